"""`cursor-byok trace`: every id kind leads to its run's story; unknown ids say so."""

from __future__ import annotations

import pytest

from byok.cli import main
from byok.cli.common import open_db
from byok.dashboard.queries import find


@pytest.mark.parametrize("attr, kind, runs", [
    ("request_ok", "request", 1),
    ("conversation_id", "conversation", 2),
    ("model_call_failed", "model_call", 1),
    ("tool_call_id", "tool_call", 1),
    ("tool_round_id", "tool_round", 1),
])
def test_find_each_id_kind(built, attr, kind, runs):
    conn = open_db(built.db)
    found = find(conn, getattr(built, attr))
    assert found is not None and found.kind == kind and len(found.request_ids) == runs
    assert found.conversation_id == built.conversation_id


def test_find_by_unique_prefix_and_inside_messages(built):
    conn = open_db(built.db)
    found = find(conn, "req-unit-fail")
    assert found.kind == "request" and found.request_ids == [built.request_failed]
    assert find(conn, "req-unit") is None  # two requests start with it: ambiguous
    found = find(conn, "w1")  # a runtime wire id, only inside a stored message payload
    assert found.kind == "message" and found.request_ids == [built.request_ok]


def test_trace_tool_call_prints_run_calls_tools_and_frames(built, capsys):
    assert main(["trace", built.tool_call_id, "--db", str(built.db), "--frames", "all"]) == 0
    out = capsys.readouterr().out
    assert f"tool call {built.tool_call_id}" in out
    assert "completed" in out and built.request_ok in out
    # provider calls with timings and tokens, tool call with arguments and result, every frame
    assert built.model_call_tool in out and "tool_use" in out and "120" in out and "300" in out
    assert "Read" in out and "project/a.py" in out and "print('hi')" in out
    assert "run_request" in out and "'Reading'" in out and "interaction_update.thinking_completed" in out
    assert "kv 0 SET" in out and "ok {}" in out


def test_trace_model_call_of_a_failed_run_shows_the_errors(built, capsys):
    assert main(["trace", built.model_call_failed, "--db", str(built.db)]) == 0
    out = capsys.readouterr().out
    assert "failed" in out and "unavailable: provider error: HTTP 529" in out
    assert "HTTP 529 from provider: overloaded" in out
    assert "end_stream" in out and "provider error" in out


def test_trace_conversation_summarises_frames_per_run(built, capsys):
    assert main(["trace", built.conversation_id, "--db", str(built.db)]) == 0
    out = capsys.readouterr().out
    assert out.count("request req-unit-") == 2
    assert "--frames all lists them" in out
    assert main(["trace", built.conversation_id, "--db", str(built.db), "--frames", "none"]) == 0
    assert "frames (" not in capsys.readouterr().out


def test_unknown_id_and_missing_db(built, tmp_path, capsys):
    assert main(["trace", "nope-nope", "--db", str(built.db)]) == 1
    assert "is not a request, conversation" in capsys.readouterr().out
    assert main(["trace", "x", "--db", str(tmp_path / "missing.db")]) == 2
    assert "no database" in capsys.readouterr().err


def test_runs_without_a_run_row_are_found_through_their_frames(built):
    """Runs passed upstream (or observed) are recorded as frames only."""
    from byok.store import Store

    store = Store.open(built.db)
    store.record_frames([{"request_id": "req-upstream-1", "conversation_id": "conv-upstream", "seq": 0,
                          "direction": "down", "ts_ms": 5, "kind": "end_stream", "flags": 2, "data": b"{}"}])
    store.close()
    conn = open_db(built.db)
    by_request = find(conn, "req-upstream-1")
    assert (by_request.kind, by_request.conversation_id) == ("request", "conv-upstream")
    by_conversation = find(conn, "conv-upstream")
    assert by_conversation.kind == "conversation" and by_conversation.request_ids == ["req-upstream-1"]
    from byok.cli import capture as cap

    assert cap.resolve_runs(conn, "conv-upstream") == (["req-upstream-1"], "conv-upstream")
    exported = cap.export(conn, "req-upstream-1")
    assert exported.of("run")[0]["status"] is None and exported.frames()[0]["kind"] == "end_stream"


def test_frames_default_to_counts_per_kind_as_help_says(built, capsys):
    """Issue 24.4.7: `trace <request id>` printed every frame while --help said counts per kind."""
    from byok.cli import build_parser

    usage = build_parser()._subparsers._group_actions[0].choices["trace"].format_help()
    assert "counts per kind (default)" in " ".join(usage.split())
    assert main(["trace", built.request_ok, "--db", str(built.db)]) == 0
    summary = capsys.readouterr().out
    assert main(["trace", built.request_ok, "--db", str(built.db), "--frames", "all"]) == 0
    every = capsys.readouterr().out
    assert "'Reading'" not in summary and "'Reading'" in every  # a frame's content only in the full list
    assert "interaction_update.thinking_completed" in summary  # its kind, counted
