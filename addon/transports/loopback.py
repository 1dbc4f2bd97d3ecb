"""What every answer streamed from the loopback server shares, and the Connect answers built in a hook.

mitmproxy cannot stream a response an addon builds itself (`Response.make` sends one piece), so a flow
answered by a stream is pointed at the in-process loopback server (stream_server.py) with a header that
names what to serve. Here: pointing a flow there, showing its real host again when the response starts,
teeing agent streams to the recorder, streaming everything cursor-byok does not answer, and a client
that fails its stream cancelling the run it carried.
"""

from __future__ import annotations

import logging

from mitmproxy import http

from ..router import Rpc, classify
from ..wire import connect
from ..wire.errors import RunCanceled
from .stream_server import AUTH_HEADER, StreamServer

log = logging.getLogger("byok.loopback")

CONNECT_PROTO = "application/connect+proto"
ANSWERED_HERE = ("rejected", "run-probe", "answered", "status")
"""`flow.metadata["byok"]` of responses built in `request`: complete, nothing to stream."""
INTERNAL_HEADERS = ("x-byok-request-id", "x-byok-run", "x-byok-call", AUTH_HEADER)


def point_at_loopback(flow: http.HTTPFlow, server: StreamServer, header: str, value: str) -> None:
    """Send this flow to the loopback server; `header: value` tells the server what to serve, and a
    proof of the process's secret for exactly that lets it in (stream_server.LoopbackSecret)."""
    request = flow.request
    flow.metadata["byok_target"] = (request.scheme, request.host, request.port)
    request.headers[header] = value
    request.headers[AUTH_HEADER] = server.secret.proof(header, value)
    request.scheme, request.host, request.port = "http", "127.0.0.1", server.port


def stream_error(flow: http.HTTPFlow, error: connect.ConnectError, what: str = "RunSSE") -> None:
    """Answer a server-streaming call with a Connect error end-stream (HTTP 200, as Connect does)."""
    log.warning("%s rejected: %s", what, error)
    flow.response = http.Response.make(200, connect.encode_end_stream(error), {"content-type": CONNECT_PROTO})
    flow.metadata["byok"] = "rejected"


def unary_error(flow: http.HTTPFlow, error: connect.ConnectError, what: str = "BidiAppend") -> None:
    """Answer a unary call with a Connect error (HTTP status by code, JSON body)."""
    log.warning("%s rejected: %s", what, error)
    status, body = connect.unary_error_body(error)
    flow.response = http.Response.make(status, body, {"content-type": "application/json"})
    flow.metadata["byok"] = "rejected"


class FlowStreaming:
    """Streams what cursor-byok does not answer, and restores flows answered by the loopback server."""

    def __init__(self, backend, recorder=None) -> None:
        self.backend = backend
        self.recorder = recorder

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        settings = self.backend.settings
        if settings is None or classify(flow, settings) is None:
            flow.request.stream = True  # not ours: straight through, never buffered

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if flow.metadata.get("byok") in ANSWERED_HERE:
            return  # built in `request`: already complete, nothing to stream
        target = flow.metadata.get("byok_target")
        if target:  # show the real host again (the request already went to the loopback server)
            flow.request.scheme, flow.request.host, flow.request.port = target
            # An HTTP/2 Run's `transfer-encoding: chunked` stays: its request is still streaming, and
            # mitmproxy's HTTP/1.1 hop frames every later chunk (and the end) by this very header.
            for name in INTERNAL_HEADERS:
                flow.request.headers.pop(name, None)
        settings = self.backend.settings
        rpc = None if settings is None else classify(flow, settings)
        if rpc in (Rpc.MODEL_LIST, Rpc.SERVER_CONFIG) or flow.metadata.get("byok_rewrite"):
            return  # buffered: an addon rewrites the body
        if self.recorder is not None and rpc in (Rpc.RUN_SSE, Rpc.RUN):
            flow.response.stream = self.recorder.tee_response(flow)
        else:
            flow.response.stream = True

    def error(self, flow: http.HTTPFlow) -> None:
        flow.request.headers.pop(AUTH_HEADER, None)  # a failed flow is kept and shown: no proof in it
        request_id = flow.metadata.get("byok_request_id")
        runtime = self.backend.runtime
        if request_id and runtime is not None and flow.metadata.get("byok_target"):
            run = runtime.run(request_id)
            if run is not None and not run.terminal:
                what = "Run" if flow.metadata.get("byok") == "run" else "RunSSE"
                run.cancel(RunCanceled(f"the client's {what} stream failed: {flow.error}"))
