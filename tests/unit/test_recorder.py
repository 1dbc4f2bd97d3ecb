"""The recorder: frames to the store (numbered, conversation filled, off the event loop), the RunSSE
tee (copies only, live updates, body kept), BidiAppends passed on, byok_record, bounded memory."""

from __future__ import annotations

import asyncio
import gzip
import sqlite3
import time

import pytest
from mitmproxy.test import taddons, tflow, tutils

from byok.wire import connect
from byok.agent.cursor import updates
from byok.agent.cursor.bidi import encode_bidi_append
from byok.cli.client import user_turn_request
from byok.options import Options
from byok.proto import agent_pb2 as apb, aiserver_pb2 as spb
from byok.recorder import Captured, FrameWriter, Recorder, now_ms, server_kind
from byok.store import AsyncStore
from byok.store.store import Store
from tests.support.waiting import until

RUN_SSE = "/agent.v1.AgentService/RunSSE"
BIDI_APPEND = "/aiserver.v1.BidiService/BidiAppend"


def env(message, **kwargs) -> bytes:
    return connect.encode_envelope(message.SerializeToString(), **kwargs)


def run_request_append(request_id: str, conversation_id: str, seqno: int = 0) -> bytes:
    request = user_turn_request("hi", model_id="m", conversation_id=conversation_id)
    return encode_bidi_append(request_id, seqno, apb.AgentClientMessage(run_request=request))


def rows(db_path, request_id: str) -> list[tuple]:
    db = sqlite3.connect(db_path)
    try:
        return db.execute(
            "SELECT direction, seq, kind, flags, conversation_id, data, ts_ms FROM frames WHERE request_id = ? "
            "ORDER BY direction, seq", [request_id]).fetchall()
    finally:
        db.close()


class UpdateSpy:
    def __init__(self) -> None:
        self.seen: list[tuple[float, bytes]] = []

    def update(self, flows) -> None:
        self.seen.append((time.monotonic(), flows[0].response.data.content))


def run_sse_flow(request_id: str, route: str, *, response_headers: dict | None = None):
    flow = tflow.tflow(
        req=tutils.treq(host="api2.cursor.sh", port=443, path=RUN_SSE.encode(), method=b"POST",
                        content=env(spb.BidiRequestId(request_id=request_id))),
        resp=tutils.tresp(content=b""),
    )
    flow.request.headers["content-type"] = "application/connect+proto"
    flow.response.headers["content-type"] = "application/connect+proto"
    for k, v in (response_headers or {}).items():
        flow.response.headers[k] = v
    flow.response.data.content = None  # streamed: mitmproxy keeps no body of its own
    flow.metadata["byok"] = route
    return flow


def append_flow(body: bytes, route: str | None, *, gzip_body: bool = False):
    flow = tflow.tflow(req=tutils.treq(host="api2.cursor.sh", port=443, path=BIDI_APPEND.encode(), method=b"POST",
                                       content=b""), resp=tutils.tresp(content=b""))
    flow.request.headers["content-type"] = "application/proto"
    if gzip_body:
        flow.request.headers["content-encoding"] = "gzip"
        flow.request.raw_content = gzip.compress(body)
    else:
        flow.request.raw_content = body
    if route:
        flow.metadata["byok"] = route
    return flow


# ---- the writer (store thread) --------------------------------------------------------------------------


def test_writer_numbers_per_direction_and_fills_conversation_from_the_run_request(tmp_path):
    store = Store.open(tmp_path / "b.db")
    writer = FrameWriter()
    text = updates.text_delta("early").SerializeToString()
    # a down frame recorded before its request's run_request was seen
    writer.write(store, [Captured("req-a", "down", 1000, None, 0, text)])
    writer.write(store, [
        Captured(None, "up", 1001, None, 0, run_request_append("req-a", "conv-a"), append_content_type="application/proto"),
        Captured("req-a", "down", 1002, None, connect.FLAG_END_STREAM, b"{}"),
        Captured("req-a", "up", 1003, "client_heartbeat", 0,
                 apb.AgentClientMessage(client_heartbeat=apb.ClientHeartbeat()).SerializeToString()),
    ])
    got = rows(tmp_path / "b.db", "req-a")
    assert [(d, s, k, c) for d, s, k, _, c, _, _ in got] == [
        ("down", 0, "interaction_update.text_delta", "conv-a"),
        ("down", 1, "end_stream", "conv-a"),
        ("up", 0, "run_request", "conv-a"),
        ("up", 1, "client_heartbeat", "conv-a"),
    ]
    # up data is the AgentClientMessage itself (decoded from the hex in the append)
    assert apb.AgentClientMessage.FromString(got[2][5]).run_request.conversation_id == "conv-a"
    # a new writer (restart, or the counters left the cache) numbers on from the database
    FrameWriter().write(store, [Captured("req-a", "down", 1004, None, 0, text)])
    assert [s for d, s, *_ in rows(tmp_path / "b.db", "req-a") if d == "down"] == [0, 1, 2]
    store.close()


def test_drift_of_frames_recorded_before_the_runsse_headers_waits_for_the_client_version(tmp_path):
    """A local run starts at its run_request, which can be recorded before its RunSSE (whose headers
    carry the client's version) arrives: the drift of such frames is tallied once the version is known,
    or without one after PARK_MS, never lost."""
    from google.protobuf.internal import encoder

    store = Store.open(tmp_path / "b.db")
    writer = FrameWriter()
    drifted = updates.text_delta("new field")
    drifted.interaction_update.text_delta.MergeFromString(encoder._VarintBytes((901 << 3) | 0) + b"\x01")
    writer.write(store, [Captured("req-v", "down", now_ms(), None, 0, drifted.SerializeToString())])
    assert store.db.execute("SELECT count(*) FROM protocol_drift").fetchone() == (0,)
    store.record_clients([{"request_id": "req-v", "client_version": "3.20.1", "user_agent": None, "ts_ms": 1}])
    writer.settle_parked(store)
    assert store.db.execute("SELECT client_version, count FROM protocol_drift").fetchall() == [("3.20.1", 1)]
    # a request whose RunSSE never says: tallied without a version at shutdown
    writer.write(store, [Captured("req-x", "down", now_ms(), None, 0, drifted.SerializeToString())])
    writer.settle_parked(store, everything=True)
    assert sorted(store.db.execute("SELECT client_version, count FROM protocol_drift").fetchall()) == [
        ("", 1), ("3.20.1", 1)]
    store.close()


def test_writer_drops_an_undecodable_append(tmp_path):
    store = Store.open(tmp_path / "b.db")
    assert FrameWriter().write(store, [Captured(None, "up", 1, None, 0, b"\xff\x00junk",
                                                append_content_type="application/proto")]) == 0
    store.close()


def test_server_kind_names_like_local_runs():
    assert server_kind(updates.text_delta("x").SerializeToString(), 0) == "interaction_update.text_delta"
    assert server_kind(updates.kv_get(1, b"\x00" * 32).SerializeToString(), 1) == "kv_server_message.get_blob_args"
    assert server_kind(updates.exec_abort(3).SerializeToString(), 0) == "exec_server_control_message"
    assert server_kind(b"{}", connect.FLAG_END_STREAM) == "end_stream"
    assert server_kind(b"\xff\xff", 0) == "undecodable"


# ---- the tee and the hooks (in a taddons context, on a real AsyncStore) ----------------------------------------


async def recorder_with_store(tmp_path, **kwargs) -> tuple[Recorder, AsyncStore]:
    store = await AsyncStore.open(tmp_path / "b.db")
    recorder = Recorder(flush_interval_s=3600, **kwargs)  # flushed by hand
    recorder.attach(store)
    return recorder, store


@pytest.mark.parametrize("route", ["upstream", "observe"])
def test_upstream_runsse_tee_copies_records_publishes_and_keeps_the_body(tmp_path, route):
    stream = b"".join([
        env(updates.text_delta("one")),
        env(updates.kv_set(0, b"\x01" * 32, b"blob data " * 100), compress=True),
        env(updates.text_delta("two")),
        connect.encode_end_stream(),
    ])

    async def scenario():
        recorder, store = await recorder_with_store(tmp_path)
        spy = UpdateSpy()
        with taddons.context(Options(), recorder, spy):
            flow = run_sse_flow("req-up", route)
            tee = recorder.tee_response(flow)
            out = b""
            for i in range(0, len(stream), 7):  # frames split across chunks
                out += tee(stream[i:i + 7])
            assert out == stream  # the tee only copies
            assert len(spy.seen) == 1 and spy.seen[0][1] == stream[:7]  # first chunk at once, then throttled
            # the throttled rest arrives on the recorder's timer
            await until(lambda: spy.seen[-1][1] == stream, "the throttled rest of the body")
            tee(b"")  # mitmproxy's end-of-message call
            recorder.response(flow)
            assert flow.response.content == stream
            await recorder.flush()
            await recorder.done()
        await store.close()
        return rows(tmp_path / "b.db", "req-up")

    got = asyncio.run(scenario())
    assert [(d, s, k, f) for d, s, k, f, *_ in got] == [
        ("down", 0, "interaction_update.text_delta", 0),
        ("down", 1, "kv_server_message.set_blob_args", connect.FLAG_COMPRESSED),
        ("down", 2, "interaction_update.text_delta", 0),
        ("down", 3, "end_stream", connect.FLAG_END_STREAM),
    ]
    # data is the uncompressed payload
    assert apb.AgentServerMessage.FromString(got[1][5]).kv_server_message.set_blob_args.blob_data == b"blob data " * 100
    assert got[3][5] == b"{}"


def test_local_runsse_tee_keeps_the_body_but_leaves_frames_to_the_run_sink(tmp_path):
    stream = env(updates.text_delta("local")) + connect.encode_end_stream()

    async def scenario():
        recorder, store = await recorder_with_store(tmp_path)
        with taddons.context(Options(), recorder):
            flow = run_sse_flow("req-local", "local")
            flow.metadata["byok_request_id"] = "req-local"
            tee = recorder.tee_response(flow)
            assert tee(stream) == stream
            recorder.error(flow)  # e.g. the client went away: the body is still kept
            assert flow.response.content == stream
            sink = recorder.sink_for("req-local")
            sink("up", "run_request", apb.AgentClientMessage(run_request=user_turn_request(
                "x", model_id="m", conversation_id="conv-l")).SerializeToString(), 0)
            sink("down", "interaction_update.text_delta", updates.text_delta("local").SerializeToString(), 0)
            await recorder.flush()
        await store.close()
        return rows(tmp_path / "b.db", "req-local")

    got = asyncio.run(scenario())
    assert [(d, s, k, c) for d, s, k, _, c, *_ in got] == [
        ("down", 0, "interaction_update.text_delta", "conv-l"), ("up", 0, "run_request", "conv-l")]


def test_runsse_with_http_content_encoding_is_inflated_for_recording(tmp_path):
    stream = env(updates.text_delta("gz")) + connect.encode_end_stream()
    wire = gzip.compress(stream)

    async def scenario():
        recorder, store = await recorder_with_store(tmp_path)
        with taddons.context(Options(), recorder):
            flow = run_sse_flow("req-gz", "upstream", response_headers={"content-encoding": "gzip"})
            tee = recorder.tee_response(flow)
            assert tee(wire[:10]) + tee(wire[10:]) == wire
            recorder.response(flow)
            assert flow.response.raw_content == wire and flow.response.content == stream
            await recorder.flush()
        await store.close()
        return rows(tmp_path / "b.db", "req-gz")

    assert [k for _, _, k, *_ in asyncio.run(scenario())] == ["interaction_update.text_delta", "end_stream"]


def test_bidi_appends_are_recorded_only_when_passed_on(tmp_path):
    async def scenario():
        recorder, store = await recorder_with_store(tmp_path)
        with taddons.context(Options(), recorder):
            for route, request_id, gz in (("upstream", "req-u", False), ("observe", "req-o", True),
                                          ("local", "req-l", False), ("rejected", "req-r", False),
                                          (None, "req-n", False)):
                flow = append_flow(run_request_append(request_id, f"conv-{request_id}"), route, gzip_body=gz)
                recorder.response(flow)
            await recorder.flush()
        await store.close()

    asyncio.run(scenario())
    for request_id in ("req-u", "req-o"):
        [(direction, seq, kind, flags, conversation, data, _)] = rows(tmp_path / "b.db", request_id)
        assert (direction, seq, kind, conversation) == ("up", 0, "run_request", f"conv-{request_id}")
    for request_id in ("req-l", "req-r", "req-n"):
        assert rows(tmp_path / "b.db", request_id) == []


def test_byok_record_off_keeps_bodies_and_writes_nothing(tmp_path):
    stream = env(updates.text_delta("quiet")) + connect.encode_end_stream()

    async def scenario():
        recorder, store = await recorder_with_store(tmp_path)
        with taddons.context(Options(), recorder) as tctx:
            tctx.configure(recorder, byok_record=False)
            flow = run_sse_flow("req-off", "observe")
            tee = recorder.tee_response(flow)
            tee(stream)
            recorder.response(flow)
            assert flow.response.content == stream
            recorder.response(append_flow(run_request_append("req-off", "c"), "observe"))
            recorder.sink_for("req-off")("down", "end_stream", b"{}", connect.FLAG_END_STREAM)
            await recorder.flush()
        await store.close()

    asyncio.run(scenario())
    assert rows(tmp_path / "b.db", "req-off") == []


def test_pending_frames_are_bounded():
    recorder = Recorder(max_pending_bytes=100)
    sink = recorder.sink_for("r")
    for _ in range(3):
        sink("down", "x", b"\x00" * 60, 0)
    assert len(recorder._pending) == 1 and recorder.dropped == 2


def test_broken_stream_stops_recording_but_not_the_copy(tmp_path):
    async def scenario():
        recorder, store = await recorder_with_store(tmp_path)
        with taddons.context(Options(), recorder):
            flow = run_sse_flow("req-bad", "upstream")
            tee = recorder.tee_response(flow)
            good = env(updates.text_delta("ok"))
            bad = connect.HEADER.pack(connect.FLAG_COMPRESSED, 4) + b"nope"
            assert tee(good) == good and tee(bad) == bad and tee(good) == good
            recorder.response(flow)
            assert flow.response.content == good + bad + good
            await recorder.flush()
        await store.close()
        return rows(tmp_path / "b.db", "req-bad")

    assert [k for _, _, k, *_ in asyncio.run(scenario())] == ["interaction_update.text_delta"]


def test_a_response_made_by_an_addon_keeps_its_body(tmp_path):
    """A rejected RunSSE gets a whole response in `request`; mitmproxy still runs `responseheaders`
    (where the tee is set) but never streams through it."""
    body = connect.encode_end_stream(connect.ConnectError(connect.Code.ALREADY_EXISTS, "twice"))

    async def scenario():
        recorder, store = await recorder_with_store(tmp_path)
        with taddons.context(Options(), recorder):
            flow = run_sse_flow("req-made", "rejected")
            flow.response.content = body
            recorder.tee_response(flow)
            recorder.response(flow)
            assert flow.response.content == body
            await recorder.done()
        await store.close()

    asyncio.run(scenario())
