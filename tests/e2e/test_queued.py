"""Issue 11, messages sent while the agent works, through a real mitmdump: queued, then delivered at
the next model call (all three dialects) or run as the next turn in the same stream; a system
injection; a stale injection refused; cancel honoured; one surviving kill -9; a changed request
context on resume shown once."""

from __future__ import annotations

import asyncio
import json
import sqlite3

import pytest

from byok.wire import connect
from byok.cli.client import resume_request, user_turn_request
from byok.cli.executor import LocalExecutor
from byok.proto import agent_pb2 as apb
from tests.e2e.conftest import run, start_proxy
from tests.e2e.harness import run_with_executor
from tests.support.scripted_provider import CHAT, KINDS, SCRIPTS, Ev, ScriptedProvider, Sse, Usage

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider):
    proxy, ids = start_proxy(tmp_path_factory.mktemp("queued"), provider, kinds=KINDS)
    yield proxy, ids
    proxy.stop()


def user_message(text: str, message_id: str) -> apb.AgentClientMessage:
    action = apb.ConversationAction(user_message_action=apb.UserMessageAction(
        user_message=apb.UserMessage(text=text, message_id=message_id, mode=apb.AGENT_MODE_AGENT)))
    return apb.AgentClientMessage(conversation_action=action)


def states(result) -> list[tuple[str, str]]:
    out = []
    for f in result.down("interaction_update.context_injection_state"):
        update = f.message.interaction_update.context_injection_state
        out.append((update.injection_id, update.state.WhichOneof("state")))
    return out


def body(request) -> str:
    return json.dumps(request.json, ensure_ascii=False)


def tool_turn_with_a_message(proxy, model, workspace, *, text, message_id, on_queued=None):
    """A Read round during which the user sends `text`; the tool answers only once the proxy said
    `queued`, so the message is waiting when the round settles."""
    (workspace / "notes.txt").write_text("alpha\n")
    queued = asyncio.Event

    async def scenario():
        executor = LocalExecutor(workspace)
        is_queued = queued()
        request_id = f"req-{message_id}"

        async def on_exec(client, message):
            client.append_soon(request_id, user_message(text, message_id))
            await is_queued.wait()
            if on_queued is not None:
                await on_queued(client, request_id)
            await executor.on_exec(client, message)

        async with proxy.client(on_exec=on_exec) as client:
            async def on_frame(frame):
                executor.on_frame(frame)
                if frame.kind == "interaction_update.context_injection_state":
                    is_queued.set()

            request = user_turn_request("read notes.txt", model_id=model, workspace=str(workspace))
            result = await client.run(request, request_id=request_id, on_frame=on_frame)
            await executor.aclose()
            return request, result, dict(client.blobs)

    return run(scenario())


@pytest.mark.parametrize("kind", KINDS)
def test_a_message_sent_during_a_tool_round_reaches_the_next_model_call(env, provider, tmp_path, kind):
    proxy, ids = env
    script = SCRIPTS[kind]
    read = json.dumps({"path": str(tmp_path / "notes.txt")})
    provider.enqueue(kind, script.tool_calls([("call_notes", "Read", read)]),
                     script.text_reply("alpha, and yes: in French too."))
    n = len(provider.requests)
    request, result, _ = tool_turn_with_a_message(proxy, ids[kind], tmp_path, text="also answer in French",
                                                  message_id=f"late-{kind}")
    assert result.end_error is None, result.end_error
    injection = f"user-message:late-{kind}"
    assert states(result) == [(injection, "queued"), (injection, "delivered")]
    first, second = provider.requests[n], provider.requests[n + 1]
    assert "also answer in French" not in body(first) and "also answer in French" in body(second)
    key = "input" if kind == "openai_responses" else "messages"
    assert second.json[key][: len(first.json[key]) - (kind == "anthropic")] == \
        first.json[key][: len(first.json[key]) - (kind == "anthropic")]  # anthropic merges the user tail
    kinds = result.kinds()
    delivered = [i for i, f in enumerate(result.frames) if f.direction == "down"
                 and f.kind == "interaction_update.context_injection_state"][1]
    appended = [i for i, f in enumerate(result.frames) if f.kind == "interaction_update.user_message_appended"]
    completed = [i for i, f in enumerate(result.frames) if f.kind == "interaction_update.tool_call_completed"]
    texts = [i for i, f in enumerate(result.frames) if f.kind == "interaction_update.text_delta"]
    assert completed[0] < delivered < appended[0] < texts[0]
    [shown] = [f.message.interaction_update.user_message_appended.user_message for f in result.frames
               if f.kind == "interaction_update.user_message_appended"]
    assert shown.text == "also answer in French" and shown.conversation_state_blob_id
    update = [f.message.interaction_update.context_injection_state.state.delivered for f in result.frames
              if f.kind == "interaction_update.context_injection_state"][1]
    assert update.step == 1 and update.delivery_batch_id and update.delivered_at_ms > 0  # after the Read card
    assert kinds.count("interaction_update.turn_ended") == 1
    state = result.checkpoints()[-1]
    assert len(state.turns) == 2  # the message starts its own turn in Cursor's history
    db = sqlite3.connect(proxy.db)
    assert db.execute("SELECT status FROM queued_inputs WHERE injection_id = ?", [injection]).fetchone() == \
        ("delivered",)


def test_a_message_sent_during_the_final_answer_runs_as_the_next_turn(env, provider):
    proxy, ids = env
    items = CHAT.text_reply("the first answer, slowly", pieces=4, usage=Usage(100, 20)).items
    slow = Sse([items[0], *(Ev(item, delay_s=0.4) for item in items[1:])])
    provider.enqueue("openai_chat", slow, CHAT.text_reply("the second answer", usage=Usage(300, 7)))
    n = len(provider.requests)

    async def scenario():
        async with proxy.client() as client:
            request_id = "req-next-turn"

            async def on_frame(frame):
                if frame.kind == "interaction_update.text_delta" and not on_frame.sent:
                    on_frame.sent = True
                    client.append_soon(request_id, user_message("and a follow-up", "follow-up"))

            on_frame.sent = False
            request = user_turn_request("first", model_id=ids["openai_chat"])
            result = await client.run(request, request_id=request_id, on_frame=on_frame)
            return request, result, dict(client.blobs)

    request, result, blobs = run(scenario())
    assert result.end_error is None, result.end_error
    assert states(result) == [("user-message:follow-up", "queued"), ("user-message:follow-up", "queued_for_next_turn"),
                              ("user-message:follow-up", "delivered")]
    kinds = [k for k in result.kinds() if not k.startswith("kv_")]
    ended = [i for i, k in enumerate(kinds) if k == "interaction_update.turn_ended"]
    assert len(ended) == 2
    first_turn_tail = kinds[ended[0]:ended[0] + 4]
    assert first_turn_tail == ["interaction_update.turn_ended"] + ["conversation_checkpoint_update"] * 3
    assert kinds.index("interaction_update.user_message_appended") > ended[0] + 3
    assert kinds[-1] == "end_stream"
    totals = [f.message.interaction_update.turn_ended for f in result.down("interaction_update.turn_ended")]
    assert (totals[0].input_tokens, totals[1].input_tokens) == (100, 300)  # each turn its own
    first, second = provider.requests[n].json["messages"], provider.requests[n + 1].json["messages"]
    assert second[: len(first)] == first and second[len(first)]["content"] == "the first answer, slowly"
    assert "and a follow-up" in json.dumps(second[-1])
    assert result.text() == "the first answer, slowlythe second answer"
    assert len(result.checkpoints()[-1].turns) == 2
    db = sqlite3.connect(proxy.db)
    assert json.loads(db.execute("SELECT usage FROM runs WHERE request_id = 'req-next-turn'").fetchone()[0]) == \
        {"input_tokens": 400, "output_tokens": 27}  # the run's record holds both turns

    # the delivered message is a message like any other: editing it branches from where it came in
    provider.enqueue("openai_chat", CHAT.text_reply("answer to the edit"))

    async def edit():
        async with proxy.client(blobs=blobs) as client:
            return await client.run(user_turn_request(
                "an edited follow-up", model_id=ids["openai_chat"], message_id="follow-up",
                conversation_id=request.conversation_id, state=result.checkpoints()[-1]))

    edited = run(edit())
    assert edited.end_error is None, edited.end_error
    sent = provider.requests[-1].json["messages"]
    assert sent[: len(first) + 1] == second[: len(first) + 1]  # up to the first answer
    assert "an edited follow-up" in json.dumps(sent[-1]) and "and a follow-up" not in json.dumps(sent)
    assert len(edited.checkpoints()[-1].turns) == 2


def test_an_empty_injection_naming_a_waiting_message_takes_it_back(env, provider, tmp_path):
    proxy, ids = env
    read = json.dumps({"path": str(tmp_path / "notes.txt")})
    provider.enqueue("openai_chat", CHAT.tool_calls([("call_w", "Read", read)]), CHAT.text_reply("alpha"))
    n = len(provider.requests)

    async def withdraw(client, request_id):
        take_back = apb.ConversationAction(inject_context_action=apb.InjectContextAction(
            injection_id="user-message:oops"))
        client.append_soon(request_id, apb.AgentClientMessage(conversation_action=take_back))
        while not any(f.kind == "interaction_update.context_injection_state" and
                      f.message.interaction_update.context_injection_state.state.WhichOneof("state") == "cancelled"
                      for f in client.frames(request_id)):
            await asyncio.sleep(0.02)

    _, result, _ = tool_turn_with_a_message(proxy, ids["openai_chat"], tmp_path, text="ignore this, sent by mistake",
                                            message_id="oops", on_queued=withdraw)
    assert result.end_error is None, result.end_error
    assert states(result) == [("user-message:oops", "queued"), ("user-message:oops", "cancelled")]
    assert "sent by mistake" not in body(provider.requests[n + 1])
    assert len(result.checkpoints()[-1].turns) == 1


def test_system_injection_and_a_stale_one(env, provider, tmp_path):
    proxy, ids = env
    read = json.dumps({"path": str(tmp_path / "notes.txt")})
    (tmp_path / "notes.txt").write_text("alpha\n")
    provider.enqueue("openai_chat", CHAT.tool_calls([("call_n", "Read", read)]), CHAT.text_reply("noted"))
    n = len(provider.requests)

    async def scenario():
        executor = LocalExecutor(tmp_path)
        request_id = "req-system-injection"
        seen = asyncio.Event()

        async def on_exec(client, message):
            stale = apb.ConversationAction(inject_context_action=apb.InjectContextAction(
                injection_id="inj-stale", expected_run_id="some-other-run",
                system_context=apb.SystemContextInjection(producer="hooks", content="never delivered")))
            good = apb.ConversationAction(inject_context_action=apb.InjectContextAction(
                injection_id="inj-lint", expected_run_id=request_id,
                system_context=apb.SystemContextInjection(producer="linter", content="3 new lint errors in a.py")))
            client.append_soon(request_id, apb.AgentClientMessage(conversation_action=stale))
            client.append_soon(request_id, apb.AgentClientMessage(conversation_action=good))
            await seen.wait()
            await executor.on_exec(client, message)

        async with proxy.client(on_exec=on_exec) as client:
            async def on_frame(frame):
                if frame.kind == "interaction_update.context_injection_state" and \
                        frame.message.interaction_update.context_injection_state.injection_id == "inj-lint":
                    seen.set()

            result = await client.run(user_turn_request("read", model_id=ids["openai_chat"], workspace=str(tmp_path)),
                                      request_id=request_id, on_frame=on_frame)
            await executor.aclose()
            return result

    result = run(scenario())
    assert result.end_error is None, result.end_error
    assert states(result) == [("inj-stale", "rejected"), ("inj-lint", "queued"), ("inj-lint", "delivered")]
    [rejected] = [f.message.interaction_update.context_injection_state.state.rejected for f in result.frames
                  if f.kind == "interaction_update.context_injection_state"][:1]
    assert "expected run some-other-run" in rejected.reason
    assert "interaction_update.user_message_appended" not in result.kinds()  # not a user message
    sent = body(provider.requests[n + 1])
    assert "3 new lint errors in a.py" in sent and 'from=\\"linter\\"' in sent and "never delivered" not in sent
    assert len(result.checkpoints()[-1].turns) == 1


def test_cancel_takes_back_what_waits(env, provider, tmp_path):
    proxy, ids = env
    read = json.dumps({"path": str(tmp_path / "notes.txt")})
    (tmp_path / "notes.txt").write_text("alpha\n")
    provider.enqueue("openai_chat", CHAT.tool_calls([("call_c", "Read", read)]))
    request_id = "req-cancel-queued"

    async def scenario():
        async with proxy.client() as client:
            async def on_exec(client, message):  # the tool never answers: the user presses stop
                client.append_soon(request_id, user_message("do this next", "next-one"))

            client.on_exec = on_exec

            async def on_frame(frame):
                if frame.kind == "interaction_update.context_injection_state":
                    client.append_soon(request_id, apb.AgentClientMessage(conversation_action=apb.ConversationAction(
                        cancel_action=apb.CancelAction(reason="stop"))))

            request = user_turn_request("read", model_id=ids["openai_chat"], workspace=str(tmp_path))
            return request, await client.run(request, request_id=request_id, on_frame=on_frame)

    request, result = run(scenario())
    assert result.end_error.code is connect.Code.CANCELED
    assert states(result) == [("user-message:next-one", "queued"), ("user-message:next-one", "cancelled")]
    kinds = result.kinds()
    assert kinds.index("interaction_update.context_injection_state") < kinds.index("end_stream")
    # the next run of the conversation does not deliver it
    provider.enqueue("openai_chat", CHAT.text_reply("fresh"))

    async def later():
        async with proxy.client() as client:
            return await client.run(user_turn_request("new question", model_id=ids["openai_chat"],
                                                      conversation_id=request.conversation_id))

    assert run(later()).end_error is None
    assert "do this next" not in body(provider.requests[-1])
    db = sqlite3.connect(proxy.db)
    assert db.execute("SELECT status FROM queued_inputs WHERE injection_id = 'user-message:next-one'").fetchone() == \
        ("cancelled",)


@pytest.fixture
def own_provider():
    with ScriptedProvider() as p:
        yield p


def test_a_queued_message_survives_kill9(tmp_path, own_provider):
    provider = own_provider
    proxy, ids = start_proxy(tmp_path / "home", provider)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    read = json.dumps({"path": str(workspace / "notes.txt")})
    provider.enqueue("openai_chat", CHAT.tool_calls([("call_k", "Read", read)]))
    staged: list = []
    try:
        request, blobs = run(_queue_then_die(proxy, ids["openai_chat"], workspace, staged))
        assert staged and json.loads(staged[-1].pending_tool_calls[0])["content"][-1]["toolCallId"] == "call_k"
        db = sqlite3.connect(proxy.db)
        assert db.execute("SELECT status FROM queued_inputs").fetchall() == [("queued",)]
        db.close()
        proxy.start()
        provider.enqueue("openai_chat", CHAT.text_reply("alpha; and I remembered your second message"))
        n = len(provider.requests)

        result, _ = run_with_executor(proxy, resume_request(request, staged[-1]), workspace, blobs=blobs)
        assert result.end_error is None, result.end_error
        assert len(provider.requests) == n + 1
        sent = body(provider.requests[-1])
        assert "also check the tests" in sent and "alpha" in sent
        assert states(result) == [("user-message:survivor", "delivered")]
        assert "interaction_update.user_message_appended" in result.kinds()
        db = sqlite3.connect(proxy.db)
        assert db.execute("SELECT status FROM queued_inputs").fetchall() == [("delivered",)]
    finally:
        proxy.stop()


async def _queue_then_die(proxy, model, workspace, staged):
    """Send a message while the Read runs; once it is queued (and the round staged), kill -9."""
    (workspace / "notes.txt").write_text("alpha\n")
    request = user_turn_request("read notes.txt", model_id=model, workspace=str(workspace))
    request_id = "req-survivor"

    async def on_exec(client, message):
        client.append_soon(request_id, user_message("also check the tests", "survivor"))

    async with proxy.client(on_exec=on_exec) as client:
        async def on_frame(frame):
            if frame.kind == "conversation_checkpoint_update" and \
                    frame.message.conversation_checkpoint_update.pending_tool_calls:
                staged.append(frame.message.conversation_checkpoint_update)
            if frame.kind == "interaction_update.context_injection_state":
                proxy.kill9()

        try:
            await client.run(request, request_id=request_id, on_frame=on_frame)
        except Exception:
            pass  # the stream dies with the proxy
        return request, dict(client.blobs)


def test_a_resume_with_a_changed_request_context_tells_the_model_once(env, provider):
    proxy, ids = env
    provider.enqueue("openai_chat", CHAT.text_reply("done"), CHAT.text_reply("continuing in pwsh"),
                     CHAT.text_reply("still pwsh"))

    async def scenario():
        async with proxy.client() as client:
            request = user_turn_request("hello", model_id=ids["openai_chat"])
            first = await client.run(request)

            def resume(after):
                again = resume_request(request, after.checkpoints()[-1])
                again.action.resume_action.request_context.env.shell = "pwsh"
                return again

            second = await client.run(resume(first))
            third = await client.run(resume(second))
            return first, second, third

    first, second, third = run(scenario())
    assert second.end_error is None and third.end_error is None
    once, twice = body(provider.requests[-2]), body(provider.requests[-1])
    assert once.count("Shell: pwsh") == 1 and "environment has changed" in once
    assert twice.count("Shell: pwsh") == 1  # the same context again: nothing new
    assert "Shell: bash" in once  # the original message is never rewritten
