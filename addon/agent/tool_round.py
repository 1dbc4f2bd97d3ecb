"""The tool round that follows a provider call ending in tool calls.

    persist the round (assistant + all calls) -> staged checkpoint (stable roots unchanged, the
    pending assistant inline) -> run every call concurrently on its ONE transport -> per result,
    atomically append assistant(call) -> tool(result) in completion order, then tool_call_completed
    -> all done: SET blobs, ACK barrier, settled checkpoint -> the next provider call.

The model's mistakes (unknown tool, arguments that are not JSON or break the schema) become a tool
error result it sees; the client's violations (raised by the exec table) end the run. The live
cards streamed while the model produced the calls are in cards.py.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from byok.proto import agent_pb2 as apb
from byok.store import NewMessage

from . import history
from .cards import CallState, prepare
from .cursor import projection as proj
from .cursor import updates
from .cursor.tools import registry
from .cursor.tools.base import RunToolContext, ToolArgsError, ToolOutcome
from .cursor.tools.dispatch import CallPort, ExecTable
from ..wire.errors import RunError
from ..providers.base import Done
from ..providers.transcript import AssistantItem, ToolCall, ToolResultItem
from .turn_base import CallResult, TurnState

log = logging.getLogger("byok.tools")


def restored_round(turn: "TurnState", pending: proj.Pending) -> "Round":
    """The staged round of a resumed checkpoint, ready to run again (same ids, same start time)."""
    model_call_id = pending.model_call_id or turn.svc.ids.new("model-call")
    started_at = pending.started_at_ms or turn.svc.clock.wall_ms()
    calls = []
    for call in pending.item.tool_calls:
        tool = turn.offered_tools.get(call.name)
        state = CallState(call.index, call.call_id, call.name, model_call_id, tool,
                          error=None if tool is not None else "unknown")
        prepare(state, call.arguments, turn, started_at)
        turn.run.emit(updates.tool_call_started(state.call_id, model_call_id, state.card(state.card_args)))
        calls.append(state)
    result = CallResult(pending.item, Done("tool_use", pending.item.replay), pending.usage,
                        pending.thinking_ms, model_call_id)
    return Round(turn, result, calls, started_at_ms=started_at)


@dataclass
class Round:
    turn: "TurnState"
    result: CallResult
    calls: list[CallState]
    started_at_ms: int | None = None
    round_id: str = ""
    committed: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def item(self) -> AssistantItem:
        return self.result.item

    async def run(self) -> None:
        turn = self.turn
        svc, run = turn.svc, turn.run
        self.round_id = svc.ids.new("round")
        started_at = self.started_at_ms or svc.clock.wall_ms()
        await svc.store.stage_round(
            self.round_id, turn.conversation_id, run.request_id, turn.revision,
            proj.assistant_json(self.item), [(c.index, c.call_id, c.name) for c in self.calls],
            created_at_ms=started_at,
        )
        staged = await turn._project(turn.messages, proj.Pending(
            self.item, self.result.thinking_ms, self.result.usage, started_at_ms=started_at,
            model_call_id=self.result.model_call_id))
        await turn._publish(staged, revision=None)
        self.base_steps = staged.last_turn_steps
        try:
            async with asyncio.TaskGroup() as group:
                for position, state in enumerate(self.calls):
                    group.create_task(self._call(state, position))
        except BaseExceptionGroup as group_error:  # surface the first run-ending error as itself
            raise _first_error(group_error) from None
        settled = await turn._project(turn.messages)
        await turn._publish(settled, revision=turn.revision)
        await svc.store.settle_round(self.round_id)
        turn.execs.settle()

    async def _call(self, state: CallState, position: int) -> None:
        outcome = await self._execute(state, position)
        turn = self.turn
        completed_at = turn.svc.clock.wall_ms()
        card_args = outcome.args if outcome.args is not None else state.card_args
        tool_call = state.card(card_args, outcome.result)
        tool_call.completed_at_ms = completed_at
        tool_call_pb = tool_call.SerializeToString(deterministic=True)
        async with self.lock:
            first = self.committed == 0
            self.committed += 1
            item = self.item
            call = ToolCall(state.call_id, state.name, state.arguments, state.index)
            pair_assistant = AssistantItem(
                text=item.text if first else "",
                thinking=item.thinking if first else "",
                tool_calls=(call,),
                replay=item.replay if first else None,
            )
            a = history.assistant_payload(
                pair_assistant, thinking_ms=self.result.thinking_ms if first else None,
                usage=self.result.usage if first else None, model_call_id=self.result.model_call_id,
                tool_round_id=self.round_id, round_size=len(self.calls),
            )
            t = history.tool_payload(
                ToolResultItem(state.call_id, state.name, outcome.content, outcome.is_error, tuple(outcome.images)),
                tool_round_id=self.round_id, call_index=state.index, tool_call_pb=tool_call_pb,
                marks=outcome.marks,
            )
            request_id = turn.run.request_id
            await turn._complete_call(self.round_id, state.index, [
                NewMessage("assistant", "assistant", a, request_id=request_id),
                NewMessage("tool", "tool", t, request_id=request_id),
            ], is_error=outcome.is_error)
        turn.run.emit(updates.tool_call_completed(state.call_id, state.model_call_id, tool_call))

    async def _execute(self, state: CallState, position: int) -> ToolOutcome:
        turn = self.turn
        if state.error == "unknown":
            return registry.unknown_tool_outcome(state.name, tuple(turn.offered_tools))
        if state.error is not None:
            return registry.invalid_args_outcome(state.tool, state.error)
        context = turn.tool_context
        extra = dict(context.extra)
        extra["todos"] = proj.current_todos(turn.messages)
        extra["message_index"] = self.base_steps + position + 1
        port = CallPort(turn.execs, turn.run.emit, state.call_id, state.model_call_id, state.name,
                        RunToolContext(**{**context.__dict__, "extra": extra}))
        try:
            return await state.tool.run(port, state.json_args, state.card_args)
        except ToolArgsError as e:
            return registry.invalid_args_outcome(state.tool, str(e))


def _first_error(group: BaseExceptionGroup) -> BaseException:
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            return _first_error(error)
        if isinstance(error, RunError):
            return error
    return group.exceptions[0]


def tool_context(request: apb.AgentRunRequest, conversation_id: str, mode: str) -> RunToolContext:
    from .actions import request_context_of

    request_context = request_context_of(request.action)
    env = request_context.env
    return RunToolContext(
        conversation_id=conversation_id,
        workspace_paths=tuple(env.workspace_paths),
        terminals_folder=env.terminals_folder,
        shell=env.shell,
        admin_command_denylist=tuple(request_context.admin_command_denylist),
        mode=mode,
    )


def new_exec_table(run) -> ExecTable:
    return ExecTable(emit=run.emit, fail=run.fail)
