"""GetServerConfig under the user's control: `http2_config` and, optionally, `agent_url_config`.

Cursor reads `aiserver.v1.GetServerConfigResponse` at start (PROTOCOL 10.1):
- `http2_config` (7, enum `Http2Config`) decides whether its agent runs over HTTP/2 (`Run`) or over
  HTTP/1.1 (`RunSSE` + `BidiAppend`). `byok_http2`: `keep` leaves the upstream value alone (Run is
  served); `bidi-off` forces FORCE_BIDI_DISABLED (agent on RunSSE, Tab and the rest on HTTP/2);
  `off` forces FORCE_ALL_DISABLED.
- `agent_url_config` (27, `AgentUrlConfig{agent_url=1, agentn_url=2}`) tells Cursor's HTTP/2 agent
  client where to connect. `byok_agent_url` points both at a reverse-mode listener of this same
  mitmproxy, for clients whose agent connection does not take the HTTP proxy.

Every other byte of the upstream answer is kept (the fields are rewritten on the wire, see
`protowire`), so fields a newer server adds reach Cursor untouched. Observe mode changes nothing.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from urllib.parse import urlsplit

from mitmproxy import ctx, exceptions, http

from byok.wire.protowire import (
    WireError, encode_len, encode_varint_field, last_varint, merged_message, replace_field, values,
)

from .models import (
    ENVELOPED_TYPE, UNARY_TYPE, _content_type, first_message, is_cursor_host, transform_first_message,
)

log = logging.getLogger("byok.server_config")

SERVER_CONFIG_PATHS = frozenset({
    "/aiserver.v1.ServerConfigService/GetServerConfig",
    "/aiserver.v1.AiService/GetServerConfig",  # an older route some clients still call (X)
})
HTTP2_CONFIG = 7
AGENT_URL_CONFIG = 27
AGENT_URL, AGENTN_URL = 1, 2

HTTP2_CONFIG_NAMES = {
    0: "HTTP2_CONFIG_UNSPECIFIED", 1: "HTTP2_CONFIG_FORCE_ALL_DISABLED", 2: "HTTP2_CONFIG_FORCE_ALL_ENABLED",
    3: "HTTP2_CONFIG_FORCE_BIDI_DISABLED", 4: "HTTP2_CONFIG_FORCE_BIDI_ENABLED",
}
HTTP2_MODES = {"keep": None, "bidi-off": 3, "off": 1}
"""`byok_http2` -> the Http2Config value forced (None: the upstream's stays)."""
JSON_TYPE = "application/json"


@dataclass(frozen=True)
class Rewrite:
    http2_config: int | None = None
    agent_url: str | None = None

    @property
    def empty(self) -> bool:
        return self.http2_config is None and self.agent_url is None


def is_server_config_path(path: str) -> bool:
    return path.split("?", 1)[0] in SERVER_CONFIG_PATHS


# ---- pure rewrites ------------------------------------------------------------------------------


def rewrite_payload(payload: bytes, rewrite: Rewrite) -> bytes:
    """A GetServerConfigResponse (protobuf) with the chosen fields set, every other byte kept.
    Raises WireError if the payload is not protobuf."""
    if rewrite.http2_config is not None:
        payload = replace_field(payload, HTTP2_CONFIG, encode_varint_field(HTTP2_CONFIG, rewrite.http2_config))
    if rewrite.agent_url is not None:
        urls = merged_message(payload, AGENT_URL_CONFIG)
        url = rewrite.agent_url.encode()
        urls = replace_field(urls, AGENT_URL, encode_len(AGENT_URL, url))
        urls = replace_field(urls, AGENTN_URL, encode_len(AGENTN_URL, url))
        payload = replace_field(payload, AGENT_URL_CONFIG, encode_len(AGENT_URL_CONFIG, urls))
    return payload


def rewrite_json(body: bytes, rewrite: Rewrite) -> bytes:
    """The same for the Connect JSON codec (`application/json`, camelCase names)."""
    doc = json.loads(body or b"{}")
    if not isinstance(doc, dict):
        raise ValueError("GetServerConfig JSON is not an object")
    if rewrite.http2_config is not None:
        doc.pop("http2_config", None)
        doc["http2Config"] = HTTP2_CONFIG_NAMES[rewrite.http2_config]
    if rewrite.agent_url is not None:
        urls = doc.pop("agent_url_config", None) or doc.get("agentUrlConfig") or {}
        urls = {k: v for k, v in urls.items() if k not in ("agent_url", "agentn_url")}
        urls.update(agentUrl=rewrite.agent_url, agentnUrl=rewrite.agent_url)
        doc["agentUrlConfig"] = urls
    return json.dumps(doc, separators=(",", ":")).encode()


def rewrite_body(body: bytes, content_type: str, rewrite: Rewrite) -> bytes:
    """The response body (HTTP content-encoding already undone) with the rewrite applied."""
    if content_type == UNARY_TYPE:
        return rewrite_payload(body, rewrite)
    if content_type == ENVELOPED_TYPE:
        return transform_first_message(body, lambda p: rewrite_payload(p, rewrite))
    if content_type == JSON_TYPE:
        return rewrite_json(body, rewrite)
    raise ValueError(f"content type {content_type or '-'} is not a Connect codec")


def describe(payload: bytes) -> str:
    """What upstream said, for the log: the http2 setting and the agent URLs."""
    value = last_varint(payload, HTTP2_CONFIG)
    urls = merged_message(payload, AGENT_URL_CONFIG)
    found = {n: f.value(urls).decode("utf-8", "replace")
             for n in (AGENT_URL, AGENTN_URL) for f in values(urls, n)[-1:]}
    return (f"http2_config={HTTP2_CONFIG_NAMES.get(value or 0, value)} "
            f"agent_url={found.get(AGENT_URL, '-')} agentn_url={found.get(AGENTN_URL, '-')}")


def check_agent_url(url: str) -> str:
    """`byok_agent_url` must be http(s)://host:port with nothing after it."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.path not in ("", "/") \
            or parts.query or parts.fragment:
        raise ValueError(f"byok_agent_url must look like https://127.0.0.1:8443, not {url!r}")
    try:
        parts.port
    except ValueError as e:
        raise ValueError(f"byok_agent_url {url!r}: {e}") from None
    return url.rstrip("/")


def agent_url_port(url: str) -> int:
    parts = urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


# ---- the addon ----------------------------------------------------------------------------------


class ServerConfigRewriter:
    def load(self, loader) -> None:
        loader.add_option(
            "byok_http2", str, "keep",
            "What to do with GetServerConfig's http2_config: keep (leave Cursor's setting: the HTTP/2 "
            "agent Run is served), bidi-off (force FORCE_BIDI_DISABLED: the agent falls back to "
            "RunSSE + BidiAppend, Tab and the rest stay on HTTP/2), off (FORCE_ALL_DISABLED).",
            choices=tuple(HTTP2_MODES),
        )
        loader.add_option(
            "byok_agent_url", str, "",
            "Point Cursor's HTTP/2 agent client (GetServerConfig agent_url_config) at this URL: a "
            "reverse-mode listener of this mitmproxy, e.g. https://127.0.0.1:8443 with "
            "--mode reverse:https://agentn.api5.cursor.sh@8443. Empty: leave the URLs alone.",
        )

    def configure(self, updated: set[str]) -> None:
        if "byok_agent_url" in updated and ctx.options.byok_agent_url:
            try:
                check_agent_url(ctx.options.byok_agent_url)
            except ValueError as e:
                raise exceptions.OptionsError(str(e)) from None

    def running(self) -> None:
        url = ctx.options.byok_agent_url
        if not url:
            return
        port = agent_url_port(url)
        modes = [str(m) for m in ctx.options.mode]
        if not any(m.startswith("reverse:") and (m.endswith(f"@{port}") or m.endswith(f":{port}")) for m in modes):
            log.warning("byok_agent_url=%s, but no reverse-mode listener on port %d (--mode %s); add "
                        "--mode reverse:https://agentn.api5.cursor.sh@%d", url, port, " --mode ".join(modes), port)

    def rewrite(self) -> Rewrite:
        if getattr(ctx.options, "byok_mode", "intercept") == "observe":
            return Rewrite()  # observe never changes what Cursor sees
        url = ctx.options.byok_agent_url
        return Rewrite(HTTP2_MODES[ctx.options.byok_http2], check_agent_url(url) if url else None)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if self._ours(flow) and flow.response is not None and flow.response.stream:
            flow.response.stream = False  # rewritten in `response`: must be buffered

    def response(self, flow: http.HTTPFlow) -> None:
        if not self._ours(flow) or flow.response is None:
            return
        resp = flow.response
        ctype = _content_type(resp.headers)
        if resp.status_code != 200 or resp.raw_content is None:
            return
        try:
            body = resp.content or b""
            if ctype in (UNARY_TYPE, ENVELOPED_TYPE):
                payload = body if ctype == UNARY_TYPE else first_message(body) or b""
                log.info("GetServerConfig from %s: %s", flow.request.pretty_host, describe(payload))
            rewrite = self.rewrite()
            if rewrite.empty:
                return
            new = rewrite_body(body, ctype, rewrite)
        except (ValueError, WireError, OSError, EOFError) as e:
            log.warning("GetServerConfig: not rewritten (%s); upstream answer passed through", e)
            return
        if new != body:
            resp.content = new
            log.info("GetServerConfig rewritten: byok_http2=%s byok_agent_url=%s",
                     ctx.options.byok_http2, ctx.options.byok_agent_url or "-")

    @staticmethod
    def _ours(flow: http.HTTPFlow) -> bool:
        return is_server_config_path(flow.request.path) and (
            is_cursor_host(flow.request.pretty_host) or is_cursor_host(flow.request.host))
