"""The subagent fields of a checkpoint are folded from history (Task results, background completions,
a child's UpdateCurrentStep calls), and the Task codec's strings and types."""

from __future__ import annotations

import base64
from dataclasses import dataclass

import pytest

from byok.agent import subagents
from byok.agent.cursor import subagent_state
from byok.agent.cursor.tools import task
from byok.wire.errors import ProtocolError
from byok.proto import agent_pb2 as apb


@dataclass
class Msg:
    payload: dict


def tool(name: str, call_id: str, call: apb.ToolCall, is_error: bool = False) -> Msg:
    return Msg({"kind": "tool", "name": name, "call_id": call_id, "is_error": is_error,
                "tool_call": base64.b64encode(call.SerializeToString()).decode()})


def task_call(description: str, result: apb.TaskResult) -> apb.ToolCall:
    call = apb.ToolCall(started_at_ms=1000, completed_at_ms=2000)
    call.task_tool_call.args.CopyFrom(apb.TaskArgs(description=description, prompt="p",
                                                   subagent_type=task.subagent_type("explore"), model="m1"))
    call.task_tool_call.result.CopyFrom(result)
    return call


def test_parent_fields_follow_task_results_and_completions():
    state = apb.ConversationStateStructure()
    state.subagent_runs_by_parent_tool_call_id["from-cursor"].status = apb.SUBAGENT_RUN_STATUS_RUNNING
    messages = [
        tool("Task", "c1", task_call("Fg", apb.TaskResult(success=apb.TaskSuccess(agent_id="a1")))),
        tool("Task", "c2", task_call("Bg", apb.TaskResult(success=apb.TaskSuccess(agent_id="a2", is_background=True)))),
        tool("Task", "c3", task_call("Bad", apb.TaskResult(error=apb.TaskError(error="boom")))),
        Msg({"kind": "runtime", subagent_state.COMPLETION_KEY: {
            "kind": apb.BACKGROUND_TASK_KIND_SUBAGENT, "status": apb.BACKGROUND_TASK_STATUS_SUCCESS,
            "reason": apb.BACKGROUND_TASK_COMPLETION_REASON_TASK_FINISHED, "subagent_id": "a2",
            "tool_call_id": "c2", "detail": "done", "completed_at_ms": 3000}}),
    ]
    subagent_state.fold(state, messages, None)
    runs = state.subagent_runs_by_parent_tool_call_id
    assert runs["c1"] == apb.SubagentRunState(parent_tool_call_id="c1", subagent_id="a1", title="Fg",
                                              status=apb.SUBAGENT_RUN_STATUS_SUCCESS, completed_timestamp_ms=2000)
    assert (runs["c2"].status, runs["c2"].detail, runs["c2"].completed_timestamp_ms) == (
        apb.SUBAGENT_RUN_STATUS_SUCCESS, "done", 3000)
    assert (runs["c3"].status, runs["c3"].detail) == (apb.SUBAGENT_RUN_STATUS_ERROR, "boom")
    assert runs["from-cursor"].status == apb.SUBAGENT_RUN_STATUS_RUNNING  # the client's own entry is kept
    assert state.subagent_states["a1"].model_id == "m1" and state.subagent_states["a1"].subagent_type.HasField("explore")
    assert "c1" not in state.communicate_update_states_by_parent_tool_call_id


def test_child_progress_is_filed_under_the_parent_call():
    def step(current=None, final=None, subtitle=None, index=1) -> Msg:
        call = apb.ToolCall()
        args = call.communicate_update_tool_call.args
        for name, value in (("current_step", current), ("final_summary", final), ("completed_subtitle", subtitle)):
            if value is not None:
                setattr(args, name, value)
        call.communicate_update_tool_call.result.success.message_index = index
        return tool("UpdateCurrentStep", f"s{index}", call)

    earlier = [Msg({"kind": "runtime", "turn": {"request_id": "r0"}}), step("old step", index=1)]
    now = [Msg({"kind": "runtime", "turn": {"request_id": "r1"}}), step("Reading", index=1), step("Writing", index=3),
           step(final="All done", subtitle="3 files", index=5)]
    state = apb.ConversationStateStructure()
    subagent_state.fold(state, earlier + now, "parent-call")
    progress = state.communicate_update_states_by_parent_tool_call_id["parent-call"]
    assert [(h.step, h.message_index) for h in progress.history] == [("Reading", 1), ("Writing", 3)]
    assert (progress.final_summary, progress.completed_subtitle) == ("All done", "3 files")


def test_task_types_and_strings():
    assert task.subagent_type("generalPurpose").HasField("unspecified")
    assert task.subagent_type("cursor-guide").HasField("cursor_guide")
    assert task.subagent_type("My Reviewer").custom.name == "My Reviewer"  # spelling kept
    for name in ("generalPurpose", "explore", "shell", "cursor-guide", "My Reviewer"):
        assert task.type_name(task.subagent_type(name)) == name
    card = apb.TaskArgs(description="Look", prompt="p")
    assert task.success_outcome(card, agent_id="a", final_message="", background=True).content == (
        "Subagent name: Look\nSubagent ID: a\n\nIt works in the background; you will be told when it finishes.")
    resumed = apb.TaskArgs(description="Look", prompt="p", resume="a")
    assert task.success_outcome(resumed, agent_id="a", final_message="more", background=False).content == "more"
    failed = task.result_outcome(apb.SubagentResult(error=apb.SubagentError(agent_id="a", error="x")), card,
                                 background=False, duration_ms=5)
    assert failed.is_error and failed.content == "Subagent name: Look\nSubagent ID: a\n\nThe subagent failed: x"


def test_a_completion_without_a_known_status_is_no_success():
    """A stored completion with no known status folds as ERROR; a new one is refused at the door."""
    state = apb.ConversationStateStructure()
    for call_id, status in (("c1", apb.BACKGROUND_TASK_STATUS_UNSPECIFIED), ("c2", 99)):
        subagent_state.fold(state, [Msg({"kind": "runtime", subagent_state.COMPLETION_KEY: {
            "kind": apb.BACKGROUND_TASK_KIND_SUBAGENT, "status": status, "subagent_id": "a", "tool_call_id": call_id}})],
            None)
        assert state.subagent_runs_by_parent_tool_call_id[call_id].status == apb.SUBAGENT_RUN_STATUS_ERROR
    for status in (apb.BACKGROUND_TASK_STATUS_UNSPECIFIED, 99):
        c = apb.BackgroundTaskCompletion(kind=apb.BACKGROUND_TASK_KIND_SUBAGENT, subagent_id="a", tool_call_id="c",
                                         status=status)
        with pytest.raises(ProtocolError, match="background completion of subagent 'a' has status"):
            subagents._completion_key(c)
    ok = apb.BackgroundTaskCompletion(kind=apb.BACKGROUND_TASK_KIND_SUBAGENT, subagent_id="a",
                                      status=apb.BACKGROUND_TASK_STATUS_ABORTED)
    assert subagents._completion_key(ok) == "subagent-completed:a"


def test_a_subagent_success_without_agent_id_is_a_protocol_error():
    card = apb.TaskArgs(description="Look", prompt="p")
    with pytest.raises(ProtocolError, match="SubagentSuccess carries no agent_id"):
        task.result_outcome(apb.SubagentResult(success=apb.SubagentSuccess(final_message="done")), card,
                            background=False, duration_ms=5)


def test_a_stopped_subagent_folds_as_aborted_from_its_mark_or_the_older_text():
    from byok.agent import history
    from byok.providers.transcript import ToolResultItem

    card = apb.TaskArgs(description="Stop me", prompt="p")
    stopped = task.stopped_outcome(card, agent_id="a")
    assert stopped.is_error and stopped.result.error.error == task.USER_STOPPED
    call = task_call("Stop me", stopped.result)
    call.task_tool_call.result.error.error = "worded some other way"  # the mark decides, not the text
    payload = history.tool_payload(ToolResultItem("c1", "Task", stopped.content, True), tool_round_id="r",
                                   call_index=0, tool_call_pb=call.SerializeToString(), marks=stopped.marks)
    older = tool("Task", "c2", task_call("Old", apb.TaskResult(error=apb.TaskError(error=task.USER_STOPPED))))
    failed = tool("Task", "c3", task_call("Bad", apb.TaskResult(error=apb.TaskError(error="boom"))))
    state = apb.ConversationStateStructure()
    subagent_state.fold(state, [Msg(payload), older, failed], None)
    runs = state.subagent_runs_by_parent_tool_call_id
    assert [runs[c].status for c in ("c1", "c2", "c3")] == [
        apb.SUBAGENT_RUN_STATUS_ABORTED, apb.SUBAGENT_RUN_STATUS_ABORTED, apb.SUBAGENT_RUN_STATUS_ERROR]
