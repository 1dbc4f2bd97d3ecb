"""Model picker injection: the user's models appended to Cursor's model-list responses.

Owns the model-list RPC paths (and nothing else knows them):

    /aiserver.v1.AiService/AvailableModels   /agent.v1.AgentService/AvailableModels
    /aiserver.v1.AiService/GetUsableModels   /agent.v1.AgentService/GetUsableModels
    /aiserver.v1.AiService/GetDefaultModelForCli   (the Cursor CLI's default model)
    /aiserver.v1.CppService/AvailableModels        (only when it has the AvailableModels shape)

The upstream answer is kept byte for byte; the user's models are appended as encoded repeated
fields (protobuf merges repeated fields across concatenated bytes, so unknown fields from newer
servers survive untouched, DESIGN §3). A unary body (`application/proto`) has no envelope; an
enveloped one (`application/connect+proto`) gets its first data message extended and its length
fixed. HTTP content-encoding is undone and redone by mitmproxy (`Message.content`); the Connect
envelope flag 0x01 (gzip) is undone and redone here.

GetDefaultModelForCli answers one model, not a list: its `model` field is replaced (every other
byte kept) only when `byok_cli_default_model` names one of the user's models. CppService's
AvailableModels is Tab's list in the answers peers have seen (`AvailableCppModelsResponse`, whose
field 2 is a string); it is left alone unless its body reads as an AvailableModelsResponse
(PROTOCOL 10.1).

If the upstream cannot be reached, the call is answered locally with the user's models alone.
mitmproxy cannot answer a flow from its `error` hook (verified with mitmdump 11.0.2: the client
still gets mitmproxy's 502 page), so the `request` hook probes the upstream with a TCP connect
(cached for a short while) before mitmproxy tries, and a failed server connection
(`server_connect_error`) marks the address down for the next call. A 502/503/504 gateway page
(not a Connect answer) from a CDN or corporate proxy is replaced the same way.

Pure functions first (`append_available_models`, `append_usable_models`, `inject_body`), then the
`ModelListInjector` addon.
"""

from __future__ import annotations

import asyncio
import enum
import fnmatch
import gzip
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

from google.protobuf.message import DecodeError
from mitmproxy import ctx, http
from mitmproxy.proxy.server_hooks import ServerConnectionHookData

from byok.providers.config import ModelRoute, ProvidersFile
from byok.wire.connect import (
    FLAG_COMPRESSED, FLAG_END_STREAM, HEADER, encode_end_stream, encode_envelope, parse_end_stream, split_envelopes,
)
from byok.proto import agent_pb2, aiserver_pb2
from byok.wire.protowire import WireError, encode_len, iter_fields, replace_field

logger = logging.getLogger("byok.models")

BYOK_MARK = "(BYOK)"
DEFAULT_HOSTS = ("api2.cursor.sh",)
"""Used only when no addon declares `byok_hosts` (options.Options does, with *.cursor.sh)."""
METADATA_KEY = "byok_model_list"
"""flow.metadata key set on model-list flows; addons that stream responses must skip these flows."""


class ModelList(enum.Enum):
    """Which response message a model-list path returns."""

    AVAILABLE = "AvailableModels"
    """aiserver.v1.AvailableModelsResponse (also assumed for the agent.v1 path: not in the facts)."""
    USABLE_AISERVER = "GetUsableModels(aiserver.v1)"
    """aiserver.v1.GetUsableModelsResponse{models: aiserver.v1.ModelDetails}"""
    USABLE_AGENT = "GetUsableModels(agent.v1)"
    """agent.v1.GetUsableModelsResponse{models: agent.v1.ModelDetails}"""
    CLI_DEFAULT = "GetDefaultModelForCli"
    """aiserver.v1.GetDefaultModelForCliResponse{model: aiserver.v1.ModelDetails}"""
    CPP_AVAILABLE = "AvailableModels(CppService)"
    """Injected like AVAILABLE, but only into a body with the AvailableModelsResponse shape."""


MODEL_LIST_PATHS: dict[str, ModelList] = {
    "/aiserver.v1.AiService/AvailableModels": ModelList.AVAILABLE,
    "/agent.v1.AgentService/AvailableModels": ModelList.AVAILABLE,
    "/aiserver.v1.AiService/GetUsableModels": ModelList.USABLE_AISERVER,
    "/agent.v1.AgentService/GetUsableModels": ModelList.USABLE_AGENT,
    "/aiserver.v1.AiService/GetDefaultModelForCli": ModelList.CLI_DEFAULT,
    "/aiserver.v1.CppService/AvailableModels": ModelList.CPP_AVAILABLE,
}


def model_list_kind(path: str) -> ModelList | None:
    """The model list a request path asks for (query string ignored: Connect GET), or None."""
    return MODEL_LIST_PATHS.get(path.split("?", 1)[0])


# ---- building entries ---------------------------------------------------------------------------


def picker_name(route: ModelRoute) -> str:
    """The display name, marked as the user's own unless it already says so."""
    name = route.display_name
    return name if "byok" in name.lower() else f"{name} {BYOK_MARK}"


def available_model(route: ModelRoute) -> aiserver_pb2.AvailableModelsResponse.AvailableModel:
    """One picker entry. Cursor sends `name` back as `requested_model.model_id`."""
    model = aiserver_pb2.AvailableModelsResponse.AvailableModel(
        name=route.public_id,
        default_on=True,  # shown without a trip to Settings > Models
        supports_agent=True,
        supports_plan_mode=True,
        supports_thinking=route.supports_thinking,
        supports_images=route.supports_images,
        supports_max_mode=False,  # no separate max variant: one request shape per model
        supports_non_max_mode=True,
        supports_cmd_k=True,  # Cmd-K naming this model is answered locally (addon/assist/cmdk.py)
        client_display_name=picker_name(route),
        server_model_name=route.public_id,
        inputbox_short_model_name=route.display_name,
        is_chat_only=False,
        tooltip_data=aiserver_pb2.AvailableModelsResponse.TooltipData(
            primary_text=picker_name(route),
            secondary_text=f"cursor-byok: {route.provider} / {route.model_id}",
        ),
    )
    if route.context_tokens is not None:
        model.context_token_limit = min(route.context_tokens, 2**31 - 1)  # int32 on the wire
    return model


def available_models_tail(routes: Iterable[ModelRoute]) -> bytes:
    """Encoded `models` (2) and `model_names` (1) entries of an AvailableModelsResponse."""
    routes = list(routes)
    msg = aiserver_pb2.AvailableModelsResponse(
        models=[available_model(r) for r in routes],
        model_names=[r.public_id for r in routes],
    )
    return msg.SerializeToString(deterministic=True)


def usable_models_tail(routes: Iterable[ModelRoute], *, service: Literal["aiserver", "agent"]) -> bytes:
    """Encoded `models` (1) entries of a GetUsableModelsResponse of either service.

    The two ModelDetails share only field 1 (aiserver `model_name`, agent `model_id`): the public
    id. Credentials fields are never set; the key stays in the proxy.
    """
    if service == "aiserver":
        return aiserver_pb2.GetUsableModelsResponse(
            models=[aiserver_pb2.ModelDetails(model_name=r.public_id) for r in routes]
        ).SerializeToString(deterministic=True)
    entries = []
    for r in routes:
        entry = agent_pb2.ModelDetails(
            model_id=r.public_id,
            display_model_id=r.public_id,
            display_name=picker_name(r),
            display_name_short=r.display_name,
        )
        if r.supports_thinking:
            entry.thinking_details.SetInParent()  # presence marks a thinking model; it has no fields
        entries.append(entry)
    return agent_pb2.GetUsableModelsResponse(models=entries).SerializeToString(deterministic=True)


def append_available_models(upstream_payload: bytes, routes: Iterable[ModelRoute]) -> bytes:
    """`upstream_payload` unchanged, then the user's models as AvailableModelsResponse fields."""
    return upstream_payload + available_models_tail(routes)


def append_usable_models(upstream_payload: bytes, routes: Iterable[ModelRoute], *,
                         service: Literal["aiserver", "agent"] = "aiserver") -> bytes:
    """`upstream_payload` unchanged, then the user's models as GetUsableModelsResponse fields."""
    return upstream_payload + usable_models_tail(routes, service=service)


def model_list_tail(kind: ModelList, routes: Sequence[ModelRoute]) -> bytes:
    if kind in (ModelList.AVAILABLE, ModelList.CPP_AVAILABLE):
        return available_models_tail(routes)
    if kind is ModelList.CLI_DEFAULT:
        return cli_default_field(routes[0]) if routes else b""
    return usable_models_tail(routes, service="agent" if kind is ModelList.USABLE_AGENT else "aiserver")


def cli_default_field(route: ModelRoute) -> bytes:
    """GetDefaultModelForCliResponse.model (1) naming the user's model by its public id."""
    return encode_len(1, aiserver_pb2.ModelDetails(model_name=route.public_id).SerializeToString())


def set_cli_default(upstream_payload: bytes, route: ModelRoute) -> bytes:
    """The upstream GetDefaultModelForCliResponse with only its `model` replaced."""
    return replace_field(upstream_payload, 1, cli_default_field(route))


def pick_cli_default(routes: Sequence[ModelRoute], wanted: str) -> ModelRoute | None:
    """The user's model `byok_cli_default_model` names: public id, model id or display name."""
    wanted = wanted.strip()
    if not wanted:
        return None
    for key in (lambda r: r.public_id, lambda r: r.model_id, lambda r: r.display_name, picker_name):
        for route in routes:
            if key(route) == wanted:
                return route
    return None


def has_available_models_shape(payload: bytes) -> bool:
    """Whether a payload reads as an AvailableModelsResponse with at least one named model:
    every field-2 entry is a well-formed AvailableModel with a name. Tab's AvailableCppModels
    (field 2 = the default model's name as a string) fails this."""
    try:
        entries = [f for f in iter_fields(payload) if f.number == 2]
    except WireError:
        return False
    if not entries or any(f.wire_type != 2 for f in entries):
        return False
    for entry in entries:
        try:
            model = aiserver_pb2.AvailableModelsResponse.AvailableModel.FromString(entry.value(payload))
        except DecodeError:
            return False
        if not model.name:
            return False
    return True


# ---- framing ------------------------------------------------------------------------------------


def append_to_first_message(body: bytes, tail: bytes) -> bytes:
    """Append `tail` to the first data message of a Connect envelope stream.

    Model lists are unary, so a streamed call carries one data message and the end-stream; every
    other envelope is copied as is. Without a data message, one is inserted before a successful
    end-stream; an error end-stream is left alone (the upstream refused; not ours to hide).
    Raises ValueError on a truncated body.
    """
    return transform_first_message(body, lambda message: message + tail, insert_if_missing=True)


def inject_body(kind: ModelList, body: bytes, routes: Sequence[ModelRoute], *, enveloped: bool,
                cli_default: ModelRoute | None = None) -> bytes:
    """The upstream body (HTTP content-encoding already undone) with the user's models added.
    GetDefaultModelForCli changes only when `cli_default` is given; CppService's list only when
    it has the AvailableModels shape."""
    if kind is ModelList.CLI_DEFAULT:
        if cli_default is None:
            return body
        return transform_first_message(body, lambda p: set_cli_default(p, cli_default)) if enveloped \
            else set_cli_default(body, cli_default)
    if kind is ModelList.CPP_AVAILABLE:
        payload = first_message(body) if enveloped else body
        if payload is None or not has_available_models_shape(payload):
            return body
    tail = model_list_tail(kind, routes)
    return append_to_first_message(body, tail) if enveloped else body + tail


def first_message(body: bytes) -> bytes | None:
    """The first data message of an envelope stream (inflated), or None."""
    frames, _ = split_envelopes(body)
    for flags, payload in frames:
        if not flags & FLAG_END_STREAM:
            return gzip.decompress(payload) if flags & FLAG_COMPRESSED else payload
    return None


def transform_first_message(body: bytes, change: Callable[[bytes], bytes], *,
                            insert_if_missing: bool = False) -> bytes:
    """An envelope stream with its first data message replaced by `change(message)` (gzip flag
    and every other envelope kept). With `insert_if_missing`, a stream without a data message gets
    `change(b"")` inserted before a successful end-stream (or at its end), and one with an error
    end-stream is returned as is. Raises ValueError on a truncated body."""
    frames, rest = split_envelopes(body)
    if rest:
        raise ValueError(f"truncated Connect envelope ({len(rest)} bytes left over)")
    out = bytearray()
    done = False
    for flags, payload in frames:
        if not done and not flags & FLAG_END_STREAM:
            if flags & FLAG_COMPRESSED:
                payload = gzip.compress(change(gzip.decompress(payload)), mtime=0)
            else:
                payload = change(payload)
            done = True
        elif not done and insert_if_missing:  # the end-stream came first
            if parse_end_stream(payload) is not None:
                return body
            out += encode_envelope(change(b""))
            done = True
        out += HEADER.pack(flags, len(payload)) + payload
    if not done and insert_if_missing:
        out += encode_envelope(change(b""))
    return bytes(out)


def local_body(kind: ModelList, routes: Sequence[ModelRoute], *, enveloped: bool,
               cli_default: ModelRoute | None = None) -> bytes:
    """A whole answer holding only the user's models (the upstream is unreachable); the CLI's
    default is `cli_default`, else the first of them."""
    if kind is ModelList.CLI_DEFAULT and cli_default is not None:
        routes = [cli_default]
    payload = model_list_tail(kind, routes)
    return encode_envelope(payload) + encode_end_stream() if enveloped else payload


def _content_type(headers: http.Headers) -> str:
    return headers.get("content-type", "").split(";", 1)[0].strip().lower()


UNARY_TYPE = "application/proto"
ENVELOPED_TYPE = "application/connect+proto"


# ---- hosts and reachability ---------------------------------------------------------------------


def byok_hosts() -> tuple[str, ...]:
    """Cursor backend host patterns (fnmatch): the `byok_hosts` option when declared, else the default."""
    try:
        hosts = ctx.options.byok_hosts
    except AttributeError:
        return DEFAULT_HOSTS
    if isinstance(hosts, str):
        hosts = hosts.split(",")
    return tuple(h.strip().lower() for h in hosts if h.strip()) or DEFAULT_HOSTS


def is_cursor_host(host: str) -> bool:
    return any(fnmatch.fnmatchcase(host.lower(), pattern) for pattern in byok_hosts())


def model_list_flow(flow: http.HTTPFlow) -> ModelList | None:
    """The model list this flow carries, or None (wrong path, other host, or observe mode)."""
    kind = model_list_kind(flow.request.path)
    if kind is None or not (is_cursor_host(flow.request.pretty_host) or is_cursor_host(flow.request.host)):
        return None
    if getattr(ctx.options, "byok_mode", "intercept") == "observe":
        return None  # observe never changes what Cursor sees
    return kind


class UpstreamProbe:
    """Is host:port accepting TCP connections? Answers are cached; a failure is remembered briefly."""

    def __init__(self, *, ok_ttl_s: float = 60.0, down_ttl_s: float = 15.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ok_ttl_s = ok_ttl_s
        self.down_ttl_s = down_ttl_s
        self.clock = clock
        self._known: dict[tuple[str, int], tuple[bool, float, str]] = {}

    def mark_down(self, host: str, port: int, reason: str) -> None:
        self._known[(host, port)] = (False, self.clock() + self.down_ttl_s, reason)

    def cached(self, host: str, port: int) -> tuple[bool, str] | None:
        known = self._known.get((host, port))
        if known is None or known[1] <= self.clock():
            return None
        return known[0], known[2]

    async def reachable(self, host: str, port: int, timeout_s: float) -> tuple[bool, str]:
        cached = self.cached(host, port)
        if cached is not None:
            return cached
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
        except (OSError, asyncio.TimeoutError) as e:
            reason = str(e) or type(e).__name__
            self.mark_down(host, port, reason)
            return False, reason
        writer.close()
        self._known[(host, port)] = (True, self.clock() + self.ok_ttl_s, "")
        return True, ""

    async def down_reason(self, flow: http.HTTPFlow) -> str | None:
        """Why the flow's upstream is known to be unreachable (remembered, or a TCP connect of at most
        `byok_upstream_probe_ms`), or None: reachable, not known, or not worth checking (an open
        connection proves it is reachable; through an upstream proxy we cannot tell)."""
        if not direct_and_unconnected(flow):
            return None
        host, port = flow.request.host, flow.request.port
        known = self.cached(host, port)
        probe_ms = getattr(ctx.options, "byok_upstream_probe_ms", 0)
        if known is None and probe_ms > 0:
            known = await self.reachable(host, port, probe_ms / 1000)
        return None if known is None or known[0] else f"{host}:{port} unreachable ({known[1]})"


def direct_and_unconnected(flow: http.HTTPFlow) -> bool:
    """Whether reachability is worth checking: no open connection and no upstream proxy."""
    if flow.server_conn.connected or flow.server_conn.via is not None:
        return False  # an open connection proves reachability; via a proxy we cannot tell
    return not any(str(mode).startswith("upstream") for mode in ctx.options.mode)


def is_gateway_page(response: http.Response) -> bool:
    """A 502/503/504 page from a CDN, a corporate proxy or mitmproxy itself, not a Connect answer:
    the upstream is unreachable."""
    return response.status_code in (502, 503, 504) and not _content_type(response.headers).startswith("application/")


# ---- the addon ----------------------------------------------------------------------------------


class ModelListInjector:
    """Adds the user's models to AvailableModels / GetUsableModels on the Cursor hosts."""

    def __init__(self, providers: ProvidersFile | Callable[[], Sequence[ModelRoute]],
                 probe: UpstreamProbe | None = None,
                 may_see_user_models: Callable[[http.HTTPFlow], bool] | None = None,
                 routes_for: Callable[[http.HTTPFlow, Sequence[ModelRoute]], Sequence[ModelRoute]] | None = None,
                 ) -> None:
        self._routes = (lambda: providers.agent_models) if isinstance(providers, ProvidersFile) else providers
        self.probe = probe or UpstreamProbe()
        self._may_see = may_see_user_models or (lambda flow: True)
        """access.py's gate: other clients get Cursor's list as it is."""
        self._routes_for = routes_for or (lambda flow, routes: routes)
        """The team file's filter: a team user sees the models they may use."""
        self._refused_peers: set = set()

    def load(self, loader) -> None:
        loader.add_option(
            "byok_upstream_probe_ms", int, 3000,
            "Before forwarding a model-list call (AvailableModels, GetUsableModels) or Cursor's "
            "connectivity probe (NetworkService/IsConnected) on a new connection, check with a TCP "
            "connect of at most this many milliseconds that the Cursor backend is reachable; if not, "
            "answer the model list with your own models alone, and the probe as connected while your "
            "models serve calls. 0 disables the check (a failed connection is still remembered).",
        )
        loader.add_option(
            "byok_cli_default_model", str, "",
            "The Cursor CLI's default model (GetDefaultModelForCli): one of your models, by public "
            "id, model id or display name. Empty: the CLI keeps Cursor's default.",
        )

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        self._tag(flow)

    async def request(self, flow: http.HTTPFlow) -> None:
        kind = self._tag(flow)
        if kind is None or flow.response is not None:
            return
        if kind is ModelList.CPP_AVAILABLE:
            return  # Tab's list is never made up here (with [tab], tab_config.py answers it)
        routes = self._active_routes(flow)
        if not routes:
            return
        why = await self.probe.down_reason(flow)
        if why is not None:
            self._answer_locally(flow, kind, routes, why)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        # The body is rewritten in `response`, so it must be buffered, whatever other addons chose.
        if flow.metadata.get(METADATA_KEY) and flow.response is not None and flow.response.stream:
            flow.response.stream = False

    def response(self, flow: http.HTTPFlow) -> None:
        kind = model_list_flow(flow)
        if kind is None or flow.response is None or flow.metadata.get("byok_model_list_local"):
            return
        routes = self._active_routes(flow)
        if not routes:
            return
        resp = flow.response
        ctype = _content_type(resp.headers)
        if is_gateway_page(resp) and kind is not ModelList.CPP_AVAILABLE:  # Tab's list is not ours to make up
            self._answer_locally(flow, kind, routes, f"upstream answered {resp.status_code} {ctype or '-'}")
            return
        if resp.status_code != 200 or ctype not in (UNARY_TYPE, ENVELOPED_TYPE):
            return  # Connect errors and the JSON codec pass through unchanged
        if resp.raw_content is None:
            logger.warning("%s was streamed by another addon; user models not added", kind.value)
            return
        try:
            body = resp.content or b""  # mitmproxy undoes content-encoding here ...
            new = inject_body(kind, body, routes, enveloped=ctype == ENVELOPED_TYPE,
                              cli_default=self._cli_default(routes))
        except (ValueError, OSError, EOFError) as e:  # undecodable upstream body: leave it alone
            logger.warning("%s: cannot add user models (%s); upstream answer passed through", kind.value, e)
            return
        if new == body:
            return
        resp.content = new  # ... and redoes it with the upstream's encoding (and fixes content-length)
        logger.debug("%s: added %d user model(s) to %d upstream bytes", kind.value, len(routes), len(body))

    def server_connect_error(self, data: ServerConnectionHookData) -> None:
        # mitmproxy cannot answer a flow whose connection failed (the client gets its 502 page);
        # remember the failure so the next model-list call to this address is answered locally
        if data.server.address is not None and is_cursor_host(data.server.address[0]):
            host, port = data.server.address
            self.probe.mark_down(host, port, data.server.error or "connection failed")

    # ---- helpers ----

    def _active_routes(self, flow: http.HTTPFlow) -> Sequence[ModelRoute]:
        """The models to add; none in observe mode, which leaves every byte as upstream sent it,
        and none for a client that may not use them."""
        if getattr(ctx.options, "byok_mode", "intercept") == "observe":
            return ()
        if not self._may_see(flow):
            peer = flow.client_conn.peername[0] if flow.client_conn.peername else None
            if peer not in self._refused_peers and len(self._refused_peers) < 1024:
                self._refused_peers.add(peer)
                logger.warning("model list for %s left as Cursor sent it: this client may not use your models "
                               "(not on this machine, no proxyauth)", peer)
            return ()
        return self._routes_for(flow, self._routes())

    def _cli_default(self, routes: Sequence[ModelRoute]) -> ModelRoute | None:
        wanted = getattr(ctx.options, "byok_cli_default_model", "")
        route = pick_cli_default(routes, wanted)
        if wanted and route is None:
            logger.warning("byok_cli_default_model=%r names none of your models; the CLI keeps "
                           "Cursor's default", wanted)
        return route

    def _tag(self, flow: http.HTTPFlow) -> ModelList | None:
        kind = model_list_flow(flow)
        if kind is not None:
            flow.metadata[METADATA_KEY] = kind.value
        return kind

    def _answer_locally(self, flow: http.HTTPFlow, kind: ModelList, routes: Sequence[ModelRoute],
                        why: str) -> None:
        enveloped = _content_type(flow.request.headers) == ENVELOPED_TYPE
        flow.response = http.Response.make(
            200, local_body(kind, routes, enveloped=enveloped, cli_default=self._cli_default(routes)),
            {"content-type": ENVELOPED_TYPE if enveloped else UNARY_TYPE},
        )
        flow.metadata["byok_model_list_local"] = True
        logger.warning("%s: %s; answered with your %d model(s) only", kind.value, why, len(routes))
