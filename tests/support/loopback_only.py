"""Test-only mitmproxy script: no connection leaves this machine.

    mitmdump -s addon/cursor_byok.py [-s tests/support/redirect_upstream.py] -s tests/support/loopback_only.py

Loaded after the addon (and after any script that remaps upstreams), it refuses in `server_connect`,
before mitmproxy resolves anything, every upstream that is not a loopback address literal. A browser
under test reaches for outside hosts by itself (component updates, safe browsing, metrics); with the
browser's only proxy being this mitmdump, those attempts end here. Each refusal is logged as
`loopback-only: refused HOST:PORT` so a test can see what was tried.
"""

import ipaddress
import logging

from mitmproxy.proxy import server_hooks

log = logging.getLogger("loopback_only")


def is_loopback_literal(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it would need a DNS lookup, which is exactly what must not happen


class LoopbackOnly:
    def server_connect(self, data: server_hooks.ServerConnectionHookData) -> None:
        host, port = data.server.address if data.server.address else ("", 0)
        if not is_loopback_literal(host):
            log.warning("loopback-only: refused %s:%s", host, port)
            data.server.error = f"the test's network rule: {host} is not a loopback address"


addons = [LoopbackOnly()]
