"""Issue 10.6: newer clients' appends. A whole Read tool turn runs with every append carrying its
message in hex `data`, in raw `data_binary` (field 4, `data` empty), or in both, each also with
gzip-compressed bodies (`content-encoding: gzip`); the recorder stores the same frames whatever the
form; observe mode records data_binary appends and passes them upstream as sent; two different
messages in one append are refused."""

from __future__ import annotations

import gzip
import sqlite3
import time

import pytest

from byok.cli.client import user_turn_request
from byok.cli.executor import LocalExecutor
from byok.proto import agent_pb2 as apb, aiserver_pb2 as spb
from tests.e2e.conftest import run, start_proxy
from tests.support.scripted_provider import CHAT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

BIDI_APPEND = "/aiserver.v1.BidiService/BidiAppend"


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider, upstream):
    proxy, ids = start_proxy(tmp_path_factory.mktemp("forms"), provider, upstream, byok_route_wait_s="5",
                             byok_upstream_probe_ms="0")
    yield proxy, ids["openai_chat"]
    proxy.stop()


def up_frames(db_path, request_id: str, expected: int, timeout: float = 5.0) -> list[tuple[str, bytes]]:
    db = sqlite3.connect(db_path)
    try:
        deadline = time.monotonic() + timeout
        while True:
            rows = db.execute("SELECT kind, data FROM frames WHERE request_id = ? AND direction = 'up' ORDER BY seq",
                              [request_id]).fetchall()
            if len(rows) >= expected or time.monotonic() > deadline:
                return rows
            time.sleep(0.05)
    finally:
        db.close()


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("form", ["data", "data_binary", "both"])
def test_a_read_tool_turn_in_each_append_form(env, provider, tmp_path, form, gzipped):
    proxy, model = env
    (tmp_path / "notes.txt").write_text("form check\n")
    provider.enqueue("openai_chat", CHAT.tool_calls([("call_read", "Read", '{"path": "notes.txt"}')]),
                     CHAT.text_reply(f"read it as {form}"))
    executor = LocalExecutor(tmp_path)

    async def scenario():
        async with proxy.client(on_exec=executor.on_exec, append_form=form, gzip_appends=gzipped) as client:
            try:
                return await client.run(user_turn_request("read notes.txt", model_id=model, workspace=str(tmp_path)),
                                        on_frame=executor.on_frame)
            finally:
                await executor.aclose()

    before = len(provider.requests)
    result = run(scenario())
    assert result.end_error is None, result.end_error
    assert result.text() == f"read it as {form}"
    assert len(provider.requests) == before + 2
    tool_results = [m["content"] for m in provider.requests[-1].json["messages"] if m["role"] == "tool"]
    assert any("form check" in r for r in tool_results)
    # recorded in protocol order, the message bytes whatever field carried them
    sent = sorted((f for f in result.frames if f.direction == "up"), key=lambda f: f.seqno)
    rows = up_frames(proxy.db, result.request_id, len(sent))
    assert [data for _, data in rows] == [f.message.SerializeToString() for f in sent]
    kinds = [kind for kind, _ in rows]
    assert kinds[0] == "run_request" and "exec_client_message" in kinds and "kv_client_message" in kinds


def test_an_append_with_two_different_messages_is_refused(env):
    proxy, _ = env
    heartbeat = apb.AgentClientMessage(client_heartbeat=apb.ClientHeartbeat()).SerializeToString()
    other = apb.AgentClientMessage(prewarm_request=apb.PrewarmRequest()).SerializeToString()

    async def scenario():
        async with proxy.client() as client:
            body = spb.BidiAppendRequest(data=heartbeat.hex(), data_binary=other, append_seqno=0,
                                         request_id=spb.BidiRequestId(request_id="mixed")).SerializeToString()
            return await client.append("mixed", apb.AgentClientMessage(), seqno=0, body=body)

    response = run(scenario())
    assert response.status_code == 400 and response.json()["code"] == "invalid_argument"
    assert "data and data_binary hold different messages" in response.json()["message"]


def test_observe_mode_records_data_binary_appends_and_passes_them_on_as_sent(tmp_path, provider, upstream):
    proxy, ids = start_proxy(tmp_path / "observe", provider, upstream, byok_mode="observe", byok_route_wait_s="5")
    try:
        async def scenario():
            async with proxy.client(append_form="data_binary", gzip_appends=True) as client:
                return await client.run(user_turn_request("observe binary", model_id=ids["openai_chat"]))

        result = run(scenario())
        assert result.end_error is None and result.text() == "official answer"  # the fake upstream's answer
        [row] = up_frames(proxy.db, result.request_id, 1)
        assert row[0] == "run_request"
        assert apb.AgentClientMessage.FromString(row[1]).run_request.action.user_message_action.user_message.text \
            == "observe binary"
        [seen] = [s for s in upstream.requests(BIDI_APPEND) if s.headers.get("content-encoding") == "gzip"
                  and result.request_id.encode() in gzip.decompress(s.body)]
        append = spb.BidiAppendRequest.FromString(gzip.decompress(seen.body))
        assert append.data == "" and apb.AgentClientMessage.FromString(append.data_binary).HasField("run_request")
    finally:
        proxy.stop()
