"""What the running proxy serves, for `cursor-byok doctor` and `smoke`: `GET http://cursor-byok.invalid/status`.

The CLI runs in another shell than mitmdump, so it cannot see the proxy's environment (an API key
variable exported where mitmdump runs) nor which providers config the proxy really uses (a bad edit
keeps the last good one). It asks the proxy instead: a plain-HTTP request through the proxy to the
reserved host below is answered here, like mitmproxy's own `mitm.it` pages, and never leaves the
machine. The answer names models, config path and error, and whether each model's key is set in the
proxy's environment (true/false, never the key). Only clients on this machine (loopback) get it.
"""

from __future__ import annotations

import ipaddress
import json
import os
import time

from mitmproxy import http

from .providers.config import ProvidersFile

STATUS_HOST = "cursor-byok.invalid"
"""`.invalid` never resolves (RFC 6761): a request for it cannot reach anything but this addon."""
STATUS_URL = f"http://{STATUS_HOST}/status"
SERVICE = "cursor-byok"


def is_loopback(peer) -> bool:
    try:
        address = ipaddress.ip_address(peer[0])
    except (TypeError, ValueError, IndexError):
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or bool(mapped and mapped.is_loopback)


def status(providers: ProvidersFile, mode: str | None = None) -> dict:
    config = providers.current()
    error = providers.last_error
    return {
        "service": SERVICE,
        "pid": os.getpid(),
        "time_ms": int(time.time() * 1000),
        "mode": mode,
        "config": {
            "path": str(providers.path) if providers.path else None,
            "error": str(error) if error is not None else None,
            "serving": "last good config" if error is not None and config.models else
                       "no user models" if not config.models else "current file",
            "models": [
                {"public_id": m.public_id, "provider": m.provider, "kind": m.kind, "model_id": m.model_id,
                 "display_name": m.display_name, "base_url": m.base_url, "api_key_env": m.api_key_env,
                 "key_set": m.resolve_api_key() is not None, "problems": list(m.problems)}
                for m in config.models
            ],
        },
    }


class StatusEndpoint:
    """Answers `GET http://cursor-byok.invalid/status` with `status()` as JSON."""

    def __init__(self, providers: ProvidersFile) -> None:
        self.providers = providers

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.request.pretty_host != STATUS_HOST or flow.response is not None:
            return
        if flow.request.path.split("?", 1)[0] != "/status":
            return  # every other page of this host is the dashboard's (dashboard_endpoint.py)
        flow.metadata["byok"] = "status"
        if not is_loopback(flow.client_conn.peername):
            flow.response = http.Response.make(
                403, b"cursor-byok status is answered only to clients on this machine\n",
                {"content-type": "text/plain"})
            return
        from mitmproxy import ctx

        mode = getattr(ctx.options, "byok_mode", None)
        body = json.dumps(status(self.providers, mode), ensure_ascii=False, indent=1).encode()
        flow.response = http.Response.make(200, body, {"content-type": "application/json",
                                                       "cache-control": "no-store"})
