"""Issue 2/5 (and the spine's shutdown): nothing lost across kill -9 and a lost DB, interrupts fence
off older runs, edits branch, bad blobs end the run; proxy shutdown ends open streams cleanly."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from dataclasses import dataclass

import pytest

from byok.wire import connect
from byok.cli.client import resume_request, user_turn_request
from byok.proto import agent_pb2 as apb
from tests.e2e.conftest import run, start_proxy
from tests.e2e.harness import newer_turn_while_streaming, run_with_executor, stage_then_leave
from tests.support.scripted_provider import CHAT, Ev, Hang, Sse
from tests.support.waiting import until

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


@dataclass
class Turn:
    request: apb.AgentRunRequest
    result: object
    blobs: dict
    gets: list


def turn(proxy, model: str, text: str, *, after: Turn | None = None, **client_options) -> Turn:
    """One user turn; `after` continues that turn's conversation from its last checkpoint, with the
    client's blob store as it was then (the client survives proxy restarts)."""
    async def scenario():
        blobs = dict(after.blobs) if after else {}
        async with proxy.client(blobs=blobs, **client_options) as client:
            request = user_turn_request(
                text, model_id=model,
                conversation_id=after.request.conversation_id if after else None,
                state=after.result.checkpoints()[-1] if after else None)
            result = await client.run(request)
            return Turn(request, result, dict(client.blobs), list(client.get_log))

    return run(scenario())


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
        first = turn(proxy, model, "one")
        assert first.result.end_error is None
        proxy.kill9()
        proxy.start()
        second = turn(proxy, model, "two", after=first)
        assert second.result.end_error is None and not second.gets  # known checkpoint: nothing to import
        m1, m2 = messages_of(provider.requests[-2]), messages_of(provider.requests[-1])
        assert m2[: len(m1)] == m1 and len(m2) == len(m1) + 2
        db = sqlite3.connect(proxy.db)
        counts = db.execute("SELECT role, count(*) FROM messages WHERE conversation_id = ? GROUP BY role",
                            [first.request.conversation_id]).fetchall()
        assert dict(counts) == {"user": 2, "assistant": 2}
    finally:
        proxy.stop()


def test_lost_database_continues_from_the_client_checkpoint(home, provider):
    proxy, ids = start_proxy(home, provider)
    model = ids["openai_chat"]
    provider.enqueue("openai_chat", CHAT.text_reply("remembered"), CHAT.text_reply("still here"))
    try:
        first = turn(proxy, model, "remember me")
        proxy.stop()
        for suffix in ("", "-wal", "-shm"):
            (proxy.db.parent / (proxy.db.name + suffix)).unlink(missing_ok=True)
        proxy.start()
        second = turn(proxy, model, "and now?", after=first)
        assert second.result.end_error is None, second.result.end_error
        state = first.result.checkpoints()[-1]
        assert set(state.root_prompt_messages_json) <= set(second.gets)  # roots fetched by KV GET
        m1, m2 = messages_of(provider.requests[-2]), messages_of(provider.requests[-1])
        assert m2[: len(m1)] == m1 and m2[len(m1)]["content"] == "remembered"
        cp = second.result.checkpoints()[-1]
        assert list(cp.root_prompt_messages_json[: len(state.root_prompt_messages_json)]) == list(state.root_prompt_messages_json)
        assert cp.turns[0] == state.turns[0] and len(cp.turns) == 2
    finally:
        proxy.stop()


def test_kv_get_hash_mismatch_is_invalid_argument_and_stores_nothing(home, provider):
    proxy, ids = start_proxy(home, provider)
    model = ids["openai_chat"]
    provider.enqueue("openai_chat", CHAT.text_reply("once"))
    try:
        first = turn(proxy, model, "x")
        proxy.stop()
        proxy.db.unlink()
        proxy.start()
        calls_before = len(provider.requests)
        second = turn(proxy, model, "y", after=first, corrupt_gets=True).result
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
                return await newer_turn_while_streaming(client, client, model)

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


def test_kill9_with_a_staged_round_resumes_the_tools_without_a_new_model_call(home, provider, tmp_path):
    """The proxy dies while a tool round is staged (the client holds the staged checkpoint). After a
    restart, resume_action with that checkpoint re-runs the round's tools first; the model is asked
    again only once the round settled, and nothing is duplicated."""
    proxy, ids = start_proxy(home, provider)
    model = ids["openai_chat"]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("from a\n")
    read_args = json.dumps({"path": str(workspace / "a.txt")})
    provider.enqueue("openai_chat", CHAT.tool_calls([("call_a", "Read", read_args)]))
    try:
        req = user_turn_request("read a", model_id=model, workspace=str(workspace))
        staged, blobs = stage_then_leave(proxy, req, lambda _: proxy.kill9())
        assert json.loads(staged.pending_tool_calls[0])["content"][-1]["toolCallId"] == "call_a"
        calls_before = len(provider.requests)
        proxy.start()
        provider.enqueue("openai_chat", CHAT.text_reply("a says: from a"))

        result, execs = run_with_executor(proxy, resume_request(req, staged), workspace, blobs=blobs)
        assert result.end_error is None, result.end_error
        assert [e.WhichOneof("message") for e in execs] == ["read_args"]
        kinds = result.kinds()
        completed = kinds.index("interaction_update.tool_call_completed")
        first_text = kinds.index("interaction_update.text_delta")
        settled = [i for i, k in enumerate(kinds) if k == "conversation_checkpoint_update"]
        assert any(completed < i < first_text for i in settled)  # settled before the model is asked again
        assert len(provider.requests) == calls_before + 1
        tool_message = messages_of(provider.requests[-1])[-1]
        assert tool_message["role"] == "tool" and "from a" in tool_message["content"]
        # the round's start time survived the crash
        pending = json.loads(staged.pending_tool_calls[0])
        started = pending["providerOptions"]["cursor"]["pendingToolCallStartedAtMs"]
        [done] = [f.message.interaction_update.tool_call_completed.tool_call
                  for f in result.down("interaction_update.tool_call_completed")]
        assert done.started_at_ms == started
        db = sqlite3.connect(proxy.db)
        roles = [r for (r,) in db.execute(
            "SELECT m.role FROM revisions r JOIN messages m ON m.id = r.message_id"
            " WHERE r.id = (SELECT head_revision_id FROM conversations WHERE id = ?)", [req.conversation_id])]
        assert roles == ["assistant"]  # the head is the final answer...
        history = db.execute("SELECT count(*) FROM messages WHERE conversation_id = ? AND role = 'tool'",
                             [req.conversation_id]).fetchone()[0]
        assert history == 1  # ...and the tool result was stored once
    finally:
        proxy.stop()


def test_conversation_begun_on_a_cursor_model_continues_on_ours(home, provider):
    """Hybrid: the history exists only as the client's checkpoint, written by Cursor's backend
    (AI-SDK JSON roots, its own turn blobs). It is imported by KV GET and continued."""
    import hashlib

    proxy, ids = start_proxy(home, provider)
    provider.enqueue("openai_chat", CHAT.text_reply("continuing where Cursor left off"))

    def blob(data: bytes) -> bytes:
        return hashlib.sha256(data).digest()

    roots = [
        json.dumps({"role": "system", "content": "You are Cursor's own agent."}).encode(),
        json.dumps({"role": "user", "content": [{"type": "text", "text": "what is in x.py?"}]}).encode(),
        json.dumps({"role": "assistant", "id": "1", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool-call", "toolCallId": "toolu_1", "toolName": "Read", "input": {"path": "x.py"}}]}).encode(),
        json.dumps({"role": "tool", "id": "toolu_1", "content": [
            {"type": "tool-result", "toolCallId": "toolu_1", "toolName": "Read",
             "output": {"type": "text", "value": "print('x')"}}]}).encode(),
        json.dumps({"role": "assistant", "id": "1", "content": [{"type": "text", "text": "It prints x."}]}).encode(),
    ]
    user_message = apb.UserMessage(text="what is in x.py?", message_id="cursor-m1").SerializeToString()
    step = apb.ConversationStep(assistant_message=apb.AssistantMessage(text="It prints x.")).SerializeToString()
    turn = apb.ConversationTurnStructure(agent_conversation_turn=apb.AgentConversationTurnStructure(
        user_message=blob(user_message), steps=[blob(step)], request_id="cursor-request-1")).SerializeToString()
    client_blobs = {blob(b): b for b in [*roots, user_message, step, turn]}
    state = apb.ConversationStateStructure(root_prompt_messages_json=[blob(r) for r in roots], turns=[blob(turn)])
    try:
        async def scenario():
            async with proxy.client(blobs=dict(client_blobs)) as client:
                req = user_turn_request("and now with my model?", model_id=ids["openai_chat"], state=state)
                return await client.run(req), list(client.get_log)

        result, gets = run(scenario())
        assert result.end_error is None, result.end_error
        assert set(blob(r) for r in roots) <= set(gets) and blob(turn) in gets
        sent = messages_of(provider.requests[-1])
        assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant", "user"]
        assert sent[0]["content"] != "You are Cursor's own agent."  # our system prompt replaces theirs
        assert sent[2]["tool_calls"][0]["id"] == "toolu_1" and sent[3]["content"] == "print('x')"
        cp = result.checkpoints()[-1]
        assert list(cp.root_prompt_messages_json[1:5]) == [blob(r) for r in roots[1:]]  # their roots, reused
        assert cp.turns[0] == blob(turn) and len(cp.turns) == 2
    finally:
        proxy.stop()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_shutdown_aborts_running_execs_before_the_unavailable_end(home, provider, tmp_path, sig):
    from byok.cli.executor import LocalExecutor

    proxy, ids = start_proxy(home, provider)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    provider.enqueue("openai_chat", CHAT.tool_calls([("call_sleep", "Shell", json.dumps(
        {"command": "sleep 30", "block_until_ms": 60000}))]))
    try:
        async def scenario():
            executor = LocalExecutor(workspace)
            async with proxy.client(on_exec=executor.on_exec) as client:
                request_id = f"shutdown-{sig.name}"

                def shell_started() -> bool:
                    return any(f.direction == "up" and f.message.exec_client_message.shell_stream.HasField("start")
                               for f in client.frames(request_id))

                async def on_frame(frame):
                    executor.on_frame(frame)
                    if frame.kind == "exec_server_message":
                        await until(shell_started, "the shell to start")  # it runs now
                        proxy.process.send_signal(sig)

                result = await client.run(user_turn_request("sleep", model_id=ids["openai_chat"],
                                                            workspace=str(workspace)), request_id=request_id,
                                          on_frame=on_frame)
                await executor.aclose()
                return result

        result = run(scenario())
        kinds = result.kinds()
        assert kinds[-2:] == ["exec_server_control_message", "end_stream"]
        abort = result.down("exec_server_control_message")[0].message.exec_server_control_message.abort
        exec_id = result.down("exec_server_message")[0].message.exec_server_message.id
        assert abort.id == exec_id
        assert result.end_error.code is connect.Code.UNAVAILABLE
        assert proxy.process.wait(15) == 0
    finally:
        proxy.stop()


def test_server_heartbeats_while_the_provider_is_silent(home, provider):
    proxy, ids = start_proxy(home, provider, byok_heartbeat_s="0.5")
    items = CHAT.text_reply("after a pause").items
    provider.enqueue("openai_chat", Sse([Ev(items[0], delay_s=2.0), *items[1:]]))
    try:
        async def scenario():
            async with proxy.client() as client:
                return await client.run(user_turn_request("think long", model_id=ids["openai_chat"]))

        result = run(scenario())
        assert result.end_error is None
        kinds = result.kinds(skip_heartbeats=False)
        first_text = kinds.index("interaction_update.text_delta")
        initial = kinds.index("conversation_checkpoint_update")
        waiting = kinds[initial:first_text].count("interaction_update.heartbeat")
        assert waiting >= 2  # ~4 expected over 2 s at 0.5 s; never an idle stream
    finally:
        proxy.stop()


def test_resume_after_a_final_answer_gets_a_transient_continuation(home, provider):
    proxy, ids = start_proxy(home, provider)
    model = ids["openai_chat"]
    provider.enqueue("openai_chat", CHAT.text_reply("done."), CHAT.text_reply("nothing more to do."))
    try:
        async def scenario():
            async with proxy.client() as client:
                req = user_turn_request("do it", model_id=model)
                first = await client.run(req)
                resume = apb.AgentRunRequest(conversation_id=req.conversation_id, requested_model=req.requested_model)
                resume.conversation_state.CopyFrom(first.checkpoints()[-1])
                resume.action.resume_action.SetInParent()
                return req, await client.run(resume)

        req, resumed = run(scenario())
        assert resumed.end_error is None and resumed.text() == "nothing more to do."
        sent = messages_of(provider.requests[-1])
        assert [m["role"] for m in sent[-2:]] == ["assistant", "user"]
        assert "resumed" in json.dumps(sent[-1])
        db = sqlite3.connect(proxy.db)
        stored = [json.loads(p)["kind"] for (p,) in db.execute(
            "SELECT payload FROM messages WHERE conversation_id = ? ORDER BY id", [req.conversation_id])]
        assert stored == ["runtime", "assistant", "assistant"]  # the continuation prompt was never stored
    finally:
        proxy.stop()


def test_other_mid_run_actions_are_refused_without_harm(home, provider):
    """Mid-run user messages are queued (tests/e2e/test_queued.py); an action with no mid-run
    handler, such as a second resume_action, is refused and the run goes on."""
    proxy, ids = start_proxy(home, provider)
    slow = Sse([Ev(item, delay_s=0.2) for item in CHAT.text_reply("uninterrupted answer", pieces=4).items])
    provider.enqueue("openai_chat", slow)
    try:
        async def scenario():
            async with proxy.client() as client:
                request_id = "req-mid-run-action"

                async def on_frame(frame):
                    if frame.kind == "interaction_update.text_delta" and not on_frame.sent:
                        on_frame.sent = True
                        action = apb.ConversationAction(resume_action=apb.ResumeAction())
                        client.append_soon(request_id, apb.AgentClientMessage(conversation_action=action))

                on_frame.sent = False
                return await client.run(user_turn_request("answer", model_id=ids["openai_chat"]),
                                        request_id=request_id, on_frame=on_frame)

        result = run(scenario())
        assert result.end_error is None and result.text() == "uninterrupted answer"
        assert "refusing mid-run conversation action resume_action" in proxy.log()
        assert len(provider.requests) == 1
    finally:
        proxy.stop()


def test_resume_from_a_staged_final_answer_settles_it_without_asking_the_model(home, provider):
    proxy, ids = start_proxy(home, provider)
    model = ids["openai_chat"]
    provider.enqueue("openai_chat", CHAT.text_reply("the final answer"))
    try:
        async def scenario():
            async with proxy.client() as client:
                req = user_turn_request("answer", model_id=model)
                first = await client.run(req)
                staged = first.checkpoints()[1]
                assert len(staged.pending_tool_calls) == 1
                resume = apb.AgentRunRequest(conversation_id=req.conversation_id, requested_model=req.requested_model)
                resume.conversation_state.CopyFrom(staged)
                resume.action.resume_action.SetInParent()
                return first, await client.run(resume)

        calls = len(provider.requests)
        first, resumed = run(scenario())
        assert resumed.end_error is None
        assert len(provider.requests) == calls + 1  # only the original call: the resume asked nothing
        assert resumed.checkpoints()[-1].root_prompt_messages_json == first.checkpoints()[-1].root_prompt_messages_json
    finally:
        proxy.stop()
