"""The operator's view of a team store: `usage --by user` and `trace --user`, on both backends."""

from __future__ import annotations

import json

from byok.cli import main
from byok.store import NewMessage, Store


def team_store(target: str) -> None:
    store = Store.open(target)
    store.clock_ms = lambda: 1_767_312_000_000  # 2026-01-02
    for rid, cid, user, tokens in (("req-alice-1", "conv-alice", "alice", 100), ("req-alice-2", "conv-alice", "alice", 50),
                                   ("req-bob-1", "conv-bob", "bob", 7), ("req-solo-1", "conv-solo", None, 1)):
        store.claim_run(rid, cid, user_id=user, model_public_id="abcd1234")
        base = store.conversation(cid)["head_revision_id"]
        store.append(cid, base, [NewMessage("user", "runtime", {"kind": "runtime", "text": f"{user} asks"},
                                            request_id=rid)], fence_request_id=rid)
        call = store.begin_llm_call({"request_id": rid, "conversation_id": cid, "call_index": 0, "provider": "p",
                                     "model": "m", "model_public_id": "abcd1234",
                                     "started_at": "2026-01-02T10:00:00Z"})
        store.finish_llm_call(call, {"status": "ok", "input_tokens": tokens, "output_tokens": 1})
        store.finish_run(rid, "completed")
    store.close()


def test_usage_by_user(db_target, capsys):
    team_store(db_target)
    assert main(["usage", "--db", db_target, "--by", "user", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["by"] == "user"
    assert [(r["user"], r["calls"], r["input_tokens"]) for r in doc["rows"]] == [
        ("-", 1, 1), ("alice", 2, 150), ("bob", 1, 7)]
    assert main(["usage", "--db", db_target, "--by", "user"]) == 0
    out = capsys.readouterr().out
    assert "tokens and cost per user and day" in out and "alice" in out and "bob" in out


def test_trace_user_sees_only_their_own(db_target, capsys):
    team_store(db_target)
    assert main(["trace", "conv-alice", "--db", db_target, "--user", "alice", "--json"]) == 0
    story = json.loads(capsys.readouterr().out)
    assert "req-alice-1" in json.dumps(story) and "req-bob-1" not in json.dumps(story)
    for ident in ("conv-alice", "req-alice-1", "conv-solo"):
        assert main(["trace", ident, "--db", db_target, "--user", "bob"]) == 1
        out = capsys.readouterr().out
        assert "of user bob" in out and "alice asks" not in out
    assert main(["trace", "req-bob", "--db", db_target, "--user", "bob", "--json"]) == 0  # a prefix of his own
    assert "req-bob-1" in capsys.readouterr().out
    assert main(["trace", "conv-alice", "--db", db_target]) == 0  # the operator without --user sees all
