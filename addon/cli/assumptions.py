"""The protocol assumptions cursor-byok relies on, each checked against the user's recorded traffic.

Each assumption is a function `(Evidence) -> Verdict` described with `@assumption(id, title, docs)`,
where `docs` names the documentation that depends on it. To add one (another RPC), write the function
below the others and add it to `ASSUMPTIONS` at the end of this module: `cursor-byok verify` runs that
list, in its order, and nothing else.

A verdict is one of three:
- `confirmed`: the traffic shows it, with counts and the client versions seen;
- `contradicted`: some traffic does not, with an example request id and what was seen instead;
- `not_seen`: nothing recorded bears on it yet.

Everything a verdict carries is a protocol fact: counts, request ids, client versions, message kinds,
field numbers, the values of Connect's own headers. Never message contents, blob data or keys, so
`verify --json` can be shared as it is.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from ..agent.cursor.bidi import BEFORE_RUN_REQUEST
from ..agent.drift import WIRE_TYPES
from ..store.store import OPEN_AT_SHUTDOWN

CONFIRMED, CONTRADICTED, NOT_SEEN = "confirmed", "contradicted", "not_seen"
CONNECT_PROTO = "application/connect+proto"
AGENT_RPCS = ("run", "run_sse", "bidi_append", "run_probe")
"""router.Rpc values of the agent's RPCs."""


@dataclass
class Verdict:
    status: str
    summary: str
    """One line for people: counts and kinds, never contents."""
    counts: dict[str, int] = field(default_factory=dict)
    client_versions: list[str] = field(default_factory=list)
    example_request_id: str | None = None
    seen_instead: str | None = None
    """For a contradiction: what the traffic showed instead of the assumption."""
    details: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Assumption:
    id: str
    title: str
    docs: tuple[str, ...]
    """Where the product's documentation (or PROTOCOL.md) depends on it."""
    check: Callable[["Evidence"], Verdict]


def assumption(id: str, title: str, docs: Iterable[str]) -> Callable:
    """Name a check and the docs that depend on it (`check.assumption`); `ASSUMPTIONS` at the end of
    this module is the one ordered list `verify` reports."""

    def describe(check: Callable[["Evidence"], Verdict]) -> Callable[["Evidence"], Verdict]:
        check.assumption = Assumption(id, title, tuple(docs), check)  # type: ignore[attr-defined]
        return check

    return describe


class Evidence:
    """Read access to the store's recorded traffic since `since_ms` (0: all of it)."""

    def __init__(self, conn, since_ms: int = 0) -> None:
        self.conn = conn
        self.since_ms = since_ms
        self._versions: dict[str, str] | None = None

    def rows(self, sql: str, params: Iterable = ()) -> list:
        return self.conn.execute(sql, list(params)).fetchall()

    def iter_rows(self, sql: str, params: Iterable = ()):
        """Rows one at a time (frames can be many and large)."""
        cursor = self.conn.execute(sql, list(params))
        while True:
            batch = cursor.fetchmany(500)
            if not batch:
                return
            yield from batch

    def version_of(self, request_id: str) -> str | None:
        if self._versions is None:
            self._versions = {r[0]: r[1] for r in self.rows(
                "SELECT request_id, client_version FROM rpc_clients WHERE client_version IS NOT NULL")}
        return self._versions.get(request_id)

    def versions(self, request_ids: Iterable[str]) -> list[str]:
        return sorted({v for v in (self.version_of(r) for r in request_ids) if v})

    def streams(self, rpc: str) -> list:
        return self.rows("SELECT * FROM rpc_streams WHERE rpc = ? AND started_ms >= ? ORDER BY started_ms, id",
                         [rpc, self.since_ms])

    def end_streams(self, request_ids: Iterable[str]) -> dict[str, str]:
        """request id -> 'ok' or the Connect error code of its down end-stream frame."""
        out = {}
        for request_id in set(request_ids):
            row = self.rows("SELECT data FROM frames WHERE request_id = ? AND direction = 'down'"
                            " AND kind = 'end_stream' ORDER BY seq DESC LIMIT 1", [request_id])
            if row:
                out[request_id] = end_stream_code(bytes(row[0][0]))
        return out


def end_stream_code(payload: bytes) -> str:
    try:
        body = json.loads(payload or b"{}")
    except ValueError:
        return "malformed"
    error = body.get("error") if isinstance(body, dict) else None
    return "ok" if not error else str(error.get("code", "unknown")) if isinstance(error, dict) else "unknown"


def _verdict(problems: list[tuple[str, str]], counts: dict, seen: int, unit: str, request_ids: Iterable[str],
             ev: Evidence, confirmed: str, nothing: str, details: dict | None = None) -> Verdict:
    """The common shape: contradicted by the first problem (request id, what was seen), else
    confirmed when something was seen, else not seen. `seen` counts the `unit`s inspected."""
    versions = ev.versions(request_ids)
    if problems:
        example, instead = problems[0]
        return Verdict(CONTRADICTED, f"{len(problems)} contradiction(s) in {seen} {unit}", counts, versions,
                       example, instead, details or {})
    if seen:
        return Verdict(CONFIRMED, confirmed, counts, versions, details=details or {})
    return Verdict(NOT_SEEN, nothing, counts, versions, details=details or {})


def percentile(values: list[int], p: float) -> int:
    """Nearest-rank percentile of sorted `values` (not empty)."""
    return values[max(0, math.ceil(p * len(values)) - 1)]


def _tally(values: Iterable) -> dict:
    return dict(sorted(Counter(values).items(), key=lambda kv: (-kv[1], str(kv[0]))))


# ---- the Run's request ---------------------------------------------------------------------------------


@assumption("run.headers", "An HTTP/2 Run request is Connect streaming (content-type application/connect+proto, "
            "connect-protocol-version 1, gzip or no compression) and names its request in x-request-id",
            ["docs/architecture.md#how-an-http2-run-is-served", "docs/architecture.md#what-is-confirmed-and-what-is-not",
             "PROTOCOL.md 10.1"])
def run_headers(ev: Evidence) -> Verdict:
    streams = ev.streams("run")
    problems, names, values = [], Counter(), defaultdict(Counter)
    for s in streams:
        headers = json.loads(s["headers"])
        header_names = json.loads(s["header_names"])
        names.update(header_names)
        for k, v in headers.items():
            values[k][v] += 1
        found = []
        if not s["http_version"].startswith("HTTP/2"):
            found.append(f"{s['http_version']} (a Run over HTTP/1.1 passes upstream unanswered)")
        content_type = headers.get("content-type", "").split(";")[0].strip()
        if content_type != CONNECT_PROTO:
            found.append(f"content-type {content_type or '(none)'}")
        if headers.get("connect-protocol-version", "1") != "1":
            found.append(f"connect-protocol-version {headers['connect-protocol-version']}")
        if headers.get("connect-content-encoding", "identity") not in ("identity", "gzip"):
            found.append(f"connect-content-encoding {headers['connect-content-encoding']}")
        if "x-request-id" not in header_names:
            found.append("no x-request-id header")
        if found:
            problems.append((s["request_id"], "; ".join(found)))
    counts = {"runs": len(streams), "http2": sum(s["http_version"].startswith("HTTP/2") for s in streams),
              "with_x_request_id": names["x-request-id"]}
    details = {"header_values": {k: dict(v) for k, v in sorted(values.items())}, "header_names": dict(sorted(names.items()))}
    return _verdict(problems, counts, len(streams), "Run request(s)", [s["request_id"] for s in streams], ev,
                    f"{len(streams)} Run request(s) as expected", "no HTTP/2 Run recorded yet", details)


@assumption("run_sse.headers", "A RunSSE request is Connect server streaming (content-type application/connect+proto)",
            ["docs/architecture.md#architecture-one-agent-engine-two-transports", "PROTOCOL.md 1.1"])
def run_sse_headers(ev: Evidence) -> Verdict:
    streams = ev.streams("run_sse")
    problems, values = [], Counter()
    for s in streams:
        content_type = json.loads(s["headers"]).get("content-type", "").split(";")[0].strip()
        values[content_type] += 1
        if content_type != CONNECT_PROTO:
            problems.append((s["request_id"], f"content-type {content_type or '(none)'}"))
    return _verdict(problems, {"run_sse": len(streams)}, len(streams), "RunSSE request(s)",
                    [s["request_id"] for s in streams], ev,
                    f"{len(streams)} RunSSE request(s) as expected", "no RunSSE recorded yet",
                    {"content_types": dict(values)})


def _first_problem(kinds: list[str]) -> str | None:
    """What is wrong with a request's first client messages (in protocol order), or None."""
    for i, kind in enumerate(kinds):
        if kind == "run_request":
            return None
        if kind not in BEFORE_RUN_REQUEST:
            return f"{kind} before the run_request" if i else f"{kind} first, not the run_request"
    return None  # only heartbeats so far, or nothing: not a contradiction of the order


@assumption("run.first_message", "A run's first client message is its run_request; only client_heartbeat or "
            "prewarm_request may come before it (HTTP/2 Run: in stream order; RunSSE: in append_seqno order)",
            ["docs/architecture.md#how-an-http2-run-is-served", "PROTOCOL.md 1.4, 10.1"])
def first_message(ev: Evidence) -> Verdict:
    starts: Counter = Counter()
    problems, seen = [], []
    for s in ev.streams("run"):
        if s["first_kinds"] is None:
            continue
        kinds = json.loads(s["first_kinds"])
        seen.append(s["request_id"])
        starts["run: " + (" > ".join(kinds) if kinds else "(no message)")] += 1
        problem = _first_problem(kinds)
        if problem:
            problems.append((s["request_id"], f"HTTP/2 Run: {problem}"))
    for request_id, appends in _appends_by_request(ev).items():
        by_seqno = {a["seqno"]: a["kind"] for a in appends if a["kind"]}
        kinds = [by_seqno[n] for n in sorted(by_seqno)]
        until = kinds[:kinds.index("run_request") + 1] if "run_request" in kinds else kinds
        if not until:
            continue
        seen.append(request_id)
        starts["run_sse: " + " > ".join(until)] += 1
        problem = _first_problem(until)
        if problem:
            problems.append((request_id, f"RunSSE appends: {problem}"))
    return _verdict(problems, {"requests": len(seen)}, len(seen), "request(s)", seen, ev,
                    f"{len(seen)} request(s) start as expected", "no run's first messages recorded yet",
                    {"starts": _tally(starts.elements())})


def classify_run_end(request_end: int | None, response_end: int | None, error: str | None,
                     end_stream: str | None) -> str:
    """How one HTTP/2 Run's two sides ended:
    - after: the request ended (END_STREAM) once the response had ended: what the design expects;
    - left: the request ended or was reset while the response still ran, and the run ended
      canceled or failed: the client leaving (a cancel);
    - early_end: the request ended before the response, yet the run completed: Cursor half-closes
      early and still wants the answer (the design would cancel such a run);
    - reset_after: the request side was reset or closed after the response ended (the design copes);
    - open: the request was still open long after the response ended;
    - unfinished: recording stopped (shutdown) before either side said more."""
    if response_end is not None and request_end is not None:
        if request_end >= response_end:
            return "after"
        return "early_end" if end_stream == "ok" else "left"
    if error is not None and error != OPEN_AT_SHUTDOWN:
        return "reset_after" if response_end is not None else "left"
    if response_end is not None and error is None:
        return "open"
    return "unfinished"


@assumption("run.request_end", "Cursor ends its HTTP/2 Run request only after the response has ended (a request "
            "that ends first is the user leaving)",
            ["docs/architecture.md#how-an-http2-run-is-served", "addon/duplex.py"])
def run_request_end(ev: Evidence) -> Verdict:
    streams = [s for s in ev.streams("run") if s["http_version"].startswith("HTTP/2")]
    codes = ev.end_streams(s["request_id"] for s in streams)
    outcomes, problems, seen = Counter(), [], []
    for s in streams:
        outcome = classify_run_end(s["request_end_ms"], s["response_end_ms"], s["error"], codes.get(s["request_id"]))
        outcomes[outcome] += 1
        if outcome == "unfinished":
            continue
        seen.append(s["request_id"])
        if outcome == "early_end":
            problems.append((s["request_id"], f"the request ended {s['response_end_ms'] - s['request_end_ms']} ms "
                                              "before the response, and the run still completed"))
        elif outcome == "open":
            problems.append((s["request_id"], "the request was still open long after the response ended"))
    lags = sorted(s["request_end_ms"] - s["response_end_ms"] for s in streams
                  if s["request_end_ms"] is not None and s["response_end_ms"] is not None
                  and s["request_end_ms"] >= s["response_end_ms"])
    counts = dict(outcomes) | ({"request_end_lag_ms_p50": percentile(lags, 0.5), "request_end_lag_ms_max": lags[-1]}
                               if lags else {})
    if not problems and seen and not outcomes["after"]:
        return Verdict(NOT_SEEN, f"{len(seen)} Run(s), none ended cleanly after its response yet", counts,
                       ev.versions(seen))
    return _verdict(problems, counts, len(seen), "Run(s)", seen, ev,
                    f"{outcomes['after']} Run(s) ended their request after the response"
                    + (f" ({outcomes['left']} left early, {outcomes['reset_after']} reset after)"
                       if outcomes["left"] or outcomes["reset_after"] else ""),
                    "no HTTP/2 Run recorded to its end yet")


# ---- BidiAppend ------------------------------------------------------------------------------------------


def _appends_by_request(ev: Evidence) -> dict[str, list]:
    """Every recorded append of the requests whose first append arrived since `since` (a request
    cut by the window would look like it skipped seqnos), in arrival order."""
    rows = ev.rows("SELECT * FROM bidi_appends WHERE request_id IN (SELECT request_id FROM bidi_appends"
                   " GROUP BY request_id HAVING min(arrived_us) >= ?) ORDER BY request_id, arrived_us, id",
                   [ev.since_ms * 1000])
    out: dict[str, list] = defaultdict(list)
    for r in rows:
        out[r["request_id"]].append(r)
    return out


@assumption("appends.form", "A BidiAppend carries its AgentClientMessage in data (lowercase hex) or data_binary "
            "(raw bytes); when both are set they hold the same message",
            ["docs/compatibility.md#known-versions-and-the-evidence", "PROTOCOL.md 1.1"])
def append_form(ev: Evidence) -> Verdict:
    rows = ev.rows("SELECT request_id, form, content_type, content_encoding, problem FROM bidi_appends"
                   " WHERE arrived_us >= ? ORDER BY arrived_us, id", [ev.since_ms * 1000])
    problems, by_version = [], defaultdict(Counter)
    for r in rows:
        by_version[ev.version_of(r["request_id"]) or "unknown"][r["form"]] += 1
        content_type = (r["content_type"] or "").split(";")[0].strip()
        if r["form"] == "invalid":
            problems.append((r["request_id"], r["problem"] or "an append without a usable message"))
        elif content_type not in ("application/proto", CONNECT_PROTO):
            problems.append((r["request_id"], f"content-type {content_type or '(none)'}"))
    counts = _tally(r["form"] for r in rows) | {
        f"encoding_{k}": v for k, v in _tally(r["content_encoding"] or "identity" for r in rows).items()}
    return _verdict(problems, counts, len(rows), "append(s)", {r["request_id"] for r in rows}, ev,
                    f"{len(rows)} append(s): " + ", ".join(f"{n} {form}" for form, n in _tally(
                        r["form"] for r in rows).items()),
                    "no BidiAppend recorded yet (HTTP/2 Runs have none)",
                    {"forms_by_client_version": {v: dict(c) for v, c in sorted(by_version.items())}})


def seqno_findings(seqnos_in_arrival_order: list[int]) -> dict:
    """What one request's append_seqnos show: where they start, gaps, duplicates, and arrivals
    after a higher seqno (out of order)."""
    unique = sorted(set(seqnos_in_arrival_order))
    highest, out_of_order = -1, 0
    for s in seqnos_in_arrival_order:
        if s < highest:
            out_of_order += 1
        highest = max(highest, s)
    return {"start": unique[0] if unique else None,
            "gaps": [s for s in range(unique[0], unique[-1] + 1) if s not in set(unique)] if unique else [],
            "duplicates": len(seqnos_in_arrival_order) - len(unique), "out_of_order": out_of_order}


@assumption("appends.seqno", "append_seqno numbers a request's client messages from 0 without gaps; appends may "
            "arrive out of order or twice (they are reordered and deduplicated)",
            ["docs/architecture.md#architecture-one-agent-engine-two-transports", "PROTOCOL.md 1.4"])
def append_seqno(ev: Evidence) -> Verdict:
    problems, totals = [], Counter()
    by_request = _appends_by_request(ev)
    for request_id, appends in by_request.items():
        found = seqno_findings([a["seqno"] for a in appends if a["seqno"] is not None])
        if found["start"] is None:
            continue
        totals["requests"] += 1
        totals["appends"] += len(appends)
        totals["duplicates"] += found["duplicates"]
        totals["out_of_order_arrivals"] += found["out_of_order"]
        totals["requests_with_out_of_order_arrivals"] += bool(found["out_of_order"])
        if found["start"] != 0:
            problems.append((request_id, f"the first append_seqno is {found['start']}, not 0"))
        elif found["gaps"]:
            problems.append((request_id, f"append_seqno {found['gaps'][0]} never arrived "
                                         f"({len(found['gaps'])} missing)"))
    return _verdict(problems, dict(totals), totals["requests"], "request(s)", by_request, ev,
                    f"{totals['requests']} request(s) numbered 0, 1, 2... ({totals['out_of_order_arrivals']} "
                    f"out-of-order arrival(s), {totals['duplicates']} duplicate(s))",
                    "no BidiAppend recorded yet (HTTP/2 Runs have none)")


# ---- KV ------------------------------------------------------------------------------------------------------


@assumption("kv.ack", "Cursor answers every blob SET with one set_blob_result of the same KV id, without error, "
            "and never fails a later GET of a blob it acknowledged",
            ["docs/architecture.md#architecture-one-agent-engine-two-transports", "PROTOCOL.md 2.3, 2.4, 2.6"])
def kv_ack(ev: Evidence) -> Verdict:
    from byok.proto import agent_pb2 as apb

    totals, problems, latencies, requests = Counter(), [], [], set()
    acked: dict[str, set[bytes]] = defaultdict(set)
    """conversation -> blob ids the client acknowledged."""
    state: dict[str, dict] = {}
    """request id -> its KV operations still unanswered, and when its last KV result came."""

    rows = ev.iter_rows(
        "SELECT request_id, conversation_id, direction, ts_ms, kind, data FROM frames WHERE ts_ms >= ? AND"
        " kind IN ('kv_server_message.set_blob_args', 'kv_server_message.get_blob_args', 'kv_client_message')"
        " ORDER BY coalesce(conversation_id, request_id), ts_ms, id", [ev.since_ms])
    for r in rows:
        request_id, conversation = r["request_id"], r["conversation_id"] or r["request_id"]
        st = state.setdefault(request_id, {"sets": {}, "gets": {}, "last_result_ms": 0})
        requests.add(request_id)
        if r["direction"] == "up":
            kv = apb.AgentClientMessage.FromString(bytes(r["data"])).kv_client_message
            st["last_result_ms"] = max(st["last_result_ms"], r["ts_ms"])
            requests.add(request_id)
            if kv.WhichOneof("message") == "set_blob_result":
                sent = st["sets"].pop(kv.id, None)
                if sent is None:
                    totals["unmatched_results"] += 1
                    continue
                totals["acked_sets"] += 1
                latencies.append(r["ts_ms"] - sent[0])
                if kv.set_blob_result.HasField("error"):
                    totals["set_errors"] += 1
                    problems.append((request_id, f"blob SET (KV id {kv.id}) answered with an error"))
                else:
                    acked[conversation].add(sent[1])
            elif kv.WhichOneof("message") == "get_blob_result":
                blob_id = st["gets"].pop(kv.id, None)
                if blob_id is None:
                    totals["unmatched_results"] += 1
                    continue
                result = kv.get_blob_result
                failed = result.HasField("error") or not result.HasField("blob_data")
                totals["gets_answered"] += 1
                if failed:
                    totals["get_errors"] += 1
                    if blob_id in acked[conversation]:
                        totals["get_errors_for_acked_blobs"] += 1
                        problems.append((request_id, f"GET of blob {blob_id.hex()[:16]} failed after the client "
                                                     "acknowledged its SET"))
        else:
            kv = apb.AgentServerMessage.FromString(bytes(r["data"])).kv_server_message
            if kv.WhichOneof("message") == "set_blob_args":
                totals["sets"] += 1
                st["sets"][kv.id] = (r["ts_ms"], kv.set_blob_args.blob_id)
            else:
                totals["gets"] += 1
                st["gets"][kv.id] = kv.get_blob_args.blob_id
    for request_id, st in state.items():
        for kv_id, (ts, _) in st["sets"].items():
            totals["unanswered_sets"] += 1
            # the client answered later KV operations but not this one (a cancel or a broken stream
            # leaves the last ones unanswered, and is no contradiction)
            if st["last_result_ms"] > ts:
                problems.append((request_id, f"blob SET (KV id {kv_id}) never answered, while later KV "
                                             "operations were"))
    latencies.sort()
    counts = dict(totals) | ({"ack_ms_p50": percentile(latencies, 0.5), "ack_ms_p95": percentile(latencies, 0.95),
                              "ack_ms_max": latencies[-1]}
                             if latencies else {})
    return _verdict(problems, counts, totals["sets"] + totals["gets"], "blob SET(s) and GET(s)", requests, ev,
                    f"{totals['acked_sets']} of {totals['sets']} blob SET(s) acknowledged"
                    + (f" (p50 {counts['ack_ms_p50']} ms, max {counts['ack_ms_max']} ms)" if latencies else "")
                    + (f"; {totals['unanswered_sets']} unanswered when the stream ended" if totals["unanswered_sets"]
                       else ""),
                    "no blob SET recorded yet")


# ---- the schema ----------------------------------------------------------------------------------------------


@assumption("schema.unknown_fields", "Every field and oneof branch in the agent's messages is in the schema "
            "cursor-byok was built from (unknown ones pass through, but nothing acts on them)",
            ["docs/compatibility.md#seeing-drift-cursor-byok-drift"])
def unknown_fields(ev: Evidence) -> Verdict:
    frames = ev.rows("SELECT count(*) FROM frames WHERE ts_ms >= ?", [ev.since_ms])[0][0]
    rows = ev.rows("SELECT * FROM protocol_drift WHERE last_seen_ms >= ? ORDER BY last_seen_ms DESC",
                   [ev.since_ms])
    messages: dict[tuple[str, str], dict] = {}
    for r in rows:
        entry = messages.setdefault((r["direction"], r["path"]), {
            "direction": r["direction"], "path": r["path"], "fields": {}, "example_request_id": r["example_request_id"],
            "client_versions": set()})
        f = entry["fields"].setdefault((r["field_number"], r["wire_type"], r["kind"]), {
            "field_number": r["field_number"], "wire_type": WIRE_TYPES.get(r["wire_type"], str(r["wire_type"])),
            "kind": r["kind"], "count": 0})
        f["count"] += r["count"]
        if r["client_version"]:
            entry["client_versions"].add(r["client_version"])
    listed = [{**m, "fields": sorted(m["fields"].values(), key=lambda f: f["field_number"]),
               "client_versions": sorted(m["client_versions"])} for m in messages.values()]
    counts = {"frames": frames, "messages_with_unknown_fields": len(listed),
              "unknown_fields": sum(len(m["fields"]) for m in listed)}
    versions = sorted({v for m in listed for v in m["client_versions"]})
    if listed:
        first = listed[0]
        fields = ", ".join(f"{f['field_number']} ({f['wire_type']}{', oneof branch' if f['kind'] == 'oneof_branch' else ''})"
                           for f in first["fields"])
        instead = f"{first['direction']} {first['path']}: unknown field(s) {fields}"
        return Verdict(CONTRADICTED, f"{counts['unknown_fields']} unknown field(s) in {len(listed)} message path(s)"
                       f" of {frames:,} frame(s)", counts, versions, first["example_request_id"], instead,
                       {"messages": listed})
    if frames:
        return Verdict(CONFIRMED, f"no unknown field in {frames:,} recorded frame(s)", counts,
                       sorted({r[0] for r in ev.rows("SELECT DISTINCT client_version FROM rpc_clients"
                                                     " WHERE client_version IS NOT NULL AND ts_ms >= ?",
                                                     [ev.since_ms])}))
    return Verdict(NOT_SEEN, "no agent frame recorded yet", counts)


# ---- Tab --------------------------------------------------------------------------------------------------------


@assumption("tab.positions", "Tab (StreamCpp) requests give cursor_position.line 0-based within contents (offset by "
            "contents_start_at_line) and columns in UTF-16 code units",
            ["docs/tab.md#what-is-not-confirmed", "PROTOCOL.md 11.1"])
def tab_positions(ev: Evidence) -> Verdict:
    """Every recorded Tab request (`tab_positions`: the ones cursor-byok answered, and in observe mode the
    ones Cursor answered) must put its cursor inside the contents, at a UTF-16 column of its line; and
    where Cursor answered, its range_to_replace must hold the cursor's line read as 0-based within the
    contents (file line contents_start_at_line + line + 1). Only answers with contents_start_at_line > 0
    tell the two readings apart; the counts say how many there were."""
    rows = ev.rows("SELECT * FROM tab_positions WHERE ts_ms >= ? ORDER BY ts_ms, id", [ev.since_ms])
    problems: list[tuple[str, str]] = []
    counts = {"requests": len(rows), "observed_answers": 0, "telling_answers": 0}
    for r in rows:
        if r["column_fits"] != "ok":
            problems.append((r["request_id"], f"cursor {r['cursor_line']}:{r['cursor_column']} with "
                             f"contents_start_at_line {r['contents_start_at_line']} and {r['contents_lines']} lines: "
                             f"{r['column_fits'].replace('_', ' ')}"))
        if r["source"] != "observed" or r["range_start"] is None:
            continue
        counts["observed_answers"] += 1
        contents_line = r["contents_start_at_line"] + r["cursor_line"] + 1
        file_line = r["cursor_line"] + 1
        in_range = r["range_start"] <= contents_line <= r["range_end"]
        if r["contents_start_at_line"] and (in_range != (r["range_start"] <= file_line <= r["range_end"])):
            counts["telling_answers"] += 1
        if not in_range:
            fits_file = r["range_start"] <= file_line <= r["range_end"]
            problems.append((r["request_id"], f"Cursor replaced {r['range_start']}-{r['range_end']} for cursor line "
                             f"{r['cursor_line']} at contents_start_at_line {r['contents_start_at_line']}: "
                             + ("the line counts lines of the whole file" if fits_file else "neither reading fits")))
    ids = [r["request_id"] for r in rows]
    telling = counts["telling_answers"]
    confirmed = (f"{len(rows)} Tab request(s) in range; {counts['observed_answers']} of Cursor's answers hold the "
                 f"cursor's line ({telling} with contents_start_at_line > 0, which tell the readings apart)")
    return _verdict(problems, counts, len(rows), "Tab requests", ids, ev, confirmed,
                    "no Tab request recorded yet (with [tab] set, or byok_mode=observe)")


# ---- hosts ------------------------------------------------------------------------------------------------------


@assumption("hosts.classified", "Every *.cursor.sh host Cursor used is under byok_hosts, so the router classified "
            "its calls, and every agent RPC went to such a host",
            ["docs/options.md#options", "docs/architecture.md#how-an-http2-run-is-served", "PROTOCOL.md 10.1, 11.1"])
def hosts_classified(ev: Evidence) -> Verdict:
    rows = ev.rows("SELECT host, rpc, matched, count FROM wire_hosts WHERE last_seen_ms >= ? ORDER BY host, rpc",
                   [ev.since_ms])
    hosts: dict[str, dict] = {}
    problems = []
    for r in rows:
        entry = hosts.setdefault(r["host"], {"host": r["host"], "matched": bool(r["matched"]), "calls": {}})
        entry["calls"][r["rpc"]] = r["count"]
        if not r["matched"] and r["host"].endswith(".cursor.sh"):
            problems.append(("", f"{r['host']} is not under byok_hosts: its calls were never classified"))
        elif not r["matched"] and r["rpc"] in AGENT_RPCS:
            problems.append(("", f"an agent RPC ({r['rpc']}) went to {r['host']}, which is not under byok_hosts"))
    listed = sorted(hosts.values(), key=lambda h: h["host"])
    counts = {"hosts": len(listed), "calls": sum(r["count"] for r in rows),
              "classified_calls": sum(r["count"] for r in rows if r["matched"] and r["rpc"] != "other")}
    versions = sorted({r[0] for r in ev.rows("SELECT DISTINCT client_version FROM rpc_clients"
                                             " WHERE client_version IS NOT NULL AND ts_ms >= ?", [ev.since_ms])})
    if problems:
        return Verdict(CONTRADICTED, f"{len(problems)} of {len(listed)} host(s) not classified", counts,
                       versions, None, problems[0][1], {"hosts": listed})
    if listed:
        agent = sorted(h["host"] for h in listed if any(rpc in AGENT_RPCS for rpc in h["calls"]))
        return Verdict(CONFIRMED, f"{len(listed)} host(s), all under byok_hosts; agent RPCs on "
                       f"{', '.join(agent) or 'none yet'}", counts, versions, details={"hosts": listed})
    return Verdict(NOT_SEEN, "no call to a Cursor host recorded yet", counts)


ASSUMPTIONS: tuple[Assumption, ...] = tuple(check.assumption for check in (  # type: ignore[attr-defined]
    run_headers, run_sse_headers, first_message, run_request_end, append_form, append_seqno, kv_ack,
    unknown_fields, tab_positions, hosts_classified,
))
assert len({a.id for a in ASSUMPTIONS}) == len(ASSUMPTIONS), "two assumptions share an id"


def run_all(ev: Evidence) -> list[tuple[Assumption, Verdict]]:
    return [(a, a.check(ev)) for a in ASSUMPTIONS]


def as_json(a: Assumption, v: Verdict) -> dict:
    return {"id": a.id, "title": a.title, "docs": list(a.docs), "verdict": v.status, **{
        k: val for k, val in asdict(v).items() if k != "status"}}
