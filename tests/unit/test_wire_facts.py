"""Wire facts (addon/wire_facts.py, migration m010): what the recorder notes for `cursor-byok verify`
beyond frames: a Run's protocol headers (no secret values), first messages and the end of each side;
every BidiAppend as it arrived, in any route, with its seqno and form; and per host what the router
made of its flows."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time

from mitmproxy.test import taddons, tflow, tutils

from byok.agent.cursor.bidi import encode_bidi_append
from byok.cli.client import user_turn_request
from byok.options import Options
from byok.proto import agent_pb2 as apb, aiserver_pb2 as spb
from byok.wire import connect
from byok.wire_facts import OPEN_AFTER_RESPONSE_MS
from tests.unit.test_recorder import append_flow, recorder_with_store, run_request_append, run_sse_flow

RUN = "/agent.v1.AgentService/Run"
HEARTBEAT = apb.AgentClientMessage(client_heartbeat=apb.ClientHeartbeat())


def run_flow(request_id: str, *, secret: str = "Bearer sk-secret-token"):
    flow = tflow.tflow(req=tutils.treq(host="agentn.api5.cursor.sh", port=443, path=RUN.encode(), method=b"POST",
                                       http_version=b"HTTP/2.0", content=b""),
                       resp=tutils.tresp(content=b""))
    flow.request.headers.clear()
    for k, v in (("content-type", "application/connect+proto"), ("connect-protocol-version", "1"),
                 ("authorization", secret), ("x-request-id", request_id), ("te", "trailers")):
        flow.request.headers[k] = v
    flow.request.timestamp_end = None
    flow.response.timestamp_end = None
    return flow


def open_run(recorder, request_id: str, **metadata):
    """A Run flow as the recorder sees it: its headers, then the backend's routing, then the tee."""
    flow = run_flow(request_id)
    recorder.requestheaders(flow)
    flow.metadata.update(byok_request_id=request_id, **metadata)
    return flow, recorder.tee_request(flow)


def query(db_path, sql: str) -> list[tuple]:
    db = sqlite3.connect(db_path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def test_a_run_keeps_protocol_headers_first_messages_and_both_ends(tmp_path):
    async def scenario():
        recorder, store = await recorder_with_store(tmp_path)
        with taddons.context(Options(), recorder):
            flow, tee = open_run(recorder, "req-run", byok="observe")
            flow.request.headers["x-byok-run-stream"] = "token"  # the backend's own, after the snapshot
            run_request = apb.AgentClientMessage(run_request=user_turn_request("hi", model_id="m",
                                                                                conversation_id="c"))
            body = connect.encode_envelope(HEARTBEAT.SerializeToString()) + connect.encode_envelope(
                run_request.SerializeToString(), compress=True)
            tee(body[:3])
            tee(body[3:])
            start = time.time()
            flow.response.timestamp_end = start  # the response ends first...
            recorder.response(flow)
            await recorder.flush()
            assert query(tmp_path / "b.db", "SELECT count(*) FROM rpc_streams") == [(0,)]  # still open
            flow.request.timestamp_end = start + 0.25  # ...then Cursor ends its request
            recorder.request(flow)
            await recorder.flush()
        await store.close()
        return int(start * 1000)

    start = asyncio.run(scenario())
    [(rid, rpc, host, version, names, headers, first, route, req_end, resp_end, error)] = query(
        tmp_path / "b.db", "SELECT request_id, rpc, host, http_version, header_names, headers, first_kinds, route,"
                           " request_end_ms, response_end_ms, error FROM rpc_streams")
    assert (rid, rpc, host, version, route, error) == ("req-run", "run", "agentn.api5.cursor.sh", "HTTP/2.0",
                                                       "observe", None)
    assert json.loads(first) == ["client_heartbeat", "run_request"]
    assert resp_end == start and abs(req_end - (start + 250)) <= 1
    assert "authorization" in json.loads(names) and "x-byok-run-stream" not in json.loads(names)
    assert json.loads(headers) == {"content-type": "application/connect+proto", "connect-protocol-version": "1",
                                   "te": "trailers"}
    assert "sk-secret" not in names + headers


def test_a_run_whose_request_stays_open_long_after_its_response_is_written_as_it_is(tmp_path):
    async def scenario():
        recorder, store = await recorder_with_store(tmp_path)
        with taddons.context(Options(), recorder):
            flow, _ = open_run(recorder, "req-open", byok="run")
            flow.response.timestamp_end = time.time() - OPEN_AFTER_RESPONSE_MS / 1000 - 1
            recorder.response(flow)
            await recorder.flush()
        await store.close()

    asyncio.run(scenario())
    [(request_end, response_end)] = query(tmp_path / "b.db", "SELECT request_end_ms, response_end_ms FROM rpc_streams")
    assert request_end is None and response_end is not None


def test_a_relay_leg_is_not_a_client_stream_and_a_reset_run_keeps_its_error(tmp_path):
    async def scenario():
        recorder, store = await recorder_with_store(tmp_path)
        with taddons.context(Options(), recorder):
            relay, _ = open_run(recorder, "req-relay", byok="upstream", byok_relay=True)
            reset, _ = open_run(recorder, "req-reset", byok="run")
            relay.response.timestamp_end = relay.request.timestamp_end = 5.0
            recorder.request(relay)
            recorder.response(relay)
            from mitmproxy.flow import Error

            reset.error = Error("stream reset by client")
            recorder.error(reset)
            await recorder.flush()
        await store.close()

    asyncio.run(scenario())
    assert query(tmp_path / "b.db", "SELECT request_id, request_end_ms, response_end_ms, error FROM rpc_streams") == [
        ("req-reset", None, None, "stream reset by client")]


def test_a_run_nobody_routed_leaves_no_row_and_does_not_stop_the_batch(tmp_path):
    """A Run to a host outside byok_hosts is never given a request id (no tee): it is not a stream
    row, and the frames and appends flushed with it are still written."""
    async def scenario():
        recorder, store = await recorder_with_store(tmp_path)
        with taddons.context(Options(), recorder):
            flow = run_flow("req-unrouted")
            recorder.requestheaders(flow)
            flow.request.timestamp_end = flow.response.timestamp_end = time.time()
            recorder.request(flow)
            recorder.response(flow)
            recorder.sink_for("req-other")("down", "end_stream", b"{}", connect.FLAG_END_STREAM)
            recorder.response(append_flow(run_request_append("req-other", "c"), "answered"))
            await recorder.flush()
        await store.close()

    asyncio.run(scenario())
    assert query(tmp_path / "b.db", "SELECT count(*) FROM rpc_streams") == [(0,)]
    assert query(tmp_path / "b.db", "SELECT request_id FROM frames") == [("req-other",)]
    assert query(tmp_path / "b.db", "SELECT request_id, seqno FROM bidi_appends") == [("req-other", 0)]


def test_a_runsse_is_noted_at_its_request_with_the_route_it_took(tmp_path):
    async def scenario():
        recorder, store = await recorder_with_store(tmp_path)
        with taddons.context(Options(), recorder):
            flow = run_sse_flow("req-sse", "upstream")
            flow.metadata.pop("byok")
            recorder.request(flow)  # before the backend decided anything
            flow.metadata["byok"] = "upstream"
            recorder.response(flow)
            await recorder.flush()
        await store.close()

    asyncio.run(scenario())
    [(rid, rpc, route, headers, req_end, resp_end)] = query(
        tmp_path / "b.db", "SELECT request_id, rpc, route, headers, request_end_ms, response_end_ms FROM rpc_streams")
    assert (rid, rpc, route) == ("req-sse", "run_sse", "upstream")
    assert json.loads(headers) == {"content-type": "application/connect+proto"}
    assert req_end is not None and resp_end is not None


def test_every_append_arrival_is_noted_with_its_seqno_and_form_in_every_route(tmp_path):
    message = apb.AgentClientMessage(kv_client_message=apb.KvClientMessage(id=3, set_blob_result=apb.SetBlobResult()))
    differ = spb.BidiAppendRequest(request_id=spb.BidiRequestId(request_id="req-bad"), append_seqno=4,
                                   data=message.SerializeToString().hex(), data_binary=HEARTBEAT.SerializeToString())

    async def scenario():
        recorder, store = await recorder_with_store(tmp_path)
        with taddons.context(Options(), recorder):
            arrivals = [
                (run_request_append("req-a", "conv-a", seqno=0), "answered", False),
                (encode_bidi_append("req-a", 2, message, form="data_binary"), "answered", True),
                (encode_bidi_append("req-a", 1, message, form="both"), "upstream", False),
                (differ.SerializeToString(), "rejected", False),
            ]
            for i, (body, route, gz) in enumerate(arrivals):
                flow = append_flow(body, route, gzip_body=gz)
                flow.request.timestamp_end = 100.0 + i / 1000
                recorder.response(flow)
            await recorder.flush()
        await store.close()

    asyncio.run(scenario())
    got = query(tmp_path / "b.db", "SELECT request_id, seqno, form, content_encoding, kind, problem, arrived_us"
                                   " FROM bidi_appends ORDER BY arrived_us")
    assert [g[:5] for g in got] == [
        ("req-a", 0, "data", None, "run_request"),
        ("req-a", 2, "data_binary", "gzip", "kv_client_message"),
        ("req-a", 1, "both", None, "kv_client_message"),
        ("req-bad", 4, "invalid", None, None),
    ]
    assert got[3][5] == "BidiAppend data and data_binary hold different messages"
    assert [g[6] for g in got] == [100_000_000, 100_001_000, 100_002_000, 100_003_000]
    # only the passed-on append is a frame (a local run records the frames it was given)
    assert query(tmp_path / "b.db", "SELECT request_id, seq, kind FROM frames") == [("req-a", 0, "kv_client_message")]


def test_hosts_are_counted_per_classification_and_other_hosts_are_ignored(tmp_path):
    def flow_to(host: str, path: str, method: bytes = b"POST"):
        return tflow.tflow(req=tutils.treq(host=host, port=443, path=path.encode(), method=method))

    async def scenario():
        recorder, store = await recorder_with_store(tmp_path)
        with taddons.context(Options(), recorder) as tctx:
            tctx.configure(recorder, byok_hosts=["api2.cursor.sh", "*.api5.cursor.sh"])
            for host, path in (("api2.cursor.sh", "/agent.v1.AgentService/RunSSE"),
                               ("api2.cursor.sh", "/agent.v1.AgentService/RunSSE"),
                               ("api2.cursor.sh", "/aiserver.v1.AiService/Whatever"),
                               ("api3.cursor.sh", "/aiserver.v1.AiService/StreamCpp"),
                               ("agent.example.com", "/agent.v1.AgentService/Run"),
                               ("example.com", "/index.html")):
                recorder.requestheaders(flow_to(host, path))
            await recorder.flush()
        await store.close()

    asyncio.run(scenario())
    assert query(tmp_path / "b.db", "SELECT host, rpc, matched, count FROM wire_hosts ORDER BY host, rpc") == [
        ("agent.example.com", "run", 0, 1),
        ("api2.cursor.sh", "other", 1, 1),
        ("api2.cursor.sh", "run_sse", 1, 2),
        ("api3.cursor.sh", "one_shot", 0, 1),  # StreamCpp: Tab, a one-shot service
    ]


def test_record_off_notes_no_wire_facts(tmp_path):
    async def scenario():
        recorder, store = await recorder_with_store(tmp_path)
        with taddons.context(Options(), recorder) as tctx:
            tctx.configure(recorder, byok_record=False)
            flow = run_flow("req-quiet")
            recorder.requestheaders(flow)
            recorder.response(append_flow(run_request_append("req-quiet", "c"), "answered"))
            await recorder.flush()
        await store.close()

    asyncio.run(scenario())
    for table in ("rpc_streams", "bidi_appends", "wire_hosts"):
        assert query(tmp_path / "b.db", f"SELECT count(*) FROM {table}") == [(0,)]
