"""What a provider call was for (llm_calls.purpose) in `trace` and `usage`: the agent's own calls,
compaction summaries, and the one-shot calls of Cursor's other AI features (docs/features.md)."""

from __future__ import annotations

import json

from byok.cli import main
from byok.cli.common import open_db
from byok.dashboard.queries import usage_rows
from byok.store import Store
from tests.support.cli_store import DAY1


def one_shot(db, request_id: str, purpose: str, *, conversation_id: str | None = None, status: str = "ok") -> None:
    store = Store.open(db)
    try:
        row = store.begin_one_shot_call({
            "request_id": request_id, "conversation_id": conversation_id, "model_call_id": f"{purpose}-1",
            "provider": "deepseek", "provider_kind": "openai_chat", "model_public_id": "abcd1234",
            "model": "deepseek-chat", "started_at": f"{DAY1}T11:00:00.000+00:00", "message_count": 1,
            "tool_count": 0, "purpose": purpose})
        store.finish_llm_call(row, {"status": status, "input_tokens": 300, "output_tokens": 12, "total_ms": 800.0,
                                    "finish_reason": "stop", "error": None if status == "ok" else "HTTP 500"})
    finally:
        store.close()


def test_usage_per_purpose(built, capsys):
    one_shot(built.db, "req-commit-1", "commit_message")
    one_shot(built.db, "req-cmdk-1", "cmd_k", status="error")
    rows = {(r.day, r.model): r for r in usage_rows(open_db(built.db), by="purpose")}
    assert rows[(DAY1, "agent")].calls == 2
    assert (rows[(DAY1, "commit_message")].calls, rows[(DAY1, "commit_message")].input_tokens) == (1, 300)
    assert rows[(DAY1, "cmd_k")].errors == 1
    assert main(["usage", "--db", str(built.db), "--by", "purpose", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {r["purpose"] for r in out["rows"]} >= {"agent", "commit_message", "cmd_k"} and out["by"] == "purpose"
    assert main(["usage", "--db", str(built.db), "--by", "purpose"]) == 0
    assert "commit_message" in capsys.readouterr().out


def test_trace_finds_a_one_shot_call_by_its_request_id(built, capsys):
    one_shot(built.db, "req-commit-2", "commit_message")
    assert main(["trace", "req-commit-2", "--db", str(built.db)]) == 0
    out = capsys.readouterr().out
    assert "one-shot commit_message: no run, no frames" in out and "stop (commit_message)" in out
    assert main(["trace", "req-commit-2", "--db", str(built.db), "--json"]) == 0
    story = json.loads(capsys.readouterr().out)
    assert story["runs"][0]["run"] is None and story["runs"][0]["provider_calls"][0]["purpose"] == "commit_message"


def test_a_branch_name_shows_in_its_conversation(built, capsys):
    one_shot(built.db, "req-branch-1", "branch_name", conversation_id=built.conversation_id)
    assert main(["trace", built.conversation_id, "--db", str(built.db), "--json"]) == 0
    story = json.loads(capsys.readouterr().out)
    assert [r["request_id"] for r in story["runs"]] == [built.request_ok, built.request_failed, "req-branch-1"]
