"""Issue 1/5, the spine: a real agent text turn answered by the addon inside a real mitmdump,
driven over HTTPS through the proxy by the Cursor-like client against a scripted provider."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from byok.wire import connect
from byok.cli.client import user_turn_request
from byok.proto import agent_pb2 as apb, aiserver_pb2 as spb
from tests.e2e.conftest import run, start_proxy
from tests.support.waiting import until, wait_until
from tests.support.scripted_provider import CHAT, HttpError, Sse, Usage

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider, upstream):
    # the upstream probe would test the real api2.cursor.sh, not the fake one the test redirects to
    proxy, ids = start_proxy(tmp_path_factory.mktemp("spine"), provider, upstream,
                             byok_route_wait_s="2", byok_heartbeat_s="1", byok_upstream_probe_ms="0")
    yield proxy, ids["openai_chat"]
    proxy.stop()


def referenced_blobs(state: apb.ConversationStateStructure, blobs: dict[bytes, bytes]) -> set[bytes]:
    """The closure of a checkpoint, decoded with the client's own blob store."""
    out = set(state.root_prompt_messages_json) | set(state.todos)
    for turn_id in state.turns:
        out.add(turn_id)
        turn = apb.ConversationTurnStructure.FromString(blobs[turn_id]).agent_conversation_turn
        out.add(turn.user_message)
        out.update(turn.steps)
        user_message = apb.UserMessage.FromString(blobs[turn.user_message])
        if user_message.conversation_state_blob_id:
            out.add(user_message.conversation_state_blob_id)
    return out


def test_text_turn_frame_order_barrier_usage(env, provider):
    proxy, model = env
    provider.enqueue("openai_chat", CHAT.thinking_then_text(
        "Let me think.", "Hello there!", usage=Usage(input_tokens=20000, output_tokens=8, cache_read_tokens=80)))

    async def scenario():
        async with proxy.client(ack_delay_s=0.15) as client:
            result = await client.run(user_turn_request("hello", model_id=model))
            return result, dict(client.blobs), list(client.ack_log)

    result, blobs, acks = run(scenario())
    assert result.status == 200 and result.end_error is None
    kinds = result.kinds()
    assert kinds[-1] == "end_stream" and result.frames[-1].message is None
    # initial checkpoint, streamed thinking/text, usage, final blobs, turn_ended, staged/settled/settled
    first_text = kinds.index("interaction_update.text_delta")
    assert kinds.index("interaction_update.thinking_delta") < kinds.index("interaction_update.thinking_completed") < first_text
    assert kinds.count("interaction_update.token_delta") == 1
    tail = kinds[kinds.index("interaction_update.turn_ended"):]
    assert tail == ["interaction_update.turn_ended"] + ["conversation_checkpoint_update"] * 3 + ["end_stream"]
    assert kinds.count("conversation_checkpoint_update") == 4
    assert result.text() == "Hello there!"
    # usage exactly as reported
    [ended] = [f.message.interaction_update.turn_ended for f in result.down("interaction_update.turn_ended")]
    assert (ended.input_tokens, ended.output_tokens, ended.cache_read_tokens) == (20000, 8, 80)
    assert not ended.HasField("cache_write_tokens")
    [token] = result.down("interaction_update.token_delta")
    assert token.message.interaction_update.token_delta.tokens == 8
    [thinking_done] = result.down("interaction_update.thinking_completed")
    assert thinking_done.message.interaction_update.thinking_completed.thinking_duration_ms >= 1
    # every blob a checkpoint references was SET and ACKed before the checkpoint arrived
    ack_time = {blob_id: t for t, blob_id in acks}
    for frame in result.down("conversation_checkpoint_update"):
        state = frame.message.conversation_checkpoint_update
        for blob_id in referenced_blobs(state, blobs):
            assert blob_id in ack_time, f"checkpoint references un-SET blob {blob_id.hex()}"
            assert ack_time[blob_id] < frame.t
    staged, settled, again = result.checkpoints()[1:]
    assert len(staged.pending_tool_calls) == 1 and not settled.pending_tool_calls
    assert staged.turns == settled.turns and again == settled
    assert len(settled.root_prompt_messages_json) == len(staged.root_prompt_messages_json) + 1
    assert settled.token_details.used_tokens == 20008
    assert sum(c.estimated_tokens for c in settled.token_details.breakdown.categories) == 20008
    # no blob was SET twice
    set_ids = [f.message.kv_server_message.set_blob_args.blob_id for f in result.down("kv_server_message.set_blob_args")]
    assert len(set_ids) == len(set(set_ids))
    # the provider saw one system message and ONE user message (the runtime one)
    body = provider.requests[-1].json
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "<user_query>\nhello\n</user_query>" in body["messages"][1]["content"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    root_json = json.loads(blobs[settled.root_prompt_messages_json[-1]])
    assert root_json["role"] == "assistant" and root_json["id"] == "1" and "origin" not in root_json


def test_text_streams_before_the_initial_checkpoint_which_still_waits_for_its_acks(env, provider):
    """PROTOCOL 10.4: model output is not a checkpoint, so it never waits for the initial checkpoint's
    ACKs; the checkpoint itself still does. The client withholds every ACK until it has seen text:
    a server that held text back behind the barrier would deadlock here (and fail on its ACK timeout)."""
    proxy, model = env
    provider.enqueue("openai_chat", CHAT.text_reply("streamed before any checkpoint"))

    async def scenario():
        async with proxy.client(ack_gate=asyncio.Event()) as client:
            def on_frame(frame):
                if frame.kind == "interaction_update.text_delta":
                    client.ack_gate.set()

            result = await client.run(user_turn_request("hello", model_id=model), on_frame=on_frame)
            return result, dict(client.blobs), list(client.ack_log)

    result, blobs, acks = run(scenario())
    assert result.end_error is None and result.text() == "streamed before any checkpoint"
    kinds = result.kinds()
    assert kinds.index("interaction_update.text_delta") < kinds.index("conversation_checkpoint_update")
    ack_time = {blob_id: t for t, blob_id in acks}
    first_text = result.down("interaction_update.text_delta")[0].t
    for frame in result.down("conversation_checkpoint_update"):
        for blob_id in referenced_blobs(frame.message.conversation_checkpoint_update, blobs):
            assert first_text < ack_time[blob_id] < frame.t  # ACKed after the text, before the checkpoint


def test_second_run_with_checkpoint_keeps_the_provider_prefix(env, provider):
    proxy, model = env
    provider.enqueue("openai_chat", CHAT.text_reply("first answer"), CHAT.text_reply("second answer"))

    async def scenario():
        async with proxy.client() as client:
            req1 = user_turn_request("one", model_id=model)
            first = await client.run(req1)
            req2 = user_turn_request("two", model_id=model, conversation_id=req1.conversation_id,
                                     state=first.checkpoints()[-1])
            return first, await client.run(req2)

    first, second = run(scenario())
    assert first.end_error is None and second.end_error is None
    m1, m2 = provider.requests[-2].json["messages"], provider.requests[-1].json["messages"]
    assert m2[: len(m1)] == m1
    assert [m["role"] for m in m2[len(m1):]] == ["assistant", "user"]
    assert m2[len(m1)]["content"] == "first answer"
    # the second run only SETs what the client lacks: never the system root or old turns again
    cp1 = first.checkpoints()[-1]
    set_ids = {f.message.kv_server_message.set_blob_args.blob_id for f in second.down("kv_server_message.set_blob_args")}
    assert not set_ids & set(cp1.root_prompt_messages_json)
    assert not set_ids & set(cp1.turns)
    cp2 = second.checkpoints()[-1]
    assert list(cp2.root_prompt_messages_json[: len(cp1.root_prompt_messages_json)]) == list(cp1.root_prompt_messages_json)
    assert len(cp2.turns) == 2 and cp2.turns[0] == cp1.turns[0]


@pytest.mark.parametrize("failure", ["http_500", "eof"])
def test_provider_failure_ends_with_error_and_keeps_the_user_turn(env, provider, failure):
    proxy, model = env
    if failure == "http_500":
        provider.enqueue("openai_chat", HttpError(500, {"error": {"message": "upstream exploded", "type": "server_error"}}))
    else:
        provider.enqueue("openai_chat", Sse(CHAT.text_reply("partial text that never ends").items[:3]))

    async def scenario():
        async with proxy.client() as client:
            return await client.run(user_turn_request("fail please", model_id=model))

    result = run(scenario())
    kinds = result.kinds()
    assert "interaction_update.turn_ended" not in kinds
    assert kinds.count("conversation_checkpoint_update") == 1  # the initial user state only
    assert result.frames[-1].flags == connect.FLAG_END_STREAM
    error = result.end_error
    assert error.code is connect.Code.UNAVAILABLE
    [detail] = error.details
    assert detail.type == "aiserver.v1.ErrorDetails"
    details = spb.ErrorDetails.FromString(detail.value)
    assert details.error == spb.ErrorDetails.ERROR_PROVIDER_ERROR
    assert details.details.is_retryable is True
    if failure == "http_500":
        assert "upstream exploded" in details.details.detail and "500" in details.details.detail
    # nothing of the failed call was stored; the runtime user message was, once
    import sqlite3

    db = sqlite3.connect(proxy.db)
    rows = db.execute("SELECT role, origin FROM messages WHERE request_id = ?", [result.request_id]).fetchall()
    assert rows == [("user", "runtime")]
    status = db.execute("SELECT status, error_code FROM runs WHERE request_id = ?", [result.request_id]).fetchone()
    assert status == ("failed", "unavailable")


def test_out_of_order_and_duplicate_appends(env, provider):
    proxy, model = env
    provider.enqueue("openai_chat", CHAT.text_reply("ordered"))

    async def scenario():
        async with proxy.client() as client:
            request_id = "req-out-of-order"
            # seqno 1 (a heartbeat) arrives before seqno 0 (the run_request); both duplicated
            client.next_seqno(request_id), client.next_seqno(request_id)
            heartbeat = apb.AgentClientMessage(client_heartbeat=apb.ClientHeartbeat())
            run_request = apb.AgentClientMessage(run_request=user_turn_request("hi", model_id=model))

            async def send_appends():
                offset = len(proxy.log())
                early = asyncio.ensure_future(client.append(request_id, heartbeat, seqno=1))
                await until(lambda: f"[{request_id}] BidiAppend seqno 1 came before the run_request"
                            in proxy.log()[offset:], "the proxy to hold the early append")
                assert not early.done()  # held until its run_request arrives
                responses = await asyncio.gather(
                    client.append(request_id, run_request, seqno=0),
                    client.append(request_id, run_request, seqno=0),
                    client.append(request_id, heartbeat, seqno=1),
                )
                responses.append(await early)
                assert all(r.status_code == 200 for r in responses), [r.text for r in responses]

            task = asyncio.ensure_future(send_appends())
            result = await client.run(apb.AgentRunRequest(), request_id=request_id, send_run_request=False)
            await task
            return result

    result = run(scenario())
    assert result.end_error is None and result.text() == "ordered"
    assert len([r for r in provider.requests if "hi" in json.dumps(r.json)]) >= 1


def test_client_heartbeat_is_answered(env, provider):
    proxy, model = env
    from tests.support.scripted_provider import Ev

    provider.enqueue("openai_chat", Sse([Ev(i, delay_s=0.8 if n == 1 else 0) for n, i in enumerate(CHAT.text_reply("slow").items)]))

    sent_at = []

    async def scenario():
        async with proxy.client() as client:
            request_id = "req-heartbeat"

            async def on_frame(frame):
                if frame.kind == "conversation_checkpoint_update" and not sent_at:
                    sent_at.append(time.monotonic())
                    await client.append(request_id, apb.AgentClientMessage(client_heartbeat=apb.ClientHeartbeat()))

            return await client.run(user_turn_request("hb", model_id=model), request_id=request_id, on_frame=on_frame)

    result = run(scenario())
    assert result.end_error is None
    # The server's idle heartbeat comes byok_heartbeat_s=1 s after its last frame; one within 0.5 s of
    # the client's heartbeat can only be the answer to it.
    answers = [f.t for f in result.down("interaction_update.heartbeat") if 0 <= f.t - sent_at[0] < 0.5]
    assert answers, [round(f.t - sent_at[0], 3) for f in result.down("interaction_update.heartbeat")]


def test_second_runsse_for_the_same_request_is_already_exists(env, provider):
    proxy, model = env
    provider.enqueue("openai_chat", CHAT.text_reply("once"))

    async def scenario():
        async with proxy.client() as client:
            first = await client.run(user_turn_request("once", model_id=model), request_id="req-twice")
            second = await client.run(apb.AgentRunRequest(), request_id="req-twice", send_run_request=False)
            return first, second

    first, second = run(scenario())
    assert first.end_error is None
    assert second.end_error.code is connect.Code.ALREADY_EXISTS
    assert [f.kind for f in second.frames if f.direction == "down"] == ["end_stream"]


def test_garbage_bidi_append_is_a_connect_error_and_the_proxy_keeps_serving(env, provider):
    proxy, model = env

    async def scenario():
        async with proxy.client() as client:
            not_hex = spb.BidiAppendRequest(data="zz-not-hex", request_id=spb.BidiRequestId(request_id="g"),
                                            append_seqno=0).SerializeToString()
            not_message = spb.BidiAppendRequest(data="ffff", request_id=spb.BidiRequestId(request_id="g"),
                                                append_seqno=0).SerializeToString()
            responses = [await client.append("g", apb.AgentClientMessage(), seqno=0, body=body)
                         for body in (not_hex, not_message, b"", b"\xff\x00garbage")]
            provider.enqueue("openai_chat", CHAT.text_reply("still here"))
            after = await client.run(user_turn_request("alive?", model_id=model))
            return responses, after

    responses, after = run(scenario())
    for response in responses:
        assert response.status_code == 400
        assert response.headers["content-type"] == "application/json"
        assert response.json()["code"] == "invalid_argument"
    assert after.end_error is None and after.text() == "still here"


def test_appends_wait_for_their_run_request_then_fail_after_route_wait(env):
    proxy, _ = env

    async def scenario():
        async with proxy.client() as client:
            t0 = time.monotonic()
            response = await client.append("req-orphan", apb.AgentClientMessage(client_heartbeat=apb.ClientHeartbeat()),
                                           seqno=1)
            return response, time.monotonic() - t0

    response, waited = run(scenario())
    assert response.status_code == 400 and "run_request" in response.json()["message"]
    assert 1.8 < waited < 10  # byok_route_wait_s=2


def test_run_request_arriving_after_runsse_opens(env, provider):
    proxy, model = env
    provider.enqueue("openai_chat", CHAT.text_reply("late start"))

    async def scenario():
        async with proxy.client() as client:
            return await client.run(user_turn_request("late", model_id=model), run_request_delay_s=0.5)

    result = run(scenario())
    assert result.end_error is None and result.text() == "late start"


def test_agent_run_probe_is_answered_404_locally(env, upstream):
    proxy, _ = env

    async def scenario():
        async with proxy.client() as client:
            return await client._http.post("https://api2.cursor.sh/agent/v1/run", content=b"{}")

    before = len(upstream.requests("/agent/v1/run"))
    assert run(scenario()).status_code == 404
    assert len(upstream.requests("/agent/v1/run")) == before


def test_unknown_model_runs_pass_upstream_untouched(env, upstream):
    proxy, _ = env

    async def scenario():
        async with proxy.client() as client:
            request = user_turn_request("official please", model_id="claude-4.5-sonnet")
            return await client.run(request, request_id="req-hybrid")

    result = run(scenario())
    assert result.end_error is None and result.text() == "official answer"
    [runsse] = [s for s in upstream.requests("/agent.v1.AgentService/RunSSE")
                if spb.BidiRequestId.FromString(connect.decode_all(s.body)[0].payload).request_id == "req-hybrid"]
    appends = [spb.BidiAppendRequest.FromString(s.body) for s in upstream.requests("/aiserver.v1.BidiService/BidiAppend")]
    mine = [a for a in appends if a.request_id.request_id == "req-hybrid"]
    assert len(mine) == 1
    forwarded = apb.AgentClientMessage.FromString(bytes.fromhex(mine[0].data))
    assert forwarded.run_request.requested_model.model_id == "claude-4.5-sonnet"


def test_unrelated_request_streams_upstream(env, upstream):
    proxy, _ = env

    async def scenario():
        async with proxy.client() as client:
            arrivals = []
            async with client._http.stream("GET", "https://api2.cursor.sh/slow") as response:
                async for line in response.aiter_lines():
                    if line:
                        arrivals.append(time.monotonic())
            return response.status_code, arrivals

    status, arrivals = run(scenario())
    assert status == 200 and len(arrivals) == 5
    assert arrivals[-1] - arrivals[0] > 0.3  # chunks arrived as sent (100 ms apart), not buffered


def test_official_connect_python_client_drives_a_turn(env, provider):
    """Framing checked by code nobody here wrote: connectrpc (+ pyqwest) through the proxy over real
    HTTPS with mitmproxy's CA, RunSSE as a server stream and BidiAppend as unary calls."""
    from connectrpc.client import ConnectClient
    from connectrpc.compat import google_protobuf_binary_codec
    from connectrpc.errors import ConnectError
    from connectrpc.method import IdempotencyLevel, MethodInfo, StreamType
    from pyqwest import Client, HTTPTransport

    proxy, model = env
    provider.enqueue("openai_chat", CHAT.text_reply("framed by connectrpc"), HttpError(503, {"error": {"message": "busy"}}))
    run_sse = MethodInfo(name="RunSSE", service_name="agent.v1.AgentService", input=spb.BidiRequestId,
                         output=apb.AgentServerMessage, idempotency_level=IdempotencyLevel.UNKNOWN,
                         stream_type=StreamType.SERVER_STREAM)
    bidi_append = MethodInfo(name="BidiAppend", service_name="aiserver.v1.BidiService", input=spb.BidiAppendRequest,
                             output=spb.BidiAppendResponse, idempotency_level=IdempotencyLevel.UNKNOWN,
                             stream_type=StreamType.UNARY)
    ca = open(proxy.ca_file, "rb").read()

    async def one_run(client, request_id, text):
        seqno = 0

        async def append(message):
            nonlocal seqno
            data = message.SerializeToString().hex()
            request = spb.BidiAppendRequest(data=data, request_id=spb.BidiRequestId(request_id=request_id),
                                            append_seqno=seqno)
            seqno += 1
            await client.execute_unary(request=request, method=bidi_append)

        messages, error = [], None
        sender = asyncio.ensure_future(append(apb.AgentClientMessage(
            run_request=user_turn_request(text, model_id=model))))
        try:
            async for message in client.execute_server_stream(
                    request=spb.BidiRequestId(request_id=request_id), method=run_sse):
                messages.append(message)
                kv = message.kv_server_message
                if message.WhichOneof("message") == "kv_server_message" and kv.WhichOneof("message") == "set_blob_args":
                    await append(apb.AgentClientMessage(kv_client_message=apb.KvClientMessage(
                        id=kv.id, set_blob_result=apb.SetBlobResult())))
        except ConnectError as e:
            error = e
        await sender
        return messages, error

    async def scenario():
        http = Client(HTTPTransport(tls_ca_cert=ca, proxy=proxy.url))
        async with ConnectClient("https://api2.cursor.sh", codec=google_protobuf_binary_codec(),
                                 http_client=http) as client:
            ok = await one_run(client, "req-connectrpc-ok", "hello connect")
            failed = await one_run(client, "req-connectrpc-fail", "fail connect")
            return ok, failed

    (messages, error), (_, failure) = run(scenario())
    assert error is None
    text = "".join(m.interaction_update.text_delta.text for m in messages
                   if m.interaction_update.WhichOneof("message") == "text_delta")
    assert text == "framed by connectrpc"
    assert sum(1 for m in messages if m.WhichOneof("message") == "conversation_checkpoint_update") == 4
    assert failure is not None and failure.code.name == "UNAVAILABLE"
    [detail] = failure.details
    assert detail.type_name == "aiserver.v1.ErrorDetails"
    assert spb.ErrorDetails.FromString(detail.message_bytes).error == spb.ErrorDetails.ERROR_PROVIDER_ERROR


def test_model_lists_gain_the_user_models_and_keep_upstream_bytes(env, upstream):
    """Through the proxy: AvailableModels / GetUsableModels from the (fake) official backend come back
    with every original byte first, then exactly the configured model."""
    proxy, model = env
    available = spb.AvailableModelsResponse(
        models=[spb.AvailableModelsResponse.AvailableModel(name="claude-4.5-sonnet", client_display_name="Claude")],
        model_names=["claude-4.5-sonnet"],
    ).SerializeToString() + b"\xf8\x3f\x01"  # an unknown field a newer backend might send
    usable = spb.GetUsableModelsResponse(models=[spb.ModelDetails(model_name="gpt-5")]).SerializeToString()
    upstream.model_list_payloads.update({
        "/aiserver.v1.AiService/AvailableModels": ("application/proto", available),
        "/aiserver.v1.AiService/GetUsableModels": ("application/proto", usable),
    })

    async def scenario():
        async with proxy.client() as client:
            a = await client._http.post("https://api2.cursor.sh/aiserver.v1.AiService/AvailableModels",
                                        content=b"", headers={"content-type": "application/proto"})
            u = await client._http.post("https://api2.cursor.sh/aiserver.v1.AiService/GetUsableModels",
                                        content=b"", headers={"content-type": "application/proto"})
            return a, u

    a, u = run(scenario())
    assert a.status_code == 200 and a.content.startswith(available)
    names = [m.name for m in spb.AvailableModelsResponse.FromString(a.content).models]
    assert names == ["claude-4.5-sonnet", model]
    assert u.content.startswith(usable)
    assert [m.model_name for m in spb.GetUsableModelsResponse.FromString(u.content).models] == ["gpt-5", model]


def test_a_mode_without_assets_is_a_config_error_naming_it(env, provider):
    proxy, model = env
    calls = len(provider.requests)

    async def scenario():
        async with proxy.client() as client:
            return await client.run(user_turn_request("triage this", model_id=model, mode=apb.AGENT_MODE_TRIAGE))

    result = run(scenario())
    assert result.end_error.code is connect.Code.FAILED_PRECONDITION
    assert "'triage' has no prompt assets" in result.end_error.message
    details = spb.ErrorDetails.FromString(result.end_error.details[0].value)
    assert details.details.should_show_immediate_error and not details.details.is_retryable
    assert len(provider.requests) == calls  # no provider call was made


def test_the_client_version_is_recorded_and_exported(env, provider):
    proxy, model = env
    provider.enqueue("openai_chat", CHAT.text_reply("versioned"))

    async def scenario():
        async with proxy.client(client_version="3.16.17") as client:
            return await client.run(user_turn_request("which version?", model_id=model))

    result = run(scenario())
    assert result.end_error is None
    import sqlite3
    from byok.cli import capture

    db = sqlite3.connect(proxy.db)
    row = wait_until(lambda: db.execute("SELECT client_version FROM rpc_clients WHERE request_id = ?",
                                        [result.request_id]).fetchone(), "the recorder's batch")
    assert row == ("3.16.17",)
    assert capture.export(db, result.request_id).header["cursor_version"] == "3.16.17"


def test_request_context_parts_are_fetched_checked_and_rendered(env, provider):
    """Rules, skills and MCP parts come as blob references (ids + byte lengths): one comes
    pre-fetched, the others by KV GET; all reach the runtime message; a wrong length ends the run."""
    import hashlib

    proxy, model = env
    rules = apb.RequestContextRulesPart(rules=[apb.CursorRule(full_path=".cursor/rules/style.mdc",
                                                              content="Always answer in haiku.")]).SerializeToString()
    skills = apb.RequestContextSkillsPart(agent_skills=[apb.AgentSkill(
        full_path="skills/deploy/SKILL.md", description="Deploys the app", content="run make deploy")]).SerializeToString()
    empty = b""  # an empty subagents part is the empty-string address
    ids = {name: hashlib.sha256(data).digest() for name, data in
           (("rules", rules), ("skills", skills), ("subagents", empty))}

    def request(rules_length=len(rules)):
        req = user_turn_request("use my rules", model_id=model)
        refs = req.action.request_context_parts
        refs.rules_blob_id, refs.rules_byte_length = ids["rules"], rules_length
        refs.skills_blob_id, refs.skills_byte_length = ids["skills"], len(skills)
        refs.subagents_blob_id, refs.subagents_byte_length = ids["subagents"], 0
        req.pre_fetched_blobs.add(id=ids["skills"], value=skills)
        return req

    provider.enqueue("openai_chat", CHAT.text_reply("rules read"))

    async def scenario(req):
        async with proxy.client(blobs={ids["rules"]: rules}) as client:
            return await client.run(req), list(client.get_log)

    result, gets = run(scenario(request()))
    assert result.end_error is None, result.end_error
    assert gets == [ids["rules"]]  # skills came pre-fetched, the empty part needs no read
    runtime = provider.requests[-1].json["messages"][1]["content"]
    assert "Always answer in haiku." in runtime and "<rules>" in runtime
    assert "Deploys the app" in runtime
    calls = len(provider.requests)
    bad, _ = run(scenario(request(rules_length=len(rules) + 1)))
    assert bad.end_error.code is connect.Code.INVALID_ARGUMENT
    assert f"expected {len(rules) + 1}" in bad.end_error.message
    assert len(provider.requests) == calls
