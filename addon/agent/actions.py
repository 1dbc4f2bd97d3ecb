"""Which handler each `ConversationAction` branch gets (docs/protocol-coverage.md is the table for users).

Two moments an action can arrive:
    at run start   the action of the run_request: RUN_ACTIONS here, then each capability's
                   `run_actions` (turn_base.TurnHooks)
    mid-run        an action appended while the run is going: the capabilities' `mid_run_actions`
                   (cancel is the run's own: run.py)

A branch nobody handles is refused: at run start with an `unimplemented` Connect error end-stream
whose message says in plain words what is not supported (REFUSED), mid-run with a logged refusal
that leaves the run going (run.py). A handled branch wins over a stale REFUSED entry.

Actions that start a turn without a typed-in message (start plan, execute plan, the answers to an
earlier AskQuestion) become one user turn like any other: a UserMessageAction is built for them
(`user_turn_of`) and the turn renders, stores and publishes it exactly once.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable

from byok.proto import agent_pb2 as apb
from byok.proto import aiserver_pb2 as spb

from ..wire import connect
from .cursor import context as request_context
from ..wire.errors import ProtocolError, RunError, error_details
from .turn_base import TurnHooks, TurnState
from .user_input import requested_mode

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
    "cancel_action": cancel,
    "start_plan_action": user_message,
    "execute_plan_action": user_message,
    "async_ask_question_completion_action": user_message,
    "shell_command_action": shell_command,
}
"""The turn's own branches; the capabilities add theirs (`TurnHooks.run_actions`)."""

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


def handled_at_start(capabilities: Iterable[type[TurnHooks]]) -> frozenset[str]:
    """Every branch a run can start with, given the capabilities."""
    return frozenset(RUN_ACTIONS).union(*(c.run_actions for c in capabilities))


def handled_mid_run(capabilities: Iterable[type[TurnHooks]]) -> frozenset[str]:
    """Every branch a running run takes (besides cancel_action, which is the run's own)."""
    return frozenset().union(*(c.mid_run_actions for c in capabilities))


def for_run(request: apb.AgentRunRequest, hooks: Iterable[TurnHooks]) -> RunAction:
    """The handler of the run_request's action: the turn's own, else the capability that names it."""
    which = request.action.WhichOneof("action")
    if which is None:  # a branch newer than our schema (or none at all): name what was sent
        from . import drift

        found = drift.describe(drift.unknowns(request.action))
        raise ProtocolError("unknown ConversationAction branch in run_request" + (f": {found}" if found else
                                                                                  " (the action is empty)"))
    handler = RUN_ACTIONS.get(which)
    if handler is not None:
        return handler
    for hook in hooks:
        method = type(hook).run_actions.get(which)
        if method is not None:
            return functools.partial(method, hook)
    raise ActionRefused(refusal(which))


def install_mid_run(turn: TurnState) -> None:
    """Route the run's mid-run actions to the capability that takes each branch."""
    table: dict[str, MidRunAction] = {}
    for hook in reversed(turn.hooks):  # the first capability that names a branch takes it
        table.update((name, functools.partial(method, hook)) for name, method in type(hook).mid_run_actions.items())

    def handle(action: apb.ConversationAction) -> bool:
        handler = table.get(action.WhichOneof("action") or "")
        if handler is None:
            return False
        handler(turn, action)
        return True

    turn.run.mid_run_action = handle
