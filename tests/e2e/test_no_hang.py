"""Issue 10.8: no hang and no bare answer, whatever the client sends.

- A run that fails before its RunSSE is attached to the stream server still ends that RunSSE with a
  Connect error end-stream (never HTTP 404 with an empty body, never heartbeats for ever).
- An append the proxy rejects (empty or undecodable `data`) uses up its seqno, so nothing after it
  could ever be delivered: the rejection ends the run at once with a protocol error naming the seqno.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from byok.wire import connect
from byok.cli.client import CursorClient, handler_request_id, user_turn_request
from byok.proto import agent_pb2 as apb, aiserver_pb2 as spb
from tests.e2e.conftest import run, start_proxy
from tests.support.scripted_provider import CHAT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

HANG_GUARD_S = 30.0
"""Not a speed assertion: a run that hangs fails here with a message instead of at pytest's timeout."""


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider, upstream):
    proxy, ids = start_proxy(tmp_path_factory.mktemp("nohang"), provider, upstream, byok_route_wait_s="10",
                             byok_heartbeat_s="0.5", byok_upstream_probe_ms="0")
    yield proxy, ids["openai_chat"]
    proxy.stop()


def read_result_for(exec_id: int) -> apb.AgentClientMessage:
    return apb.AgentClientMessage(exec_client_message=apb.ExecClientMessage(id=exec_id, read_result=apb.ReadResult()))


@pytest.mark.parametrize("repeat", range(5))
def test_a_run_failing_before_its_runsse_attaches_still_ends_it_with_an_error(env, provider, repeat):
    """The fuzzer's case: RunSSE open, 0.3 s later the run_request (seqno 0) and a result for an exec
    never issued (seqno 1) at once. The run fails at once (protocol error), before or while the RunSSE
    is pointed at the stream server."""
    proxy, model = env
    before = len(provider.requests)

    async def scenario():
        async with proxy.client() as client:
            request_id = f"early-fail-{repeat}-{time.monotonic_ns()}"
            runsse = asyncio.ensure_future(client.run(user_turn_request("hi", model_id=model), request_id=request_id,
                                                      run_request_delay_s=0.3))
            await asyncio.sleep(0)  # run() took seqno 0 for the run_request
            client.append_soon(request_id, read_result_for(5), delay=0.3)  # seqno 1, sent together with it
            return await asyncio.wait_for(runsse, HANG_GUARD_S)

    result = run(scenario())
    assert result.status == 200
    assert result.kinds(skip_heartbeats=True)[-1] == "end_stream"
    assert result.end_error is not None and result.end_error.code is connect.Code.INVALID_ARGUMENT
    assert "protocol error" in result.end_error.message and "exec" in result.end_error.message.lower()
    assert len(provider.requests) == before


BAD_APPENDS = {
    "not hex": lambda rid, seqno: spb.BidiAppendRequest(data="zz-not-hex", append_seqno=seqno,
                                                        request_id=spb.BidiRequestId(request_id=rid)),
    "empty": lambda rid, seqno: spb.BidiAppendRequest(append_seqno=seqno, request_id=spb.BidiRequestId(request_id=rid)),
    "not a message": lambda rid, seqno: spb.BidiAppendRequest(data_binary=b"\xff\xff", append_seqno=seqno,
                                                              request_id=spb.BidiRequestId(request_id=rid)),
}


@pytest.mark.parametrize("bad", list(BAD_APPENDS))
def test_a_rejected_append_before_the_read_result_ends_the_run_at_once(env, provider, bad):
    proxy, model = env
    provider.enqueue("openai_chat", CHAT.tool_calls([("call_read", "Read", '{"path": "a.txt"}')]))
    before = len(provider.requests)
    seen: dict = {}

    async def on_exec(client: CursorClient, message: apb.ExecServerMessage) -> None:
        request_id = handler_request_id()
        seqno = client.next_seqno(request_id)
        body = BAD_APPENDS[bad](request_id, seqno).SerializeToString()
        seen["rejected_at"] = time.monotonic()
        seen["response"] = await client.append(request_id, apb.AgentClientMessage(), seqno=seqno, body=body)
        seen["seqno"] = seqno
        seen["result"] = await client.append(request_id, read_result_for(message.id))  # seqno + 1, never deliverable

    async def scenario():
        async with proxy.client(on_exec=on_exec) as client:
            return await asyncio.wait_for(client.run(user_turn_request("read a.txt", model_id=model)), HANG_GUARD_S)

    result = run(scenario())
    ended_at = result.frames[-1].t
    assert seen["response"].status_code == 400 and seen["response"].json()["code"] == "invalid_argument"
    assert seen["result"].status_code == 200
    error = result.end_error
    assert error is not None and error.code is connect.Code.INVALID_ARGUMENT
    assert f"append_seqno {seen['seqno']} was rejected" in error.message
    assert len(provider.requests) == before + 1  # the tool round never reached the provider
    assert provider.pending("openai_chat") == 0
    print(f"\nrejected append ({bad}) -> end-stream after {1000 * (ended_at - seen['rejected_at']):.0f} ms")


def test_a_bad_append_of_a_run_on_cursors_own_model_goes_to_cursor_as_sent(env, upstream):
    proxy, _ = env

    async def scenario():
        async with proxy.client() as client:
            result = await client.run(user_turn_request("official", model_id="cursor-own-model"))
            bad = BAD_APPENDS["not hex"](result.request_id, 9).SerializeToString()
            return result, await client.append(result.request_id, apb.AgentClientMessage(), seqno=9, body=bad), bad

    result, response, bad = run(scenario())
    assert result.end_error is None and result.text() == "official answer"
    assert response.status_code == 200
    assert any(seen.body == bad for seen in upstream.requests("/aiserver.v1.BidiService/BidiAppend"))
