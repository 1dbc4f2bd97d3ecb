"""Test-only mitmproxy script: connections for Cursor hosts go to a local fake upstream.

    mitmdump -s addon/cursor_byok.py -s tests/support/redirect_upstream.py \
        --set test_upstream=127.0.0.1:PORT --set ssl_insecure=true

The flow keeps its real host (api2.cursor.sh), so the addon's routing sees what Cursor sends.
Caveat: a connection remapped here never matches the address mitmproxy looks for when it reuses server
connections, so with connection_strategy=lazy every request opens a new one, and a sixth request on one
kept-alive client connection stalls. Real traffic (no remap) reuses one connection. Tests that send many
requests give each its own client connection.
"""

from mitmproxy import ctx
from mitmproxy.proxy import server_hooks


class RedirectUpstream:
    def load(self, loader):
        loader.add_option("test_upstream", str, "", "host:port that replaces every *.cursor.sh upstream")

    def server_connect(self, data: server_hooks.ServerConnectionHookData) -> None:
        target = ctx.options.test_upstream
        host = data.server.address[0] if data.server.address else ""
        if target and host.endswith("cursor.sh"):
            h, p = target.rsplit(":", 1)
            data.server.address = (h, int(p))


addons = [RedirectUpstream()]
