"""`NetworkService/IsConnected` keeps answering while Cursor's backend is unreachable and the user's
models serve calls here.

Cursor probes IsConnected about 10 s into a slow request and cancels the work when the probe fails
(PROTOCOL 11.2). With Cursor's backend down, every probe fails, and a slow local call (a commit
message, a Cmd-K edit, an agent turn on a reasoning model) would be cancelled though nothing it needs
is missing. So, when the providers file has models, an IsConnected whose upstream is known to be
unreachable (the probe the model lists use, models.UpstreamProbe: a TCP connect of at most
`byok_upstream_probe_ms`, or a failed connection remembered for a while) is answered here with an
empty `IsConnectedResponse`, in the request's encoding; a 502/503/504 gateway page in its place is
replaced the same way. With the upstream reachable, or without models, IsConnected goes to Cursor as
sent: it tells the truth about Cursor's backend whenever it can.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from mitmproxy import ctx, http

from byok.proto import features_pb2 as fpb

from .models import UpstreamProbe, is_cursor_host, is_gateway_page
from .providers.config import ProvidersFile
from .wire import connect

log = logging.getLogger("byok.connectivity")

IS_CONNECTED_PATH = "/aiserver.v1.NetworkService/IsConnected"
MARK = "byok_is_connected"


def local_answer(request_content_type: str) -> tuple[bytes, str]:
    """(body, content type) of an IsConnected answer in the request's own encoding."""
    ctype = request_content_type.split(";", 1)[0].strip().lower()
    message = fpb.IsConnectedResponse()
    if ctype == "application/json":
        return b"{}", "application/json"
    if ctype.startswith("application/connect+"):
        body = connect.encode_envelope(message.SerializeToString()) + connect.encode_end_stream()
        return body, ctype
    return message.SerializeToString(), "application/proto"


class ConnectivityAnswer:
    def __init__(self, providers: ProvidersFile | Callable[[], bool], probe: UpstreamProbe) -> None:
        self._serving = (lambda: bool(providers.models)) if isinstance(providers, ProvidersFile) else providers
        """Whether calls are answered here (the providers file has models)."""
        self.probe = probe

    def _ours(self, flow: http.HTTPFlow) -> bool:
        return (flow.request.method == "POST" and flow.request.path.split("?", 1)[0] == IS_CONNECTED_PATH
                and is_cursor_host(flow.request.pretty_host)
                and getattr(ctx.options, "byok_mode", "intercept") != "observe" and self._serving())

    async def request(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None or not self._ours(flow):
            return
        flow.metadata[MARK] = True
        flow.metadata["byok_rewrite"] = True  # buffered (transports/loopback.py), so a gateway page can be replaced
        why = await self.probe.down_reason(flow)
        if why is not None:
            self._answer(flow, why)

    def response(self, flow: http.HTTPFlow) -> None:
        if flow.metadata.get(MARK) and flow.response is not None and is_gateway_page(flow.response) \
                and not flow.metadata.get("byok_is_connected_local"):
            self._answer(flow, f"upstream answered {flow.response.status_code}")

    def error(self, flow: http.HTTPFlow) -> None:
        # the connection to Cursor failed (the client got mitmproxy's 502, which an addon cannot
        # replace from here): remembered, so the next probe is answered at once
        if flow.metadata.get(MARK) and flow.response is None and flow.server_conn.error:
            self.probe.mark_down(flow.request.host, flow.request.port, flow.server_conn.error)

    def _answer(self, flow: http.HTTPFlow, why: str) -> None:
        body, ctype = local_answer(flow.request.headers.get("content-type", "application/proto"))
        flow.response = http.Response.make(200, body, {"content-type": ctype})
        flow.metadata["byok_is_connected_local"] = True
        flow.metadata["byok"] = "answered"
        log.info("IsConnected answered here: %s, and your models serve calls meanwhile", why)
