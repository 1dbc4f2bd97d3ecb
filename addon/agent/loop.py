"""The turn: one local run, from its run_request to its terminal frame. Provider-agnostic.

    claim the conversation (a newer run fences off older ones)
    -> base revision = where the client's checkpoint says it is (or import it); its projection is
       the one the conversation's last run left (warm.py) or is folded from the store
    -> append ONE runtime user message (exactly once), initial checkpoint
    -> loop: provider call (model_call.py) -> stream updates
         done(stop)     -> final assistant -> SET blobs, ACK barrier -> turn_ended
                           -> staged, settled, settled again -> (run ends with end-stream {})
         done(tool_use) -> tool round (tool_round.py): staged checkpoint, dispatch, results,
                           settled checkpoint -> next provider call
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence

from byok.proto import agent_pb2 as apb
from byok.prompt.assets import ModeAssets
from byok.store import BlobRef, ConversationOfAnotherUser, NewMessage, RunExists, StaleRun, StoredMessage

from . import actions, capabilities, history, tool_round, user_input
from ..providers.config import ModelRoute
from .cursor import projection as proj
from .cursor import request_parts
from .cursor import updates
from .cursor.importer import import_checkpoint
from ..wire.errors import (
    AccessDenied, AlreadyExists, ConfigError, InternalError, ProviderError, RunCanceled, RunError,
)
from .model_call import ModelCall
from ..providers.base import Done
from .run import Run
from .runtime import requested_model_id
from .turn_base import CallResult, Services, TurnHooks

__all__ = ["Services", "Turn", "make_turn_factory"]

log = logging.getLogger("byok.loop")

UNRENDERED_ON_LOOP = 64
"""A checkpoint with at most this many messages to render (a warm one) runs on the event loop."""
FOLD_ON_LOOP_BYTES = 256 << 10
"""New messages up to this much stored JSON are folded in on the event loop, larger ones off it."""


class Turn:
    """One run's turn logic. `await Turn(services, request)(run)`."""

    def __init__(self, services: Services, request: apb.AgentRunRequest) -> None:
        self.svc = services
        self.request = request
        self.run: Run
        self.history = proj.Projector()
        """The history at `revision`, folded into its provider view and checkpoint."""
        self._history_ok = False
        """`history` is the fold of `revision` and nothing works on it: it may be kept warm."""
        self._base: int | None = None
        self._base_recorded = True
        """runs.base_revision_id holds `_base` (written with the run's first append)."""
        self.revision: int | None = None
        self.usage_totals: dict = {}
        self._initial_publish: asyncio.Future | None = None
        self.call_index = -1

    # ---- entry --------------------------------------------------------------------------------

    async def __call__(self, run: Run) -> None:
        self.run = run
        request = self.request
        self.route: ModelRoute = self.svc.team.route_for(run.user, self._route())  # team: allowed? whose key?
        self.route.require_ready()
        await self.svc.team.check_budget(self.svc.store, run.user, self.svc.clock.wall_ms)
        self.mode: ModeAssets = self._mode()
        self.conversation_id = request.conversation_id or f"byok-{run.request_id}"
        await self._claim()
        self.system_prompt = self.mode.system_prompt(self.route.display_name)
        web = self.svc.web()
        self.tools = self.mode.tools_without(self._left_out(web))
        self.ctx = proj.ProjectionContext(
            system_prompt=self.system_prompt,
            tools=self.tools,
            base_state=request.conversation_state.SerializeToString(),
            mode=self._mode_enum(),
            max_tokens=self.route.context_tokens,
        )
        self.tool_context = dataclasses.replace(
            tool_round.tool_context(request, self.conversation_id, self.mode.name), web=web)
        self.prefetched = request_parts.prefetched(request)
        self.dynamic_tools = ()
        self.offered_tools = _offered_tools(self.mode, self.tools)
        self.extra_action_context: list[str] = []
        """Blocks capabilities add to this run's runtime message (e.g. a custom subagent's instructions)."""
        self.execs = tool_round.new_exec_table(run)
        run.execs = self.execs
        self.hooks: list[TurnHooks] = [make(self) for make in capabilities.CAPABILITIES]
        start = actions.for_run(request, self.hooks)  # an unknown branch ends the run before anything is stored
        actions.install_mid_run(self)
        for hook in self.hooks:
            await hook.before_action(self)
        await self._load_base()
        try:
            if await start(self):
                return
            await self._model_loop()
        finally:
            self._cancel_initial_publish()
            if self._history_ok:
                self.svc.warm.put(self.conversation_id, self.revision, self.history)
            if not self._base_recorded:
                await asyncio.shield(self.svc.store.set_run_base(self.run.request_id, self._base))

    def use_tools(self, tools, implementations: dict, dynamic=()) -> None:
        """Replace this run's tool set: `tools` (the mode's, maybe fewer) then `dynamic` ones, and
        the implementation of every name the model may call."""
        self.tools, self.dynamic_tools = tuple(tools), tuple(dynamic)
        self.offered_tools = dict(implementations)
        self.ctx = dataclasses.replace(self.ctx, tools=self.tools, dynamic_tools=self.dynamic_tools)

    async def _resume(self) -> bool:
        """A dropped stream, retried from the client's last eligible checkpoint. A staged round in it
        is finished first: its tools run again, with no new model call. A staged final answer (no
        calls) is settled as it is. Returns True when the turn is complete."""
        pending = list(self.request.conversation_state.pending_tool_calls)
        if not pending:
            return False
        staged = proj.parse_pending(pending[0])
        if not staged.item.tool_calls:
            await self._finish_text(CallResult(staged.item, Done("stop", staged.item.replay), staged.usage,
                                               staged.thinking_ms, staged.model_call_id or self.svc.ids.new("model-call")))
            return True
        await tool_round.restored_round(self, staged).run()
        await self._after_round()
        return False

    def _route(self) -> ModelRoute:
        route = self.svc.lookup_model(requested_model_id(self.request))
        if route is None:  # the providers file changed between routing and now
            raise ConfigError(f"model {requested_model_id(self.request)!r} is no longer in the providers file")
        return route

    def _mode(self) -> ModeAssets:
        request = self.request
        return self.svc.prompts.for_run(
            user_mode=user_input.requested_mode(request.action),
            state_mode=request.conversation_state.mode or None,
            subagent_type_name=request.subagent_type_name or None,
        )

    def _left_out(self, web) -> set[str]:
        """Tools of the mode this run does not offer: web tools without a configured backend, web
        tools the client switched off (`RequestContext.web_search_enabled` / `web_fetch_enabled`
        set to false), UpdateCurrentStep when the request suppresses it."""
        left_out = set(web.unoffered())
        context = user_input.request_context_of(self.request.action)
        if context.HasField("web_search_enabled") and not context.web_search_enabled:
            left_out.add("WebSearch")
        if context.HasField("web_fetch_enabled") and not context.web_fetch_enabled:
            left_out.add("WebFetch")
        if self.request.suppress_subagent_progress_update_tool:
            left_out.add("UpdateCurrentStep")
        return left_out

    def _mode_enum(self) -> int:
        return (user_input.requested_mode(self.request.action) or self.request.conversation_state.mode
                or apb.AGENT_MODE_AGENT)

    async def _claim(self) -> None:
        run = self.run
        try:
            await self.svc.store.claim_run(
                run.request_id, self.conversation_id,
                wire_run_id=self.request.run_id or None,
                model_public_id=self.route.public_id,
                mode=self.mode.name,
                action=self.request.action.WhichOneof("action"),
                user_id=run.user,
                replica=self.svc.replica,
            )
        except RunExists:
            raise AlreadyExists(f"request {run.request_id} already ran; it is not replayed") from None
        except ConversationOfAnotherUser as e:
            raise AccessDenied(str(e)) from None
        self.svc.claim_conversation(run, self.conversation_id)

    # ---- base revision ----------------------------------------------------------------------------

    async def _load_base(self) -> None:
        """Find where the client is: the revision its checkpoint maps to (importing it when this
        store never published it), and which blobs it already holds."""
        state = self.request.conversation_state
        roots = list(state.root_prompt_messages_json)
        if roots:
            known, revision = await self.svc.store.find_published(self.conversation_id, proj.roots_digest(roots))
            if not known:
                log.info("[%s] importing the client's checkpoint (%d roots, %d turns)",
                         self.run.request_id, len(roots), len(state.turns))
                revision = await import_checkpoint(self, state)
            self.revision = revision
        await self._use_revision(self.revision)
        held = self.run.held_blobs
        held.update(roots)
        held.update(state.turns)
        await self._hold_base()

    async def _use_revision(self, revision: int | None) -> None:
        """Take the history at `revision`: warm when the conversation's last run left it there, else
        folded from the store (after a restart, a fence change, an edit, an eviction)."""
        self._history_ok = False
        self._base = revision
        warm = self.svc.warm.take(self.conversation_id, revision)
        if warm is not None:
            self.history = warm
        else:
            messages = await self.svc.store.messages(revision) if revision is not None else []
            self.history = proj.Projector(await self._import_blobs(messages))
            await self._fold_in(messages)
        self.revision, self._history_ok = revision, True
        self._base_recorded = False  # recorded with the run's first append (or when it ends)

    async def _hold_base(self) -> None:
        """Everything the base projection references is on the client already (it published it),
        except a system root this run changes (a new mode or model)."""
        state = self.request.conversation_state
        base = await self._project()
        system_id = base.state.root_prompt_messages_json[0]
        held = self.run.held_blobs
        held.update(bid for bid in base.blob_ids() if bid != system_id)
        if state.root_prompt_messages_json and state.root_prompt_messages_json[0] == system_id:
            held.add(system_id)
        self.history.release()
        self.base_state_bytes = base.state_bytes()

    async def _import_blobs(self, messages) -> dict[bytes, bytes]:
        ids = []
        for m in messages:
            if m.payload["kind"] == "import":
                ids += [bytes.fromhex(h) for h in m.payload["roots"]]
                if m.payload.get("open_turn"):
                    ids.append(bytes.fromhex(m.payload["open_turn"]["id"]))
        return await self.svc.store.get_blobs(ids, user_id=self.run.user) if ids else {}

    async def _append_import(self, new: list[NewMessage], base: int | None) -> int | None:
        try:
            return await self.svc.store.append(self.conversation_id, base, new, fence_request_id=self.run.request_id)
        except StaleRun as e:
            raise self._fenced_off(e) from None

    # ---- the runtime user message ---------------------------------------------------------------

    async def _begin_user_turn(self, action: apb.UserMessageAction | None = None, *,
                               action_context: Sequence[str] = (), event_id: str | None = None,
                               payload_extra: dict | None = None) -> None:
        """`action`: the user message of this turn (default: the request's user_message_action;
        actions.py builds one for start/execute plan and late question answers). `event_id`: the
        runtime message's idempotency key (default `run-request:<request_id>`; a background
        completion uses `subagent-completed:<id>`); `payload_extra`: fields a capability keeps in
        the stored message for its checkpoint fold (written once, replayed with the message)."""
        run = self.run
        action_context = (*action_context, *self.extra_action_context)
        action = action if action is not None else self.request.action.user_message_action
        anchor = None
        if action.user_message.message_id:
            # An edited earlier message reuses its message_id: go back to the revision before it
            # was first sent and branch from there (the old suffix stays stored, unreachable).
            anchor = f"cursor:user:{action.user_message.message_id}"
            existed, anchored = await self.svc.store.find_anchor(self.conversation_id, anchor)
            if existed and anchored != self.revision:
                log.info("[%s] user message %s was edited: branching from revision %s",
                         run.request_id, action.user_message.message_id, anchored)
                await self._use_revision(anchored)
                await self._hold_base()
        event_id = event_id or f"run-request:{run.request_id}"
        existing = await self.svc.store.runtime_event(self.conversation_id, event_id)
        snapshot = ()
        if existing is not None:
            payload = existing.payload  # replayed exactly: never re-rendered, never re-timed
        else:
            payload, _ = user_input.turn_payload(
                await self._runtime_parts(action, action_context), action.user_message, event_id=event_id,
                request_id=run.request_id, state_blob=self.base_state_bytes)
            payload.update(payload_extra or {})
            snapshot = [user_input.snapshot(self.base_state_bytes)]
        await self._append([NewMessage("user", "runtime", payload, event_id, run.request_id)], blobs=snapshot,
                           anchor=anchor)
        # The initial checkpoint's ACK round trips overlap the provider's time to first token: the
        # first model event waits for it (frame order is unchanged), and so does a failure.
        self._initial_publish = asyncio.ensure_future(
            self._publish(await self._project(), revision=self.revision))
        self._initial_publish.add_done_callback(self._initial_publish_done)

    def _initial_publish_done(self, task: asyncio.Future) -> None:
        if not task.cancelled() and isinstance(task.exception(), RunError):
            self.run.fail(task.exception())  # e.g. an ACK timeout: end the run now, not at the next event

    async def _project(self, pending: proj.Pending | None = None) -> proj.Projection:
        """The checkpoint of the history at `revision` (plus a staged assistant). Only what changed
        since the last one is rendered; a history folded cold renders all of it, off the loop."""
        if self.history.unrendered() <= UNRENDERED_ON_LOOP:
            return self.history.checkpoint(self.ctx, pending)
        return await self._off_loop(self.history.checkpoint, self.ctx, pending)

    async def _off_loop(self, work, *args):
        """Run `work` on the history in a thread; a cancel while it runs leaves the history to that
        thread: it is never kept warm."""
        try:
            return await asyncio.to_thread(work, *args)
        except BaseException:
            self._history_ok = False
            raise

    async def _runtime_parts(self, action: apb.UserMessageAction,
                             action_context: Sequence[str] = ()) -> user_input.Rendered:
        """The one runtime user message: mode reminder, request context, time and query, images."""
        refs = self.request.action.request_context_parts if self.request.action.HasField(
            "request_context_parts") else None
        context = user_input.context_of(action.request_context if action.HasField("request_context") else None, refs)
        return await user_input.render(self, action.user_message, context, refs, self.svc.clock.now(),
                                       action_context=action_context)

    # ---- history writes and checkpoints ----------------------------------------------------------

    async def _append(self, new: list[NewMessage], *, blobs: Sequence[tuple[bytes, bytes, list[BlobRef]]] = (),
                      anchor: str | None = None) -> None:
        """Append to history; `blobs` the messages name (a state snapshot) are stored with them, and
        so are the input `anchor` first used here and the run's base, while it is not recorded."""
        try:
            revision, stored = await self.svc.store.append(
                self.conversation_id, self.revision, new, fence_request_id=self.run.request_id,
                blobs=blobs, user_id=self.run.user, anchor=anchor, run_base=self._records_base(), returning=True)
        except StaleRun as e:
            raise self._fenced_off(e) from None
        self._base_recorded = self._base_recorded or self.revision == self._base
        await self._advance(revision, stored, {blob_id: data for blob_id, data, _ in blobs})

    def _fenced_off(self, error: StaleRun) -> RunCanceled:
        """A newer run owns the conversation now: its history is the one to keep warm, not this one's."""
        self._history_ok = False
        return RunCanceled(str(error))

    def _records_base(self) -> bool:
        """This append (the run's first on its base) records the run's base revision."""
        return not self._base_recorded and self.revision == self._base

    async def _advance(self, revision: int | None, new: list[StoredMessage],
                       known: dict[bytes, bytes] | None = None) -> None:
        """Move to a revision this run just appended on top of its own: fold in what it added (as the
        store returned it: nothing is read back)."""
        if revision != self.revision:
            await self._fold_in(new, known)
        self.revision = revision

    async def _fold_in(self, messages: list[StoredMessage], known: dict[bytes, bytes] | None = None) -> None:
        """Fold messages into the history: on the loop when they are small, else off it (decoding and
        hashing a large tool result or a whole history is real work)."""
        if sum(m.size for m in messages) <= FOLD_ON_LOOP_BYTES:
            self.history.extend(messages, known)
        else:
            await self._off_loop(self.history.extend, messages, known)

    def _cancel_initial_publish(self) -> None:
        if self._initial_publish is not None and not self._initial_publish.done():
            self._initial_publish.cancel()

    async def _initial_checkpoint(self) -> None:
        """Wait until the run's initial checkpoint is out (raises what it raised)."""
        if self._initial_publish is not None:
            task, self._initial_publish = self._initial_publish, None
            await task

    async def _set_blobs(self, *projections: proj.Projection) -> None:
        """Keep a copy of every new blob (with its reference edges) in the store, SET them on the
        client and wait for every ACK (the barrier before any checkpoint references them)."""
        held = self.run.held_blobs
        new: dict[bytes, proj.NewBlob] = {}
        for p in projections:
            for blob in p.missing(held):
                new.setdefault(blob.blob_id, blob)
        stored = [blob_id for blob_id, blob in new.items() if blob.data is None]
        found = await self.svc.store.get_blobs(stored, user_id=self.run.user) if stored else {}
        if len(found) != len(stored):
            lost = next(blob_id for blob_id in stored if blob_id not in found)
            raise InternalError(f"internal error: blob {lost.hex()} of the checkpoint is neither in memory nor stored")
        rows = [(blob_id, blob.data, [BlobRef(*ref) for ref in blob.refs]) for blob_id, blob in new.items()
                if blob.data is not None]
        if rows:
            await self.svc.store.put_blobs(rows, user_id=self.run.user)
        await self.run.set_blobs({blob_id: blob.data if blob.data is not None else found[blob_id]
                                  for blob_id, blob in new.items()})

    async def _record(self, projection: proj.Projection, revision: int | None) -> None:
        """Record a published checkpoint: its revision, and (as GC roots) the blobs it references
        directly that this conversation did not record before."""
        recorded = self.history.recorded
        added = set(projection.top_level_ids()) - recorded
        await self.svc.store.record_published(self.conversation_id, projection.roots_digest, revision, added)
        recorded |= added

    async def _publish(self, *projections: proj.Projection, revision: int | None = None) -> None:
        """SET what the client lacks, wait for every ACK, then record and emit the states."""
        await self._set_blobs(*projections)
        if revision is not None:
            await self._record(projections[-1], revision)
        for p in projections:
            self.run.emit(updates.checkpoint(p.state))

    # ---- the model loop ---------------------------------------------------------------------------

    async def _model_loop(self) -> None:
        while True:
            for hook in self.hooks:
                await hook.before_model_call(self)
            self.call_index += 1
            try:
                result = await ModelCall(self, self.call_index)()
            except ProviderError as error:
                if await self._call_failed(error):
                    continue
                raise
            if result.done.reason != "stop":
                calls = [result.cards.calls[i] for i in sorted(result.cards.calls)]
                await tool_round.Round(self, result, calls).run()
                await self._after_round()
                continue
            await self._finish_text(result)
            if not await self._after_turn():
                return

    async def _call_failed(self, error: ProviderError) -> bool:
        """True when a capability handled the failure and the model is to be called again."""
        for hook in self.hooks:
            if await hook.on_call_failed(self, error):
                return True
        return False

    async def _after_round(self) -> None:
        for hook in self.hooks:
            await hook.after_round(self)

    async def _after_turn(self) -> bool:
        """True when a capability starts another turn in this stream."""
        follows = False
        for hook in self.hooks:
            follows = await hook.after_turn(self) or follows
        return follows

    async def _complete_call(self, round_id: str, call_index: int, new: list[NewMessage], *, is_error: bool) -> None:
        try:
            _, revision, stored = await self.svc.store.complete_call(
                round_id, call_index, self.conversation_id, self.revision, new,
                fence_request_id=self.run.request_id, is_error=is_error, returning=True,
            )
        except StaleRun as e:
            raise self._fenced_off(e) from None
        await self._advance(revision, stored)

    async def _finish_text(self, result: CallResult) -> None:
        staged = await self._project(proj.Pending(result.item, result.thinking_ms, result.usage))
        payload = history.assistant_payload(
            result.item, thinking_ms=result.thinking_ms, usage=result.usage, model_call_id=result.model_call_id
        )
        await self._append([NewMessage("assistant", "assistant", payload, request_id=self.run.request_id)])
        settled = await self._project()
        await self._set_blobs(staged, settled)
        await self._record(settled, self.revision)
        self.run.emit(updates.turn_ended(self.usage_totals))
        self.run.emit(updates.checkpoint(staged.state))
        self.run.emit(updates.checkpoint(settled.state))
        self.run.emit(updates.checkpoint(settled.state))

def _offered_tools(mode: ModeAssets, tools) -> dict:
    """This run's tool set: a name outside it is the model's mistake (a tool error it sees)."""
    from .cursor.tools import registry

    offered = {}
    for name in (t.name for t in tools):
        tool = registry.lookup(name)
        if tool is None:
            raise ConfigError(f"mode {mode.name!r} offers tool {name!r}, which has no implementation")
        offered[name] = tool
    return offered


def make_turn_factory(services: Services):
    def factory(request: apb.AgentRunRequest):
        return Turn(services, request)

    return factory

