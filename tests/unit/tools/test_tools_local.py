"""TodoWrite and UpdateCurrentStep: typed success built locally, no exec or query."""

from __future__ import annotations

import json

import pytest

from byok.agent.cursor.tools import local
from byok.agent.cursor.tools.base import RunToolContext, ToolArgsError
from byok.proto import agent_pb2 as apb
from tests.support.fake_call_io import FakeCallIO, run_tool

P, IP, C, X = apb.TODO_STATUS_PENDING, apb.TODO_STATUS_IN_PROGRESS, apb.TODO_STATUS_COMPLETED, apb.TODO_STATUS_CANCELLED


def ctx(**extra) -> RunToolContext:
    return RunToolContext(conversation_id="c", extra=extra)


def test_todo_write_replace():
    io = FakeCallIO(context=ctx(now_ms=1000))
    card, out = run_tool(local.TODO_WRITE, {"merge": False, "todos": [
        {"id": "1", "content": "Add retry", "status": "in_progress"},
        {"id": "2", "content": "Test it", "status": "pending"}]}, io)
    assert not io.sent
    assert card == apb.UpdateTodosArgs(merge=False, todos=[apb.TodoItem(id="1", content="Add retry", status=IP),
                                                           apb.TodoItem(id="2", content="Test it", status=P)])
    s = out.result.success
    assert (s.total_count, s.was_merge) == (2, False)
    assert s.todos[0] == apb.TodoItem(id="1", content="Add retry", status=IP, created_at=1000, updated_at=1000)
    assert out.content == ('{"merge":false,"todos":[{"content":"Add retry","id":"1","status":"in_progress"},'
                           '{"content":"Test it","id":"2","status":"pending"}]}')
    assert not out.is_error


def test_todo_write_empty_list_content():
    _, out = run_tool(local.TODO_WRITE, {"merge": False, "todos": []}, FakeCallIO(context=ctx()))
    assert out.content == '{"merge":false,"todos":[]}'


def test_todo_write_merge_updates_by_id_and_appends():
    previous = [apb.TodoItem(id="1", content="A", status=IP, created_at=5), apb.TodoItem(id="2", content="B", status=P)]
    io = FakeCallIO(context=ctx(todos=previous, now_ms=9))
    _, out = run_tool(local.TODO_WRITE, {"merge": True, "todos": [
        {"id": "1", "status": "completed"}, {"id": "3", "content": "C"}, {"id": "2", "content": "B2", "status": "cancelled"}]}, io)
    todos = out.result.success.todos
    assert [(t.id, t.content, t.status) for t in todos] == [("1", "A", C), ("2", "B2", X), ("3", "C", P)]
    assert (todos[0].created_at, todos[0].updated_at, todos[2].created_at) == (5, 9, 9)
    assert previous[0].status == IP  # the dispatcher's list is not mutated
    assert out.result.success.was_merge
    assert local.todos_from_content(out.content) == [apb.TodoItem(id="1", content="A", status=C),
                                                     apb.TodoItem(id="2", content="B2", status=X),
                                                     apb.TodoItem(id="3", content="C", status=P)]


@pytest.mark.parametrize("raw,extra,message", [
    ({"todos": []}, {}, "missing merge"),
    ({"merge": False}, {}, "missing todos"),
    ({"merge": False, "todos": [{"id": "1", "content": "x"}]}, {}, "missing todos\\[0\\].status"),
    ({"merge": False, "todos": [{"id": "1", "content": "x", "status": "done"}]}, {}, "invalid todos\\[0\\].status"),
    ({"merge": True, "todos": [{"id": "9", "status": "pending"}]}, {"todos": [apb.TodoItem(id="1")]},
     "missing todos\\[0\\].content"),
    ({"merge": False, "todos": [{"id": "1", "content": "a", "status": "pending"}] * 2}, {}, "more than once"),
    ({"merge": False, "todos": ["x"]}, {}, "expected an object"),
])
def test_todo_write_args_errors(raw, extra, message):
    with pytest.raises(ToolArgsError, match=message):
        local.TODO_WRITE.parse(raw, "c", ctx(**extra))


def test_todos_from_content_is_strict():
    with pytest.raises(ValueError):
        local.todos_from_content('{"current_step":"x"}')
    with pytest.raises(ValueError):
        local.todos_from_content('{"todos":[{"id":"1","content":"a","status":"weird"}]}')


def test_update_current_step():
    io = FakeCallIO(context=ctx(message_index=3))
    card, out = run_tool(local.UPDATE_CURRENT_STEP, {"current_step": "Tracing the loader"}, io)
    assert local.UPDATE_CURRENT_STEP.variant == "communicate_update_tool_call"
    assert card == apb.CommunicateUpdateArgs(current_step="Tracing the loader")
    assert out.result == apb.CommunicateUpdateResult(success=apb.CommunicateUpdateSuccess(
        current_step="Tracing the loader", message_index=3))
    assert json.loads(out.content) == {"current_step": "Tracing the loader", "message_index": 3}
    assert not io.sent


def test_update_current_step_empty_arguments_and_final_summary():
    _, out = run_tool(local.UPDATE_CURRENT_STEP, "", FakeCallIO(context=ctx(message_index=6)))
    assert out.result.success == apb.CommunicateUpdateSuccess(message_index=6)
    _, out = run_tool(local.UPDATE_CURRENT_STEP, {"final_summary": "Done", "completed_subtitle": "3 files"},
                      FakeCallIO(context=ctx(message_index=2)))
    assert out.content == '{"completed_subtitle":"3 files","final_summary":"Done","message_index":2}'


def test_update_current_step_needs_message_index():
    with pytest.raises(RuntimeError, match="message_index"):
        run_tool(local.UPDATE_CURRENT_STEP, {}, FakeCallIO(context=ctx()))
