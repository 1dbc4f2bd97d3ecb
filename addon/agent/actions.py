"""What each `ConversationAction` branch does (docs/protocol-coverage.md is the table for users).

Two tables, one per moment an action can arrive:
    RUN_ACTIONS      the action of the run_request that starts a local run
    MID_RUN_ACTIONS  an action appended while the run is going (cancel is the run's own: run.py)

A branch in neither table is refused: at run start with an `unimplemented` Connect error end-stream
whose message says in plain words what is not supported (REFUSED), mid-run with a logged refusal
that leaves the run going (run.py). Capability modules add their branches here; an entry in
RUN_ACTIONS wins over a stale REFUSED entry.

Actions that start a turn without a typed-in message (start plan, execute plan, the answers to an
earlier AskQuestion) become one user turn like any other: a UserMessageAction is built for them
(`user_turn_of`) and the turn renders, stores and publishes it exactly once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from byok.proto import agent_pb2 as apb
from byok.proto import aiserver_pb2 as spb

from . import compaction, queued
from ..wire import connect
from .cursor import context as request_context
from ..wire.errors import ProtocolError, RunError, error_details
from .turn_base import TurnState

RunAction = Callable[[TurnState], Awaitable[bool]]
"""Starts the turn; True = the turn is already complete (no model call follows)."""

MidRunAction = Callable[[TurnState, apb.ConversationAction], None]
"""Handles an action that arrived while the run is going; must not block (start a task if needed)."""


class ActionRefused(RunError):
    """A ConversationAction this version does not support: the user reads `message` in Cursor."""

    code = connect.Code.UNIMPLEMENTED

    def to_connect(self) -> connect.ConnectError:
        return connect.ConnectError(self.code, self.message, [error_details(
            spb.ErrorDetails.ERROR_CUSTOM_MESSAGE, title="Not supported by cursor-byok", detail=self.message,
            retryable=False, immediate=True)])


# ---- the user turn of each action --------------------------------------------------------------


def request_context_of(action: apb.ConversationAction) -> apb.RequestContext:
    """The RequestContext an action carries (an empty one for actions without)."""
    which = action.WhichOneof("action")
    if which in ("user_message_action", "resume_action", "start_plan_action", "execute_plan_action"):
        return getattr(action, which).request_context
    if which == "subscription_notification_action":
        return action.subscription_notification_action.request_context
    return apb.RequestContext()


def requested_mode(action: apb.ConversationAction) -> int | None:
    """The mode the action itself asks for, or None (then `conversation_state.mode` decides).

    A typed message names its mode. Start plan is Plan unless its message names another mode;
    executing a plan runs in its `execution_mode`, else Agent (a plan is carried out in Agent mode:
    the restored state mode would still be Plan, which cannot change files)."""
    which = action.WhichOneof("action")
    if which == "user_message_action":
        return action.user_message_action.user_message.mode or None
    if which == "start_plan_action":
        return action.start_plan_action.user_message.mode or apb.AGENT_MODE_PLAN
    if which == "execute_plan_action":
        return action.execute_plan_action.execution_mode or apb.AGENT_MODE_AGENT
    return None


def user_turn_of(turn: TurnState) -> tuple[apb.UserMessageAction, list[str]]:
    """The user message (and extra ACTION_CONTEXT blocks) of the action that starts this turn."""
    action = turn.request.action
    which = action.WhichOneof("action")
    if which == "user_message_action":
        return action.user_message_action, []
    if which == "start_plan_action":
        start = action.start_plan_action
        return apb.UserMessageAction(user_message=start.user_message, request_context=start.request_context), []
    if which == "execute_plan_action":
        return _execute_plan(turn, action.execute_plan_action)
    if which == "async_ask_question_completion_action":
        return _question_answers(turn, action.async_ask_question_completion_action)
    raise ProtocolError(f"{which} does not start a user turn")


def _simulated(turn: TurnState, text: str, message_id: str, reason: int) -> apb.UserMessage:
    mode = requested_mode(turn.request.action) or turn.request.conversation_state.mode or apb.AGENT_MODE_AGENT
    return apb.UserMessage(text=text, message_id=message_id, mode=mode, is_simulated_msg=True,
                           simulated_msg_reason=reason)


def _execute_plan(turn: TurnState, ep: apb.ExecutePlanAction) -> tuple[apb.UserMessageAction, list[str]]:
    content = ep.plan_file_content or ep.plan.plan
    if not content.strip():
        raise ProtocolError("execute_plan_action carries no plan (plan_file_content and plan.plan are empty)")
    message = _simulated(turn, "Carry out the approved plan.",
                         ep.kickoff_message_id or f"execute-plan:{turn.run.request_id}",
                         apb.SIMULATED_MSG_REASON_PLAN_EXECUTION)
    message.execute_plan_info.plan_id = ep.plan_id
    block = request_context.plan_block(content, path=ep.plan_file_path, uri=ep.plan_file_uri)
    return apb.UserMessageAction(user_message=message, request_context=ep.request_context), [block]


def _question_answers(turn: TurnState, done: apb.AsyncAskQuestionCompletionAction,
                      ) -> tuple[apb.UserMessageAction, list[str]]:
    from .cursor.tools.interaction import answers_text

    message = _simulated(turn, "Here are my answers to your earlier questions.",
                         f"ask-question-answers:{done.original_tool_call_id or turn.run.request_id}",
                         apb.SIMULATED_MSG_REASON_UNSPECIFIED)
    block = request_context.answers_block(answers_text(done.original_args, done.result),
                                          tool_call_id=done.original_tool_call_id)
    return apb.UserMessageAction(user_message=message), [block]


# ---- run-start handlers --------------------------------------------------------------------------


async def user_message(turn: TurnState) -> bool:
    action, extra = user_turn_of(turn)
    await turn._begin_user_turn(action, action_context=extra)
    return False


async def resume(turn: TurnState) -> bool:
    return await turn._resume()


async def cancel(turn: TurnState) -> bool:
    """Nothing runs in this request: claiming the conversation already ended its running run (a
    newer run fences older ones), so the run ends at once with an empty end-stream."""
    return True


async def shell_command(turn: TurnState) -> bool:
    from .user_shell import run_user_shell

    await run_user_shell(turn)
    return True


RUN_ACTIONS: dict[str, RunAction] = {
    "user_message_action": user_message,
    "resume_action": resume,
    "summarize_action": compaction.summarize,  # /summarize: compact now, end the run
    "cancel_action": cancel,
    "start_plan_action": user_message,
    "execute_plan_action": user_message,
    "async_ask_question_completion_action": user_message,
    "shell_command_action": shell_command,
}

MID_RUN_ACTIONS: dict[str, MidRunAction] = {
    "user_message_action": queued.accept,  # kept, then delivered at the next boundary or as the next turn
    "inject_context_action": queued.accept,
}

REFUSED: dict[str, str] = {
    "background_shell_action": "cursor-byok cannot move a command to the background on request; "
                               "a command that runs past its wait time goes to the background by itself.",
    "background_subagent_action": "cursor-byok moves a subagent to the background only while its parent's run "
                                  "waits for it; send it during that run.",
    "subscription_notification_action": "cursor-byok does not support subscriptions, so it cannot answer "
                                        "a subscription notification.",
    "goal_continuation_action": "cursor-byok does not support goals, so there is no goal to continue.",
    "inject_context_action": "cursor-byok takes added context only with a message; send it as a new message.",
}
"""Plain words for the branches nobody handles yet (shown to the user in Cursor)."""


def refusal(which: str) -> str:
    return REFUSED.get(which) or f"cursor-byok does not support the {which.removesuffix('_action')} action."


def for_run(request: apb.AgentRunRequest) -> RunAction:
    which = request.action.WhichOneof("action")
    if which is None:  # a branch newer than our schema (or none at all): name what was sent
        from . import drift

        found = drift.describe(drift.unknowns(request.action))
        raise ProtocolError("unknown ConversationAction branch in run_request" + (f": {found}" if found else
                                                                                  " (the action is empty)"))
    handler = RUN_ACTIONS.get(which)
    if handler is None:
        raise ActionRefused(refusal(which))
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


# The capability modules add their branches to these tables when imported: load them with the tables.
from . import capabilities  # noqa: E402,F401
