"""What the running proxy serves, for `cursor-byok doctor` and `smoke`: `GET http://cursor-byok.invalid/status`.

The CLI runs in another shell than mitmdump, so it cannot see the proxy's environment (an API key
variable exported where mitmdump runs) nor which providers config the proxy really uses (a bad edit
keeps the last good one). It asks the proxy instead: a plain-HTTP request through the proxy to the
reserved host below is answered here, like mitmproxy's own `mitm.it` pages, and never leaves the
machine. The answer names models, config path and error, whether each model's key is set in the
proxy's environment (true/false, never the key), the store the proxy writes (a PostgreSQL URL without
its password), the client's proxyauth user, the team file and which models it gives that user. Only
clients on this machine (loopback) get it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from mitmproxy import http

from .access import authenticated_user, peer_is_loopback
from .providers.config import ProvidersFile

STATUS_HOST = "cursor-byok.invalid"
"""`.invalid` never resolves (RFC 6761): a request for it cannot reach anything but this addon."""
STATUS_URL = f"http://{STATUS_HOST}/status"
SERVICE = "cursor-byok"


def store_location(db: Path | str | None) -> dict | None:
    """Which store the proxy writes: a SQLite file's absolute path, or the URL without its password."""
    if db is None:
        return None
    if isinstance(db, str):
        from byok.store.sql import redact_url

        return {"kind": "postgresql", "location": redact_url(db)}
    return {"kind": "sqlite", "location": str(Path(db).expanduser().resolve())}


def status(providers: ProvidersFile, mode: str | None = None, *, db: Path | str | None = None,
           user: str | None = None, allowed: Callable[[list], list] | None = None, team=None) -> dict:
    """`allowed(routes)`: the models this client's user may use (team file); `team`: the TeamFile."""
    config = providers.current()
    error = providers.last_error
    usable = {m.public_id for m in (allowed(list(config.models)) if allowed is not None else config.models)}
    return {
        "service": SERVICE,
        "pid": os.getpid(),
        "time_ms": int(time.time() * 1000),
        "mode": mode,
        "store": store_location(db),
        "user": user,
        "team": None if team is None else {
            "path": str(team.path), "error": str(team.last_error) if team.last_error is not None else None},
        "config": {
            "path": str(providers.path) if providers.path else None,
            "error": str(error) if error is not None else None,
            "serving": "last good config" if error is not None and config.models else
                       "no user models" if not config.models else "current file",
            "models": [
                {"public_id": m.public_id, "provider": m.provider, "kind": m.kind, "model_id": m.model_id,
                 "display_name": m.display_name, "base_url": m.base_url, "api_key_env": m.api_key_env,
                 "key_set": m.resolve_api_key() is not None, "problems": list(m.problems),
                 "allowed": m.public_id in usable}
                for m in config.models
            ],
        },
    }


class StatusEndpoint:
    """Answers `GET http://cursor-byok.invalid/status` with `status()` as JSON: for the client's own
    proxyauth user (which models the team file gives them)."""

    def __init__(self, providers: ProvidersFile, routes_for: Callable | None = None,
                 team: Callable[[], object] | None = None) -> None:
        self.providers = providers
        self.routes_for = routes_for
        """(flow, routes) -> the routes this flow's user may use (Backend.routes_for_flow)."""
        self.team = team
        """() -> the Team in force (Backend.team)."""

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.request.pretty_host != STATUS_HOST or flow.response is not None:
            return
        if flow.request.path.split("?", 1)[0] != "/status":
            return  # every other page of this host is the dashboard's (dashboard_endpoint.py)
        flow.metadata["byok"] = "status"
        if not peer_is_loopback(flow.client_conn.peername):
            flow.response = http.Response.make(
                403, b"cursor-byok status is answered only to clients on this machine\n",
                {"content-type": "text/plain"})
            return
        from mitmproxy import ctx

        from .options import db_target

        mode = getattr(ctx.options, "byok_mode", None)
        db = db_target(ctx.options.byok_db) if hasattr(ctx.options, "byok_db") else None
        team = self.team() if self.team is not None else None
        answer = status(self.providers, mode, db=db, user=authenticated_user(flow),
                        allowed=None if self.routes_for is None else (lambda routes: self.routes_for(flow, routes)),
                        team=team.file if team is not None and team.enabled else None)
        body = json.dumps(answer, ensure_ascii=False, indent=1).encode()
        flow.response = http.Response.make(200, body, {"content-type": "application/json",
                                                       "cache-control": "no-store"})
