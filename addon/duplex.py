"""Full-duplex HTTP/2 streams through mitmproxy: forward a response's end at once.

Why this exists: `HttpStream.send_response` (mitmproxy/proxy/layers/http/__init__.py) forwards the
end of a streamed response only when the request has already ended (`flow_done` runs only when
`client_state == state_done`). Cursor's HTTP/2 `Run` keeps its request side open until the
response has ended, so without this both sides wait forever: the run's last bytes (the end-stream
envelope) reach Cursor, END_STREAM never does. mitmproxy 11.0.2 and 12.3 behave the same (mitmproxy 12.3.1, layers/http/__init__.py).

For flows an addon marks with `flow.metadata[FULL_DUPLEX] = True` (HTTP/2 client streams only),
the response's END_STREAM is sent as soon as the response is complete. When the request ends later,
mitmproxy's own `flow_done` sends the end again; its HTTP/2 layer skips it for a stream already
closed on our side (`is_open_for_us`), so nothing is sent twice. An HTTP/1.1 client is never marked:
there a second end would be a second `0\\r\\n\\r\\n`.

The shim wraps one private generator, so it is gated: it accepts only the mitmproxy versions in
`ACCEPTED`, each proven by tests/e2e/test_h2_findings.py (the hang without the shim, the end with it)
in CI. On any other version the proxy refuses to start (`VersionGate`) and says what to install.
"""

from __future__ import annotations

import logging

from mitmproxy import version
from mitmproxy.proxy.layers import http as http_layer
from mitmproxy.proxy.layers.http import HttpStream, ResponseEndOfMessage, SendHttp

log = logging.getLogger("byok.duplex")

FULL_DUPLEX = "byok_full_duplex"
ACCEPTED = ("12.3.0", "12.3.1")
"""The mitmproxy versions the shim is proven on (.ci/run: 12.3.0 on the oldest Python, 12.3.1 on the newest)."""
INSTALL_HINT = "pip install 'mitmproxy>=12.3.0,<12.4'"
_PATCHED = "_byok_full_duplex_patch"


class UnsupportedMitmproxy(RuntimeError):
    pass


def refusal(running: str | None = None) -> str | None:
    """Why this mitmproxy cannot run cursor-byok, with what to do; None when it can."""
    running = running or version.VERSION
    if running in ACCEPTED:
        return None
    return (f"cursor-byok does not support mitmproxy {running}: it is proven on mitmproxy "
            f"{', '.join(ACCEPTED)} (HTTP/2 agent runs would never end on an unproven version). "
            f"In the environment you start mitmdump from, run: {INSTALL_HINT}  "
            "(docs/compatibility.md, 'mitmproxy versions')")


def install() -> None:
    """Wrap HttpStream.send_response (idempotent). Raises UnsupportedMitmproxy off the accepted versions."""
    message = refusal()
    if message is not None:
        raise UnsupportedMitmproxy(message)
    original = HttpStream.send_response
    if getattr(original, _PATCHED, False):
        return

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


class VersionGate:
    """First addon loaded: on an unproven mitmproxy, an error at start-up, so mitmproxy exits with it."""

    def load(self, loader) -> None:
        message = refusal()
        if message is not None:
            log.error(message)
