"""The local backend inside mitmproxy: its lifecycle and what every transport shares.

At `running` it opens the store, the provider HTTP client, the agent runtime and the loopback stream
server; at `done` it ends open runs and closes them in order. The transports (addon/transports/) answer
the RPCs with what it holds: `runtime`, `server`, `runs`, `store`, `settings`, and who may use the
user's models (`allowed`, `refusal`). Blob GC runs here at start when `byok_gc_days` is set.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket

from mitmproxy import ctx, http

from . import duplex, options
from .access import ClientAccess, authenticated_user
from .agent.clock import Clock, CountingIds, FixedClock, Ids
from .agent.loop import Services, make_turn_factory
from .agent.run import Run, RunSettings
from .agent.runtime import Runtime
from .agent.team import Team, TeamFile
from .agent.warm import WarmCache
from .providers.config import ProvidersFile
from .providers.io import StreamLimits, make_client
from .transports.run_h2 import RunTransport
from .transports.stream_server import StreamServer
from .wire import connect
from .wire.errors import AccessDenied, RunError

log = logging.getLogger("byok.backend")


class Backend:
    def __init__(self, providers: ProvidersFile, recorder=None, access: ClientAccess | None = None) -> None:
        self.providers = providers
        self.recorder = recorder
        self.access = access
        """Who may use the user's models (None: every client, as in unit tests)."""
        self.runtime: Runtime | None = None
        self.server: StreamServer | None = None
        self.runs: RunTransport | None = None
        self.store = None
        self.http = None
        self.provider_limits: StreamLimits | None = None
        self.clock: Clock | None = None
        self.settings: options.Settings | None = None
        self.team = Team()
        """The team file's rules (byok_team); without one, the single user may use every model."""
        self.replica: str | None = None
        """This process's name among replicas sharing one PostgreSQL (None on SQLite)."""
        self.fence = None
        """store.fence.FenceListener on PostgreSQL: runs fenced by another replica end here at once."""
        self._ready = asyncio.Event()
        self._gc_task: asyncio.Future | None = None
        self._team_watch: asyncio.Task | None = None

    # ---- lifecycle ------------------------------------------------------------------------------

    async def running(self) -> None:
        from byok.prompt.assets import load_assets
        from byok.store import AsyncStore

        settings = self.settings = options.current()
        if ctx.options.connection_strategy == "eager" and "connection_strategy" not in _user_set():
            # eager makes an unreachable upstream 502 every CONNECT, even calls we answer locally
            ctx.options.update(connection_strategy="lazy")
        prompts = load_assets()  # a broken asset stops start-up with a message naming the file
        self.team = Team(TeamFile(settings.team), prices_of=self._prices_of) if settings.team else Team()
        if self.team.enabled and not ctx.options.proxyauth:
            log.error("byok_team is set but proxyauth is not: no client has a user name, so every local run "
                      "is refused (docs/team.md)")
        if self.team.enabled and ctx.options.byok_config_poll_ms > 0:  # a broken edit is reported promptly
            self._team_watch = asyncio.ensure_future(self.team.file.watch(ctx.options.byok_config_poll_ms / 1000))
        from byok.store.db import DatabaseUnavailable

        try:
            self.store = await AsyncStore.open(settings.db)
        except DatabaseUnavailable as e:  # one line, no traceback: mitmproxy exits on this error at start
            log.error("cursor-byok cannot open its database (byok_db=%s): %s", _shown(settings.db), e)
            return
        if self.store.dialect == "postgresql":
            self.replica = settings.replica or f"{socket.gethostname()}:{os.getpid()}"
        self.http = make_client()
        self.provider_limits = StreamLimits(headers_s=settings.provider_headers_s, idle_s=settings.provider_idle_s)
        clock, ids = (FixedClock(), CountingIds()) if settings.deterministic else (Clock(), Ids())
        self.clock = clock
        services = Services(
            store=self.store, lookup_model=self.providers.lookup, prompts=prompts, http=self.http,
            clock=clock, ids=ids, verbose_llm=settings.verbose_llm, team=self.team, replica=self.replica,
            provider_limits=self.provider_limits,
            user_models=lambda: list(self.providers.agent_models), warm=WarmCache(settings.warm_cache_mib << 20),
        )
        self.runtime = Runtime(
            is_user_model=lambda model_id: self.providers.lookup(model_id) is not None,
            make_turn=make_turn_factory(services),
            settings=RunSettings(
                ack_timeout_s=settings.ack_timeout_s, heartbeat_s=settings.heartbeat_s,
                stream_attach_timeout_s=settings.route_wait_s,
            ),
            observe=settings.mode == "observe",
            clock=clock, ids=ids,
            frame_sink_for=(self.recorder.sink_for if self.recorder and settings.record else lambda rid: None),
            on_run_finished=self._run_finished,
        )
        services.claim_conversation = self.runtime.claim_conversation
        if self.replica is not None:
            from byok.store.fence import FenceListener

            self.fence = FenceListener(str(settings.db), self.runtime.fence_remote)
            self.fence.start()
        services.web = self._web_tools
        duplex.install()
        self.runs = RunTransport(self.runtime)
        self.server = StreamServer(self.runtime.stream_run, self.runs.serve)
        await self.server.start()
        self._ready.set()
        if settings.gc_days > 0:
            self._gc_task = asyncio.ensure_future(self._collect_garbage(settings.gc_days))
        log.info(
            "cursor-byok ready: mode=%s, %d user model(s), db=%s%s, stream server 127.0.0.1:%d",
            settings.mode, len(self.providers.models), _shown(settings.db),
            f", replica={self.replica}" if self.replica else "", self.server.port,
        )

    def _web_tools(self):
        """The web backends as the providers file (hot-reloaded) and the options say now."""
        from .agent.web import WebTools
        from .agent.web.fetch import FetchPolicy
        from .agent.web.images import ImageBackend
        from .agent.web.search import search_backend

        config = self.providers.current()
        return WebTools(
            http=self.http,
            search=search_backend(config.web_search) if config.web_search else None,
            images=ImageBackend(config.image_generation) if config.image_generation else None,
            fetch=FetchPolicy(allow_private=self.settings.web_fetch_private,
                              max_bytes=self.settings.web_fetch_max_kb * 1024,
                              check_redirects=self.settings.web_fetch_check_redirects),
        )

    async def done(self) -> None:
        if self._team_watch is not None:
            self._team_watch.cancel()
        if self._gc_task is not None:
            await asyncio.wait([self._gc_task], timeout=5)
        if self.fence is not None:
            await self.fence.stop()
        if self.runtime is not None:
            await self.runtime.shutdown(timeout=8.0)
        if self.server is not None:
            await self.server.stop(timeout=2.0)
        if self.http is not None:
            await self.http.aclose()
        if self.recorder is not None:
            await self.recorder.flush()
        if self.store is not None:
            await self.store.close()

    async def _collect_garbage(self, days: int) -> None:
        """Mark-and-sweep on the store thread; blobs of runs starting meanwhile are young, so safe."""
        try:
            stats = await self.store.gc(retention_ms=days * 86_400_000)
            log.info("blob GC: %d reachable, %d swept (%.1f MB), %d unreachable but younger than %d days",
                     stats.marked, stats.swept, stats.swept_bytes / 1e6, stats.kept_young, days)
        except Exception:
            log.exception("blob GC failed")

    async def _run_finished(self, run: Run, error: RunError | None) -> None:
        status = run.outcome or "failed"
        try:
            await self.store.finish_run(
                run.request_id, status,
                error_code=None if error is None else error.code.value,
                error_message=None if error is None else getattr(error, "detail", error.message),
                usage=run.usage,
            )
        except Exception:
            log.exception("[%s] could not record the run's end", run.request_id)

    # ---- what the transports share ----------------------------------------------------------------

    async def ready(self) -> None:
        """Returns once `running` finished (the proxy listens before that)."""
        if not self._ready.is_set():
            await self._ready.wait()

    def routes_for_flow(self, flow: http.HTTPFlow, routes):
        """The models this flow's user may use (model lists): all of them without a team file."""
        if not self.team.enabled:
            return routes
        user = authenticated_user(flow)
        if user is None:
            return ()
        policy = self.team.file.policy(user)
        return [r for r in routes if policy.allows(r)]

    def allowed(self, flow: http.HTTPFlow) -> bool:
        return self.access is None or self.access.allows(flow)

    def refusal(self, flow: http.HTTPFlow, request_id: str) -> connect.ConnectError:
        if self.allowed(flow):  # a client that may run locally, refused: the request is another user's
            message = f"request {request_id} belongs to another user; this client may not take part in it"
        else:
            message = self.access.refusal(flow) if self.access is not None else "not allowed"
        log.warning("[%s] refused: %s", request_id, message)
        return AccessDenied(message).to_connect()

    def _prices_of(self, public_id: str | None):
        route = self.providers.lookup(public_id) if public_id else None
        return None if route is None else route.prices


def _shown(db) -> str:
    from byok.store.sql import redact_url

    return redact_url(db) if isinstance(db, str) else str(db)


def _user_set() -> set[str]:
    """Options the user set explicitly: changed from their default, or named on the command line
    (an explicit `--set connection_strategy=eager` equals the default but must be respected)."""
    import sys

    named = {arg.split("=", 1)[0] for arg in sys.argv if "=" in arg}
    return {name for name, opt in ctx.options._options.items() if opt.current() != opt.default or name in named}
