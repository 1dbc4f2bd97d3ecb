"""Messages the user sends while the agent works (PROTOCOL 10.3), and context changes on resume.

    user_message_action / inject_context_action arrives mid-run
      -> stored (queued_inputs) -> context_injection_state{queued}
      -> at the next provider-call boundary (a tool round settled): appended to history as runtime
         messages -> delivered{step, delivery_batch_id, delivered_at_ms} + user_message_appended
         -> checkpoint -> the model call sees them
      -> or, when the model's answer ends the turn first: queued_for_next_turn, and right after the
         turn's final checkpoints the next turn runs in the same stream, starting with them
         (delivered + user_message_appended, its own turn_ended)
    cancel_action while inputs wait                  -> cancelled for each; never delivered
    inject_context_action with a waiting id, no payload -> that input is cancelled
    inject_context_action for another run (expected_run_id) -> rejected

Every accepted input is in the store before `queued` goes out. One that was never delivered (the
proxy died, the run failed or was replaced) is delivered by the conversation's next run at its
first boundary, unless that run's own message is the same one. An input is marked delivered once a
checkpoint holding it was published. A user message starts a new turn in Cursor's history, so the
chat shows it where it was delivered.

A resume_action whose request context renders differently from the one the history last showed
gets the new context once, as a runtime message, before its first model call.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timezone

import jinja2

from byok.prompt.assets import ROOT as PROMPT_ROOT
from byok.proto import agent_pb2 as apb
from byok.store import NewMessage

from . import history, user_input
from .cursor import updates
from ..wire.errors import InternalError, RunError
from ..providers.transcript import TextPart
from .turn_base import TurnHooks, TurnState

log = logging.getLogger("byok.queued")

_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, autoescape=False)
CONTEXT_CHANGED = _ENV.from_string((PROMPT_ROOT / "updates" / "context_changed.md.j2").read_text(encoding="utf-8"))
SYSTEM_CONTEXT = _ENV.from_string((PROMPT_ROOT / "updates" / "system_context.md.j2").read_text(encoding="utf-8"))

_background: set[asyncio.Future] = set()
"""Store writes started from synchronous callbacks (a cancel), kept until done."""


def _state(injection_id: str, **state) -> apb.AgentServerMessage:
    return updates.interaction(apb.InteractionUpdate(context_injection_state=apb.ContextInjectionStateUpdate(
        injection_id=injection_id, state=apb.ContextInjectionState(**state))))


@dataclass(frozen=True)
class Input:
    """One accepted input: the action as the client sent it, and when it arrived."""

    injection_id: str
    action: apb.ConversationAction
    received_at_ms: int

    @property
    def event_id(self) -> str:
        return f"injection:{self.injection_id}"

    @property
    def user_message(self) -> apb.UserMessage | None:
        if self.action.WhichOneof("action") == "user_message_action":
            return self.action.user_message_action.user_message
        inject = self.action.inject_context_action
        return inject.user_context.user_message if inject.WhichOneof("payload") == "user_context" else None

    @property
    def context(self) -> apb.RequestContext | None:
        if self.action.WhichOneof("action") == "user_message_action":
            action = self.action.user_message_action
            own = action.request_context if action.HasField("request_context") else None
        else:
            user = self.action.inject_context_action.user_context
            own = user.request_context if user.HasField("request_context") else None
        return user_input.context_of(own, self.refs)

    @property
    def refs(self) -> apb.RequestContextPartReferences | None:
        return self.action.request_context_parts if self.action.HasField("request_context_parts") else None

    @classmethod
    def from_row(cls, row: dict) -> "Input":
        return cls(row["injection_id"], apb.ConversationAction.FromString(row["action"]), row["received_at_ms"])


def injection_id(action: apb.ConversationAction, new_id) -> str:
    """The client's injection id, else the message's own id (`user-message:<message_id>`)."""
    if action.WhichOneof("action") == "inject_context_action" and action.inject_context_action.injection_id:
        return action.inject_context_action.injection_id
    message = Input("", action, 0).user_message
    return f"user-message:{message.message_id if message is not None and message.message_id else new_id('message')}"


class Queue(TurnHooks):
    """One run's waiting inputs."""

    def __init__(self, turn: TurnState) -> None:
        self.turn = turn
        self.pending: list[Input] = []
        self.accepting: set[asyncio.Task] = set()
        self.closing = False
        """The run decided to end: an input arriving now is refused, not queued."""
        self.cancelled = False
        self.loaded = False
        self.lock = asyncio.Lock()
        turn.run.on_client_cancel.append(self._client_cancel)

    # ---- arrival (synchronous: called from the run's inbox) -----------------------------------------

    def accept(self, action: apb.ConversationAction) -> None:
        turn = self.turn
        ident = injection_id(action, turn.svc.ids.new)
        if action.WhichOneof("action") == "inject_context_action":
            inject = action.inject_context_action
            active = turn.request.run_id or turn.run.request_id
            if inject.expected_run_id and inject.expected_run_id not in (turn.request.run_id, turn.run.request_id):
                self._reject(ident, f"InjectContextAction expected run {inject.expected_run_id}, active run is {active}")
                return
            if inject.WhichOneof("payload") is None:
                self._withdraw(ident)
                return
        if self.closing or self.cancelled:
            self._reject(ident, "the run is ending; send the message again")
            return
        task = asyncio.ensure_future(self._accept(Input(ident, action, turn.svc.clock.wall_ms())))
        self.accepting.add(task)
        task.add_done_callback(self._accepted)

    def _accepted(self, task: asyncio.Task) -> None:
        self.accepting.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self.turn.run.fail(error if isinstance(error, RunError) else InternalError(
                f"internal error: keeping a mid-run message failed: {type(error).__name__}: {error}"))

    async def _accept(self, item: Input) -> None:
        turn = self.turn
        async with self.lock:
            status = await turn.svc.store.queue_input(
                turn.conversation_id, item.injection_id, turn.run.request_id,
                item.action.SerializeToString(deterministic=True), item.received_at_ms)
            if status != "queued":
                self._reject(item.injection_id, f"this message was already {status}")
                return
            if self.cancelled:  # the client cancelled while it was being stored
                await turn.svc.store.mark_inputs(turn.conversation_id, [item.injection_id], "cancelled")
                turn.run.emit(_state(item.injection_id, cancelled=apb.ContextInjectionCancelled()))
                return
            self.pending = [p for p in self.pending if p.injection_id != item.injection_id] + [item]
            log.info("[%s] queued %s until the next model call", turn.run.request_id, item.injection_id)
            turn.run.emit(_state(item.injection_id, queued=apb.ContextInjectionQueued()))

    def _reject(self, ident: str, reason: str) -> None:
        log.warning("[%s] refusing input %s: %s", self.turn.run.request_id, ident, reason)
        self.turn.run.emit(updates.injection_rejected(ident, reason))

    def _withdraw(self, ident: str) -> None:
        """An injection with a waiting id and no payload takes that input back."""
        if not any(p.injection_id == ident for p in self.pending):
            self._reject(ident, "no waiting message has this injection id")
            return
        self.pending = [p for p in self.pending if p.injection_id != ident]
        self._mark_cancelled([ident])

    def _client_cancel(self) -> None:
        """cancel_action: nothing waiting is delivered, and the client is told so before the end."""
        self.cancelled = True
        idents, self.pending = [p.injection_id for p in self.pending], []
        if idents:
            self._mark_cancelled(idents)

    def _mark_cancelled(self, idents: list[str]) -> None:
        turn = self.turn
        for ident in idents:
            turn.run.emit(_state(ident, cancelled=apb.ContextInjectionCancelled()))
        task = asyncio.ensure_future(turn.svc.store.mark_inputs(turn.conversation_id, idents, "cancelled"))
        _background.add(task)
        task.add_done_callback(_background.discard)

    # ---- the boundaries -------------------------------------------------------------------------------

    async def before_model_call(self, turn: TurnState) -> None:
        await self._load()
        await self._settle()
        if self.pending:
            batch, self.pending = self.pending, []
            await self._deliver(batch, next_turn=False)

    async def after_turn(self, turn: TurnState) -> bool:
        await self._load()
        while True:  # end only when nothing waits and nothing is being stored
            await self._settle()
            if self.pending:
                break
            if not self.accepting:
                self.closing = True
                return False
        batch, self.pending = self.pending, []
        for item in batch:
            turn.run.emit(_state(item.injection_id, queued_for_next_turn=apb.ContextInjectionQueuedForNextTurn()))
        turn.usage_totals = {}  # each turn_ended reports its own turn
        await self._deliver(batch, next_turn=True)
        return True

    async def _settle(self) -> None:
        while self.accepting:
            await asyncio.gather(*list(self.accepting), return_exceptions=True)

    # ---- replay and resume -----------------------------------------------------------------------------

    async def _load(self) -> None:
        """Once per run: inputs earlier runs accepted but never delivered go first; on a resume, a
        changed request context is rendered."""
        if self.loaded:
            return
        self.loaded = True
        turn = self.turn
        store, cid = turn.svc.store, turn.conversation_id
        in_history = {m.runtime_event_id for m in turn.messages if m.runtime_event_id}
        action = turn.request.action
        own = (f"user-message:{action.user_message_action.user_message.message_id}"
               if action.WhichOneof("action") == "user_message_action" else None)
        waiting = {p.injection_id for p in self.pending}
        replay = []
        for row in await store.queued_inputs(cid, ("queued",)):
            item = Input.from_row(row)
            if item.injection_id in waiting:
                continue  # accepted by this run already
            if item.injection_id == own:
                await store.mark_inputs(cid, [item.injection_id], "superseded")
            elif item.event_id in in_history:
                await store.mark_inputs(cid, [item.injection_id], "delivered", turn.revision)
            else:
                replay.append(item)
        if replay:
            log.info("[%s] delivering %d message(s) an earlier run accepted: %s", turn.run.request_id,
                     len(replay), ", ".join(i.injection_id for i in replay))
        self.pending = replay + self.pending
        if action.WhichOneof("action") == "resume_action" and await self._context_change() and not self.pending:
            await turn._publish(await turn._project(turn.messages), revision=turn.revision)

    async def _context_change(self) -> bool:
        turn = self.turn
        resume = turn.request.action.resume_action
        if not resume.HasField("request_context"):
            return False
        refs = turn.request.action.request_context_parts if turn.request.action.HasField(
            "request_context_parts") else None
        section, _ = await user_input.context_section(turn, user_input.context_of(resume.request_context, refs), refs)
        shown = next((m.payload["context_digest"] for m in reversed(turn.messages)
                      if m.payload.get("context_digest")), None)
        new = user_input.digest(section)
        if not section or shown is None or shown == new:
            return False
        log.info("[%s] the resumed run's request context changed: telling the model once", turn.run.request_id)
        event_id = f"request-context:{turn.run.request_id}"
        payload = history.runtime_user_payload([TextPart(CONTEXT_CHANGED.render(REQUEST_CONTEXT=section).strip())],
                                               wire_id=f"runtime:{event_id}", context_digest=new)
        await turn._append([NewMessage("user", "runtime", payload, event_id, turn.run.request_id)])
        return True

    # ---- delivery --------------------------------------------------------------------------------------

    async def _deliver(self, batch: list[Input], *, next_turn: bool) -> None:
        """Append the batch to history (a user message starts a Cursor turn), tell the client, and
        publish the checkpoint that holds them before the model sees them."""
        turn = self.turn
        svc, run, cid = turn.svc, turn.run, turn.conversation_id
        await turn._initial_checkpoint()
        delivered_at, batch_id = svc.clock.wall_ms(), svc.ids.new("delivery")
        step = 0 if next_turn else (await turn._project(turn.messages)).last_turn_steps
        shown: list[tuple[Input, apb.UserMessage | None]] = []
        for item in batch:
            message = item.user_message
            existing = await svc.store.runtime_event(cid, item.event_id)
            user_message = None
            if message is not None:
                if message.message_id:  # an edit of this message later branches from here
                    await svc.store.anchor_input(cid, f"cursor:user:{message.message_id}", turn.revision)
                if existing is not None:  # delivered before, never re-rendered
                    payload = existing.payload
                    user_message = apb.UserMessage.FromString(history.unb64(payload["turn"]["user_message_blob"]))
                else:
                    state_blob = (await turn._project(turn.messages)).state_bytes()
                    rendered = await user_input.render(
                        turn, message, item.context, item.refs,
                        datetime.fromtimestamp(item.received_at_ms / 1000, timezone.utc))
                    payload, user_message = user_input.turn_payload(
                        rendered, message, event_id=item.event_id, request_id=run.request_id, state_blob=state_blob)
            else:
                system = item.action.inject_context_action.system_context
                payload = existing.payload if existing is not None else history.runtime_user_payload(
                    [TextPart(SYSTEM_CONTEXT.render(PRODUCER=system.producer, CONTENT=system.content).strip())],
                    wire_id=f"runtime:{item.event_id}")
            await turn._append([NewMessage("user", "runtime", payload, item.event_id, run.request_id)])
            shown.append((item, user_message))
        for item, user_message in shown:
            run.emit(_state(item.injection_id, delivered=apb.ContextInjectionDelivered(
                step=step, delivery_batch_id=batch_id, delivered_at_ms=delivered_at)))
            if user_message is not None:
                run.emit(updates.interaction(apb.InteractionUpdate(
                    user_message_appended=apb.UserMessageAppendedUpdate(user_message=user_message))))
        await turn._publish(await turn._project(turn.messages), revision=turn.revision)
        await svc.store.mark_inputs(cid, [item.injection_id for item in batch], "delivered", turn.revision)
        log.info("[%s] delivered %s %s", run.request_id, ", ".join(i.injection_id for i in batch),
                 "as the next turn" if next_turn else "at the model-call boundary")


def accept(turn: TurnState, action: apb.ConversationAction) -> None:
    """MID_RUN_ACTIONS entry for user_message_action and inject_context_action."""
    next(h for h in turn.hooks if isinstance(h, Queue)).accept(action)
