"""kill -9 at each step of a turn: after a restart, the IDE continues from the last checkpoint it
holds (resume_action; a turn it got no checkpoint of is sent again), and nothing is lost or duplicated:
the provider sees each user message and each tool result once, the history the proxy continues
holds each once, and every turn stored before the crash still has its state snapshot (stored with
its message, even when the proxy died before publishing it)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from byok.cli.client import resume_request, user_turn_request
from byok.cli.executor import LocalExecutor
from tests.e2e.conftest import run, start_proxy
from tests.e2e.harness import run_with_executor
from tests.support.scripted_provider import CHAT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

ASK = "two: read a.txt and b.txt"


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


@pytest.fixture
def provider():
    """A provider per test: each kills the proxy mid-turn and leaves scripts behind."""
    from tests.support.scripted_provider import ScriptedProvider

    with ScriptedProvider() as p:
        yield p


def crash(proxy, request, step: str, workspace, blobs: dict) -> tuple[object, dict]:
    """Run `request` and kill the proxy at `step`; returns the last checkpoint the client holds and
    its blobs (what the IDE continues from).

        appended         the runtime message is stored, its checkpoint not yet published (ACKs held)
        staged           the tool round is staged (the client never runs the tools)
        one_result       one of the round's two results is stored, the other still running
        answer_appended  the final answer is stored, its checkpoint not yet published (ACKs held)
    """

    async def scenario():
        executor = LocalExecutor(workspace)
        answered = 0

        async def on_exec(client, message):
            nonlocal answered
            answered += 1
            if step == "staged" or step == "one_result" and answered > 1:
                return  # never answered: the round stays staged, or waits for its second result
            await executor.on_exec(client, message)

        async with proxy.client(blobs=dict(blobs), on_exec=on_exec, ack_blobs=step != "appended") as client:
            checkpoints = [request.conversation_state]  # the one it came with, until it gets another

            def on_frame(frame):
                if frame.kind == "conversation_checkpoint_update":
                    checkpoints.append(frame.message.conversation_checkpoint_update)
                kind = frame.kind
                if step == "answer_appended" and kind == "interaction_update.text_delta":
                    client.ack_blobs = False  # the answer's checkpoint will wait for these ACKs
                if (kind == "kv_server_message.set_blob_args" and not client.ack_blobs
                        or step == "staged" and checkpoints and checkpoints[-1].pending_tool_calls
                        or step == "one_result" and kind == "interaction_update.tool_call_completed"):
                    if proxy.process is not None:
                        proxy.kill9()

            try:
                await client.run(request, on_frame=on_frame)
            except Exception:
                pass  # the stream dies with the proxy
            finally:
                await executor.aclose()
            return checkpoints[-1], dict(client.blobs)

    return run(scenario())


@pytest.mark.parametrize("step", ["appended", "staged", "one_result", "answer_appended"])
def test_kill9_at_each_step_of_a_turn_loses_nothing_and_duplicates_nothing(home, provider, tmp_path, step):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for name in ("a", "b"):
        (workspace / f"{name}.txt").write_text(f"this is {name}\n")
    reads = CHAT.tool_calls([(f"call_{n}", "Read", json.dumps({"path": str(workspace / f"{n}.txt")})) for n in "ab"])
    proxy, ids = start_proxy(home, provider)
    model = ids["openai_chat"]
    try:
        provider.enqueue("openai_chat", CHAT.text_reply("first"))
        opening = user_turn_request("one", model_id=model)
        first, _ = run_with_executor(proxy, opening, workspace)
        request = user_turn_request(ASK, model_id=model, conversation_id=opening.conversation_id,
                                    state=first.checkpoints()[-1], message_id="m2", workspace=str(workspace))
        if step != "appended":  # (appended: the proxy dies before the provider could answer, whatever it asked)
            provider.enqueue("openai_chat", reads)
        if step == "answer_appended":
            provider.enqueue("openai_chat", CHAT.text_reply("a and b were read"))
        state, blobs = crash(proxy, request, step, workspace, {})
        db = sqlite3.connect(proxy.db)
        stored = [json.loads(p) for (p,) in db.execute(
            "SELECT payload FROM messages WHERE conversation_id = ? ORDER BY id", [request.conversation_id])]
        rounds = [r for (r,) in db.execute("SELECT status FROM tool_rounds WHERE conversation_id = ?",
                                           [request.conversation_id])]
        crashed_at = {  # what the store held when the proxy died: the step really was reached
            "appended": sum(1 for p in stored if p.get("turn")) == 2 and stored[-1]["kind"] == "runtime",
            "staged": stored[-1]["kind"] == "runtime" and rounds == ["staged"],
            "one_result": [p["kind"] for p in stored[-2:]] == ["assistant", "tool"],
            "answer_appended": stored[-1]["kind"] == "assistant" and stored[-1]["text"] == "a and b were read",
        }
        assert crashed_at[step], [p["kind"] for p in stored]
        proxy.start()

        if state is not request.conversation_state:  # the IDE resumes from the last checkpoint it got
            again = resume_request(request, state)
        else:  # it got none of this turn: the message is sent again
            again = user_turn_request(ASK, model_id=model, conversation_id=request.conversation_id, state=state,
                                      message_id="m2", workspace=str(workspace))
            provider.enqueue("openai_chat", reads)
        provider.enqueue("openai_chat", CHAT.text_reply("a and b were read"))
        result, _ = run_with_executor(proxy, again, workspace, blobs=blobs)
        assert result.end_error is None, result.end_error
        assert result.text().endswith("a and b were read")

        sent = provider.requests[-1].json["messages"]
        asks = [m for m in sent if m["role"] == "user" and ASK in json.dumps(m)]
        results = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
        assert len(asks) == 1 and sorted(results) == ["call_a", "call_b"]
        assert any("one" in json.dumps(m) for m in sent if m["role"] == "user") and sent[2]["content"] == "first"

        db = sqlite3.connect(proxy.db)
        head = [json.loads(p) for (p,) in db.execute(
            "WITH RECURSIVE chain(id, parent_id, message_id) AS ("
            " SELECT id, parent_id, message_id FROM revisions"
            "  WHERE id = (SELECT head_revision_id FROM conversations WHERE id = ?)"
            " UNION ALL SELECT r.id, r.parent_id, r.message_id FROM revisions r JOIN chain c ON r.id = c.parent_id)"
            " SELECT m.payload FROM chain JOIN messages m ON m.id = chain.message_id", [request.conversation_id])]
        assert sum(1 for p in head if p["kind"] == "runtime" and p.get("turn")) == 2
        assert sorted(p["call_id"] for p in head if p["kind"] == "tool") == ["call_a", "call_b"]
        for (payload,) in db.execute("SELECT payload FROM messages WHERE conversation_id = ?", [request.conversation_id]):
            p = json.loads(payload)
            if p["kind"] == "runtime" and p.get("turn"):  # crashed branches too: no snapshot lost
                snapshot = bytes.fromhex(p["blob_refs"][1])
                assert db.execute("SELECT count(*) FROM blobs WHERE id = ?", [snapshot]).fetchone()[0] == 1
    finally:
        proxy.stop()

