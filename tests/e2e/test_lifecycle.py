"""Issue 2/5 (and the spine's shutdown): nothing lost across kill -9 and a lost DB, interrupts fence
off older runs, edits branch, bad blobs end the run; proxy shutdown ends open streams cleanly."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import time

import pytest

from byok.agent import connect
from byok.cli.client import user_turn_request
from byok.proto import agent_pb2 as apb
from tests.e2e.conftest import run, start_proxy
from tests.support.scripted_provider import CHAT, Ev, Hang, Sse

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


@pytest.fixture
def provider():
    """A provider per test: these tests restart or kill the proxy mid-stream, and a script one test
    leaves unconsumed must not answer the next test's call."""
    from tests.support.scripted_provider import ScriptedProvider

    with ScriptedProvider() as p:
        yield p


def messages_of(provider_request) -> list:
    return provider_request.json["messages"]


def test_shutdown_ends_open_streams_with_unavailable(home, provider):
    proxy, ids = start_proxy(home, provider)
    provider.enqueue("openai_chat", Hang(60))

    async def scenario():
        async with proxy.client() as client:
            async def on_frame(frame):
                if frame.kind == "conversation_checkpoint_update":
                    proxy.process.send_signal(signal.SIGINT)
            t0 = time.monotonic()
            result = await client.run(user_turn_request("wait", model_id=ids["openai_chat"]), on_frame=on_frame)
            return result, time.monotonic() - t0

    try:
        result, took = run(scenario())
        assert result.end_error.code is connect.Code.UNAVAILABLE
        assert "shutting down" in result.end_error.message
        assert took < 12
        assert proxy.process.wait(15) == 0
    finally:
        proxy.stop()


def test_kill9_after_completed_turn_then_continue(home, provider):
    proxy, ids = start_proxy(home, provider)
    model = ids["openai_chat"]
    provider.enqueue("openai_chat", CHAT.text_reply("first"), CHAT.text_reply("second"))
    try:
        async def turn1():
            async with proxy.client() as client:
                req = user_turn_request("one", model_id=model)
                return req, await client.run(req), dict(client.blobs)

        req1, first, blobs = run(turn1())
        assert first.end_error is None
        proxy.kill9()
        proxy.start()

        async def turn2():
            async with proxy.client(blobs=blobs) as client:
                req = user_turn_request("two", model_id=model, conversation_id=req1.conversation_id,
                                        state=first.checkpoints()[-1])
                return await client.run(req), client.get_log

        second, gets = run(turn2())
        assert second.end_error is None and not gets  # known checkpoint: nothing to import
        m1, m2 = messages_of(provider.requests[-2]), messages_of(provider.requests[-1])
        assert m2[: len(m1)] == m1 and len(m2) == len(m1) + 2
        db = sqlite3.connect(proxy.db)
        counts = db.execute("SELECT role, count(*) FROM messages WHERE conversation_id = ? GROUP BY role",
                            [req1.conversation_id]).fetchall()
        assert dict(counts) == {"user": 2, "assistant": 2}
    finally:
        proxy.stop()


def test_lost_database_continues_from_the_client_checkpoint(home, provider):
    proxy, ids = start_proxy(home, provider)
    model = ids["openai_chat"]
    provider.enqueue("openai_chat", CHAT.text_reply("remembered"), CHAT.text_reply("still here"))
    try:
        async def turn1():
            async with proxy.client() as client:
                req = user_turn_request("remember me", model_id=model)
                return req, await client.run(req), dict(client.blobs)

        req1, first, blobs = run(turn1())
        proxy.stop()
        for suffix in ("", "-wal", "-shm"):
            (proxy.db.parent / (proxy.db.name + suffix)).unlink(missing_ok=True)
        proxy.start()

        async def turn2():
            async with proxy.client(blobs=blobs) as client:
                req = user_turn_request("and now?", model_id=model, conversation_id=req1.conversation_id,
                                        state=first.checkpoints()[-1])
                return await client.run(req), list(client.get_log)

        second, gets = run(turn2())
        assert second.end_error is None, second.end_error
        state = first.checkpoints()[-1]
        assert set(state.root_prompt_messages_json) <= set(gets)  # roots fetched by KV GET
        m1, m2 = messages_of(provider.requests[-2]), messages_of(provider.requests[-1])
        assert m2[: len(m1)] == m1 and m2[len(m1)]["content"] == "remembered"
        cp = second.checkpoints()[-1]
        assert list(cp.root_prompt_messages_json[: len(state.root_prompt_messages_json)]) == list(state.root_prompt_messages_json)
        assert cp.turns[0] == state.turns[0] and len(cp.turns) == 2
    finally:
        proxy.stop()


def test_kv_get_hash_mismatch_is_invalid_argument_and_stores_nothing(home, provider):
    proxy, ids = start_proxy(home, provider)
    model = ids["openai_chat"]
    provider.enqueue("openai_chat", CHAT.text_reply("once"))
    try:
        async def turn1():
            async with proxy.client() as client:
                req = user_turn_request("x", model_id=model)
                return req, await client.run(req), dict(client.blobs)

        req1, first, blobs = run(turn1())
        proxy.stop()
        proxy.db.unlink()
        proxy.start()
        calls_before = len(provider.requests)

        async def turn2():
            async with proxy.client(blobs=blobs, corrupt_gets=True) as client:
                req = user_turn_request("y", model_id=model, conversation_id=req1.conversation_id,
                                        state=first.checkpoints()[-1])
                return await client.run(req)

        second = run(turn2())
        assert second.end_error.code is connect.Code.INVALID_ARGUMENT
        assert "Blob hash mismatch" in second.end_error.message
        assert len(provider.requests) == calls_before
        db = sqlite3.connect(proxy.db)
        assert db.execute("SELECT count(*) FROM messages").fetchone()[0] == 0
        assert db.execute("SELECT count(*) FROM blobs").fetchone()[0] == 0
    finally:
        proxy.stop()


def test_newer_run_cancels_the_older_one(home, provider):
    proxy, ids = start_proxy(home, provider)
    model = ids["openai_chat"]
    slow = Sse([Ev(item, delay_s=0.3) for item in CHAT.text_reply("slow answer that gets interrupted", pieces=8).items])
    provider.enqueue("openai_chat", slow, CHAT.text_reply("new answer"))
    try:
        async def scenario():
            async with proxy.client() as client:
                req_a = user_turn_request("first", model_id=model)
                started = asyncio.Event()

                async def on_frame(frame):
                    if frame.kind == "interaction_update.text_delta":
                        started.set()

                task_a = asyncio.ensure_future(client.run(req_a, on_frame=on_frame))
                await started.wait()
                req_b = user_turn_request("second", model_id=model, conversation_id=req_a.conversation_id)
                result_b = await client.run(req_b)
                return await task_a, result_b

        result_a, result_b = run(scenario())
        assert result_a.end_error.code is connect.Code.CANCELED
        assert "interaction_update.turn_ended" not in result_a.kinds()
        assert result_b.end_error is None and result_b.text() == "new answer"
        assert provider.wait_closed(len(provider.requests) - 1).closed_early  # A's provider stream was cut
        db = sqlite3.connect(proxy.db)
        statuses = dict(db.execute("SELECT request_id, status FROM runs").fetchall())
        assert statuses[result_a.request_id] == "canceled" and statuses[result_b.request_id] == "completed"
        texts = [json.loads(p)["text"] for (p,) in db.execute(
            "SELECT payload FROM messages WHERE role = 'assistant'").fetchall()]
        assert texts == ["new answer"]  # nothing of A's interrupted call was stored
    finally:
        proxy.stop()


def test_cancel_action_ends_the_run_canceled(home, provider):
    proxy, ids = start_proxy(home, provider)
    provider.enqueue("openai_chat", Hang(30))
    try:
        async def scenario():
            async with proxy.client() as client:
                request_id = "req-cancel"

                async def on_frame(frame):
                    if frame.kind == "conversation_checkpoint_update":
                        client.append_soon(request_id, apb.AgentClientMessage(conversation_action=apb.ConversationAction(
                            cancel_action=apb.CancelAction(reason="user pressed stop"))))

                return await client.run(user_turn_request("stop me", model_id=ids["openai_chat"]),
                                        request_id=request_id, on_frame=on_frame)

        result = run(scenario())
        assert result.end_error.code is connect.Code.CANCELED
        assert "interaction_update.turn_ended" not in result.kinds()
        assert result.kinds().count("conversation_checkpoint_update") == 1
    finally:
        proxy.stop()


def test_editing_an_earlier_message_branches_from_its_anchor(home, provider):
    proxy, ids = start_proxy(home, provider)
    model = ids["openai_chat"]
    provider.enqueue("openai_chat", CHAT.text_reply("a1"), CHAT.text_reply("a2"), CHAT.text_reply("a1 edited"))
    try:
        async def scenario():
            async with proxy.client() as client:
                req1 = user_turn_request("question one", model_id=model, message_id="m1")
                r1 = await client.run(req1)
                req2 = user_turn_request("question two", model_id=model, message_id="m2",
                                         conversation_id=req1.conversation_id, state=r1.checkpoints()[-1])
                r2 = await client.run(req2)
                edit = user_turn_request("question one, edited", model_id=model, message_id="m1",
                                         conversation_id=req1.conversation_id, state=r2.checkpoints()[-1])
                return await client.run(edit)

        result = run(scenario())
        assert result.end_error is None
        body = json.dumps(messages_of(provider.requests[-1]))
        assert "question one, edited" in body
        assert "question two" not in body and "a1" not in body.replace("a1 edited", "")
        cp = result.checkpoints()[-1]
        assert len(cp.turns) == 1
    finally:
        proxy.stop()
