"""RunSSE + BidiAppend: the HTTP/1.1 agent transport (docs/architecture.md).

- BidiAppend is answered in the `request` hook (200 empty, or a Connect error JSON) after the runtime
  took its message; an append of Cursor's own run goes upstream untouched.
- A local RunSSE is pointed at the loopback stream server, which streams the run's frames; a RunSSE of
  Cursor's own run goes upstream untouched.
- `/agent/v1/run` is answered 404 in intercept mode so Cursor takes the RunSSE path (DESIGN §2).
- Observe mode answers nothing: every agent RPC goes upstream untouched (no routing, no waiting).
Both wait for their request's run_request to know the route; with replicas (PostgreSQL) they also
watch the store, so a request that reached the wrong replica fails at once, naming both.
"""

from __future__ import annotations

import asyncio
import logging

from mitmproxy import http

from ..access import authenticated_user
from ..agent.cursor.bidi import UnusableAppend, decode_bidi_append, decode_run_sse
from ..agent.run import PARENT_TOOL_CALL_HEADER
from ..agent.runtime import Route, RouteTimeout
from ..router import Rpc, classify
from ..wire import connect
from ..wire.errors import AccessDenied
from .loopback import CONNECT_PROTO, point_at_loopback, stream_error, unary_error
from .stream_server import RUN_HEADER

log = logging.getLogger("byok.runsse")


class RunSseTransport:
    def __init__(self, backend) -> None:
        self.backend = backend

    async def request(self, flow: http.HTTPFlow) -> None:
        backend = self.backend
        await backend.ready()  # the proxy listens before `running` finished
        rpc = classify(flow, backend.settings)
        if backend.settings.mode == "observe":
            if rpc in (Rpc.RUN_SSE, Rpc.BIDI_APPEND, Rpc.RUN_PROBE):
                flow.metadata["byok"] = "observe"  # passed upstream as sent; the recorder keeps the frames
            return
        if rpc is Rpc.RUN_SSE:
            await self._run_sse(flow)
        elif rpc is Rpc.BIDI_APPEND:
            await self._bidi_append(flow)
        elif rpc is Rpc.RUN_PROBE and backend.settings.mode == "intercept":
            flow.response = http.Response.make(404, b"", {"content-type": "text/plain"})
            flow.metadata["byok"] = "run-probe"

    # ---- RunSSE ----------------------------------------------------------------------------------

    async def _run_sse(self, flow: http.HTTPFlow) -> None:
        backend = self.backend
        try:
            request_id = decode_run_sse(flow.request.content or b"",
                                        flow.request.headers.get("content-type", CONNECT_PROTO))
        except connect.ConnectError as e:
            stream_error(flow, e)
            return
        flow.metadata["byok_request_id"] = request_id
        runtime = backend.runtime
        run = runtime.run(request_id)  # live, or ended before a RunSSE attached (that one still gets its end)
        if (run is None and request_id in runtime.finished) or (run is not None and run.stream_attached):
            stream_error(flow, connect.ConnectError(
                connect.Code.ALREADY_EXISTS, f"request {request_id} already has a RunSSE stream; it is not replayed"))
            return
        try:
            route = await self._wait_route(request_id)
        except RouteTimeout as e:
            stream_error(flow, connect.ConnectError(connect.Code.DEADLINE_EXCEEDED, str(e)))
            return
        except connect.ConnectError as e:  # its run is on another replica
            stream_error(flow, e)
            return
        if route is Route.UPSTREAM:
            flow.metadata["byok"] = "upstream"
            return
        if route is Route.REFUSED or not backend.allowed(flow):
            stream_error(flow, backend.refusal(flow, request_id))
            return
        if (run := runtime.run(request_id)) is not None and run.user != authenticated_user(flow):
            stream_error(flow, AccessDenied(
                f"request {request_id} belongs to another user; it is not streamed to this client").to_connect())
            return
        flow.metadata["byok"] = "local"
        point_at_loopback(flow, backend.server, RUN_HEADER, request_id)

    # ---- BidiAppend ------------------------------------------------------------------------------

    async def _bidi_append(self, flow: http.HTTPFlow) -> None:
        backend, runtime = self.backend, self.backend.runtime
        try:
            append = decode_bidi_append(flow.request.get_content(strict=True) or b"",
                                        flow.request.headers.get("content-type", "application/proto"))
        except UnusableAppend as e:  # names its request and seqno: that seqno is used up
            flow.metadata["byok_request_id"] = e.request_id
            run = runtime.run(e.request_id)
            own = run is None or run.user == authenticated_user(flow)  # another user never ends someone's run
            route = runtime.reject_append(e.request_id, e.seqno, e.message,
                                          local_allowed=backend.allowed(flow) and own)
            if route is Route.UPSTREAM:
                flow.metadata["byok"] = "upstream"  # Cursor's own run: its backend judges the append
            elif route is Route.REFUSED:
                unary_error(flow, backend.refusal(flow, e.request_id))
            else:
                unary_error(flow, e)
            return
        except (connect.ConnectError, ValueError) as e:
            error = e if isinstance(e, connect.ConnectError) else connect.ConnectError(connect.Code.INVALID_ARGUMENT, str(e))
            unary_error(flow, error)
            return
        flow.metadata["byok_request_id"] = append.request_id
        allowed, user = backend.allowed(flow), authenticated_user(flow)
        parent = flow.request.headers.get(PARENT_TOOL_CALL_HEADER) or None
        route = runtime.on_append(append.request_id, append.seqno, append.message, append.raw,
                                  local_allowed=allowed, user=user, parent_tool_call_id=parent)
        if route is None:
            log.info("[%s] BidiAppend seqno %d came before the run_request: held until the route is known",
                     append.request_id, append.seqno)
            try:
                await self._wait_route(append.request_id)
            except RouteTimeout as e:
                unary_error(flow, connect.ConnectError(connect.Code.INVALID_ARGUMENT, str(e)))
                return
            except connect.ConnectError as e:  # its run is on another replica
                unary_error(flow, e)
                return
            route = runtime.on_append(append.request_id, append.seqno, append.message, append.raw,
                                      local_allowed=allowed, user=user, parent_tool_call_id=parent)
        if route is Route.UPSTREAM:
            flow.metadata["byok"] = "upstream"
            return
        if route is Route.REFUSED:
            unary_error(flow, backend.refusal(flow, append.request_id))
            return
        flow.metadata["byok"] = "answered"
        flow.response = http.Response.make(200, b"", {"content-type": "application/proto"})

    # ---- the route, across replicas ------------------------------------------------------------------

    async def _wait_route(self, request_id: str) -> Route:
        """Wait for this request's run_request. With replicas (PostgreSQL), also watch the store: when
        another replica claimed the run, this RunSSE or append came to the wrong one, and it fails
        now, naming both, instead of waiting out byok_route_wait_s."""
        backend = self.backend
        runtime, timeout, replica = backend.runtime, backend.settings.route_wait_s, backend.replica
        if replica is None:
            return await runtime.wait_route(request_id, timeout)
        waiter = asyncio.ensure_future(runtime.wait_route(request_id, timeout))
        delay = 0.02
        try:
            while True:
                done, _ = await asyncio.wait([waiter], timeout=delay)
                if done:
                    return waiter.result()
                other = await backend.store.run_replica(request_id)
                if other is not None and other != replica:
                    raise connect.ConnectError(connect.Code.FAILED_PRECONDITION, (
                        f"request {request_id} runs on replica {other}, not on this one ({replica}): a "
                        f"client's RunSSE and BidiAppends must reach the same replica (sticky routing, docs/team.md)"))
                delay = min(delay * 2, 0.5)
        finally:
            if not waiter.done():
                waiter.cancel()
                runtime.forget_unrouted(request_id)
