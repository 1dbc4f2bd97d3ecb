"""Live tool cards while the model streams one provider call.

    toolcall start  -> partial_tool_call (typed, empty placeholder)
    args delta      -> partial_tool_call(args_text_delta) (+ the tool's live stream, e.g. edit content)
    args complete   -> parse + validate -> tool_call_started (args, started_at_ms)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from google.protobuf.message import Message

from byok.proto import agent_pb2 as apb

from .cursor import updates
from .cursor.tools import registry
from .cursor.tools.base import ArgsStream, ToolArgsError, ToolDef
from ..providers.base import ToolCallDelta, ToolCallEnd, ToolCallStart

if TYPE_CHECKING:
    from .turn_base import TurnState


@dataclass
class CallState:
    index: int
    call_id: str
    name: str
    model_call_id: str
    tool: ToolDef | None
    arguments: str = ""
    json_args: dict | None = None
    card_args: Message | None = None
    error: str | None = None
    started_at_ms: int | None = None
    stream: ArgsStream | None = None

    def card(self, args: Message | None = None, result: Message | None = None) -> apb.ToolCall:
        call = self.tool.tool_call(args, result) if self.tool else apb.ToolCall(tool_call_id=self.call_id)
        if self.started_at_ms is not None:
            call.started_at_ms = self.started_at_ms
        return call


class Cards:
    """Turns one model call's tool-call events into Cursor's live cards."""

    def __init__(self, turn: "TurnState", model_call_id: str) -> None:
        self.turn = turn
        self.model_call_id = model_call_id
        self.calls: dict[int, CallState] = {}

    def on_event(self, event) -> None:
        if isinstance(event, ToolCallStart):
            self._start(event)
        elif isinstance(event, ToolCallDelta):
            self._delta(event)
        elif isinstance(event, ToolCallEnd):
            self._end(event)

    def _start(self, event: ToolCallStart) -> None:
        tool = self.turn.offered_tools.get(event.name)
        state = CallState(event.index, event.call_id, event.name, self.model_call_id, tool)
        if tool is None:
            state.error = "unknown"
        elif tool.stream is not None:
            state.stream = tool.stream(event.call_id, self.model_call_id, self.turn.tool_context)
        self.calls[event.index] = state
        self.turn.run.emit(updates.partial_tool_call(state.call_id, self.model_call_id, state.card()))

    def _delta(self, event: ToolCallDelta) -> None:
        state = self.calls[event.index]
        state.arguments += event.arguments_delta
        run = self.turn.run
        run.emit(updates.partial_tool_call(state.call_id, self.model_call_id, state.card(),
                                           args_text_delta=event.arguments_delta))
        if state.stream is not None:
            for update in state.stream.feed(event.arguments_delta):
                run.emit(updates.interaction(update))

    def _end(self, event: ToolCallEnd) -> None:
        state = self.calls[event.index]
        prepare(state, event.arguments, self.turn, self.turn.svc.clock.wall_ms())
        self.turn.run.emit(updates.tool_call_started(state.call_id, self.model_call_id, state.card(state.card_args)))


def prepare(state: CallState, arguments: str, turn: "TurnState", started_at_ms: int) -> None:
    """Complete arguments: parse and validate them into the card's typed args, or record why not."""
    state.arguments = arguments
    state.started_at_ms = started_at_ms
    if state.tool is None:
        return
    try:
        parsed = registry.decode_args(arguments)
        state.card_args = state.tool.parse(parsed, state.call_id, turn.tool_context)
        state.json_args = parsed
    except ToolArgsError as e:
        state.error = str(e)  # the reason only: invalid_args_outcome words the message
