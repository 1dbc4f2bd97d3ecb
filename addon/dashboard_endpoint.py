"""The dashboard's mitmproxy side: `http://cursor-byok.invalid/` answered by the proxy itself.

A plain-HTTP request through the proxy to the reserved host (`.invalid` never resolves, RFC 6761) is
answered here, like `/status` (status.py) and mitmproxy's own `mitm.it`: no extra port. This addon
decides who is looking (`views.viewer_for`: loopback clients of a single-user proxy, proxyauth users
on an exposed or team proxy) and hands the request to `views.Dashboard`.

Live runs stream as server-sent events. mitmproxy sends a response an addon builds in one piece, so
`/events` is pointed at the embedded loopback stream server, as a local RunSSE is: a one-shot call
(`expect_call` + `x-byok-call`, transports/loopback.py) whose token names the viewer, streaming the
live panel whenever it changes for as long as the page stays open.
"""

from __future__ import annotations

import asyncio
import logging
import secrets

from mitmproxy import ctx, http

from .access import authenticated_user, peer_is_loopback
from .transports.loopback import point_at_loopback
from .transports.stream_server import CALL_HEADER
from .dashboard.views import HOST, MAX_BODY, RECENT_RUNS, Dashboard, Request, Sources, Viewer, viewer_for

log = logging.getLogger("byok.dashboard")

EVENTS_PATH = "/events"
LIVE_POLL_S = 0.5
"""How often an open page's live panel is re-read (sent only when it changed)."""
KEEPALIVE_S = 15.0


class DashboardEndpoint:
    """Serves the dashboard (after the backend in the addon list: it needs the store's settings, the
    runtime's live runs and the loopback stream server, all made in the backend's `running`)."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.board: Dashboard | None = None

    async def running(self) -> None:
        backend = self.backend
        if backend.settings is None or backend.server is None:
            return
        settings = backend.settings
        self.board = Dashboard(settings.db, Sources(
            config=lambda: settings.config, team=lambda: backend.team, live_request_ids=self._live_request_ids,
            doctor=self._doctor, gc=self._gc, mode=lambda: settings.mode))

    async def done(self) -> None:
        if self.board is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.board.close)

    # ---- hooks ---------------------------------------------------------------------------------------

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if self._ours(flow):
            flow.request.stream = False  # a form's body is read whole (FlowStreaming streams other hosts)

    async def request(self, flow: http.HTTPFlow) -> None:
        if not self._ours(flow) or flow.response is not None:
            return
        flow.metadata["byok"] = "dashboard"
        viewer = self.viewer(flow)
        if isinstance(viewer, str):
            flow.response = http.Response.make(403, (viewer + "\n").encode(), {"content-type": "text/plain"})
            return
        if self.board is None:
            flow.response = http.Response.make(503, b"cursor-byok is starting\n", {"content-type": "text/plain"})
            return
        if len(flow.request.raw_content or b"") > MAX_BODY:
            flow.response = http.Response.make(413, b"too large for a dashboard form\n", {"content-type": "text/plain"})
            return
        if flow.request.method == "GET" and flow.request.path.split("?", 1)[0] == EVENTS_PATH:
            self._to_stream_server(flow, viewer)
            return
        request = Request.parse(flow.request.method, flow.request.path, dict(flow.request.headers),
                                flow.request.raw_content or b"")
        try:
            response = await self.board.handle(request, viewer)
        except Exception as e:  # never let the flow go on towards a host that does not exist
            log.exception("dashboard request %s failed", flow.request.path)
            flow.response = http.Response.make(500, f"dashboard error: {type(e).__name__}: {e}\n".encode(),
                                               {"content-type": "text/plain"})
            return
        flow.response = http.Response.make(response.status, response.body,
                                           [(k.encode(), v.encode()) for k, v in response.headers])

    # ---- who is looking --------------------------------------------------------------------------------

    def viewer(self, flow: http.HTTPFlow) -> Viewer | str:
        team = self.backend.team
        peer = flow.client_conn.peername
        return viewer_for(user=authenticated_user(flow), loopback_client=peer_is_loopback(peer),
                          team_enabled=team.enabled, admins=team.file.current().admins if team.enabled else frozenset())

    @staticmethod
    def _ours(flow: http.HTTPFlow) -> bool:
        return flow.request.pretty_host == HOST and flow.request.path.split("?", 1)[0] != "/status"

    # ---- live runs -------------------------------------------------------------------------------------

    def _to_stream_server(self, flow: http.HTTPFlow, viewer: Viewer) -> None:
        """The live stream is served by the loopback server (FlowStreaming restores the host and
        streams the response); the one-time token names this viewer's stream."""
        server = self.backend.server
        token = secrets.token_urlsafe(24)
        server.expect_call(token, lambda response: self._events(viewer, response))
        point_at_loopback(flow, server, CALL_HEADER, token)

    async def _events(self, viewer: Viewer, response) -> None:
        """The live panel as server-sent events, sent whenever it changed, until the page is closed
        (the stream server cancels this then) or the proxy stops."""
        response.start(200, [("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-store")])
        stopping = self.backend.server.stopping
        last, quiet = None, 0.0
        try:
            await response.write(b"retry: 2000\n\n")
            while not stopping.is_set():
                fragment = await self.board.live_fragment(viewer)
                if fragment != last:
                    await response.write(sse_event("live", fragment))
                    last, quiet = fragment, 0.0
                elif quiet >= KEEPALIVE_S:
                    await response.write(b": keep-alive\n\n")
                    quiet = 0.0
                try:
                    await asyncio.wait_for(stopping.wait(), LIVE_POLL_S)
                except asyncio.TimeoutError:
                    quiet += LIVE_POLL_S
            await response.end()
        except ConnectionError:
            pass  # the page was closed

    def _live_request_ids(self) -> list[str]:
        """Runs of this process, running first. Called on the dashboard's thread while the event loop
        changes these maps: each is copied by one C-level call (atomic under the GIL) before it is read."""
        runtime = self.backend.runtime
        if runtime is None:
            return []
        channels = list(runtime.channels.values())
        finished = list(runtime.finished)[-(RECENT_RUNS + len(channels)):]
        running = [ch.run.request_id for ch in channels if ch.run is not None and not ch.run.terminal]
        return running + [rid for rid in reversed(finished) if rid not in running][:RECENT_RUNS]

    # ---- what the operator pages run ------------------------------------------------------------------------

    def _doctor(self) -> list:
        """`cursor-byok doctor`'s checks for this proxy (on the dashboard's thread): its confdir,
        providers file, store, listener and status, as the CLI would find them from this machine."""
        import os
        from pathlib import Path

        from byok.cli import doctor
        from byok.cli.common import platform_name

        from .status import status

        from byok.cli.common import ProxyAnswer

        backend, settings = self.backend, self.backend.settings
        host, port = self._listen_address()
        os_name = platform_name()
        # what this proxy's /status says, asked here rather than over the network: a proxy with proxyauth
        # would answer the dashboard's own unauthenticated request 407
        served = status(backend.providers, settings.mode, db=settings.db,
                        team=backend.team.file if backend.team.enabled else None)
        return doctor.all_checks(
            os_name=os_name, confdir=Path(os.path.expanduser(ctx.options.confdir)), config=settings.config,
            db=settings.db, proxy=f"http://{host}:{port}", settings_path=doctor.cursor_settings_path(os_name),
            recent_min=60, timeout=2.0, served=served, answer=ProxyAnswer(200, served))

    @staticmethod
    def _listen_address() -> tuple[str, int]:
        proxyserver = ctx.master.addons.get("proxyserver")
        for host, port, *_ in (proxyserver.listen_addrs() if proxyserver is not None else []):
            shown = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
            return (f"[{shown}]" if ":" in shown else shown), port
        return "127.0.0.1", ctx.options.listen_port or 8080

    async def _gc(self, days: int):
        stats = await self.backend.store.gc(retention_ms=days * 86_400_000)
        log.info("blob GC from the dashboard: %d reachable, %d swept (%.1f MB), %d unreachable but younger than %d "
                 "days", stats.marked, stats.swept, stats.swept_bytes / 1e6, stats.kept_young, days)
        return stats


def sse_event(name: str, data: str) -> bytes:
    """One server-sent event; every line of `data` its own `data:` line (the browser joins them)."""
    lines = "".join(f"data: {line}\n" for line in data.split("\n"))
    return f"event: {name}\n{lines}\n".encode()
