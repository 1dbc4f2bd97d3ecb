"""Issue 14: Cursor's default transport, the HTTP/2 bidi `agent.v1.AgentService/Run`, through a real
mitmdump (CONNECT, TLS with the proxy's CA, ALPN h2, application/connect+proto), answered by the same
engine as RunSSE; a Cursor-model Run relayed to a fake HTTP/2 Cursor backend byte for byte."""

from __future__ import annotations

import json
import sqlite3

import pytest

from byok.wire import connect
from byok.cli.client import resume_request, user_turn_request
from byok.proto import agent_pb2 as apb, aiserver_pb2 as spb
from tests.e2e.conftest import run, start_proxy
from tests.e2e.harness import run_with_executor, stage_then_leave
from tests.support.scripted_provider import CHAT, Hang, HttpError, Usage
from tests.support.waiting import until, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider, upstream):
    proxy, ids = start_proxy(tmp_path_factory.mktemp("h2run"), provider, upstream,
                             byok_heartbeat_s="1", byok_upstream_probe_ms="0")
    yield proxy, ids["openai_chat"]
    proxy.stop()


def test_text_turn_over_http2(env, provider):
    proxy, model = env
    provider.enqueue("openai_chat", CHAT.thinking_then_text(
        "Let me think.", "Hello over HTTP/2!", usage=Usage(input_tokens=100, output_tokens=5)))

    async def scenario():
        async with proxy.h2_client() as client:
            result = await client.run(user_turn_request("hello", model_id=model))
            return result, client.responses[result.request_id]

    result, headers = run(scenario())
    assert result.status == 200 and result.end_error is None
    assert result.text() == "Hello over HTTP/2!"
    kinds = result.kinds()
    tail = kinds[kinds.index("interaction_update.turn_ended"):]
    assert tail == ["interaction_update.turn_ended"] + ["conversation_checkpoint_update"] * 3 + ["end_stream"]
    assert dict(headers)["content-type"] == "application/connect+proto"


def test_an_empty_data_frame_mid_stream_does_not_end_the_request(env, provider):
    """mitmproxy forwards an empty HTTP/2 DATA frame to the loopback hop as a zero-length chunk, which
    HTTP/1.1 reads as the body's end; the tee drops it, so the run still gets its ACKs."""
    proxy, model = env
    provider.enqueue("openai_chat", CHAT.text_reply("still here"))

    async def with_empty_frame():
        async with proxy.h2_client() as client:
            sent_empty = []

            async def on_frame(frame):
                if not sent_empty:
                    sent_empty.append(True)
                    await client.send("h2-empty-frame", apb.AgentClientMessage(), raw=b"")

            return await client.run(user_turn_request("hello", model_id=model), request_id="h2-empty-frame",
                                    on_frame=on_frame)

    result = run(with_empty_frame())
    assert result.end_error is None and result.text() == "still here"


def test_a_cursor_model_run_is_relayed_to_an_http2_upstream_byte_for_byte(tmp_path, provider):
    """A Run on a model that is not the user's goes back through mitmproxy to (fake) Cursor over HTTP/2;
    the upstream's answer depends on a message the client sends mid-stream (its blob ACK)."""
    from tests.support.fake_h2_cursor import FakeH2Cursor

    with FakeH2Cursor() as upstream:
        proxy, _ = start_proxy(tmp_path, provider, upstream, byok_upstream_probe_ms="0")
        try:
            async def scenario():
                async with proxy.h2_client() as client:
                    result = await client.run(user_turn_request("hi", model_id="claude-4.5-sonnet"),
                                              request_id="official-run-1")
                    # the request's end travels on after the response ended
                    await until(lambda: upstream.runs and upstream.runs[0].request_ended, "the request's end upstream")
                    return result, client

            result, client = run(scenario())
        finally:
            proxy.stop()
        [seen] = upstream.runs
    assert result.end_error is None and result.text() == "official answer"
    assert bytes(client.received["official-run-1"]) == bytes(seen.response)  # down, byte for byte
    assert bytes(client.sent["official-run-1"]) == bytes(seen.request)  # up, byte for byte
    assert [m.WhichOneof("message") for m in seen.messages] == ["run_request", "kv_client_message"]
    assert seen.request_ended and not seen.reset and seen.request_ended_at > seen.response_ended_at
    assert seen.headers[":authority"] == "agentn.api5.cursor.sh" and seen.headers["x-request-id"] == "official-run-1"
    assert not any(k.startswith("x-byok") for k in seen.headers)
    assert dict(client.responses["official-run-1"])["x-official"] == "yes"
    assert "official-run-1] model 'claude-4.5-sonnet' -> upstream" in proxy.log()
    db = sqlite3.connect(proxy.db)  # the relay leg is recorded like any run passed on
    frames = db.execute("SELECT direction, kind FROM frames WHERE request_id = 'official-run-1' ORDER BY direction, seq")
    assert [tuple(r) for r in frames] == [
        ("down", "kv_server_message.set_blob_args"), ("down", "interaction_update.text_delta"),
        ("down", "interaction_update.text_delta"), ("down", "end_stream"),
        ("up", "run_request"), ("up", "kv_client_message")]


def statuses(proxy) -> dict[str, str]:
    return dict(sqlite3.connect(proxy.db).execute("SELECT request_id, status FROM runs"))


def test_tool_turn_over_http2(env, provider, tmp_path):
    proxy, model = env
    (tmp_path / "a.txt").write_text("alpha\n")
    provider.enqueue("openai_chat", CHAT.tool_calls([("call_1", "Read", json.dumps({"path": str(tmp_path / "a.txt")}))]),
                     CHAT.text_reply("a.txt says alpha"))

    request = user_turn_request("read a.txt", model_id=model, workspace=str(tmp_path))
    result, execs = run_with_executor(proxy, request, tmp_path, h2=True)
    assert result.end_error is None and result.text() == "a.txt says alpha"
    assert [e.WhichOneof("message") for e in execs] == ["read_args"]
    kinds = result.kinds()
    assert kinds.index("interaction_update.tool_call_started") < kinds.index("interaction_update.tool_call_completed")
    [done] = result.down("interaction_update.tool_call_completed")
    assert "alpha" in done.message.interaction_update.tool_call_completed.tool_call.read_tool_call.result.success.content
    tool_message = provider.requests[-1].json["messages"][-1]
    assert tool_message["role"] == "tool" and "alpha" in tool_message["content"]


def test_provider_error_ends_the_stream_with_error_details(env, provider):
    proxy, model = env
    provider.enqueue("openai_chat", HttpError(500, {"error": {"message": "upstream exploded", "type": "server_error"}}))

    async def scenario():
        async with proxy.h2_client() as client:
            return await client.run(user_turn_request("fail please", model_id=model))

    result = run(scenario())
    assert result.status == 200 and result.frames[-1].flags == connect.FLAG_END_STREAM
    assert "interaction_update.turn_ended" not in result.kinds()
    assert result.kinds().count("conversation_checkpoint_update") == 1  # the user turn stays restorable
    error = result.end_error
    assert error.code is connect.Code.UNAVAILABLE
    [detail] = error.details
    details = spb.ErrorDetails.FromString(detail.value)
    assert detail.type == "aiserver.v1.ErrorDetails" and details.error == spb.ErrorDetails.ERROR_PROVIDER_ERROR
    assert "upstream exploded" in details.details.detail and details.details.is_retryable


def test_cancel_action_on_the_stream(env, provider):
    proxy, model = env
    provider.enqueue("openai_chat", Hang(30))

    async def scenario():
        async with proxy.h2_client() as client:
            async def on_frame(frame):
                if frame.kind == "conversation_checkpoint_update":
                    await client.cancel("h2-cancel", "user pressed stop")

            return await client.run(user_turn_request("stop me", model_id=model), request_id="h2-cancel",
                                    on_frame=on_frame)

    result = run(scenario())
    assert result.end_error.code is connect.Code.CANCELED
    assert "interaction_update.turn_ended" not in result.kinds()
    assert statuses(proxy)["h2-cancel"] == "canceled"


@pytest.mark.parametrize("with_end", [False, True], ids=["rst", "end+rst"])
def test_resetting_the_stream_cancels_the_run(env, provider, with_end):
    """RST_STREAM, and END_STREAM + RST_STREAM in one packet (mitmproxy may forward only the end):
    either way the client left, and the run ends canceled, its provider call abandoned."""
    proxy, model = env
    provider.enqueue("openai_chat", Hang(30))
    request_id = f"h2-reset-{with_end}"

    async def scenario():
        async with proxy.h2_client() as client:
            async def on_frame(frame):
                if frame.kind == "conversation_checkpoint_update":
                    client.reset(request_id, with_end=with_end)

            try:
                await client.run(user_turn_request("leave", model_id=model), request_id=request_id, on_frame=on_frame)
            except Exception as e:  # the stream is gone: no end-stream comes
                return e
            return None

    error = run(scenario())
    assert error is not None
    wait_until(lambda: statuses(proxy).get(request_id) not in (None, "running"), "the run's end in the store")
    assert statuses(proxy)[request_id] == "canceled"
    reasons = ("the client's Run stream failed: stream reset by client", "the client reset the Run stream",
               "the client ended its Run request before the response ended")
    assert any(f"[{request_id}] run ends with canceled: {why}" in proxy.log() for why in reasons)


def test_resume_from_a_staged_checkpoint_over_http2(env, provider, tmp_path):
    """The client leaves while a tool round is staged (it holds the staged checkpoint); a new Run with
    resume_action and that checkpoint runs the round's tools and then asks the model once."""
    proxy, model = env
    (tmp_path / "b.txt").write_text("beta\n")
    provider.enqueue("openai_chat", CHAT.tool_calls([("call_b", "Read", json.dumps({"path": str(tmp_path / "b.txt")}))]))

    req = user_turn_request("read b", model_id=model, workspace=str(tmp_path))
    staged, blobs = stage_then_leave(proxy, req, lambda client: client.reset("h2-staged"), h2=True,
                                     request_id="h2-staged")
    calls_before = len(provider.requests)
    provider.enqueue("openai_chat", CHAT.text_reply("b says beta"))

    result, execs = run_with_executor(proxy, resume_request(req, staged), tmp_path, h2=True, blobs=blobs)
    assert result.end_error is None, result.end_error
    assert [e.WhichOneof("message") for e in execs] == ["read_args"]
    assert result.text() == "b says beta" and len(provider.requests) == calls_before + 1
    assert "beta" in provider.requests[-1].json["messages"][-1]["content"]


def test_the_reverse_listener_serves_runs_for_clients_that_skip_the_proxy(tmp_path, provider):
    """`byok_agent_url` points Cursor's agent client at a reverse-mode listener of the same mitmdump.
    A client that connects there directly (no CONNECT) gets its local run, and a Cursor-model Run is
    relayed through that listener to the reverse target (here the fake HTTP/2 Cursor)."""
    from tests.e2e.harness import free_port
    from tests.support.fake_h2_cursor import FakeH2Cursor

    port = free_port()
    with FakeH2Cursor() as upstream:
        proxy, ids = start_proxy(
            tmp_path, provider, upstream, byok_upstream_probe_ms="0", byok_agent_url=f"https://127.0.0.1:{port}",
            extra_args=["--mode", "regular", "--mode", f"reverse:https://agentn.api5.cursor.sh@127.0.0.1:{port}"])
        provider.enqueue("openai_chat", CHAT.text_reply("via the reverse listener"))
        try:
            async def scenario():
                from byok.cli.h2client import H2CursorClient

                async with H2CursorClient(None, proxy.ca_file, base_url=f"https://127.0.0.1:{port}") as client:
                    local = await client.run(user_turn_request("hi", model_id=ids["openai_chat"]))
                    official = await client.run(user_turn_request("hi", model_id="gpt-5"), request_id="rev-official")
                    await until(lambda: upstream.runs and upstream.runs[0].request_ended, "the request's end upstream")
                    return local, official

            local, official = run(scenario())
        finally:
            proxy.stop()
        [seen] = upstream.runs
    assert local.end_error is None and local.text() == "via the reverse listener"
    assert official.end_error is None and official.text() == "official answer"
    assert seen.headers[":authority"] == "agentn.api5.cursor.sh" and seen.request_ended
    assert "no reverse-mode listener" not in proxy.log()


def test_shutdown_ends_an_open_run_with_unavailable(tmp_path, provider):
    import signal

    proxy, ids = start_proxy(tmp_path, provider)
    provider.enqueue("openai_chat", Hang(60))

    async def scenario():
        async with proxy.h2_client() as client:
            async def on_frame(frame):
                if frame.kind == "conversation_checkpoint_update":
                    proxy.process.send_signal(signal.SIGINT)

            return await client.run(user_turn_request("wait", model_id=ids["openai_chat"]), on_frame=on_frame)

    try:
        result = run(scenario())
        assert result.end_error.code is connect.Code.UNAVAILABLE and "shutting down" in result.end_error.message
        assert proxy.process.wait(15) == 0
        assert "Task was destroyed but it is pending" not in proxy.log()
    finally:
        proxy.stop()
