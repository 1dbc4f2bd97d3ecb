"""The local Agent backend inside mitmproxy: answers the agent RPCs of runs on the user's models.

- BidiAppend is answered in the `request` hook (200 empty, or a Connect error JSON).
- A local RunSSE is pointed at the embedded loopback stream server; mitmproxy streams its body.
- Runs on any other model, and everything else, go upstream untouched and streamed.
- An HTTP/2 `Run` (Cursor's default transport) goes to the same loopback server, where the Run
  transport (`run_transport.py`) reads its first message and answers it or relays it to Cursor.
- `/agent/v1/run` is answered 404 in intercept mode so Cursor takes the RunSSE path (DESIGN §2).
- Observe mode answers nothing: every agent RPC goes upstream untouched (no routing, no waiting).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket

from mitmproxy import ctx, http

from . import options
from .wire import connect
from .agent.clock import Clock, CountingIds, FixedClock, Ids
from .providers.config import ProvidersFile
from .agent.cursor.bidi import UnusableAppend, decode_bidi_append, decode_run_sse
from .wire.errors import AccessDenied, RunError
from .agent.loop import Services, make_turn_factory
from .providers.io import StreamLimits, make_client
from .agent.run import PARENT_TOOL_CALL_HEADER, Run, RunSettings
from .access import ClientAccess, authenticated_user
from .agent.team import Team, TeamFile
from .agent.runtime import Route, RouteTimeout, Runtime
from . import duplex
from .router import Rpc, classify
from .run_transport import RELAY_HEADER, PendingRun, RelayTarget, RunTransport, relay_headers
from .stream_server import RUN_HEADER, RUN_STREAM_HEADER, StreamServer

log = logging.getLogger("byok.backend")

CONNECT_PROTO = "application/connect+proto"
ANSWERED_HERE = ("rejected", "run-probe", "answered", "status")


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
        self.settings: options.Settings | None = None
        self.team = Team()
        """The team file's rules (byok_team); without one, the single user may use every model."""
        self.replica: str | None = None
        """This process's name among replicas sharing one PostgreSQL (None on SQLite)."""
        self.fence = None
        """store.fence.FenceListener on PostgreSQL: runs fenced by another replica end here at once."""
        self._ready = asyncio.Event()
        self._gc_task: asyncio.Future | None = None

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
        self.store = await AsyncStore.open(settings.db)
        if self.store.dialect == "postgresql":
            self.replica = settings.replica or f"{socket.gethostname()}:{os.getpid()}"
        self.http = make_client()
        clock, ids = (FixedClock(), CountingIds()) if settings.deterministic else (Clock(), Ids())
        services = Services(
            store=self.store, lookup_model=self.providers.lookup, prompts=prompts, http=self.http,
            clock=clock, ids=ids, verbose_llm=settings.verbose_llm, team=self.team, replica=self.replica,
            provider_limits=StreamLimits(headers_s=settings.provider_headers_s, idle_s=settings.provider_idle_s),
            user_models=lambda: list(self.providers.agent_models),
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
                              max_bytes=self.settings.web_fetch_max_kb * 1024),
        )

    async def done(self) -> None:
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

    # ---- hooks ---------------------------------------------------------------------------------

    async def requestheaders(self, flow: http.HTTPFlow) -> None:
        if not self._ready.is_set() and self._is_run(flow):
            await self._ready.wait()  # a Run's route is fixed at its headers: wait for the loopback server
        rpc = None if self.settings is None else classify(flow, self.settings)
        if rpc is Rpc.RUN and self.runs is not None:
            self._run_headers(flow)
        elif rpc is None or rpc is Rpc.RUN:
            flow.request.stream = True  # not ours: straight through, never buffered

    async def request(self, flow: http.HTTPFlow) -> None:
        if not self._ready.is_set():
            await self._ready.wait()  # the proxy listens before `running` finished
        rpc = classify(flow, self.settings)
        if self.settings.mode == "observe":
            if rpc in (Rpc.RUN_SSE, Rpc.BIDI_APPEND, Rpc.RUN_PROBE):
                flow.metadata["byok"] = "observe"  # passed upstream as sent; the recorder keeps the frames
            return
        if rpc is Rpc.RUN_SSE:
            await self._run_sse(flow)
        elif rpc is Rpc.BIDI_APPEND:
            await self._bidi_append(flow)
        elif rpc is Rpc.RUN_PROBE and self.settings.mode == "intercept":
            flow.response = http.Response.make(404, b"", {"content-type": "text/plain"})
            flow.metadata["byok"] = "run-probe"

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if flow.metadata.get("byok") in ANSWERED_HERE:
            return  # built in `request`: already complete, nothing to stream
        target = flow.metadata.get("byok_target")
        if target:  # show the real host again (the request already went to the loopback server)
            flow.request.scheme, flow.request.host, flow.request.port = target
            flow.request.headers.pop(RUN_HEADER, None)
            # An HTTP/2 Run's `transfer-encoding: chunked` stays: its request is still streaming, and
            # mitmproxy's HTTP/1.1 hop frames every later chunk (and the end) by this very header.
            flow.request.headers.pop(RUN_STREAM_HEADER, None)
        rpc = None if self.settings is None else classify(flow, self.settings)
        if rpc not in (Rpc.MODEL_LIST, Rpc.SERVER_CONFIG):
            if self.recorder is not None and rpc in (Rpc.RUN_SSE, Rpc.RUN):
                flow.response.stream = self.recorder.tee_response(flow)
            else:
                flow.response.stream = True

    def error(self, flow: http.HTTPFlow) -> None:
        request_id = flow.metadata.get("byok_request_id")
        if request_id and self.runtime is not None and flow.metadata.get("byok_target"):
            run = self.runtime.run(request_id)
            if run is not None and not run.terminal:
                from .wire.errors import RunCanceled

                what = "Run" if flow.metadata.get("byok") == "run" else "RunSSE"
                run.cancel(RunCanceled(f"the client's {what} stream failed: {flow.error}"))

    # ---- HTTP/2 Run -------------------------------------------------------------------------------

    def _is_run(self, flow: http.HTTPFlow) -> bool:
        return flow.request.method == "POST" and flow.request.path.split("?", 1)[0] == "/agent.v1.AgentService/Run"

    def _run_headers(self, flow: http.HTTPFlow) -> None:
        """Route a Run at its headers (mitmproxy connects upstream right after this hook)."""
        request = flow.request
        relay_token = request.headers.pop(RELAY_HEADER, None)
        relayed = self.runs.relays.get(relay_token or "")
        flow.metadata[duplex.FULL_DUPLEX] = request.is_http2
        if relayed is not None:  # our own relay leg of a Cursor-model Run: to Cursor as it is
            flow.metadata.update(byok="upstream", byok_request_id=relayed, byok_relay=True)
            request.stream = self.recorder.tee_request(flow) if self.recorder is not None else True
            return
        request_id = self._run_request_id(flow)
        flow.metadata["byok_request_id"] = request_id
        if self.settings.mode == "observe" or not request.is_http2:
            # observe records without answering; an HTTP/1.1 Run (no client sends one) passes on as before
            flow.metadata["byok"] = "observe" if self.settings.mode == "observe" else "upstream"
            request.stream = self.recorder.tee_request(flow) if self.recorder is not None else True
            return
        token = RunTransport.new_token()
        self.runs.expect(PendingRun(
            token, request_id, authority=request.authority or request.pretty_host, path=request.path,
            headers=relay_headers(list(request.headers.items(multi=True))), relay=self._relay_target(flow),
            refusal=None if self._allowed(flow) else self.access.refusal(flow), user=authenticated_user(flow),
        ))
        flow.metadata["byok"] = "run"
        flow.metadata["byok_target"] = (request.scheme, request.host, request.port)
        request.headers[RUN_STREAM_HEADER] = token
        request.headers["transfer-encoding"] = "chunked"  # else mitmproxy's HTTP/1.1 hop has no body framing
        request.headers.pop("content-length", None)
        request.scheme, request.host, request.port = "http", "127.0.0.1", self.server.port
        request.stream = self.recorder.tee_request(flow) if self.recorder is not None else True

    def _run_request_id(self, flow: http.HTTPFlow) -> str:
        """The client's x-request-id when it is new to this process, else a fresh id."""
        import uuid

        wanted = flow.request.headers.get("x-request-id", "").strip()
        if wanted and self.runtime.known_route(wanted) is None and wanted not in self.runtime.channels \
                and not any(p.request_id == wanted for p in self.runs.pending.values()):
            return wanted
        fresh = str(uuid.uuid4())
        if wanted:
            log.info("Run x-request-id %s already seen: this Run is %s", wanted, fresh)
        return fresh

    @staticmethod
    def _relay_target(flow: http.HTTPFlow) -> RelayTarget | None:
        from mitmproxy.proxy.mode_specs import ReverseMode

        mode = flow.client_conn.proxy_mode
        sockname = flow.client_conn.sockname
        if isinstance(mode, ReverseMode):
            tunnel = False
        elif mode.type_name in ("regular", "upstream"):
            tunnel = True
        else:
            return None
        auth = flow.metadata.get("proxyauth")
        confdir = os.path.expanduser(ctx.options.confdir)
        return RelayTarget(
            listener=(sockname[0], sockname[1]), tunnel=tunnel, host=flow.request.host, port=flow.request.port,
            ca_file=os.path.join(confdir, "mitmproxy-ca-cert.pem"),
            proxy_auth=tuple(auth) if auth else None,
        )

    # ---- RunSSE ----------------------------------------------------------------------------------

    async def _run_sse(self, flow: http.HTTPFlow) -> None:
        try:
            request_id = decode_run_sse(flow.request.content or b"", flow.request.headers.get("content-type", CONNECT_PROTO))
        except connect.ConnectError as e:
            self._stream_error(flow, e)
            return
        flow.metadata["byok_request_id"] = request_id
        runtime = self.runtime
        run = runtime.run(request_id)  # live, or ended before a RunSSE attached (that one still gets its end)
        if (run is None and request_id in runtime.finished) or (run is not None and run.stream_attached):
            self._stream_error(flow, connect.ConnectError(
                connect.Code.ALREADY_EXISTS, f"request {request_id} already has a RunSSE stream; it is not replayed"))
            return
        try:
            route = await self._wait_route(request_id)
        except RouteTimeout as e:
            self._stream_error(flow, connect.ConnectError(connect.Code.DEADLINE_EXCEEDED, str(e)))
            return
        except connect.ConnectError as e:  # its run is on another replica
            self._stream_error(flow, e)
            return
        if route is Route.UPSTREAM:
            flow.metadata["byok"] = "upstream"
            return
        if route is Route.REFUSED or not self._allowed(flow):
            self._stream_error(flow, self._refusal(flow, request_id))
            return
        if (run := runtime.run(request_id)) is not None and run.user != authenticated_user(flow):
            self._stream_error(flow, AccessDenied(
                f"request {request_id} belongs to another user; it is not streamed to this client").to_connect())
            return
        flow.metadata["byok"] = "local"
        flow.metadata["byok_target"] = (flow.request.scheme, flow.request.host, flow.request.port)
        flow.request.headers[RUN_HEADER] = request_id
        flow.request.scheme, flow.request.host, flow.request.port = "http", "127.0.0.1", self.server.port

    def _prices_of(self, public_id: str | None):
        route = self.providers.lookup(public_id) if public_id else None
        return None if route is None else route.prices

    async def _wait_route(self, request_id: str) -> Route:
        """Wait for this request's run_request. With replicas (PostgreSQL), also watch the store: when
        another replica claimed the run, this RunSSE or append came to the wrong one, and it fails
        now, naming both, instead of waiting out byok_route_wait_s."""
        runtime, timeout = self.runtime, self.settings.route_wait_s
        if self.replica is None:
            return await runtime.wait_route(request_id, timeout)
        waiter = asyncio.ensure_future(runtime.wait_route(request_id, timeout))
        delay = 0.02
        try:
            while True:
                done, _ = await asyncio.wait([waiter], timeout=delay)
                if done:
                    return waiter.result()
                other = await self.store.run_replica(request_id)
                if other is not None and other != self.replica:
                    raise connect.ConnectError(connect.Code.FAILED_PRECONDITION, (
                        f"request {request_id} runs on replica {other}, not on this one ({self.replica}): a "
                        f"client's RunSSE and BidiAppends must reach the same replica (sticky routing, docs/team.md)"))
                delay = min(delay * 2, 0.5)
        finally:
            if not waiter.done():
                waiter.cancel()
                runtime.forget_unrouted(request_id)

    def routes_for_flow(self, flow: http.HTTPFlow, routes):
        """The models this flow's user may use (model lists): all of them without a team file."""
        if not self.team.enabled:
            return routes
        user = authenticated_user(flow)
        if user is None:
            return ()
        policy = self.team.file.policy(user)
        return [r for r in routes if policy.allows(r)]

    def _allowed(self, flow: http.HTTPFlow) -> bool:
        return self.access is None or self.access.allows(flow)

    def _refusal(self, flow: http.HTTPFlow, request_id: str) -> connect.ConnectError:
        if self._allowed(flow):  # a client that may run locally, refused: the request is another user's
            message = f"request {request_id} belongs to another user; this client may not take part in it"
        else:
            message = self.access.refusal(flow) if self.access is not None else "not allowed"
        log.warning("[%s] refused: %s", request_id, message)
        return AccessDenied(message).to_connect()

    @staticmethod
    def _stream_error(flow: http.HTTPFlow, error: connect.ConnectError) -> None:
        log.warning("RunSSE rejected: %s", error)
        flow.response = http.Response.make(200, connect.encode_end_stream(error), {"content-type": CONNECT_PROTO})
        flow.metadata["byok"] = "rejected"

    # ---- BidiAppend ------------------------------------------------------------------------------

    async def _bidi_append(self, flow: http.HTTPFlow) -> None:
        try:
            append = decode_bidi_append(
                flow.request.get_content(strict=True) or b"", flow.request.headers.get("content-type", "application/proto")
            )
        except UnusableAppend as e:  # names its request and seqno: that seqno is used up
            flow.metadata["byok_request_id"] = e.request_id
            run = self.runtime.run(e.request_id)
            own = run is None or run.user == authenticated_user(flow)  # another user never ends someone's run
            route = self.runtime.reject_append(e.request_id, e.seqno, e.message,
                                               local_allowed=self._allowed(flow) and own)
            if route is Route.UPSTREAM:
                flow.metadata["byok"] = "upstream"  # Cursor's own run: its backend judges the append
            elif route is Route.REFUSED:
                self._unary_error(flow, self._refusal(flow, e.request_id))
            else:
                self._unary_error(flow, e)
            return
        except (connect.ConnectError, ValueError) as e:
            error = e if isinstance(e, connect.ConnectError) else connect.ConnectError(connect.Code.INVALID_ARGUMENT, str(e))
            self._unary_error(flow, error)
            return
        flow.metadata["byok_request_id"] = append.request_id
        runtime = self.runtime
        allowed, user = self._allowed(flow), authenticated_user(flow)
        parent = flow.request.headers.get(PARENT_TOOL_CALL_HEADER) or None
        route = runtime.on_append(append.request_id, append.seqno, append.message, append.raw,
                                  local_allowed=allowed, user=user, parent_tool_call_id=parent)
        if route is None:
            try:
                await self._wait_route(append.request_id)
            except RouteTimeout as e:
                self._unary_error(flow, connect.ConnectError(connect.Code.INVALID_ARGUMENT, str(e)))
                return
            except connect.ConnectError as e:  # its run is on another replica
                self._unary_error(flow, e)
                return
            route = runtime.on_append(append.request_id, append.seqno, append.message, append.raw,
                                      local_allowed=allowed, user=user, parent_tool_call_id=parent)
        if route is Route.UPSTREAM:
            flow.metadata["byok"] = "upstream"
            return
        if route is Route.REFUSED:
            self._unary_error(flow, self._refusal(flow, append.request_id))
            return
        flow.metadata["byok"] = "answered"
        flow.response = http.Response.make(200, b"", {"content-type": "application/proto"})

    @staticmethod
    def _unary_error(flow: http.HTTPFlow, error: connect.ConnectError) -> None:
        log.warning("BidiAppend rejected: %s", error)
        status, body = connect.unary_error_body(error)
        flow.response = http.Response.make(status, body, {"content-type": "application/json"})
        flow.metadata["byok"] = "rejected"


def _shown(db) -> str:
    from byok.store.sql import redact_url

    return redact_url(db) if isinstance(db, str) else str(db)


def _user_set() -> set[str]:
    """Options the user set explicitly: changed from their default, or named on the command line
    (an explicit `--set connection_strategy=eager` equals the default but must be respected)."""
    import sys

    named = {arg.split("=", 1)[0] for arg in sys.argv if "=" in arg}
    return {name for name, opt in ctx.options._options.items() if opt.current() != opt.default or name in named}
