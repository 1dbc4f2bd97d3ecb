"""The proxy on PostgreSQL (`byok_db=postgresql://...`): a real mitmdump against a real server.

The store suite already runs on both backends (tests/unit/store); these check that the engine's
writes (claims, appends, tool rounds, frames, provider calls) land there and that the lifecycle
guarantees still hold: kill -9 loses nothing, a staged round resumes, a newer run fences the older.
"""

from __future__ import annotations

import json

import pytest

from byok.wire import connect
from byok.cli.client import user_turn_request
from tests.e2e.conftest import run, start_proxy
from tests.e2e.harness import newer_turn_while_streaming, run_with_executor
from tests.e2e.test_lifecycle import messages_of, turn
from tests.support.postgres import sql
from tests.support.scripted_provider import CHAT, Ev, ScriptedProvider, Sse

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture
def provider():
    with ScriptedProvider() as p:
        yield p


@pytest.fixture
def db_url(pg_server) -> str:
    return pg_server.create_database()


def test_turns_survive_kill9_and_continue_on_postgresql(tmp_path, provider, db_url):
    proxy, ids = start_proxy(tmp_path / "home", provider, byok_db=db_url)
    model = ids["openai_chat"]
    provider.enqueue("openai_chat", CHAT.text_reply("first"), CHAT.text_reply("second"))
    try:
        assert "db=postgresql://byok@/" in proxy.log()
        first = turn(proxy, model, "one")
        assert first.result.end_error is None
        proxy.kill9()
        proxy.start()
        second = turn(proxy, model, "two", after=first)
        assert second.result.end_error is None and not second.gets  # the checkpoint is known: no import
        m1, m2 = messages_of(provider.requests[-2]), messages_of(provider.requests[-1])
        assert m2[: len(m1)] == m1 and len(m2) == len(m1) + 2
        cid = first.request.conversation_id
        counts = sql(db_url, "SELECT role, count(*) FROM messages WHERE conversation_id = %s GROUP BY role", [cid])
        assert dict(counts) == {"user": 2, "assistant": 2}
        statuses = sql(db_url, "SELECT status FROM runs WHERE conversation_id = %s", [cid])
        assert [s for (s,) in statuses] == ["completed", "completed"]
        calls = sql(db_url, "SELECT status, input_tokens FROM llm_calls WHERE conversation_id = %s", [cid])
        assert len(calls) == 2 and all(status == "ok" and tokens == 100 for status, tokens in calls)
        proxy.stop()  # flushes the recorder
        frames = sql(db_url, "SELECT direction, count(*) FROM frames WHERE conversation_id = %s GROUP BY direction",
                     [cid])
        assert dict(frames).keys() == {"up", "down"}
        assert not sql(db_url, "SELECT 1 FROM frames WHERE conversation_id IS NULL")
    finally:
        proxy.stop()


def test_a_tool_round_commits_its_pairs_on_postgresql(tmp_path, provider, db_url):
    proxy, ids = start_proxy(tmp_path / "home", provider, byok_db=db_url)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for name in ("a", "b"):
        (workspace / f"{name}.txt").write_text(f"from {name}\n")
    provider.enqueue("openai_chat", CHAT.tool_calls([
        ("call_a", "Read", json.dumps({"path": str(workspace / "a.txt")})),
        ("call_b", "Read", json.dumps({"path": str(workspace / "b.txt")})),
    ]), CHAT.text_reply("both read"))
    try:
        request = user_turn_request("read both", model_id=ids["openai_chat"], workspace=str(workspace))
        result, _ = run_with_executor(proxy, request, workspace)
        assert result.end_error is None, result.end_error
        assert result.text() == "both read"
        tool_results = [m for m in messages_of(provider.requests[-1]) if m["role"] == "tool"]
        assert len(tool_results) == 2
        assert "from a" in tool_results[0]["content"] and "from b" in tool_results[1]["content"]
        cid = request.conversation_id
        seqs = sql(db_url, "SELECT c.completion_seq FROM tool_round_calls c JOIN tool_rounds r ON r.id = c.round_id"
                           " WHERE r.conversation_id = %s ORDER BY 1", [cid])
        assert [s for (s,) in seqs] == [0, 1]
        assert sql(db_url, "SELECT status FROM tool_rounds WHERE conversation_id = %s", [cid]) == [("settled",)]
        roles = sql(db_url, "SELECT role FROM messages WHERE conversation_id = %s ORDER BY id", [cid])
        assert [r for (r,) in roles] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    finally:
        proxy.stop()


def test_a_newer_run_cancels_the_older_one_on_postgresql(tmp_path, provider, db_url):
    proxy, ids = start_proxy(tmp_path / "home", provider, byok_db=db_url)
    model = ids["openai_chat"]
    slow = Sse([Ev(item, delay_s=0.3) for item in CHAT.text_reply("slow answer that gets interrupted", pieces=8).items])
    provider.enqueue("openai_chat", slow, CHAT.text_reply("new answer"))
    try:
        async def scenario():
            async with proxy.client() as client:
                return await newer_turn_while_streaming(client, client, model)

        result_a, result_b = run(scenario())
        assert result_a.end_error.code is connect.Code.CANCELED
        assert result_b.end_error is None and result_b.text() == "new answer"
        statuses = dict(sql(db_url, "SELECT request_id, status FROM runs"))
        assert statuses[result_a.request_id] == "canceled" and statuses[result_b.request_id] == "completed"
        texts = [json.loads(p)["text"] for (p,) in sql(db_url, "SELECT payload FROM messages WHERE role = 'assistant'")]
        assert texts == ["new answer"]
    finally:
        proxy.stop()
