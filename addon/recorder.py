"""Recording: every Connect frame of the agent RPCs to the store, and streamed bodies kept on flows.

Where frames come from:
- local runs: the run's frame sink (`sink_for(request_id)`), both directions as the run sees them;
- runs not answered here (official models in intercept mode, every run in observe mode): the RunSSE
  response frames, teed from the streamed body (`tee_response`), and the BidiAppend request bodies
  once the backend has passed them on (`response` / `error` hooks).
The event loop only appends captured frames to a bounded buffer. One task hands batches to the
store thread, where `FrameWriter` decodes what is still undecoded (kinds, BidiAppend bodies),
numbers frames per (request_id, direction) and fills conversation_id from the request's
run_request. `data` is always the uncompressed payload; `flags` are the wire flags.

A streamed RunSSE body, local or upstream, is teed: mitmweb sees it grow while the stream runs
(throttled updates, the last one never later than one interval) and the flow keeps it afterwards
(also in `-w` flow files). The tee only copies: the bytes the client gets are never touched.
`byok_record=false` stops frames going to the store; bodies are still kept on flows for display.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass

from google.protobuf.message import DecodeError
from mitmproxy import ctx, http
from mitmproxy.hooks import UpdateHook

from byok.proto import agent_pb2 as apb

from .access import authenticated_user
from .wire import connect
from .agent import drift
from .agent.cursor.bidi import UnusableAppend, decode_bidi_append, decode_run_sse
from .agent.run import FrameSink
from .router import BIDI_APPEND_PATH, RUN_SSE_PATH
from .wire_facts import FirstMessages, WireFacts, client_kind

log = logging.getLogger("byok.recorder")

LIVE_UPDATE_INTERVAL_S = 0.25
PARK_MS = 10_000
PARK_PER_REQUEST = 256
FLUSH_INTERVAL_S = 0.2
MAX_PENDING_BYTES = 64 * 1024 * 1024
"""Frames waiting for the store beyond this are dropped (and counted): a stuck disk must not grow
the proxy without bound."""
PASSED_ON = ("upstream", "observe")
"""`flow.metadata["byok"]` of agent RPC flows the backend did not answer itself."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class Captured:
    """One frame as captured on the event loop; `FrameWriter` completes it on the store thread."""

    request_id: str | None
    direction: str
    ts_ms: int
    kind: str | None
    flags: int
    data: bytes
    append_content_type: str | None = None
    """Set when `data` is a whole BidiAppend body still to decode (request id, message)."""
    append_encoding: str | None = None
    """The append body's content-encoding (gzip and deflate are inflated on the store thread)."""
    as_frame: bool = True
    """False: an append answered here, whose frame the local run records; only its arrival is noted."""
    arrived_us: int | None = None
    """When the append arrived (epoch microseconds: arrival order of appends within one millisecond)."""


CLIENT_VERSION_HEADERS = ("x-cursor-client-version", "x-client-version")


def client_info(request_id: str, flow: http.HTTPFlow) -> dict:
    """The client's version (Cursor sends it as a header), user agent and proxyauth user name (the
    team server scopes traces by it); never auth headers or passwords."""
    headers = flow.request.headers
    version = next((headers[h] for h in CLIENT_VERSION_HEADERS if h in headers), None)
    return {"request_id": request_id, "client_version": version, "user_agent": headers.get("user-agent"),
            "ts_ms": int((flow.request.timestamp_start or time.time()) * 1000), "user_id": authenticated_user(flow)}


def server_kind(payload: bytes, flags: int, message: apb.AgentServerMessage | None = None) -> str:
    """The kind of a down frame, named like the local run's frames (`interaction_update.text_delta`)."""
    if flags & connect.FLAG_END_STREAM:
        return "end_stream"
    if message is None:
        try:
            message = apb.AgentServerMessage.FromString(payload)
        except DecodeError:
            return "undecodable"
    kind = message.WhichOneof("message") or "empty"
    if kind in ("interaction_update", "kv_server_message"):
        return f"{kind}.{getattr(message, kind).WhichOneof('message')}"
    return kind


# ---- store thread ----------------------------------------------------------------------------------


class FrameWriter:
    """Completes and writes batches on a store thread; the recorder awaits one batch at a time, so
    its maps are never used by two threads at once.

    seq continues from the database the first time a (request, direction) is seen, so a request
    seen again after its counters left the bounded cache still numbers on.
    """

    def __init__(self, max_requests: int = 4096) -> None:
        self.max_requests = max_requests
        self._seq: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._conversations: OrderedDict[str, str] = OrderedDict()
        self._versions: OrderedDict[str, str] = OrderedDict()
        self.drift = drift.DriftTally()
        self._drift_logged: set[tuple] = set()
        self._parked: OrderedDict[str, list[tuple]] = OrderedDict()
        """request id -> frames whose drift waits for the client's version (its RunSSE headers)."""

    def write(self, store, batch: list[Captured], streams: list[dict] = (), hosts: list[dict] = ()) -> int:
        """Write a batch of frames, plus the wire facts `verify` reads (wire_facts.py)."""
        rows, learned, appends = [], {}, []
        for item in batch:
            row = self._row(store, item, learned, appends)
            if row is not None:
                rows.append(row)
        for row in rows:
            row["conversation_id"] = self._conversations.get(row["request_id"])
        store.record_frames(rows)
        self._release_parked(store)
        tallied = self.drift.take()
        if tallied:
            store.record_drift(tallied)
        for request_id, conversation_id in learned.items():
            # frames of this request written before its run_request was seen
            store.fill_frame_conversation(request_id, conversation_id)
        if streams or appends or hosts:  # last: what verify reads never holds up the frames
            store.record_wire_facts(streams, appends, hosts)
        return len(rows)

    def _row(self, store, item: Captured, learned: dict[str, str], appends: list[dict]) -> dict | None:
        request_id, kind, data, message = item.request_id, item.kind, item.data, None
        if item.append_content_type is not None:
            append = self._append(item, appends)
            if append is None or not item.as_frame:
                return None
            request_id, message, data = append.request_id, append.message, append.raw
            kind = message.WhichOneof("message") or "empty"
        elif kind is None:
            if item.direction == "down" and not item.flags & connect.FLAG_END_STREAM:
                try:
                    message = apb.AgentServerMessage.FromString(data)
                except DecodeError:
                    pass
            kind = server_kind(data, item.flags, message) if item.direction == "down" else "undecodable"
        assert request_id is not None
        # A local run's own down frames were built here from our schema: nothing in them is unknown.
        ours = item.kind is not None and item.direction == "down"
        if message is None and not ours and not item.flags & connect.FLAG_END_STREAM and kind != "undecodable":
            cls = apb.AgentServerMessage if item.direction == "down" else apb.AgentClientMessage
            try:
                message = cls.FromString(data)
            except DecodeError:
                message = None
        if message is not None:
            self.count_drift(store, item.direction, message, request_id, item.ts_ms)
        if item.direction == "up" and kind == "run_request" and request_id not in self._conversations:
            try:
                message = message or apb.AgentClientMessage.FromString(data)
            except DecodeError:
                message = None
            if message is not None and message.run_request.conversation_id:
                self._remember(self._conversations, request_id, message.run_request.conversation_id)
                learned[request_id] = message.run_request.conversation_id
        return {
            "request_id": request_id, "seq": self._next_seq(store, request_id, item.direction),
            "direction": item.direction, "ts_ms": item.ts_ms, "kind": kind, "flags": item.flags, "data": data,
        }

    @staticmethod
    def _append(item: Captured, appends: list[dict]):
        """Decode a BidiAppend body and note its arrival (seqno, form; `problem` when unusable)."""
        fact = {"request_id": "", "seqno": None, "form": "invalid", "content_type": item.append_content_type,
                "content_encoding": item.append_encoding, "kind": None, "problem": None,
                "arrived_us": item.arrived_us if item.arrived_us is not None else item.ts_ms * 1000}
        appends.append(fact)
        try:
            append = decode_bidi_append(_inflated(item.data, item.append_encoding), item.append_content_type)
        except UnusableAppend as e:
            fact.update(request_id=e.request_id, seqno=e.seqno, problem=e.message)
            return None
        except (connect.ConnectError, ValueError, zlib.error) as e:
            fact["problem"] = e.message if isinstance(e, connect.ConnectError) else str(e)
            if item.as_frame:
                log.info("BidiAppend passed upstream is not decodable, not recorded: %s", fact["problem"])
            return None
        fact.update(request_id=append.request_id, seqno=append.seqno, form=append.form,
                    kind=append.message.WhichOneof("message") or "empty")
        return append

    def count_drift(self, store, direction: str, message, request_id: str, ts_ms: int) -> None:
        """Tally the unknown fields of one decoded frame (any transport's recorder path calls this on
        the store thread); the first sighting of each kind of drift is logged. A frame recorded before
        its request's RunSSE headers told the client's version waits for them (PARK_MS at most)."""
        version = self._client_version(store, request_id)
        if request_id not in self._versions and drift.unknowns(message):  # no RunSSE headers seen yet
            parked = self._parked.setdefault(request_id, [])
            if len(parked) < PARK_PER_REQUEST:
                parked.append((direction, message, ts_ms))
                while len(self._parked) > self.max_requests:
                    self._tally_parked(store, *self._parked.popitem(last=False))
                return
        self._tally(direction, message, request_id, version, ts_ms)

    def _release_parked(self, store, *, everything: bool = False) -> None:
        now = now_ms()
        for request_id in list(self._parked):
            version = self._client_version(store, request_id)
            frames = self._parked[request_id]
            if request_id in self._versions or everything or now - frames[0][2] > PARK_MS:
                del self._parked[request_id]
                self._tally_parked(store, request_id, frames, version)

    def _tally_parked(self, store, request_id: str, frames: list[tuple], version: str | None = None) -> None:
        version = self._client_version(store, request_id) if version is None else version
        for direction, message, ts_ms in frames:
            self._tally(direction, message, request_id, version, ts_ms)

    def settle_parked(self, store, *, everything: bool = False) -> None:
        """Tally the parked frames whose client version is now known (at shutdown: all of them)."""
        self._release_parked(store, everything=everything)
        tallied = self.drift.take()
        if tallied:
            store.record_drift(tallied)

    def _tally(self, direction: str, message, request_id: str, version: str, ts_ms: int) -> None:
        for u in self.drift.observe(direction, message, request_id, client_version=version, ts_ms=ts_ms):
            key = (direction, u.path, u.field_number, u.wire_type, version)
            if key not in self._drift_logged and len(self._drift_logged) < 10_000:
                self._drift_logged.add(key)
                log.warning("[%s] protocol drift (%s, client %s): unknown %s; `cursor-byok drift` reports them all",
                            request_id, direction, version or "version unknown", drift.describe([u]))

    def _client_version(self, store, request_id: str) -> str:
        version = self._versions.get(request_id)
        if version is None:
            row = store.db.execute("SELECT client_version FROM rpc_clients WHERE request_id = ?",
                                   [request_id]).fetchone()
            if row is None:
                return ""  # not known (yet): RunSSE headers arrive with the stream
            version = row[0] or ""
            self._remember(self._versions, request_id, version)
        return version

    def _next_seq(self, store, request_id: str, direction: str) -> int:
        key = (request_id, direction)
        seq = self._seq.get(key)
        if seq is None:
            seq = store.next_frame_seq(request_id, direction)
        self._remember(self._seq, key, seq + 1)
        return seq

    def _remember(self, cache: OrderedDict, key, value) -> None:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > self.max_requests:
            cache.popitem(last=False)


# ---- streamed bodies ---------------------------------------------------------------------------------


class StreamTee:
    """The `flow.response.stream` (or, for an HTTP/2 Run, also `flow.request.stream`) callable of one
    agent stream: keeps a copy of every chunk for the flow, publishes it to mitmweb (throttled),
    and, for runs not answered here, cuts the copy into frames for the store. Returns each chunk
    unchanged."""

    def __init__(self, recorder: "Recorder", flow: http.HTTPFlow, request_id: str | None,
                 interval_s: float = LIVE_UPDATE_INTERVAL_S, *, side: str = "response") -> None:
        self.recorder = recorder
        self.flow = flow
        self.request_id = request_id
        self.interval_s = interval_s
        self.side = side
        self.direction = "down" if side == "response" else "up"
        self.body = bytearray()
        self.closed = False
        self.streamed = False
        """Chunks went through; a response an addon made in `request` is never streamed and keeps its body."""
        self._decoder = connect.EnvelopeDecoder() if request_id else None
        self._inflate = _http_decoder(self.message) if request_id else None
        self._last_publish = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.first: FirstMessages | None = None
        """A Run's request: the kinds of its first messages, for `verify` (wire_facts.py)."""

    @property
    def message(self) -> http.Message | None:
        return self.flow.response if self.side == "response" else self.flow.request

    def __call__(self, chunk: bytes) -> bytes | list[bytes]:
        if not chunk:
            # mitmproxy (11.0.2 and 12.3) writes an empty chunk to an HTTP/1.1 peer as `0\r\n\r\n`, the body's
            # end: an empty HTTP/2 DATA frame would end the stream early. Nothing to forward.
            return []
        self.streamed = True
        if chunk and not self.closed:
            self.body += chunk
            if self._decoder is not None:
                self._record(chunk)
            if self.first is not None and not self.first.done:
                self.first.feed(chunk)
            self._schedule_publish()
        return chunk

    def _record(self, chunk: bytes) -> None:
        try:
            data = self._inflate.decompress(chunk) if self._inflate is not None else chunk
            frames = self._decoder.feed(data)
        except (connect.ConnectError, zlib.error) as e:
            log.warning("[%s] RunSSE frames no longer recorded: %s", self.request_id, e)
            self._decoder = None
            return
        ts = now_ms()
        for frame in frames:
            kind = None if self.direction == "down" else client_kind(frame.payload, frame.flags)
            self.recorder.capture(Captured(self.request_id, self.direction, ts, kind, frame.flags, frame.payload))

    def _schedule_publish(self) -> None:
        due = self._last_publish + self.interval_s
        now = time.monotonic()
        if now >= due:
            self.publish()
        elif self._timer is None:
            try:
                self._timer = asyncio.get_running_loop().call_later(due - now, self.publish)
            except RuntimeError:  # no loop (called outside mitmproxy): publish at the next chunk
                pass

    def publish(self) -> None:
        """Put the bytes so far on the flow and tell the UI (mitmweb) the flow changed."""
        self._timer = None
        if self.closed or self.message is None:
            return
        self._last_publish = time.monotonic()
        self.message.data.content = bytes(self.body)
        ctx.master.addons.trigger(UpdateHook([self.flow]))

    def keep(self) -> None:
        """Put the bytes so far on the flow, without telling the UI."""
        if self.streamed and self.message is not None:
            self.message.data.content = bytes(self.body)

    def finish(self) -> None:
        """The stream ended (or failed): the flow keeps the whole body, already sent to the client."""
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.keep()
        if self._decoder is not None and self._decoder.buffered:
            log.info("[%s] %s stream ended inside a frame (%d bytes left over)", self.request_id, self.side,
                     self._decoder.buffered)


def _inflated(body: bytes, encoding: str | None) -> bytes:
    """A unary body as sent with `content-encoding` (identity, gzip or deflate), inflated."""
    encoding = (encoding or "").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding in ("gzip", "x-gzip", "deflate"):
        return zlib.decompress(body, 32 + zlib.MAX_WBITS) if encoding != "deflate" else _inflate_deflate(body)
    raise ValueError(f"content-encoding {encoding!r}")


def _inflate_deflate(body: bytes) -> bytes:
    try:
        return zlib.decompress(body)  # zlib-wrapped, as HTTP's deflate means
    except zlib.error:
        return zlib.decompress(body, -zlib.MAX_WBITS)  # raw deflate, as some clients send it


def _http_decoder(message: http.Message | None):
    """Stream bodies are not content-encoded (Connect compresses per frame); if one is, inflate
    gzip/deflate for recording (the flow keeps the bytes as sent)."""
    encoding = (message.headers.get("content-encoding", "") if message is not None else "").strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip", "deflate"):
        return zlib.decompressobj(32 + zlib.MAX_WBITS)  # gzip or zlib header, detected
    raise ValueError(f"content-encoding {encoding!r}")


# ---- the addon ------------------------------------------------------------------------------------------


class Recorder:
    def __init__(self, *, flush_interval_s: float = FLUSH_INTERVAL_S,
                 max_pending_bytes: int = MAX_PENDING_BYTES) -> None:
        self.store = None
        self.enabled = True
        """`byok_record`: frames go to the store."""
        self.writer = FrameWriter()
        self.flush_interval_s = flush_interval_s
        self.max_pending_bytes = max_pending_bytes
        self.dropped = 0
        self._pending: list[Captured] = []
        self._clients: list[dict] = []
        self._pending_bytes = 0
        self._lock = asyncio.Lock()
        self._task: asyncio.Task | None = None
        self._tees: dict[tuple[str, str], StreamTee] = {}
        self.facts = WireFacts()

    def configure(self, updated: set[str]) -> None:
        if "byok_record" in updated:
            self.enabled = bool(ctx.options.byok_record)

    def attach(self, store) -> None:
        """Start writing to `store` (an AsyncStore) once the backend has opened it."""
        self.store = store
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._flush_forever(), name="byok recorder")

    # ---- capture (event loop, never blocks) ------------------------------------------------------

    def capture(self, item: Captured) -> None:
        if not self.enabled:
            return
        if self._pending_bytes + len(item.data) > self.max_pending_bytes:
            self.dropped += 1
            return
        self._pending.append(item)
        self._pending_bytes += len(item.data)

    def sink_for(self, request_id: str) -> FrameSink:
        """The frame sink of a local run (both directions, as the run sends and receives them)."""

        def sink(direction: str, kind: str, payload: bytes, flags: int) -> None:
            self.capture(Captured(request_id, direction, now_ms(), kind, flags, payload))

        return sink

    def tee_response(self, flow: http.HTTPFlow) -> StreamTee:
        """The stream callable for a RunSSE response (set in `responseheaders`)."""
        request_id = None
        if self.enabled and flow.metadata.get("byok") in PASSED_ON:
            request_id = self._run_sse_request_id(flow)
        client_request = request_id or flow.metadata.get("byok_request_id")
        if self.enabled and client_request:
            self._clients.append(client_info(client_request, flow))
        try:
            tee = StreamTee(self, flow, request_id)
        except ValueError as e:
            log.warning("RunSSE response with %s: frames not recorded", e)
            tee = StreamTee(self, flow, None)
        self._tees[(flow.id, "response")] = tee
        return tee

    def tee_request(self, flow: http.HTTPFlow) -> StreamTee:
        """The stream callable for an HTTP/2 Run's request (set in `requestheaders`): the flow keeps
        the client's frames; for a Run passed on (observe mode, a Cursor model's relay leg) they go
        to the store as `up` frames in stream order."""
        request_id = flow.metadata.get("byok_request_id") if self.enabled and flow.metadata.get("byok") in PASSED_ON \
            else None
        try:
            tee = StreamTee(self, flow, request_id, side="request")
        except ValueError as e:
            log.warning("Run request with %s: frames not recorded", e)
            tee = StreamTee(self, flow, None, side="request")
        if self.enabled and "content-encoding" not in flow.request.headers:
            tee.first = self.facts.run_tee(flow)
        self._tees[(flow.id, "request")] = tee
        return tee

    @staticmethod
    def _run_sse_request_id(flow: http.HTTPFlow) -> str | None:
        if flow.metadata.get("byok_request_id"):
            return flow.metadata["byok_request_id"]
        try:
            return decode_run_sse(flow.request.content or b"",
                                  flow.request.headers.get("content-type", "application/connect+proto"))
        except (connect.ConnectError, ValueError) as e:
            log.info("RunSSE request without a readable request id, frames not recorded: %s", e)
            return None

    # ---- hooks -------------------------------------------------------------------------------------

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if self.enabled:
            self.facts.saw_flow(flow)
            self.facts.run_headers(flow)

    def request(self, flow: http.HTTPFlow) -> None:
        tee = self._tees.pop((flow.id, "request"), None)  # a streamed request ended
        if tee is not None:
            tee.finish()
        if not self.enabled:
            return
        if flow.request.method == "POST" and flow.request.path.split("?", 1)[0] == RUN_SSE_PATH:
            self.facts.run_sse_request(flow, self._run_sse_request_id(flow))
        else:
            self.facts.request_ended(flow)

    def response(self, flow: http.HTTPFlow) -> None:
        self._flow_ended(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._flow_ended(flow)

    def _flow_ended(self, flow: http.HTTPFlow) -> None:
        if self.enabled:
            self.facts.flow_ended(flow)
        for side in ("response", "request"):  # an HTTP/2 Run's response may end before its request
            if side == "request" and not flow.error:
                continue
            tee = self._tees.pop((flow.id, side), None)
            if tee is not None:
                tee.finish()
        if flow.request.method == "POST" and flow.request.path.split("?", 1)[0] == BIDI_APPEND_PATH:
            self._capture_append(flow)

    def _capture_append(self, flow: http.HTTPFlow) -> None:
        """Every append's arrival is noted (verify); a passed-on one is also a frame (a local run
        records the frames of the appends it was given)."""
        body = flow.request.raw_content
        if body is None:
            return
        ts = flow.request.timestamp_end or flow.request.timestamp_start or time.time()
        self.capture(Captured(None, "up", int(ts * 1000), None, 0, body,
                              append_content_type=flow.request.headers.get("content-type", "application/proto"),
                              append_encoding=flow.request.headers.get("content-encoding"),
                              as_frame=flow.metadata.get("byok") in PASSED_ON, arrived_us=int(ts * 1_000_000)))

    async def done(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        for tee in self._tees.values():
            tee.keep()  # `-w` writes live flows at shutdown; streams still ending finish later
        await self.flush(everything=True)
        if self.store is not None:
            await self.store.call(self.writer.settle_parked, everything=True)

    # ---- store -------------------------------------------------------------------------------------

    async def flush(self, *, everything: bool = False) -> None:
        """Hand everything captured so far to the store thread (one transaction per batch); at
        shutdown (`everything`) also the streams still open."""
        async with self._lock:
            if self._clients and self.store is not None:
                clients, self._clients = self._clients, []
                try:
                    await asyncio.shield(self.store.record_clients(clients))
                    await asyncio.shield(self.store.call(self.writer.settle_parked))
                except Exception:
                    log.exception("could not record %d RunSSE clients", len(clients))
            if self.store is not None:
                streams, hosts = self.facts.take(everything=everything)
                if self._pending or streams or hosts:
                    batch, self._pending, self._pending_bytes = self._pending, [], 0
                    try:
                        # shielded: cancelling the flusher at shutdown must not drop a batch already taken
                        await asyncio.shield(self.store.call(self.writer.write, batch, streams, hosts))
                    except Exception:
                        log.exception("could not record %d frames", len(batch))
            if self.dropped:
                log.warning("%d frames not recorded: more than %d bytes were waiting for the database",
                            self.dropped, self.max_pending_bytes)
                self.dropped = 0

    async def _flush_forever(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval_s)
            await self.flush()
