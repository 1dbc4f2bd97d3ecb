"""Wire facts for `cursor-byok verify`: what the frames alone do not show.

Collected on the event loop by the recorder (cheap bookkeeping only) and written with its batches:
- each agent stream the client opened (HTTP/2 or HTTP/1.1 `Run`, `RunSSE`): the protocol headers
  (names of all, values only of the Connect ones in PROTOCOL_HEADERS: never auth or cookies), the
  first client messages of a Run up to its run_request, and when the request and the response
  ended (or the flow's error);
- each BidiAppend as it arrived (decoded on the store thread: recorder.FrameWriter);
- per host, what the router made of its flows (`wire_hosts`): every host under `byok_hosts`, any
  other `*.cursor.sh` host, and any host an agent RPC path went to.
The store side is `Store.record_wire_facts` (migration m010).
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict

from google.protobuf.message import DecodeError
from mitmproxy import http

from byok.proto import agent_pb2 as apb
from byok.store.store import OPEN_AT_SHUTDOWN

from .models import is_cursor_host
from .router import BIDI_APPEND_PATH, RUN_PATH, RUN_PROBE_PATH, RUN_SSE_PATH, classify
from .wire import connect

PROTOCOL_HEADERS = ("content-type", "connect-protocol-version", "connect-content-encoding",
                    "connect-accept-encoding", "connect-timeout-ms", "content-encoding", "te")
"""Request headers whose values are kept: the Connect protocol's own, none that can carry a secret."""
AGENT_PATHS = frozenset({RUN_PATH, RUN_SSE_PATH, BIDI_APPEND_PATH, RUN_PROBE_PATH})
FIRST_KINDS_MAX = 8
"""A Run's first messages are kept up to its run_request, at most this many."""
FIRST_BYTES_MAX = 4 * 1024 * 1024
OPEN_AFTER_RESPONSE_MS = 120_000
"""A Run whose request is still open this long after its response ended is written as it is."""
MAX_OPEN = 4096


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _ms(timestamp: float | None) -> int | None:
    return None if timestamp is None else int(timestamp * 1000)


def client_kind(payload: bytes, flags: int) -> str:
    """The kind of an up frame, named like the local run's (`kv_client_message`, `run_request`)."""
    if flags & connect.FLAG_END_STREAM:
        return "end_stream"
    try:
        return apb.AgentClientMessage.FromString(payload).WhichOneof("message") or "empty"
    except DecodeError:
        return "undecodable"


class _EveryHost:
    """classify() by path alone: which RPC a flow is, whatever its host (the host is judged apart)."""

    @staticmethod
    def is_cursor_host(host: str) -> bool:
        return True


EVERY_HOST = _EveryHost()


def path_of(flow: http.HTTPFlow) -> str:
    return flow.request.path.split("?", 1)[0]


def header_facts(request: http.Request) -> tuple[str, str]:
    """(JSON list of header names, JSON object of the PROTOCOL_HEADERS values)."""
    names = sorted({k.lower() for k in request.headers.keys()})
    values = {h: request.headers[h] for h in PROTOCOL_HEADERS if h in request.headers}
    return json.dumps(names), json.dumps(values, sort_keys=True)


class FirstMessages:
    """The kinds of a Run's first client messages, up to its run_request (fed the request's chunks)."""

    def __init__(self, facts: dict) -> None:
        self.facts = facts
        self.kinds: list[str] = []
        self.done = False
        self._decoder = connect.EnvelopeDecoder()
        self._fed = 0

    def feed(self, chunk: bytes) -> None:
        self._fed += len(chunk)
        try:
            frames = self._decoder.feed(chunk)
        except connect.ConnectError:
            frames, self.done = [], True
            self.kinds.append("undecodable")
        for frame in frames:
            self.kinds.append(client_kind(frame.payload, frame.flags))
            if self.kinds[-1] == "run_request" or len(self.kinds) >= FIRST_KINDS_MAX:
                self.done = True
                break
        if self._fed > FIRST_BYTES_MAX:
            self.done = True
        self.facts["first_kinds"] = json.dumps(self.kinds)


class WireFacts:
    """The loop-side bookkeeping; `take()` hands finished rows to the recorder's next batch."""

    def __init__(self) -> None:
        self._open: OrderedDict[str, dict] = OrderedDict()
        """flow id -> the stream's row while either side is still open."""
        self._hosts: dict[tuple[str, str], dict] = {}
        self._done: list[dict] = []

    # ---- hosts ---------------------------------------------------------------------------------

    def saw_flow(self, flow: http.HTTPFlow) -> None:
        """Count this flow for its host (requestheaders). Only Cursor's hosts and agent RPCs count."""
        host = (flow.request.pretty_host or flow.request.host or "").lower()
        matched = is_cursor_host(host)
        if not (matched or host.endswith(".cursor.sh") or path_of(flow) in AGENT_PATHS):
            return  # not Cursor's: nothing more to do on the loop
        rpc = classify(flow, EVERY_HOST)
        label = rpc.value if rpc is not None else "other"
        ts = now_ms()
        row = self._hosts.get((host, label))
        if row is None:
            self._hosts[(host, label)] = {"host": host, "rpc": label, "matched": matched, "count": 1,
                                          "first_seen_ms": ts, "last_seen_ms": ts}
        else:
            row["count"] += 1
            row["last_seen_ms"], row["matched"] = ts, matched

    # ---- streams -------------------------------------------------------------------------------

    def run_headers(self, flow: http.HTTPFlow) -> None:
        """A Run's request headers, as the client sent them (before the backend adds its own)."""
        if flow.request.method == "POST" and path_of(flow) == RUN_PATH:
            self._open[flow.id] = self._row(flow, "run")
            self._bound()

    def run_tee(self, flow: http.HTTPFlow) -> FirstMessages | None:
        """The Run's request id is known now (the backend set it); a relay leg is our own, not the
        client's, and is dropped. Returns the sniffer of its first messages."""
        row = self._open.get(flow.id)
        if row is None:
            return None
        if flow.metadata.get("byok_relay") or not flow.metadata.get("byok_request_id"):
            del self._open[flow.id]
            return None
        row["request_id"] = flow.metadata["byok_request_id"]
        return FirstMessages(row)

    def run_sse_request(self, flow: http.HTTPFlow, request_id: str | None) -> None:
        """A RunSSE request, complete (its body is the request id)."""
        if request_id is None:
            return
        row = self._row(flow, "run_sse")
        row["request_id"] = request_id
        row["request_end_ms"] = _ms(flow.request.timestamp_end)
        self._open[flow.id] = row
        self._bound()

    def request_ended(self, flow: http.HTTPFlow) -> None:
        row = self._open.get(flow.id)
        if row is not None:
            row["request_end_ms"] = _ms(flow.request.timestamp_end) or now_ms()
            self._maybe_done(flow)

    def flow_ended(self, flow: http.HTTPFlow) -> None:
        """The response hook or the error hook."""
        row = self._open.get(flow.id)
        if row is None:
            return
        if flow.response is not None and flow.response.timestamp_end is not None:
            row["response_end_ms"] = _ms(flow.response.timestamp_end)
        if flow.error is not None:
            row["error"] = str(flow.error.msg)[:200]
        self._maybe_done(flow)

    def _maybe_done(self, flow: http.HTTPFlow) -> None:
        row = self._open[flow.id]
        row["route"] = flow.metadata.get("byok")
        ended = row["response_end_ms"] is not None or row["error"] is not None
        if ended and (row["request_end_ms"] is not None or row["error"] is not None):
            del self._open[flow.id]
            if row["request_id"] is not None:  # a Run nobody routed (not a Cursor host) has none
                self._done.append(row)

    def _row(self, flow: http.HTTPFlow, rpc: str) -> dict:
        names, values = header_facts(flow.request)
        return {"request_id": None, "rpc": rpc, "host": (flow.request.pretty_host or "").lower(),
                "http_version": flow.request.http_version, "header_names": names, "headers": values,
                "first_kinds": None, "route": flow.metadata.get("byok"),
                "started_ms": _ms(flow.request.timestamp_start) or now_ms(),
                "request_end_ms": None, "response_end_ms": None, "error": None}

    def _bound(self) -> None:
        while len(self._open) > MAX_OPEN:
            _, row = self._open.popitem(last=False)
            if row["request_id"] is not None:
                self._done.append(row)

    # ---- hand-over -----------------------------------------------------------------------------

    def take(self, *, everything: bool = False) -> tuple[list[dict], list[dict]]:
        """(finished streams, host tallies) since the last call. Runs whose request stayed open long
        after the response ended go as they are; at shutdown (`everything`) every known stream does."""
        cutoff = now_ms() - OPEN_AFTER_RESPONSE_MS
        for flow_id in list(self._open):
            row = self._open[flow_id]
            stale = row["response_end_ms"] is not None and row["response_end_ms"] < cutoff
            if everything or stale:
                del self._open[flow_id]
                if everything and not stale and row["error"] is None:
                    row["error"] = OPEN_AT_SHUTDOWN
                if row["request_id"] is not None:
                    self._done.append(row)
        streams, self._done = self._done, []
        hosts, self._hosts = list(self._hosts.values()), {}
        return streams, hosts
