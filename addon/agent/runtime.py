"""The agent runtime: routes requests, owns the live runs, feeds them client messages in order.

Pure asyncio (no mitmproxy). The backend addon calls three entry points:
    on_append(request_id, seqno, message, raw)  every decoded BidiAppend
    wait_route(request_id, timeout)             RunSSE and early appends wait for the routing decision
    run(request_id)                             the live run a local RunSSE streams

A request's route is decided by its first run_request: LOCAL when the requested model is one of the
user's, UPSTREAM otherwise (and always in observe mode). Only the first decision counts.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from byok.proto import agent_pb2 as apb

from .clock import Clock, Ids
from .cursor import updates
from ..wire.errors import ProtocolError, RunCanceled, RunError, ShuttingDown
from .inbox import Inbox
from .run import FrameSink, Run, RunSettings

log = logging.getLogger("byok.runtime")


class Route(enum.Enum):
    LOCAL = "local"
    UPSTREAM = "upstream"
    REFUSED = "refused"
    """A run on the user's model asked for by a client that may not use them (access.py)."""


@dataclass
class RequestChannel:
    request_id: str
    route: asyncio.Future
    inbox: Inbox = field(default_factory=Inbox)
    run: Run | None = None
    started: bool = False
    rejected: tuple[int, str] | None = None
    """(seqno, why) of the first append the proxy rejected for this request: that seqno never comes."""
    expiry: asyncio.TimerHandle | None = None


class RouteTimeout(Exception):
    pass


def requested_model_id(request: apb.AgentRunRequest) -> str:
    """The model the client asked for: `requested_model.model_id`, else `model_details.model_id`."""
    if request.requested_model.model_id:
        return request.requested_model.model_id
    return request.model_details.model_id


@dataclass
class Runtime:
    is_user_model: Callable[[str], bool]
    """public model id -> whether it is one of the user's models (config lookup)."""
    make_turn: Callable[[apb.AgentRunRequest], Callable[[Run], Awaitable[None]]]
    """Builds the turn coroutine for a local run (loop.py)."""
    settings: RunSettings = field(default_factory=RunSettings)
    observe: bool = False
    clock: Clock = field(default_factory=Clock)
    ids: Ids = field(default_factory=Ids)
    frame_sink_for: Callable[[str], FrameSink | None] = lambda request_id: None
    on_run_finished: Callable[[Run, RunError | None], Awaitable[None]] | None = None
    max_finished: int = 10_000

    channels: dict[str, RequestChannel] = field(default_factory=dict)
    finished: OrderedDict = field(default_factory=OrderedDict)
    """request_id -> outcome of finished local runs (a second RunSSE gets already_exists)."""
    unclaimed: OrderedDict = field(default_factory=OrderedDict)
    """request_id -> a run that ended before its RunSSE attached: that RunSSE still gets its end-stream."""
    rejected_early: OrderedDict = field(default_factory=OrderedDict)
    """request_id -> (seqno, why) of a rejected append whose request has no route yet."""
    upstream: OrderedDict = field(default_factory=OrderedDict)
    """request ids routed upstream (their later appends and RunSSE pass through), most recent last."""
    refused: OrderedDict = field(default_factory=OrderedDict)
    """request ids whose run_request came from a client that may not use the user's models."""
    by_conversation: dict[str, Run] = field(default_factory=dict)
    closing: bool = False

    # ---- routing --------------------------------------------------------------------------------

    def channel(self, request_id: str) -> RequestChannel:
        ch = self.channels.get(request_id)
        if ch is None:
            ch = self.channels[request_id] = RequestChannel(
                request_id, asyncio.get_running_loop().create_future()
            )
        return ch

    def known_route(self, request_id: str) -> Route | None:
        if request_id in self.upstream:
            return Route.UPSTREAM
        if request_id in self.refused:
            return Route.REFUSED
        ch = self.channels.get(request_id)
        if ch is None or not ch.route.done():
            return Route.LOCAL if request_id in self.finished else None
        return ch.route.result()

    async def wait_route(self, request_id: str, timeout: float) -> Route:
        if request_id in self.finished:
            return Route.LOCAL
        if request_id in self.upstream:
            return Route.UPSTREAM
        if request_id in self.refused:
            return Route.REFUSED
        ch = self.channel(request_id)
        try:
            return await asyncio.wait_for(asyncio.shield(ch.route), timeout)
        except asyncio.TimeoutError:
            if not ch.route.done() and self.channels.get(request_id) is ch:
                del self.channels[request_id]  # an orphan: nothing may hold its memory forever
            raise RouteTimeout(
                f"timed out after {timeout:g} s waiting for the run_request of request {request_id}"
            ) from None

    def _decide(self, ch: RequestChannel, request: apb.AgentRunRequest, local_allowed: bool,
                user: str | None = None) -> Route:
        model_id = requested_model_id(request)
        local = not self.observe and not self.closing and bool(model_id) and self.is_user_model(model_id)
        route = Route.UPSTREAM if not local else Route.LOCAL if local_allowed else Route.REFUSED
        local = route is Route.LOCAL
        if local:
            ch.run = Run(
                ch.request_id,
                user=user,
                settings=self.settings,
                frame_sink=self.frame_sink_for(ch.request_id),
                on_finished=self._finished,
            )
            ch.rejected = self.rejected_early.pop(ch.request_id, None)
            # the run_request may sit behind a seqno gap that never fills: do not keep the run forever
            ch.expiry = asyncio.get_running_loop().call_later(
                self.settings.stream_attach_timeout_s, self._expire_unstarted, ch)
        ch.route.set_result(route)
        if route is not Route.LOCAL:  # only the decision is needed from now on (bounded memory)
            self.channels.pop(ch.request_id, None)
            decided = self.upstream if route is Route.UPSTREAM else self.refused
            decided[ch.request_id] = None
            while len(decided) > self.max_finished:
                decided.popitem(last=False)
        log.info("[%s] model %r -> %s", ch.request_id, model_id, route.value)
        return route

    # ---- appends ---------------------------------------------------------------------------------

    def on_append(self, request_id: str, seqno: int, message: apb.AgentClientMessage, raw: bytes, *,
                  local_allowed: bool = True, user: str | None = None,
                  parent_tool_call_id: str | None = None) -> Route | None:
        """Take one decoded append. Returns the route if known (the caller passes UPSTREAM appends
        on untouched, refuses REFUSED ones, or waits when None). `local_allowed` is False for a
        client that may not use the user's models: its appends never reach a local run. `user` is
        the client's proxyauth name: a local run belongs to the user of its run_request, and
        another user's appends to it are REFUSED. `parent_tool_call_id` is the append's
        `X-Parent-Agent-Tool-Call-Id` (a subagent's run): bound to the run, a conflicting value later
        is a protocol error."""
        if request_id in self.upstream:
            return Route.UPSTREAM
        if request_id in self.refused:
            return Route.REFUSED
        if request_id in self.finished and request_id not in self.channels:
            return Route.LOCAL if local_allowed else Route.REFUSED  # a late append for a run that ended
        ch = self.channel(request_id)
        if not ch.route.done():
            if message.WhichOneof("message") != "run_request":
                return None
            self._decide(ch, message.run_request, local_allowed, user)
        route = ch.route.result()
        if route is Route.LOCAL and (not local_allowed or (ch.run is not None and ch.run.user != user)):
            return Route.REFUSED
        if route is not Route.LOCAL or ch.run is None:
            return route
        run = ch.run
        if parent_tool_call_id:
            if run.parent_tool_call_id is None:
                run.parent_tool_call_id = parent_tool_call_id
            elif run.parent_tool_call_id != parent_tool_call_id:
                run.fail(ProtocolError(
                    f"X-Parent-Agent-Tool-Call-Id changed within request {request_id}: bound to "
                    f"{run.parent_tool_call_id!r}, then {parent_tool_call_id!r}"))
                return route
        if message.WhichOneof("message") == "client_heartbeat" and run.stream_attached and not run.terminal:
            run.emit(updates.heartbeat())  # answered at once, whatever the seqno gaps
        try:
            ready = ch.inbox.push(seqno, (message, raw))
        except ProtocolError as e:
            run.fail(e)
            return route
        for msg, msg_raw in ready:
            run.record_up(msg, msg_raw)  # recorded in protocol (seqno) order, not arrival order
            if msg.WhichOneof("message") == "run_request" and not ch.started:
                ch.started = True
                if ch.expiry is not None:  # the timer would hold the finished run for its whole delay
                    ch.expiry.cancel()
                    ch.expiry = None
                run.start(self.make_turn(msg.run_request))
            else:
                run.deliver(msg)
        self._end_if_rejected(ch)
        return route

    def reject_append(self, request_id: str, seqno: int, why: str, *, local_allowed: bool = True) -> Route | None:
        """An append of this request the proxy could not use: its seqno is used up, so nothing after
        it could ever be delivered. A local run ends at once with a protocol error (docs/
        troubleshooting.md); before the route is known the rejection waits for a local run to end it.
        Returns the route if known (UPSTREAM: the caller passes the append on untouched)."""
        known = self.known_route(request_id)
        if known in (Route.UPSTREAM, Route.REFUSED):
            return known
        if not local_allowed:  # never lets another client end someone's run
            return None if known is None else Route.REFUSED
        ch = self.channels.get(request_id)
        if ch is None or not ch.route.done():
            if request_id not in self.finished and request_id not in self.rejected_early:
                self.rejected_early[request_id] = (seqno, why)
                while len(self.rejected_early) > 1024:
                    self.rejected_early.popitem(last=False)
            return self.known_route(request_id)
        if ch.rejected is None or seqno < ch.rejected[0]:
            ch.rejected = (seqno, why)
        self._end_if_rejected(ch)
        return ch.route.result()

    def _end_if_rejected(self, ch: RequestChannel) -> None:
        if ch.rejected is None or ch.run is None or ch.run.terminal:
            return
        seqno, why = ch.rejected
        if not ch.inbox.awaits(seqno):
            ch.rejected = None  # a good copy of that seqno arrived (a retry): nothing is lost
            return
        ch.run.fail(ProtocolError(
            f"BidiAppend append_seqno {seqno} was rejected ({why}); the appends after it can never be delivered"))

    # ---- runs -------------------------------------------------------------------------------------

    def _expire_unstarted(self, ch: RequestChannel) -> None:
        if ch.run is not None and not ch.started and not ch.run.terminal:
            missing = ch.inbox.next_seqno
            asyncio.ensure_future(ch.run.finish(ProtocolError(
                f"the run_request never became deliverable: append_seqno {missing} never arrived")))

    def run(self, request_id: str) -> Run | None:
        """The local run of this request: live, or ended before its RunSSE attached."""
        ch = self.channels.get(request_id)
        if ch is not None and ch.run is not None:
            return ch.run
        return self.unclaimed.get(request_id)

    def stream_run(self, request_id: str) -> Run | None:
        """The run a RunSSE should stream (the stream server's lookup): handed out once."""
        run = self.run(request_id)
        if run is not None and run.terminal:
            self.unclaimed.pop(request_id, None)
        return run

    def claim_conversation(self, run: Run, conversation_id: str) -> None:
        """A newer run owns the conversation: the older one ends canceled (late events are fenced
        off in the store)."""
        run.conversation_id = conversation_id
        previous = self.by_conversation.get(conversation_id)
        self.by_conversation[conversation_id] = run
        if previous is not None and previous is not run and not previous.terminal:
            previous.cancel(RunCanceled(f"a newer run ({run.request_id}) started in this conversation"))

    def fence_remote(self, request_id: str, by: str) -> bool:
        """Another replica's claim displaced `request_id` (a NOTIFY from the store): if it runs here,
        it ends canceled now, as a local newer run would end it. True when a live run was ended."""
        run = self.run(request_id)
        if run is None or run.terminal:
            return False
        if run.conversation_id and self.by_conversation.get(run.conversation_id) is not run:
            return False  # a newer run of this conversation already runs here and ended it
        run.cancel(RunCanceled(f"a newer run ({by}) started in this conversation on another replica"))
        return True

    def forget_unrouted(self, request_id: str) -> None:
        """Drop the channel of a request this process will not serve (it runs on another replica)."""
        ch = self.channels.get(request_id)
        if ch is not None and not ch.route.done():
            del self.channels[request_id]

    async def _finished(self, run: Run, error: RunError | None) -> None:
        self.finished[run.request_id] = run.outcome
        while len(self.finished) > self.max_finished:
            self.finished.popitem(last=False)
        if run.conversation_id and self.by_conversation.get(run.conversation_id) is run:
            del self.by_conversation[run.conversation_id]
        self.channels.pop(run.request_id, None)
        if not run.stream_attached:  # its RunSSE may be on the way to the stream server
            self.unclaimed[run.request_id] = run
            while len(self.unclaimed) > 1024:
                self.unclaimed.popitem(last=False)
            asyncio.get_running_loop().call_later(
                self.settings.stream_attach_timeout_s, lambda: self.unclaimed.pop(run.request_id, None))
        if self.on_run_finished is not None:
            await self.on_run_finished(run, error)

    def live_runs(self) -> list[Run]:
        return [ch.run for ch in self.channels.values() if ch.run is not None and not ch.run.terminal]

    async def shutdown(self, timeout: float = 8.0) -> None:
        """Abort running execs and end every open run with `unavailable`, within `timeout`."""
        self.closing = True
        runs = self.live_runs()
        for run in runs:
            run.fail(ShuttingDown())
        waits = [asyncio.ensure_future(r.wait()) for r in runs if r._task is not None]
        for run in runs:
            if run._task is None:  # never started: no task will take the terminal door
                await run.finish(ShuttingDown())
        if waits:
            await asyncio.wait(waits, timeout=timeout)
        for ch in list(self.channels.values()):
            if not ch.route.done():
                ch.route.cancel()
