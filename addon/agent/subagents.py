"""Subagents: the Task tool's child runs, their link to the parent, and the actions about them
(PROTOCOL 5.11, 10.5; seed §32, §33).

    parent run                               client (Cursor)                   child run (this process)
    Task call -> subagent_args ------------> opens a NEW conversation: RunSSE +
                                             BidiAppend run_request{subagent_type_name,
                                             requested_model}, every append carrying
                                             X-Parent-Agent-Tool-Call-Id --------> bound to the Task call:
                                                                                   its tools, its progress
                                                                                   (field 29), stored link
                 <----------- subagent_result{agent_id, final_message} <-------- its final answer
    Task result: "Subagent name/ID" + the final message

The child is an ordinary run in the `subagent` mode (the Agent system prompt, the subagent runtime
reminder); its history holds the task, never the parent's conversation. This module decides, per run:

  parent side (`launch`, the Task tool's executor)
    - the subagent type: generalPurpose, explore (read-only), shell, or a custom subagent of the
      request context (its tools, read-only permission, model, instructions)
    - the model: `subagent_model_overrides` (disabled rejects the type; inherit = the parent's), then
      Task.model (one of the user's models, by public id or display name; anything else is a tool
      error listing them), then the type's own model (when it names one of the user's), then the
      parent's model
    - read-only when Task.readonly, the type says so, or the parent itself cannot change files
    - the launch (read-only, depth, parent conversation) is stored before the exec goes out: the
      child reads it when it binds, however late (store: subagent_launches)
    - after a crash (the round re-runs on resume): a call whose child finished is completed from the
      store (never run twice); a child that did not finish is reported interrupted, with its id so the
      model can continue it (`resume`: the same child, bound again under the new call); a child still
      running here is waited for
  child side (`before_action`)
    - the binding: X-Parent-Agent-Tool-Call-Id -> the call's stored launch, a row per (child, call)
      in the store's subagents table, and the live registry (per parent conversation, until it ends)
    - the tool set: the subagent manifest, read-only / type-restricted as the launch asked, without
      UpdateCurrentStep when the request suppresses it, without Task for a subagent's subagent
    - a custom subagent's instructions (or the request's custom_system_prompt) in its runtime message
  actions
    - cancel_subagent_action (mid-run: abort that Task's exec and cancel its child, nothing else; at run
      start: cancel the child if it is running here)
    - background_subagent_action (mid-run: the waiting Task completes now as a background Task)
    - background_task_completion_action (a run-start action: one runtime message per completion,
      keyed `subagent-completed:<id>` / `shell-completed:<task id>`, added exactly once, then a model call)
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from byok.proto import agent_pb2 as apb
from byok.store import SubagentConflict, SubagentLaunch

from . import actions, capabilities
from .cursor import request_parts, subagent_state
from .cursor.context import render_block
from .cursor.tools import registry as tool_registry
from .cursor.tools import task as task_codec
from .cursor.tools.base import CallIO, ToolOutcome
from .cursor.tools.common import Args
from ..wire.errors import ProtocolError, RunCanceled
from .run import Run
from .turn_base import TurnHooks, TurnState

log = logging.getLogger("byok.subagents")

REGISTRY_KEY = "subagents"
READ_ONLY_TOOLS = frozenset({
    "Read", "Grep", "Glob", "Ls", "ReadLints", "WebFetch", "WebSearch", "GetMcpTools", "FetchMcpResource",
    "TodoWrite", "UpdateCurrentStep", "AwaitShell",
})
"""What a read-only subagent keeps: reading, searching, the web, MCP discovery and resources, its own
todo list and progress line. No shell, no edits, no MCP calls (their effects are unknown), no Task."""
READ_ONLY_MODES = frozenset({"ask", "plan"})
MAX_DEPTH = 2
"""A subagent's subagent (depth 2) gets no Task."""

FOLLOW_UP = (
    "Perform any necessary follow-up actions in response to the subagent completion above. If no follow-up "
    "work is needed, no further action is required. If you mention an agent or subagent in your response, "
    "link it with the `[Name](id)` Don't use generic label such as `[agent]`, `[worker]`, or `[subagent]`. "
    "For cloud subagents, when the agent has edited code, link to `[Review](bc-id#changes)`, or, if you know "
    "the exact added and deleted line counts, `[Review +A −D](bc-id#changes)`, replacing A and D with those "
    "counts. Never write A or D literally. Use `[Try Live](bc-id#desktop)` only when the agent used computer "
    "use. Don't repeat the same confirmation every time."
)
"""The fixed follow-up after a finished background subagent (Cursor's own wording, seed §33.6)."""
SHELL_FOLLOW_UP = ("Briefly tell the user how the background command above ended, and do any follow-up "
                   "work its result calls for.")


# ---- types --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    name: str
    readonly: bool = False
    tools: frozenset[str] | None = None
    """The tools this type may use (None: the whole subagent manifest)."""
    model: str = ""
    instructions: str = ""


BUILTIN = {
    "generalPurpose": Kind("generalPurpose"),
    "explore": Kind("explore", readonly=True),
    "shell": Kind("shell", tools=frozenset({"Shell", "AwaitShell", "Read", "Grep", "Glob", "Ls", "TodoWrite",
                                            "UpdateCurrentStep"})),
}
"""The built-in types this version runs (Cursor knows more, e.g. cursor-guide: they are refused)."""


def custom_kinds(custom: Sequence[apb.CustomSubagent]) -> dict[str, Kind]:
    out = {}
    for c in custom:
        if not c.name or c.name in BUILTIN:
            continue
        out[c.name] = Kind(
            c.name, readonly=c.permission_mode == apb.CUSTOM_SUBAGENT_PERMISSION_MODE_READONLY,
            tools=frozenset(c.tools) if c.tools else None, model=c.model, instructions=c.prompt.strip())
    return out


# ---- the process-wide registry ----------------------------------------------------------------------------


@dataclass
class Registry:
    """The child runs live in this process, by the Task call that launched them. Call ids are the
    provider's: two conversations may use the same one, so every key names the parent conversation."""

    children: dict[tuple[str, str], tuple[Run, str]] = field(default_factory=dict)
    """(parent conversation, parent Task call id) -> (the child's live run, the child conversation),
    from its binding until its run ends."""
    _watchers: set[asyncio.Task] = field(default_factory=set)

    def add(self, parent_conversation_id: str, call_id: str, run: Run, conversation_id: str) -> None:
        key = (parent_conversation_id, call_id)
        self.children[key] = (run, conversation_id)
        watcher = asyncio.get_running_loop().create_task(self._forget_when_done(key, run))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)

    async def _forget_when_done(self, key: tuple[str, str], run: Run) -> None:
        try:
            await run.wait()
        finally:
            if self.children.get(key, (None,))[0] is run:
                del self.children[key]

    def child(self, parent_conversation_id: str, call_id: str) -> tuple[Run, str] | None:
        found = self.children.get((parent_conversation_id, call_id))
        if found is not None and found[0].terminal:
            return None
        return found

    def by_agent(self, parent_conversation_id: str, agent_id: str) -> tuple[str, Run] | None:
        for (parent, call_id), (run, conversation) in self.children.items():
            if parent == parent_conversation_id and conversation == agent_id and not run.terminal:
                return call_id, run
        return None


def registry(turn: TurnState) -> Registry:
    return turn.svc.live.setdefault(REGISTRY_KEY, Registry())


class Stopped(Exception):
    """A waiting Task ended from the server's side: `how` = "canceled" | "background"."""

    def __init__(self, how: str) -> None:
        super().__init__(how)
        self.how = how


# ---- the capability ---------------------------------------------------------------------------------------


class Subagents(TurnHooks):
    def __init__(self, turn: TurnState) -> None:
        self.turn = turn
        self.registry = registry(turn)
        self.kinds: dict[str, Kind] = dict(BUILTIN)
        self.depth = 0
        """How deep this run is: 0 for a conversation of the user's, 1 for its subagent, 2 for theirs."""
        context = turn.tool_context
        turn.tool_context = dataclasses.replace(context, extra={**context.extra, task_codec.EXTRA_KEY: self})

    async def before_action(self, turn: TurnState) -> None:
        custom = await _custom_subagents(turn)
        self.kinds.update(custom_kinds(custom))
        if turn.request.subagent_type_name:
            await self._as_child(turn)

    # ---- child side ---------------------------------------------------------------------------------

    async def _as_child(self, turn: TurnState) -> None:
        request, run = turn.request, turn.run
        call_id = run.parent_tool_call_id
        kind = self.kinds.get(request.subagent_type_name) or Kind(request.subagent_type_name)
        launch = None
        if call_id:  # else launched without a parent we can name (e.g. by another tool): runs as a root
            try:
                launch = await turn.svc.store.bind_subagent(turn.conversation_id, call_id,
                                                            request.conversation_group_id or None,
                                                            request.subagent_type_name)
            except SubagentConflict as e:
                raise ProtocolError(str(e)) from None
            if launch is None:
                log.info("[%s] subagent %s: no Task call %r was launched here; the type %s decides its tools",
                         run.request_id, turn.conversation_id, call_id, kind.name)
        readonly = launch.readonly if launch is not None else kind.readonly
        self.depth = launch.depth if launch is not None else 1
        drop = set()  # (UpdateCurrentStep under suppress_subagent_progress_update_tool: loop._left_out)
        if self.depth >= MAX_DEPTH:
            drop.add("Task")  # two levels at most: a subagent's subagent launches no more
        allowed = self._type_tools(kind, run.request_id)
        names = [t.name for t in turn.tools if t.name not in drop
                 and (not readonly or t.name in READ_ONLY_TOOLS)
                 and (allowed is None or t.name in allowed | {"UpdateCurrentStep"})]
        if len(names) != len(turn.tools):
            kept = set(names)
            turn.use_tools([t for t in turn.tools if t.name in kept],
                           {n: d for n, d in turn.offered_tools.items() if n in kept}, turn.dynamic_tools)
        instructions = request.custom_system_prompt if request.HasField("custom_system_prompt") else kind.instructions
        if instructions.strip():
            turn.extra_action_context.append(render_block("subagent_instructions", instructions, name=kind.name))
        if not call_id:
            return
        self.registry.add(launch.parent_conversation_id if launch is not None else "", call_id, run,
                          turn.conversation_id)
        turn.ctx = dataclasses.replace(turn.ctx, parent_tool_call_id=call_id)
        log.info("[%s] subagent %s (%s) of Task call %r%s", run.request_id, turn.conversation_id,
                 request.subagent_type_name, call_id, " read-only" if readonly else "")

    @staticmethod
    def _type_tools(kind: Kind, request_id: str) -> frozenset[str] | None:
        """The tools a type names that are tools here (None: the whole set). Names that are not (a
        custom subagent written for another tool naming) are logged and left out; a list of nothing
        but such names keeps the default set rather than leaving the subagent with no tools."""
        if kind.tools is None:
            return None
        known = kind.tools & tool_registry.REGISTRY.keys()
        unknown = sorted(kind.tools - known)
        if unknown:
            log.info("[%s] subagent type %s lists tools that are not tool names here: %s%s", request_id, kind.name,
                     ", ".join(unknown), "" if known else "; it keeps the default tool set")
        return frozenset(known) or None

    # ---- parent side: the Task tool -------------------------------------------------------------------

    def parent_readonly(self) -> bool:
        turn = self.turn
        return turn.mode.name in READ_ONLY_MODES or "Write" not in turn.offered_tools

    async def launch(self, io: CallIO, raw: dict, card: apb.TaskArgs) -> ToolOutcome:
        turn = self.turn
        a = Args(raw)
        name = task_codec.type_name(card.subagent_type)
        kind = self.kinds.get(name)
        if kind is None:
            names = ", ".join(self.kinds)
            return task_codec.error_outcome(card, f"Unknown subagent type {name!r}. Available: {names}.")
        try:
            model_id = self._model(name, card.model if card.HasField("model") else "", kind)
        except LookupError as e:
            return task_codec.error_outcome(card, str(e))
        card.model = model_id  # the card (and the checkpoint's subagent_states) shows the model the child runs on
        readonly = bool(a.boolean("readonly")) or kind.readonly or self.parent_readonly()
        background = bool(a.boolean("run_in_background"))
        call_id = io.call_id
        bound = await turn.svc.store.subagent_of_call(turn.conversation_id, call_id)
        if bound is not None:
            return await self._recover(card, call_id, bound.child_conversation_id, bound.base_revision_id)
        root = turn.request.conversation_group_id or turn.conversation_id
        args = apb.SubagentArgs(
            tool_call_id=call_id, subagent_type=name, model_id=model_id, prompt=_prompt(card), readonly=readonly,
            run_in_background=background, parent_conversation_id=turn.conversation_id,
            root_parent_conversation_id=root)
        if card.HasField("resume"):
            args.resume_agent_id = card.resume
        # stored before the exec goes out: the child reads it when it binds, however late that is
        await turn.svc.store.record_subagent_launch(SubagentLaunch(
            turn.conversation_id, call_id, root, name, readonly, self.depth + 1, card.resume or None))
        started = turn.svc.clock.wall_ms()
        try:
            _, result = await io.exec("subagent_args", args, results=frozenset({"subagent_result"}),
                                      envelope={"accept_hook_additional_contexts": False})
        except Stopped as stop:
            live = self.registry.child(turn.conversation_id, call_id)
            agent_id = live[1] if live else ""
            if stop.how == "background":
                return task_codec.success_outcome(card, agent_id=agent_id, final_message="", background=True,
                                                  background_reason=apb.SUBAGENT_BACKGROUND_REASON_USER_REQUEST)
            return task_codec.stopped_outcome(card, agent_id=agent_id)
        return task_codec.result_outcome(result, card, background=background,
                                         duration_ms=max(0, turn.svc.clock.wall_ms() - started))

    def _model(self, type_name: str, task_model: str, kind: Kind) -> str:
        turn = self.turn
        parent = turn.route.public_id
        for override in turn.request.subagent_model_overrides:
            if override.subagent_type != type_name:
                continue
            which = override.WhichOneof("selection")
            if which == "disabled" and override.disabled:
                raise LookupError(f"The subagent type {type_name!r} is disabled in Cursor's settings.")
            if which == "model" and override.model.model_id:
                return override.model.model_id  # the user's own setting, whichever backend serves it
            return parent
        if task_model and task_model != "inherit":
            found = self._user_model(task_model)
            if found is None:
                names = ", ".join(f"{r.display_name} ({r.public_id})" for r in turn.svc.user_models())
                raise LookupError(f"Model {task_model!r} is not one of the models you can give a subagent: "
                                  f"{names or parent}. Leave `model` out to use your own.")
            return found
        if kind.model and kind.model != "inherit":
            found = self._user_model(kind.model)
            if found is not None:
                return found
            log.info("[%s] subagent type %s names model %r, which is not configured; it runs on %s",
                     turn.run.request_id, type_name, kind.model, parent)
        return parent

    def _user_model(self, name: str) -> str | None:
        for route in self.turn.svc.user_models():
            if name in (route.public_id, route.display_name, route.model_id):
                return route.public_id
        return None

    async def _recover(self, card: apb.TaskArgs, call_id: str, child: str, base_revision: int | None) -> ToolOutcome:
        """This call launched (or resumed) `child` before, from `base_revision` (the round is re-running
        after a crash or a retry): never launched twice."""
        turn = self.turn
        live = self.registry.child(turn.conversation_id, call_id)
        if live is not None:
            log.info("[%s] Task call %r: waiting for its running subagent %s", turn.run.request_id, call_id, child)
            await live[0].wait()
        final = None
        if await turn.svc.store.head_revision(child) != base_revision:  # it answered this call, not only before
            final = _final_answer(await turn.svc.store.head_messages(child))
        if final is not None:
            log.info("[%s] Task call %r: subagent %s had finished; its result is reused", turn.run.request_id,
                     call_id, child)
            return task_codec.success_outcome(card, agent_id=child, final_message=final, background=False)
        log.info("[%s] Task call %r: subagent %s did not finish; reported interrupted", turn.run.request_id,
                 call_id, child)
        return task_codec.error_outcome(
            card, "The subagent was interrupted before it finished (its connection was lost). Its work so far "
                  f"is kept: to continue it, call Task again with resume=\"{child}\" and say what is left.",
            agent_id=child)

    # ---- actions about subagents -----------------------------------------------------------------------

    def cancel(self, subagent_id: str) -> bool:
        """Stop one subagent of this conversation, named by its Task call id or by its agent id;
        nothing else (another conversation's child under the same call id goes on)."""
        conversation = self.turn.conversation_id
        call_id = self._pending_call(subagent_id)
        stopped = False
        if call_id is not None:
            stopped = self.turn.execs.stop(call_id, "subagent_args", Stopped("canceled"), abort=True) is not None
        found = self.registry.child(conversation, call_id or subagent_id) or (
            (self.registry.by_agent(conversation, subagent_id) or (None, None))[1], subagent_id)
        if found and found[0] is not None:
            found[0].cancel(RunCanceled("the user stopped this subagent"))
            stopped = True
        return stopped

    def to_background(self, call_id: str) -> bool:
        return self.turn.execs.stop(call_id, "subagent_args", Stopped("background"), abort=False) is not None

    def _pending_call(self, subagent_id: str) -> str | None:
        pending = {p.call_id for p in self.turn.execs.pending.values() if p.field == "subagent_args"}
        if subagent_id in pending:
            return subagent_id
        by_agent = self.registry.by_agent(self.turn.conversation_id, subagent_id)
        if by_agent is not None and by_agent[0] in pending:
            return by_agent[0]
        return None


async def _custom_subagents(turn: TurnState) -> Sequence[apb.CustomSubagent]:
    action = turn.request.action
    if action.HasField("request_context_parts"):
        part = await request_parts.part(turn, action.request_context_parts, "subagents")
        if part is not None:
            return part.custom_subagents
    return actions.request_context_of(action).custom_subagents


def _prompt(card: apb.TaskArgs) -> str:
    if not card.attachments:
        return card.prompt
    files = "\n".join(f"- {path}" for path in card.attachments)
    return f"{card.prompt}\n\nAttached files (read them first):\n{files}"


def _final_answer(messages: Sequence) -> str | None:
    """The child's final answer when its history ends with one (a settled text reply)."""
    if not messages:
        return None
    p = messages[-1].payload
    if p["kind"] == "assistant" and not p.get("tool_round_id") and not p.get("tool_calls"):
        return p["text"]
    return None


def _service(turn: TurnState) -> Subagents:
    return turn.tool_context.extra[task_codec.EXTRA_KEY]


# ---- ConversationAction branches ------------------------------------------------------------------------


def cancel_mid_run(turn: TurnState, action: apb.ConversationAction) -> None:
    subagent_id = action.cancel_subagent_action.subagent_id
    if not _service(turn).cancel(subagent_id):
        log.warning("[%s] cancel_subagent_action: no running subagent %r here", turn.run.request_id, subagent_id)


def background_mid_run(turn: TurnState, action: apb.ConversationAction) -> None:
    call_id = action.background_subagent_action.tool_call_id
    if not _service(turn).to_background(call_id):
        log.warning("[%s] background_subagent_action: no waiting Task call %r", turn.run.request_id, call_id)


async def cancel_at_start(turn: TurnState) -> bool:
    """The parent is idle (a background subagent): stop that child if it runs here; no model call."""
    subagent_id = turn.request.action.cancel_subagent_action.subagent_id
    if not _service(turn).cancel(subagent_id):
        log.info("[%s] cancel_subagent_action: subagent %r is not running here", turn.run.request_id, subagent_id)
    return True


async def background_completion(turn: TurnState) -> bool:
    """One runtime message per finished background task, each added once (its idempotency key),
    in the order given; the first starts the turn (a simulated UserMessage). Then the model follows up."""
    completions = list(turn.request.action.background_task_completion_action.completions)
    usable = []
    for c in completions:
        key = _completion_key(c)
        if key is None:
            log.info("[%s] background completion of kind %s, reason %s: nothing for the model", turn.run.request_id,
                     apb.BackgroundTaskKind.Name(c.kind), apb.BackgroundTaskCompletionReason.Name(c.reason))
            continue
        usable.append((key, c))
    if not usable:
        raise ProtocolError("background_task_completion_action carries no finished subagent or shell "
                            "(a subagent completion needs subagent_id; a shell one task_id)")
    held = {m.runtime_event_id for m in turn.messages if m.runtime_event_id}
    fresh = [(key, c) for key, c in usable if key not in held]
    if not fresh:
        last = turn.messages[-1].payload if turn.messages else {}
        return last.get("kind") == "assistant" and not last.get("tool_round_id")  # answered already?
    for i, (key, c) in enumerate(fresh):
        message = _simulated_message(turn, c, key)
        block = _completion_block(c)
        if i == 0:
            await turn._begin_user_turn(apb.UserMessageAction(user_message=message), action_context=[block],
                                        event_id=key, payload_extra={
                                            subagent_state.COMPLETION_KEY: _metadata(c, turn.svc.clock.wall_ms())})
        else:
            await _append_completion(turn, message, block, key, c)
    return False


def _completion_key(c: apb.BackgroundTaskCompletion) -> str | None:
    if c.reason == apb.BACKGROUND_TASK_COMPLETION_REASON_TASK_PROGRESS:
        return None  # a progress note, not an end: nothing to follow up yet
    if c.kind == apb.BACKGROUND_TASK_KIND_SUBAGENT and c.HasField("subagent_id") and c.subagent_id:
        if c.status not in subagent_state.RUN_STATUS:
            status = apb.BackgroundTaskStatus.Name(c.status) if c.status in apb.BackgroundTaskStatus.values() else c.status
            raise ProtocolError(f"background completion of subagent {c.subagent_id!r} has status {status} "
                                "(a finished subagent is SUCCESS, ERROR or ABORTED)")
        return f"subagent-completed:{c.subagent_id}"
    if c.kind == apb.BACKGROUND_TASK_KIND_SHELL and c.task_id:
        return f"shell-completed:{c.task_id}"
    return None


def _simulated_message(turn: TurnState, c: apb.BackgroundTaskCompletion, key: str) -> apb.UserMessage:
    mode = turn.request.conversation_state.mode or apb.AGENT_MODE_AGENT
    text = FOLLOW_UP if c.kind == apb.BACKGROUND_TASK_KIND_SUBAGENT else SHELL_FOLLOW_UP
    message = apb.UserMessage(text=text, message_id=key, mode=mode, is_simulated_msg=True,
                              simulated_msg_reason=apb.SIMULATED_MSG_REASON_BACKGROUND_TASK_COMPLETION)
    message.simulated_message_metadata.title = c.title
    message.simulated_message_metadata.task_id = c.task_id or c.subagent_id
    return message


_STATUS_WORDS = {apb.BACKGROUND_TASK_STATUS_SUCCESS: "success", apb.BACKGROUND_TASK_STATUS_ERROR: "error",
                 apb.BACKGROUND_TASK_STATUS_ABORTED: "aborted"}


def _completion_block(c: apb.BackgroundTaskCompletion) -> str:
    subagent = c.kind == apb.BACKGROUND_TASK_KIND_SUBAGENT
    lines = [f"kind: {'subagent' if subagent else 'shell'}"]
    if c.title:
        lines.append(f"title: {c.title}")
    if subagent:
        lines += [f"Subagent name: {c.title or c.subagent_id}", f"agent_id: {c.subagent_id}"]
        if c.HasField("tool_call_id") and c.tool_call_id:
            lines.append(f"task_tool_call_id: {c.tool_call_id}")
    if c.task_id:
        lines.append(f"task_id: {c.task_id}")
    lines.append(f"status: {_STATUS_WORDS.get(c.status, 'finished')}")
    if c.HasField("output_path") and c.output_path:
        lines.append(f"output_path: {c.output_path}")
    if c.HasField("detail") and c.detail.strip():
        lines.append(f"detail:\n{c.detail.strip()}")
    return render_block("background_task_completion", "\n".join(lines))


def _metadata(c: apb.BackgroundTaskCompletion, completed_at_ms: int) -> dict:
    return {"kind": c.kind, "status": c.status, "reason": c.reason, "title": c.title,
            "subagent_id": c.subagent_id, "tool_call_id": c.tool_call_id, "task_id": c.task_id,
            "detail": c.detail, "output_path": c.output_path, "completed_at_ms": completed_at_ms}


async def _append_completion(turn: TurnState, message: apb.UserMessage, block: str, key: str,
                             c: apb.BackgroundTaskCompletion) -> None:
    from . import history, user_input
    from byok.store import NewMessage

    existing = await turn.svc.store.runtime_event(turn.conversation_id, key)
    if existing is not None:
        payload = existing.payload
    else:
        rendered = await user_input.render(turn, message, None, None, turn.svc.clock.now(), action_context=[block])
        payload = history.runtime_user_payload(rendered.parts, wire_id=f"runtime:{key}",
                                               context_digest=rendered.context_digest)
        payload[subagent_state.COMPLETION_KEY] = _metadata(c, turn.svc.clock.wall_ms())
    await turn._append([NewMessage("user", "runtime", payload, key, turn.run.request_id)])


capabilities.CAPABILITIES.append(Subagents)
actions.RUN_ACTIONS["background_task_completion_action"] = background_completion
actions.RUN_ACTIONS["cancel_subagent_action"] = cancel_at_start
actions.MID_RUN_ACTIONS["cancel_subagent_action"] = cancel_mid_run
actions.MID_RUN_ACTIONS["background_subagent_action"] = background_mid_run
