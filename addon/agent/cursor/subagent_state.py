"""The subagent fields of a checkpoint, folded from history (never stored twice; PROTOCOL 3.1, seed §33.2).

In a parent's checkpoint, from its Task results and the background completions it received:
    subagent_runs_by_parent_tool_call_id[Task call id] = SubagentRunState{parent_tool_call_id,
        subagent_id, status (SUCCESS / BACKGROUNDED / ERROR, ABORTED when the user stopped it; a background completion then sets its
        own status, detail, output path, completion time and reason), title = the Task description}
    subagent_states[agent id] = SubagentPersistedState{subagent_type, model_id, created/last used}
In a subagent's own checkpoint (its run carries the parent's Task call id):
    communicate_update_states_by_parent_tool_call_id[parent Task call id] =
        CommunicateUpdateTurnState{history[step, message_index], final_summary, completed_subtitle}
        from the current turn's UpdateCurrentStep calls.
Entries the client sent that no history here touches are kept (its state is echoed).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence

from byok.proto import agent_pb2 as apb

from .tools import task as task_codec

COMPLETION_KEY = "background_completion"
"""The runtime payload key holding a background completion's fields (subagents.py writes it)."""

RUN_STATUS = {
    apb.BACKGROUND_TASK_STATUS_SUCCESS: apb.SUBAGENT_RUN_STATUS_SUCCESS,
    apb.BACKGROUND_TASK_STATUS_ERROR: apb.SUBAGENT_RUN_STATUS_ERROR,
    apb.BACKGROUND_TASK_STATUS_ABORTED: apb.SUBAGENT_RUN_STATUS_ABORTED,
}
"""A subagent's background completion status -> its run status (the only statuses a completion may carry)."""


class Subagents:
    """What history says about subagents, message by message: the Task results and background
    completions (applied to a checkpoint in their order), and the current turn's progress calls."""

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.progress: list[apb.CommunicateUpdateToolCall] | None = None
        """The current turn's successful UpdateCurrentStep calls (None: none yet)."""

    def add(self, payload: Mapping, call: apb.ToolCall | None = None) -> None:
        """One stored message; `call` is a tool message's decoded ToolCall (decoded when None)."""
        p = payload
        if p["kind"] == "tool" and p["name"] in ("Task", "UpdateCurrentStep"):
            call = call if call is not None else apb.ToolCall.FromString(base64.b64decode(p["tool_call"]))
            if p["name"] == "Task":
                self.events.append((_task, call, p["call_id"], bool(p.get(task_codec.USER_STOPPED_MARK))))
            elif not p.get("is_error") and call.communicate_update_tool_call.result.HasField("success"):
                self.progress = [*(self.progress or ()), call.communicate_update_tool_call]
        elif p["kind"] == "runtime":
            if p.get(COMPLETION_KEY):
                self.events.append((_completion, p[COMPLETION_KEY]))
            if p.get("turn"):
                self.progress = None  # a new turn: its progress starts over

    def apply(self, state: apb.ConversationStateStructure, parent_tool_call_id: str | None) -> None:
        for apply_event, *args in self.events:
            apply_event(state, *args)
        if parent_tool_call_id and self.progress is not None:
            state.communicate_update_states_by_parent_tool_call_id[parent_tool_call_id].CopyFrom(
                _progress(self.progress))


def fold(state: apb.ConversationStateStructure, messages: Sequence, parent_tool_call_id: str | None) -> None:
    """The subagent fields of a checkpoint, from a whole history."""
    folded = Subagents()
    for msg in messages:
        folded.add(msg.payload)
    folded.apply(state, parent_tool_call_id)


def _task(state: apb.ConversationStateStructure, call: apb.ToolCall, call_id: str, user_stopped: bool) -> None:
    task = call.task_tool_call
    run = apb.SubagentRunState(parent_tool_call_id=call_id, title=task.args.description)
    result = task.result
    if result.HasField("success"):
        s = result.success
        if s.HasField("agent_id"):
            run.subagent_id = s.agent_id
        if s.is_background:
            run.status = apb.SUBAGENT_RUN_STATUS_BACKGROUNDED
        else:
            run.status = apb.SUBAGENT_RUN_STATUS_SUCCESS
            if call.HasField("completed_at_ms"):
                run.completed_timestamp_ms = call.completed_at_ms
        if s.HasField("transcript_path"):
            run.transcript_path = s.transcript_path
        if s.agent_id:
            persisted = state.subagent_states[s.agent_id]
            persisted.subagent_type.CopyFrom(task.args.subagent_type)
            if task.args.HasField("model"):
                persisted.model_id = task.args.model
            if call.HasField("started_at_ms"):
                persisted.created_timestamp_ms = persisted.created_timestamp_ms or call.started_at_ms
            if call.HasField("completed_at_ms"):
                persisted.last_used_timestamp_ms = call.completed_at_ms
    elif result.HasField("error"):
        stopped = user_stopped or result.error.error == task_codec.USER_STOPPED  # (the text: older rows)
        run.status = apb.SUBAGENT_RUN_STATUS_ABORTED if stopped else apb.SUBAGENT_RUN_STATUS_ERROR
        run.detail = result.error.error
        if task.args.HasField("agent_id"):
            run.subagent_id = task.args.agent_id
    else:
        return
    state.subagent_runs_by_parent_tool_call_id[call_id].CopyFrom(run)


def _completion(state: apb.ConversationStateStructure, c: dict) -> None:
    call_id = c.get("tool_call_id")
    if not call_id or c.get("kind") != apb.BACKGROUND_TASK_KIND_SUBAGENT:
        return
    run = state.subagent_runs_by_parent_tool_call_id[call_id]
    run.parent_tool_call_id = call_id
    if c.get("subagent_id"):
        run.subagent_id = c["subagent_id"]
    # A completion arrives with a known status (subagents.background_completion refuses others);
    # a row stored before that check with none is not claimed to have succeeded.
    run.status = RUN_STATUS.get(c.get("status", 0), apb.SUBAGENT_RUN_STATUS_ERROR)
    for key in ("title", "detail", "output_path"):
        if c.get(key):
            setattr(run, key, c[key])
    if c.get("completed_at_ms"):
        run.completed_timestamp_ms = c["completed_at_ms"]
    if c.get("reason"):
        run.completion_reason = c["reason"]


def _progress(calls: Sequence[apb.CommunicateUpdateToolCall]) -> apb.CommunicateUpdateTurnState:
    """The current turn's UpdateCurrentStep calls as the turn's progress state."""
    out = apb.CommunicateUpdateTurnState()
    for call in calls:
        args = call.args
        if args.HasField("current_step") and args.current_step:
            out.history.add(step=args.current_step, message_index=call.result.success.message_index)
        if args.HasField("final_summary") and args.final_summary:
            out.final_summary = args.final_summary
        if args.HasField("completed_subtitle") and args.completed_subtitle:
            out.completed_subtitle = args.completed_subtitle
    return out
