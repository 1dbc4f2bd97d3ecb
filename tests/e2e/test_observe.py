"""Issue 5/5: observe mode (`byok_mode=observe`) against a fake official backend. Nothing is answered
locally: runs on a user model and on an unknown model both go upstream, the client gets exactly the
upstream bytes, appends reach the upstream as sent (even broken ones), `/agent/v1/run` too; the
frames of both directions are in the store, decodable; mitmdump prints them decoded (auto view) and
its `-w` file keeps the streamed bodies."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import time

import pytest
from mitmproxy import io as mitmio

from byok import contentview
from byok.wire import connect
from byok.agent.cursor import updates
from byok.agent.cursor.bidi import encode_bidi_append
from byok.cli.client import user_turn_request
from byok.proto import agent_pb2 as apb, aiserver_pb2 as spb
from tests.e2e.conftest import run, start_proxy
from tests.support.fake_cursor import FakeCursor

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

RUN_SSE = "/agent.v1.AgentService/RunSSE"
BIDI_APPEND = "/aiserver.v1.BidiService/BidiAppend"
BLOB = json.dumps({"role": "assistant", "content": "official " * 200}).encode()
BLOB_ID = hashlib.sha256(BLOB).digest()
OFFICIAL = [
    connect.encode_envelope(updates.text_delta("observed ").SerializeToString()),
    connect.encode_envelope(updates.kv_set(0, BLOB_ID, BLOB).SerializeToString(), compress=True),
    connect.encode_envelope(updates.text_delta("answer").SerializeToString()),
    connect.encode_end_stream(),
]


@pytest.fixture(scope="module")
def upstream():
    with FakeCursor(script_frames=OFFICIAL, frame_delay_s=0.02) as fake:
        yield fake


@pytest.fixture(scope="module")
def observe(tmp_path_factory, provider, upstream):
    home = tmp_path_factory.mktemp("observe")
    proxy, ids = start_proxy(home, provider, upstream, byok_mode="observe", byok_route_wait_s="5",
                             flow_detail="3", save_stream_file=str(home / "flows.mitm"))
    yield proxy, ids["openai_chat"], home / "flows.mitm"
    proxy.stop()


async def raw_run(proxy, request_id: str, model_id: str, conversation_id: str) -> tuple[bytes, list[bytes]]:
    """A run by hand: the RunSSE body exactly as received, and the append bodies sent."""
    async with proxy.client() as client:
        run_request = apb.AgentClientMessage(run_request=user_turn_request(
            "observe me", model_id=model_id, conversation_id=conversation_id))
        ack = apb.AgentClientMessage(kv_client_message=apb.KvClientMessage(id=0, set_blob_result=apb.SetBlobResult()))
        sent = [encode_bidi_append(request_id, 0, run_request), encode_bidi_append(request_id, 1, ack)]
        client.next_seqno(request_id)
        first = asyncio.ensure_future(client.append(request_id, run_request, seqno=0))
        body = connect.encode_envelope(spb.BidiRequestId(request_id=request_id).SerializeToString())
        async with client._http.stream("POST", client.base_url + RUN_SSE, content=body, headers={
                "content-type": "application/connect+proto", "connect-protocol-version": "1"}) as response:
            assert response.status_code == 200
            raw = b"".join([chunk async for chunk in response.aiter_raw()])
        assert (await first).status_code == 200
        assert (await client.append(request_id, ack, seqno=1)).status_code == 200
        return raw, sent


def stored(proxy, request_id: str, count: int, timeout: float = 5) -> list[tuple]:
    db = sqlite3.connect(proxy.db)
    try:
        deadline = time.monotonic() + timeout
        while True:
            rows = db.execute("SELECT direction, seq, kind, conversation_id, flags, data, ts_ms FROM frames "
                              "WHERE request_id = ? ORDER BY direction, seq", [request_id]).fetchall()
            if len(rows) >= count or time.monotonic() > deadline:
                return rows
            time.sleep(0.05)
    finally:
        db.close()


@pytest.mark.parametrize("which", ["user_model", "unknown_model"])
def test_runs_go_upstream_untouched_and_are_recorded(observe, provider, upstream, which):
    proxy, user_model, _ = observe
    model_id = user_model if which == "user_model" else "claude-4.5-sonnet"
    request_id, conversation_id = f"req-observe-{which}", f"conv-observe-{which}"
    provider_calls = len(provider.requests)

    raw, sent = run(raw_run(proxy, request_id, model_id, conversation_id))

    assert raw == b"".join(OFFICIAL)  # the client got exactly the upstream bytes
    assert len(provider.requests) == provider_calls  # nothing ran locally
    [runsse] = [s for s in upstream.requests(RUN_SSE)
                if spb.BidiRequestId.FromString(connect.decode_all(s.body)[0].payload).request_id == request_id]
    appends = [s.body for s in upstream.requests(BIDI_APPEND)
               if spb.BidiAppendRequest.FromString(s.body).request_id.request_id == request_id]
    assert sorted(appends) == sorted(sent)  # appends reached the upstream byte for byte

    rows = stored(proxy, request_id, 6)
    assert [(d, s, k, c, f) for d, s, k, c, f, _, _ in rows] == [
        ("down", 0, "interaction_update.text_delta", conversation_id, 0),
        ("down", 1, "kv_server_message.set_blob_args", conversation_id, connect.FLAG_COMPRESSED),
        ("down", 2, "interaction_update.text_delta", conversation_id, 0),
        ("down", 3, "end_stream", conversation_id, connect.FLAG_END_STREAM),
        ("up", 0, "run_request", conversation_id, 0),
        ("up", 1, "kv_client_message", conversation_id, 0),
    ]
    down = [apb.AgentServerMessage.FromString(data) for d, _, k, _, _, data, _ in rows if d == "down" and k != "end_stream"]
    assert down[1].kv_server_message.set_blob_args.blob_data == BLOB  # stored inflated
    assert down[0].interaction_update.text_delta.text + down[2].interaction_update.text_delta.text == "observed answer"
    up = apb.AgentClientMessage.FromString(rows[4][5])
    assert up.run_request.requested_model.model_id == model_id
    assert all(r[6] > 0 for r in rows)


def test_nothing_is_answered_locally_even_broken_or_orphan_appends(observe, upstream):
    proxy, _, _ = observe

    async def scenario():
        async with proxy.client() as client:
            not_hex = spb.BidiAppendRequest(data="zz-not-hex", request_id=spb.BidiRequestId(request_id="req-junk"),
                                            append_seqno=0).SerializeToString()
            t0 = time.monotonic()
            junk = await client.append("req-junk", apb.AgentClientMessage(), seqno=0, body=not_hex)
            orphan = await client.append("req-orphan", apb.AgentClientMessage(
                client_heartbeat=apb.ClientHeartbeat()), seqno=3)
            return junk, orphan, time.monotonic() - t0, not_hex

    junk, orphan, elapsed, not_hex = run(scenario())
    # intercept mode answers these itself (400 at once / after the route wait); observe passes them on
    assert junk.status_code == 200 and orphan.status_code == 200 and elapsed < 3
    assert not_hex in [s.body for s in upstream.requests(BIDI_APPEND)]


def test_agent_v1_run_reaches_the_upstream(observe, upstream):
    proxy, _, _ = observe
    before = len(upstream.requests("/agent/v1/run"))

    async def scenario():
        async with proxy.client() as client:
            return await client._http.post("https://api2.cursor.sh/agent/v1/run", content=b"{}")

    response = run(scenario())
    assert response.status_code == 200 and response.content == b"upstream ok"
    assert len(upstream.requests("/agent/v1/run")) == before + 1


def test_mitmdump_prints_decoded_frames_and_the_flow_file_keeps_bodies(observe):
    """Runs last in this module: it stops the proxy to read the `-w` file."""
    proxy, _, flows_file = observe
    request_id = "req-observe-file"
    raw, _ = run(raw_run(proxy, request_id, "gpt-5", "conv-observe-file"))
    stored(proxy, request_id, 6)
    proxy.stop()

    log = proxy.log()  # flow_detail=3 with the default ("auto") content view
    assert "[1] MSG flags=0x01(gzip)" in log and "kv_server_message.set_blob_args  kv=0 blob=" in log
    assert "run_request  conversation=conv-observe-file model=gpt-5" in log

    with open(flows_file, "rb") as f:
        flows = list(mitmio.FlowReader(f).stream())
    [flow] = [f for f in flows if f.request.path == RUN_SSE
              and spb.BidiRequestId.FromString(connect.decode_all(f.request.content)[0].payload).request_id == request_id]
    assert flow.response.content == raw == b"".join(OFFICIAL)
    heads = ["".join(t for _, t in line) for line in contentview.render_server_stream(flow.response.content)]
    assert heads[-2] == "[3] END flags=0x02(end) len=2 ok"
