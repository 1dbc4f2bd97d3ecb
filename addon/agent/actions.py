"""What each `ConversationAction` branch does.

Two tables, one per moment an action can arrive:
    RUN_ACTIONS      the action of the run_request that starts a local run
    MID_RUN_ACTIONS  an action appended while the run is going (cancel is the run's own: run.py)

A branch in neither table is refused: at run start with a Connect error end-stream, mid-run with a
visible refusal (run.py). Capability modules add their branches here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from byok.proto import agent_pb2 as apb

from . import compaction
from .errors import ProtocolError
from .turn_base import TurnState

RunAction = Callable[[TurnState], Awaitable[bool]]
"""Starts the turn; True = the turn is already complete (no model call follows)."""

MidRunAction = Callable[[TurnState, apb.ConversationAction], None]
"""Handles an action that arrived while the run is going; must not block (start a task if needed)."""


async def user_message(turn: TurnState) -> bool:
    await turn._begin_user_turn()
    return False


async def resume(turn: TurnState) -> bool:
    return await turn._resume()


RUN_ACTIONS: dict[str, RunAction] = {
    "user_message_action": user_message,
    "resume_action": resume,
    "summarize_action": compaction.summarize,  # /summarize: compact now, end the run
}

MID_RUN_ACTIONS: dict[str, MidRunAction] = {}


def for_run(request: apb.AgentRunRequest) -> RunAction:
    which = request.action.WhichOneof("action")
    handler = RUN_ACTIONS.get(which or "")
    if handler is None:
        if which is None:  # a branch newer than our schema (or none at all): name what was sent
            from . import drift

            found = drift.describe(drift.unknowns(request.action))
            raise ProtocolError("unknown ConversationAction branch in run_request" + (f": {found}" if found else
                                                                                      " (the action is empty)"))
        raise ProtocolError(f"unsupported run action {which!r}")
    return handler


def install_mid_run(turn: TurnState) -> None:
    """Route the run's mid-run actions to this turn's handlers."""

    def handle(action: apb.ConversationAction) -> bool:
        handler = MID_RUN_ACTIONS.get(action.WhichOneof("action") or "")
        if handler is None:
            return False
        handler(turn, action)
        return True

    turn.run.mid_run_action = handle
