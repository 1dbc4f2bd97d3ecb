"""Full-duplex HTTP/2 streams through mitmproxy 11.0.2: forward a response's end at once.

Why this exists: `HttpStream.send_response` (mitmproxy/proxy/layers/http/__init__.py) forwards the
end of a streamed response only when the request has already ended (`flow_done` runs only when
`client_state == state_done`). Cursor's HTTP/2 `Run` keeps its request side open until the
response has ended, so without this both sides wait forever: the run's last bytes (the end-stream
envelope) reach Cursor, END_STREAM never does. mitmproxy's main branch behaves the same.

For flows an addon marks with `flow.metadata[FULL_DUPLEX] = True` (HTTP/2 client streams only),
the response's END_STREAM is sent as soon as the response is complete. When the request ends later,
mitmproxy's own `flow_done` sends the end again; its HTTP/2 layer skips it for a stream already
closed on our side (`is_open_for_us`), so nothing is sent twice. An HTTP/1.1 client is never marked:
there a second end would be a second `0\\r\\n\\r\\n`.

The patch wraps one method, is applied once, and checks the mitmproxy version it was written for
(tests/e2e/test_h2_findings.py shows the hang without it and the fix with it).
"""

from __future__ import annotations

import logging

from mitmproxy import version
from mitmproxy.proxy.layers import http as http_layer
from mitmproxy.proxy.layers.http import HttpStream, ResponseEndOfMessage, SendHttp

log = logging.getLogger("byok.duplex")

FULL_DUPLEX = "byok_full_duplex"
WRITTEN_FOR = "11.0.2"
_PATCHED = "_byok_full_duplex_patch"


def install() -> bool:
    """Wrap HttpStream.send_response (idempotent). Returns whether the patch is in place."""
    original = HttpStream.send_response
    if getattr(original, _PATCHED, False):
        return True
    if version.VERSION != WRITTEN_FOR:
        log.warning("mitmproxy %s: the full-duplex patch was written for %s; check that HTTP/2 Runs "
                    "still end (docs/architecture.md)", version.VERSION, WRITTEN_FOR)

    def send_response(self: HttpStream, already_streamed: bool = False):
        yield from original(self, already_streamed)
        flow = self.flow
        if (already_streamed and flow.metadata.get(FULL_DUPLEX) and flow.request.is_http2
                and self.server_state == self.state_done
                and self.client_state == self.state_stream_request_body):
            yield SendHttp(ResponseEndOfMessage(self.stream_id), self.context.client)

    setattr(send_response, _PATCHED, True)
    send_response.__doc__ = original.__doc__
    HttpStream.send_response = send_response  # type: ignore[method-assign]
    assert http_layer.HttpStream is HttpStream
    return True
