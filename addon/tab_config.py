"""Tab's configuration while `[tab]` serves it: CppConfig kept on, Tab's model list answered here.

- `aiserver.v1.AiService/CppConfig` goes to Cursor; its answer (`CppConfigResponse`) is rewritten on
  the wire with every other byte kept (`protowire`, as GetServerConfig is): `is_on` (5) and
  `should_let_user_enable_cpp_even_if_not_pro` (7) true, so an account whose Tab quota is spent (or a
  plan without Tab) keeps Tab; `cpp_url` (13) and `geo_cpp_backend_url` (18) only when they point at
  a host outside `byok_hosts`, where cursor-byok could not answer StreamCpp. When Cursor cannot be
  reached (TCP probe, as for the model lists) or answers anything but a 200 Connect message, the
  answer is `local_cpp_config()`: Tab on, Cursor's debounce values, StreamCpp to api3.cursor.sh.
- `aiserver.v1.CppService/AvailableModels` is answered here: the `[tab]` model is Tab's only model.

Without `[tab]`, or in observe mode, both pass untouched. Pure rewrites first, then the addon.
"""

from __future__ import annotations

import fnmatch
import json
import logging
from urllib.parse import urlsplit

from mitmproxy import ctx, http

from byok.proto import cpp_pb2 as cpb
from byok.providers.config import ModelRoute, ProvidersFile
from byok.wire.protowire import WireError, encode_len, encode_varint_field, replace_field, values

from .models import ENVELOPED_TYPE, UNARY_TYPE, UpstreamProbe, _content_type, is_cursor_host, transform_first_message

log = logging.getLogger("byok.tab")

CPP_CONFIG_PATH = "/aiserver.v1.AiService/CppConfig"
CPP_MODELS_PATH = "/aiserver.v1.CppService/AvailableModels"
TAB_CONFIG_PATHS = frozenset({CPP_CONFIG_PATH, CPP_MODELS_PATH})
IS_ON, LET_USER_ENABLE, CPP_URL, GEO_CPP_URL = 5, 7, 13, 18
LOCAL_CPP_URL = "https://api3.cursor.sh"
"""Where a locally made config sends StreamCpp (the host a captured CppConfig named; any *.cursor.sh works)."""
JSON_TYPE = "application/json"


# ---- pure rewrites ------------------------------------------------------------------------------


def foreign_url(url: str, hosts: tuple[str, ...]) -> bool:
    """A URL whose host cursor-byok does not intercept (so StreamCpp sent there would miss [tab])."""
    host = (urlsplit(url).hostname or "").lower()
    return bool(url) and not any(fnmatch.fnmatchcase(host, pattern) for pattern in hosts)


def rewrite_cpp_config(payload: bytes, hosts: tuple[str, ...]) -> bytes:
    """A CppConfigResponse with Tab forced on and StreamCpp kept on our hosts; every other byte kept.
    Raises WireError if the payload is not protobuf."""
    payload = replace_field(payload, IS_ON, encode_varint_field(IS_ON, 1))
    payload = replace_field(payload, LET_USER_ENABLE, encode_varint_field(LET_USER_ENABLE, 1))
    for number in (CPP_URL, GEO_CPP_URL):
        found = [f for f in values(payload, number) if f.wire_type == 2]
        if found and foreign_url(found[-1].value(payload).decode("utf-8", "replace"), hosts):
            payload = replace_field(payload, number, encode_len(number, LOCAL_CPP_URL.encode()))
    return payload


def rewrite_cpp_config_json(body: bytes, hosts: tuple[str, ...]) -> bytes:
    """The same for the Connect JSON codec (camelCase or proto names)."""
    doc = json.loads(body or b"{}")
    if not isinstance(doc, dict):
        raise ValueError("CppConfig JSON is not an object")
    for proto_name, json_name in (("is_on", "isOn"),
                                  ("should_let_user_enable_cpp_even_if_not_pro", "shouldLetUserEnableCppEvenIfNotPro")):
        doc.pop(proto_name, None)
        doc[json_name] = True
    for proto_name, json_name in (("cpp_url", "cppUrl"), ("geo_cpp_backend_url", "geoCppBackendUrl")):
        for name in (proto_name, json_name):
            if isinstance(doc.get(name), str) and foreign_url(doc[name], hosts):
                doc[name] = LOCAL_CPP_URL
    return json.dumps(doc, separators=(",", ":")).encode()


def local_cpp_config() -> cpb.CppConfigResponse:
    """Tab on, ghost text, Cursor's debounce (50-70 ms in a captured config), StreamCpp to our host.
    Fields not set keep the client's defaults (their meaning is not in the facts)."""
    return cpb.CppConfigResponse(is_on=True, is_ghost_text=True, should_let_user_enable_cpp_even_if_not_pro=True,
                                 client_debounce_duration_millis=50, global_debounce_duration_millis=70,
                                 cpp_url=LOCAL_CPP_URL)


def local_cpp_models(route: ModelRoute) -> cpb.AvailableCppModelsResponse:
    name = f"{route.provider}/{route.model_id}"
    return cpb.AvailableCppModelsResponse(models=[name], default_model=name)


def encode(message, content_type: str) -> tuple[bytes, str]:
    """`message` in the request's own codec (unary proto, enveloped proto, or JSON)."""
    from google.protobuf import json_format

    from byok.wire.connect import encode_envelope

    if content_type == JSON_TYPE:
        return json_format.MessageToJson(message, indent=None).encode(), JSON_TYPE
    if content_type == ENVELOPED_TYPE:
        return encode_envelope(message.SerializeToString()), ENVELOPED_TYPE
    return message.SerializeToString(), UNARY_TYPE


# ---- the addon ----------------------------------------------------------------------------------


class TabConfig:
    def __init__(self, providers: ProvidersFile, probe: UpstreamProbe | None = None) -> None:
        self.providers = providers
        self.probe = probe or UpstreamProbe()
        """Shared with the model lists (main.py), which remember failed connections in it."""

    def _tab(self, flow: http.HTTPFlow) -> ModelRoute | None:
        """The [tab] route when this flow is a Tab config call cursor-byok handles, else None."""
        if flow.request.path.split("?", 1)[0] not in TAB_CONFIG_PATHS:
            return None
        if getattr(ctx.options, "byok_mode", "intercept") == "observe":
            return None
        if not (is_cursor_host(flow.request.pretty_host) or is_cursor_host(flow.request.host)):
            return None
        return self.providers.current().tab_route

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        # after FlowStreaming (main.py): the request is read whole, so it can be answered here when
        # Cursor is unreachable; the response is rewritten, so it is buffered, never streamed
        if self._tab(flow) is not None:
            flow.request.stream = False
            flow.metadata["byok_rewrite"] = True

    async def request(self, flow: http.HTTPFlow) -> None:
        route = self._tab(flow)
        if route is None or flow.response is not None:
            return
        path = flow.request.path.split("?", 1)[0]
        if path == CPP_MODELS_PATH:
            self._answer(flow, local_cpp_models(route), f"Tab's models: {route.provider}/{route.model_id}")
            flow.metadata["byok_model_list_local"] = True  # the model-list injector leaves it alone
            return
        down = await self.probe.down_reason(flow)
        if down is not None:
            self._answer(flow, local_cpp_config(), f"CppConfig answered locally: {down}")

    def response(self, flow: http.HTTPFlow) -> None:
        if flow.request.path.split("?", 1)[0] != CPP_CONFIG_PATH or flow.metadata.get("byok") == "answered":
            return
        if self._tab(flow) is None or flow.response is None:
            return
        resp = flow.response
        ctype = _content_type(resp.headers)
        if resp.status_code != 200 or ctype not in (UNARY_TYPE, ENVELOPED_TYPE, JSON_TYPE):
            self._answer(flow, local_cpp_config(),
                         f"CppConfig answered locally: Cursor answered {resp.status_code} {ctype or '-'}",
                         content_type=_content_type(flow.request.headers))
            return
        hosts = tuple(ctx.options.byok_hosts)
        try:
            body = resp.content or b""
            if ctype == JSON_TYPE:
                new = rewrite_cpp_config_json(body, hosts)
            elif ctype == ENVELOPED_TYPE:
                new = transform_first_message(body, lambda p: rewrite_cpp_config(p, hosts))
            else:
                new = rewrite_cpp_config(body, hosts)
        except (ValueError, WireError, OSError, EOFError) as e:
            self._answer(flow, local_cpp_config(), f"CppConfig answered locally: Cursor's answer is unreadable ({e})",
                         content_type=ctype)
            return
        if new != body:
            resp.content = new
            log.info("CppConfig from %s: Tab kept on for [tab]", flow.request.pretty_host)

    @staticmethod
    def _answer(flow: http.HTTPFlow, message, why: str, *, content_type: str | None = None) -> None:
        body, ctype = encode(message, content_type or _content_type(flow.request.headers))
        flow.response = http.Response.make(200, body, {"content-type": ctype})
        flow.metadata["byok"] = "answered"
        log.info("%s", why)
