"""Captures: one recorded conversation per file, as JSON lines that diff well (captures/README.md).

    {"t":"capture","format":1,...}                       header: name, source, cursor_version, redactions
    {"t":"run","run":0,"request_id":...,"status":...}    one per run (RunSSE request), in start order
    {"t":"frame","run":0,"dir":"up","seq":0,"kind":...,"flags":0,"json":{...},"b64":"..."}
    {"t":"llm_call","run":0,"call":0,...}                 one per provider request, then its
    {"t":"provider_request","run":0,"call":0,...}         body (when known) and its SSE transcript
    {"t":"sse","run":0,"call":0,"i":0,"event":...,"data":...,"raw":"..."}

Per run: the run line, its `up` frames in seq order, its `down` frames in seq order, its provider
calls. Per-direction order (not arrival time) keeps regenerated files byte-stable. `b64` / `raw` are
the exact bytes; `json` / `data` the decoded form. This module owns the format, export from the
store with redaction, and the normalised form that comparisons and diffs use.
"""

from __future__ import annotations

import base64
import difflib
import json
import re
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from byok.providers.base import SECRET_HEADERS

from . import frames as fr

FORMAT = 1
# Per-connection or per-version values that would churn every regenerated capture.
DROPPED_HEADERS = frozenset({"host", "content-length", "user-agent", "connection", "accept-encoding",
                             "transfer-encoding"})
VOLATILE_KEYS = frozenset({"thinking_duration_ms", "duration_ms", "local_execution_time_ms", "thinkingMs"})
"""JSON keys whose values are measured times: replaced by `<volatile>` when comparing."""
_KEY_SHAPES = re.compile(
    rb"sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}|AIza[0-9A-Za-z_\-]{30,}|(?i:bearer)\s+[A-Za-z0-9._~+/\-]{12,}=*"
)
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class CaptureError(ValueError):
    """A capture file that does not follow the format (message names the line)."""


# ---- the file ------------------------------------------------------------------------------------


def dump_line(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


@dataclass
class Capture:
    header: dict
    records: list[dict] = field(default_factory=list)

    def dumps(self) -> str:
        return "".join(dump_line(r) + "\n" for r in [self.header, *self.records])

    def write(self, path: Path | str) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.dumps(), encoding="utf-8")
        return path

    def of(self, t: str) -> list[dict]:
        return [r for r in self.records if r["t"] == t]

    def frames(self, run: int | None = None, direction: str | None = None) -> list[dict]:
        return [r for r in self.of("frame") if (run is None or r["run"] == run)
                and (direction is None or r["dir"] == direction)]

    def frame_bytes(self, record: dict) -> bytes:
        return base64.b64decode(record["b64"])


def loads(text: str, source: str = "<capture>") -> Capture:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise CaptureError(f"{source}: empty capture")
    records = []
    for n, line in enumerate(lines, 1):
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise CaptureError(f"{source}:{n}: not JSON: {e}") from None
        if not isinstance(obj, dict) or "t" not in obj:
            raise CaptureError(f"{source}:{n}: every line is an object with a 't' (type) key")
        records.append(obj)
    header = records[0]
    if header["t"] != "capture":
        raise CaptureError(f"{source}:1: the first line must be the capture header (t=capture)")
    if header.get("format") != FORMAT:
        raise CaptureError(f"{source}:1: format {header.get('format')!r}, this version reads format {FORMAT}")
    return Capture(header, records[1:])


def load(path: Path | str) -> Capture:
    return loads(Path(path).read_text(encoding="utf-8"), str(path))


# ---- redaction -----------------------------------------------------------------------------------


@dataclass
class Redactor:
    """Replaces secrets (and, on request, the user's home path) in everything a capture holds.

    `secrets` are exact strings (configured API keys and header tokens, see `from_routes`); key-shaped
    strings (`sk-...`, `Bearer ...`, `AIza...`) and secret headers are always redacted.
    """

    secrets: list[str] = field(default_factory=list)
    home: str | None = None
    substitutions: dict[str, str] = field(default_factory=dict)
    """Exact replacements made first (scenarios: random ports, machine paths -> stable values)."""
    applied: set[str] = field(default_factory=set)

    @classmethod
    def from_routes(cls, routes: Iterable, *, home: str | None = None) -> "Redactor":
        from byok.providers.config import redact

        # `redact` owns what counts as key material of a route; recover the strings it replaces.
        secrets: list[str] = []
        for route in routes:
            key = route.resolve_api_key()
            candidates = [key] if key else []
            candidates += list((getattr(route, "extra_headers", None) or {}).values())
            secrets += [c for c in candidates if c and redact(c, [route]) != c]
        return cls(secrets=sorted(set(secrets), key=len, reverse=True), home=home)

    def text(self, value: str) -> str:
        out = value
        for old, new in self.substitutions.items():
            if old in out:
                out = out.replace(old, new)
                self.applied.add("stable substitutes for run-specific values (ports, model id, paths)")
        for secret in self.secrets:
            if secret in out:
                out = out.replace(secret, "<redacted>")
                self.applied.add("configured API keys")
        shaped = _KEY_SHAPES.sub(b"<redacted>", out.encode("utf-8", "surrogatepass")).decode("utf-8", "surrogatepass")
        if shaped != out:
            self.applied.add("key-shaped strings (sk-..., Bearer ..., AIza...)")
            out = shaped
        if self.home:
            homed = self._home_re().sub("~", out)
            if homed != out:
                self.applied.add("home path -> ~")
                out = homed
        return out

    def _home_re(self) -> re.Pattern:
        return re.compile(re.escape(self.home.rstrip("/\\")) + r"(?=[/\\\"'\s:]|$)")

    def deep(self, obj: Any) -> Any:
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, list):
            return [self.deep(v) for v in obj]
        if isinstance(obj, dict):
            return {k: self.deep(v) for k, v in obj.items()}
        return obj

    def headers(self, headers: dict[str, str]) -> dict[str, str]:
        out = {}
        for name, value in headers.items():
            if name.lower() in DROPPED_HEADERS:
                continue
            if name.lower() in SECRET_HEADERS:
                self.applied.add("secret headers (authorization, x-api-key, cookie, ...)")
                out[name.lower()] = "<redacted>"
            else:
                out[name.lower()] = self.text(value)
        return out

    def hits(self, data: bytes) -> bool:
        if any(s.encode() in data for s in [*self.secrets, *self.substitutions]) or _KEY_SHAPES.search(data):
            return True
        return bool(self.home) and self.home.rstrip("/\\").encode() in data

    def blob(self, data: bytes) -> tuple[bytes, bool]:
        """(redacted bytes, dropped): text blobs are redacted in place; in binary (protobuf) blobs only
        same-length substitutions are safe, and a blob still holding a secret or path is dropped."""
        if not self.hits(data):
            return data, False
        try:
            return self.text(data.decode("utf-8")).encode("utf-8"), False
        except UnicodeDecodeError:
            pass
        for old, new in self.substitutions.items():
            if len(old.encode()) == len(new.encode()) and old.encode() in data:
                data = data.replace(old.encode(), new.encode())
                self.applied.add("stable substitutes for run-specific values (ports, model id, paths)")
        if self.hits(data):
            self.applied.add("binary blobs holding secrets or paths dropped (blob_data emptied)")
            return b"", True
        return data, False

    def frame(self, direction: str, flags: int, payload: bytes) -> tuple[bytes, bool]:
        """Redact one frame; returns (payload, changed). Changed frames are re-encoded from JSON."""
        message = fr.decode(direction, flags, payload)
        if message is None:
            return payload, False
        changed = False
        if not fr.is_end_stream(flags):
            for holder in _blob_holders(message):
                data, _ = self.blob(holder.blob_data)
                if data != holder.blob_data:
                    holder.blob_data = data
                    changed = True
        before = fr.to_json(message)
        after = self.deep(before)
        if fr.is_end_stream(flags):
            after = self._error_details(after)
        if after != before or changed:
            return fr.from_json(direction, flags, after), True
        return payload, False

    def _error_details(self, trailer: Any) -> Any:
        """Connect error details carry `aiserver.v1.ErrorDetails` as base64 protobuf: redact inside."""
        from google.protobuf import json_format

        from byok.wire import connect
        from byok.proto import aiserver_pb2 as spb

        details = (trailer or {}).get("error", {}).get("details") if isinstance(trailer, dict) else None
        for detail in details or []:
            if detail.get("type") != "aiserver.v1.ErrorDetails":
                continue
            message = spb.ErrorDetails.FromString(connect.b64decode_lenient(detail.get("value", "")))
            before = json_format.MessageToDict(message, preserving_proto_field_name=True)
            after = self.deep(before)
            if after != before:
                redacted = json_format.ParseDict(after, spb.ErrorDetails())
                detail["value"] = connect.b64encode_unpadded(redacted.SerializeToString())
        return trailer

    def describe(self) -> list[str]:
        return sorted(self.applied)


def _blob_holders(message) -> list:
    kind = message.WhichOneof("message")
    if kind == "kv_server_message" and message.kv_server_message.WhichOneof("message") == "set_blob_args":
        return [message.kv_server_message.set_blob_args]
    if kind == "kv_client_message" and message.kv_client_message.WhichOneof("message") == "get_blob_result":
        return [message.kv_client_message.get_blob_result]
    return []


# ---- export from the store ---------------------------------------------------------------------------


def resolve_runs(conn: sqlite3.Connection, ident: str) -> tuple[list[str], str | None]:
    """(request ids in start order, conversation id) for a request id or a conversation id."""
    row = conn.execute("SELECT conversation_id FROM runs WHERE request_id = ?", [ident]).fetchone()
    if row is not None:
        return [ident], row[0]
    rows = conn.execute("SELECT request_id FROM runs WHERE conversation_id = ? ORDER BY started_at_ms, rowid",
                        [ident]).fetchall()
    if rows:
        return [r[0] for r in rows], ident
    # runs passed upstream (and everything in observe mode) have frames but no runs row
    if conn.execute("SELECT 1 FROM frames WHERE request_id = ? LIMIT 1", [ident]).fetchone():
        row = conn.execute("SELECT max(conversation_id) FROM frames WHERE request_id = ?", [ident]).fetchone()
        return [ident], row[0]
    rows = conn.execute("SELECT request_id FROM frames WHERE conversation_id = ? GROUP BY request_id"
                        " ORDER BY min(ts_ms)", [ident]).fetchall()
    if rows:
        return [r[0] for r in rows], ident
    raise LookupError(f"no run (request id) or conversation with id {ident!r} in the database")


def export(conn: sqlite3.Connection, ident: str, *, redactor: Redactor | None = None,
           name: str | None = None, source: str = "store", cursor_version: str | None = None) -> Capture:
    """Build a capture of one request, or of every run of one conversation, from the store."""
    redactor = redactor or Redactor()
    request_ids, conversation_id = resolve_runs(conn, ident)
    records: list[dict] = []
    for index, request_id in enumerate(request_ids):
        records += _run_records(conn, index, request_id, redactor)
    if cursor_version is None:
        cursor_version = recorded_client_version(conn, request_ids)
    header = {
        "t": "capture", "format": FORMAT, "name": name or ident, "source": source,
        "cursor_version": cursor_version, "conversation_id": conversation_id, "request_ids": request_ids,
        "redactions": redactor.describe(),
    }
    return Capture(header, records)


def recorded_client_version(conn: sqlite3.Connection, request_ids: list[str]) -> str | None:
    """The Cursor version the proxy saw on these runs' RunSSE requests, if it sent one."""
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'rpc_clients'").fetchone():
        return None  # a database from before the rpc_clients migration
    for request_id in request_ids:
        row = conn.execute("SELECT client_version FROM rpc_clients WHERE request_id = ?", [request_id]).fetchone()
        if row and row[0]:
            return row[0]
    return None


def _run_records(conn: sqlite3.Connection, index: int, request_id: str, redactor: Redactor) -> list[dict]:
    conn.row_factory = sqlite3.Row
    run = conn.execute("SELECT * FROM runs WHERE request_id = ?", [request_id]).fetchone()
    out: list[dict] = [redactor.deep({
        "t": "run", "run": index, "request_id": request_id,
        "conversation_id": run["conversation_id"] if run else None,
        "model": run["model_public_id"] if run else None,
        "mode": run["mode"] if run else None, "action": run["action"] if run else None,
        "status": run["status"] if run else None,
        "error_code": run["error_code"] if run else None,
        "error_message": run["error_message"] if run else None,
        "usage": json.loads(run["usage"]) if run and run["usage"] else None,
    })]
    rows = conn.execute(
        "SELECT direction, seq, flags, data FROM frames WHERE request_id = ?"
        " ORDER BY CASE direction WHEN 'up' THEN 0 ELSE 1 END, seq, id", [request_id]).fetchall()
    for row in rows:
        out.append(frame_record(index, row["direction"], row["seq"], row["flags"], bytes(row["data"]), redactor))
    calls = conn.execute("SELECT * FROM llm_calls WHERE request_id = ? ORDER BY call_index", [request_id]).fetchall()
    for call in calls:
        out += _call_records(index, call, redactor)
    return out


def frame_record(run: int, direction: str, seq: int, flags: int, payload: bytes,
                 redactor: Redactor | None = None) -> dict:
    redacted = False
    if redactor is not None:
        payload, redacted = redactor.frame(direction, flags, payload)
    message = fr.decode(direction, flags, payload)
    record = {"t": "frame", "run": run, "dir": direction, "seq": seq, "kind": fr.kind_of(direction, message, flags),
              "flags": flags, "json": fr.to_json(message), "b64": fr.b64(payload)}
    if redacted:
        record["redacted"] = True
    return record


USAGE_COLUMNS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")


def _call_records(run: int, call: sqlite3.Row, redactor: Redactor) -> list[dict]:
    index = call["call_index"]
    out: list[dict] = [redactor.deep({
        "t": "llm_call", "run": run, "call": index, "model_call_id": call["model_call_id"],
        "provider": call["provider"], "kind": call["provider_kind"], "model_public_id": call["model_public_id"],
        "model": call["model"], "status": call["status"], "finish_reason": call["finish_reason"],
        "usage": {k: call[k] for k in USAGE_COLUMNS if call[k] is not None},
        "messages": call["message_count"], "tools": call["tool_count"],
        "error": call["error"],
    })]
    if call["request_body"]:
        try:
            body: Any = json.loads(call["request_body"])
        except ValueError:
            body = call["request_body"]
        out.append({"t": "provider_request", "run": run, "call": index, "json": redactor.deep(body)})
    if call["raw_response"]:
        out += sse_records(run, index, bytes(call["raw_response"]), redactor)
    return out


def provider_request_record(run: int, call: int, method: str, path: str, headers: dict[str, str], body: Any,
                            redactor: Redactor) -> dict:
    return {"t": "provider_request", "run": run, "call": call, "method": method, "path": path,
            "headers": redactor.headers(headers), "json": redactor.deep(body)}


_EVENT_SPLIT = re.compile(r".*?(?:\r?\n\r?\n|\Z)", re.S)


def sse_records(run: int, call: int, raw: bytes, redactor: Redactor | None = None) -> list[dict]:
    """One record per SSE event: its exact text (`raw`) and the decoded `event` / `data`."""
    text = raw.decode("utf-8", errors="replace")
    out = []
    for i, chunk in enumerate(c for c in _EVENT_SPLIT.findall(text) if c):
        if redactor is not None:
            chunk = redactor.text(chunk)
        event, data_lines = None, []
        for line in chunk.splitlines():
            if line.startswith("event:"):
                event = line[6:].removeprefix(" ")
            elif line.startswith("data:"):
                data_lines.append(line[5:].removeprefix(" "))
        data: Any = "\n".join(data_lines) if data_lines else None
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except ValueError:
                pass
        record = {"t": "sse", "run": run, "call": call, "i": i}
        if event is not None:
            record["event"] = event
        record.update({"data": data, "raw": chunk})
        out.append(record)
    return out


def merge_provider_requests(capture: Capture, extra: dict[tuple[int, int], dict]) -> None:
    """Add what the store does not keep (method, path, headers) to each call's `provider_request`,
    or insert `extra[(run, call)]` right after the call's `llm_call` line when there is none.
    The store's body wins: it is what the proxy built (keys redacted)."""
    records: list[dict] = []
    pending = dict(extra)
    for record in capture.records:
        key = (record.get("run"), record.get("call"))
        if record["t"] == "provider_request" and key in pending:
            more = pending.pop(key)
            record = {**{k: v for k, v in more.items() if k != "json"}, **record, "json": record.get("json")}
            record = {k: record[k] for k in ("t", "run", "call", "method", "path", "headers", "json") if k in record}
        records.append(record)
    capture.records = []
    for record in records:
        capture.records.append(record)
        key = (record.get("run"), record.get("call"))
        if record["t"] == "llm_call" and key in pending:
            capture.records.append(pending.pop(key))


# ---- comparison -------------------------------------------------------------------------------------


class _Ids:
    """Volatile ids -> stable placeholders, numbered in order of first appearance."""

    def __init__(self, known: list[tuple[str, str]]) -> None:
        self.map: dict[str, str] = {}
        self.counts: dict[str, int] = {}
        for value, kind in known:
            if value:
                self.label(value, kind)

    def label(self, value: str, kind: str) -> str:
        if value not in self.map:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.map[value] = f"<{kind}-{self.counts[kind]}>"
        return self.map[value]

    def sub(self, text: str) -> str:
        for value in sorted(self.map, key=len, reverse=True):
            if value in text:
                text = text.replace(value, self.map[value])
        return _UUID.sub(self._uuid, text)

    def _uuid(self, m: re.Match) -> str:
        return self.label(m.group(0), "uuid")


def normalise(capture: Capture) -> list[str]:
    """The comparable form: one line per JSON leaf, prefixed by its record's label.

    Dropped: heartbeats, exact bytes (`b64`, `raw`), seq numbers (a missing frame then shows as one
    hunk, not as every later frame renumbered). Up frames of a run are compared in sorted order (their
    arrival order is a race between concurrent BidiAppends). Replaced: measured times (`VOLATILE_KEYS`) and ids
    (request, conversation, model-call, tool round, any UUID) by placeholders in order of appearance.
    Blobs SET to the client are decoded (JSON ones, and protobuf ones whose type the blob graph
    gives), as are JSON strings, so a change inside one diffs field by field.
    """
    known: list[tuple[str, str]] = []
    for r in capture.of("run"):
        known += [(r.get("conversation_id"), "conversation"), (r.get("request_id"), "request")]
    known += [(r.get("model_call_id"), "model-call") for r in capture.of("llm_call")]
    ids = _Ids(known)
    types = _blob_types(capture)
    header = {k: v for k, v in capture.header.items() if k not in ("t", "request_ids")}
    blocks: list[tuple[str, list[str]]] = [("header", list(_leaves("capture", ids, header)))]
    for r in capture.records:
        t = r["t"]
        if t == "frame":
            if r["kind"] in fr.HEARTBEAT_KINDS:
                continue
            label = f"r{r['run']} {r['dir']} {r['kind']}"
            body = _frame_view(r.get("json"), ids, types)
            blocks.append((f"r{r['run']} {r['dir']}", [label, *_leaves(label, ids, {"flags": r["flags"], "json": body})]))
        elif t == "sse":
            label = f"r{r['run']} call{r['call']} sse"
            blocks.append((t, list(_leaves(label, ids, {k: r.get(k) for k in ("event", "data") if k in r}))))
        else:
            label = f"r{r.get('run')} {t}" + (f" call{r['call']}" if "call" in r else "")
            blocks.append((t, list(_leaves(label, ids, {k: v for k, v in r.items() if k not in ("t", "run", "call")}))))
    blocks = _lane_initial_window(blocks)
    lines: list[str] = []
    i = 0
    while i < len(blocks):
        group, block = blocks[i]
        if not group.endswith(" up"):
            lines += block
            i += 1
            continue
        # Appends are concurrent HTTP requests and the store records them in arrival order: compare the
        # up frames of a run as a set (sorted), so a different arrival order is not a difference.
        j = i
        while j < len(blocks) and blocks[j][0] == group:
            j += 1
        for _, b in sorted(blocks[i:j], key=lambda gb: gb[1]):
            lines += b
        i = j
    return lines


STATE_SYNC_KINDS = ("kv_server_message", "conversation_checkpoint_update")


def _lane_initial_window(blocks: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    """Model output streams while the initial checkpoint waits for its ACKs (PROTOCOL 10.4), so until
    a run's first checkpoint the two are a race: compare that window as two lanes, the state sync
    (KV and the checkpoint) first, then the live updates, each in its own order."""
    out: list[tuple[str, list[str]]] = []
    window: dict[str, tuple[list, list]] = {}
    closed: set[str] = set()
    for group, block in blocks:
        if not group.endswith(" down") or group in closed:
            out.append((group, block))
            continue
        state, live = window.setdefault(group, ([], []))
        kind = block[0].split(" ", 2)[2]
        (state if kind.startswith(STATE_SYNC_KINDS) else live).append((group, block))
        if kind == "conversation_checkpoint_update":
            closed.add(group)
            out += state + live
    for group, (state, live) in window.items():
        if group not in closed:  # a run that never published a checkpoint
            out += state + live
    return out


_B64_32 = re.compile(r"[A-Za-z0-9+/]{43}=")


def _blob_types(capture: Capture) -> dict[str, str]:
    """Blob id (base64) -> agent.v1 message name, following the blob graph from the checkpoints:
    a blob's type is known only from the field that references it (turns -> ConversationTurnStructure
    -> user_message / steps ...). Blobs not reached stay opaque."""
    from byok.proto import agent_pb2 as apb

    data: dict[str, bytes] = {}
    for r in capture.frames(direction="down"):
        args = (r.get("json") or {}).get("kv_server_message", {}).get("set_blob_args")
        if args and "blob_id" in args:
            data[args["blob_id"]] = base64.b64decode(args.get("blob_data", ""))
    types: dict[str, str] = {}

    def mark(blob: bytes | str, name: str) -> None:
        key = blob if isinstance(blob, str) else base64.b64encode(blob).decode()
        if not key or key in types:
            return
        types[key] = name
        raw = data.get(key)
        if raw is None:
            return
        try:
            message = getattr(apb, name).FromString(raw)
        except Exception:  # not what the reference said: leave it opaque
            types.pop(key)
            return
        if name == "ConversationTurnStructure":
            turn = message.agent_conversation_turn
            mark(turn.user_message, "UserMessage")
            for step in turn.steps:
                mark(step, "ConversationStep")
        elif name == "UserMessage" and message.conversation_state_blob_id:
            mark(message.conversation_state_blob_id, "ConversationStateStructure")
        elif name == "ConversationStateStructure":
            state(message)

    def state(message) -> None:
        for blob in message.turns:
            mark(blob, "ConversationTurnStructure")
        for blob in message.todos:
            mark(blob, "TodoItem")

    for r in capture.frames(direction="down"):
        if r["kind"] == "conversation_checkpoint_update":
            checkpoint = (r.get("json") or {}).get("conversation_checkpoint_update", {})
            for key in checkpoint.get("turns", []):
                mark(key, "ConversationTurnStructure")
            for key in checkpoint.get("todos", []):
                mark(key, "TodoItem")
    return types


def _frame_view(obj: Any, ids: _Ids, types: dict[str, str], blob_id: str | None = None) -> Any:
    """Blobs decoded (JSON, or the agent.v1 message their reference names), JSON strings expanded,
    32-byte ids (blob ids: SHA-256) shown as `<blob-N>`."""
    if isinstance(obj, dict):
        here = obj.get("blob_id") if isinstance(obj.get("blob_id"), str) else blob_id
        out = {}
        for k, v in obj.items():
            out[k] = _blob_view(v, here, ids, types) if k == "blob_data" and isinstance(v, str) else \
                _frame_view(v, ids, types, here)
        return out
    if isinstance(obj, list):
        return [_frame_view(v, ids, types, blob_id) for v in obj]
    if isinstance(obj, str) and _B64_32.fullmatch(obj):
        return ids.label(obj, "blob")
    if isinstance(obj, str) and obj[:1] in "{[":
        try:
            return {"<json>": json.loads(obj)}
        except ValueError:
            pass
    return obj


def _blob_view(value: str, blob_id: str | None, ids: _Ids, types: dict[str, str]) -> Any:
    raw = base64.b64decode(value)
    try:
        return {"<json>": json.loads(raw)}
    except ValueError:
        pass
    name = types.get(blob_id or "")
    if name:
        from google.protobuf import json_format

        from byok.proto import agent_pb2 as apb

        message = getattr(apb, name).FromString(raw)
        decoded = json_format.MessageToDict(message, preserving_proto_field_name=True)
        return {f"<{name}>": _frame_view(decoded, ids, types)}
    return value


def _leaves(label: str, ids: _Ids, obj: Any, path: str = "") -> Iterator[str]:
    if isinstance(obj, dict):
        if not obj:
            yield f"{label} | {path or '.'} = {{}}"
        for k, v in sorted(obj.items()):  # key order carries no meaning in JSON
            sub = f"{path}.{k}" if path else k
            if k in VOLATILE_KEYS:
                yield f"{label} | {sub} = <volatile>"
            else:
                yield from _leaves(label, ids, v, sub)
    elif isinstance(obj, list):
        if not obj:
            yield f"{label} | {path} = []"
        for i, v in enumerate(obj):
            yield from _leaves(label, ids, v, f"{path}[{i}]")
    elif isinstance(obj, str) and "\n" in obj:
        # multi-line text (prompts, file contents) diffs line by line
        # (no line numbers: an inserted line then shows as one line, not as every later one renumbered)
        for line in ids.sub(obj).split("\n"):
            yield f"{label} | {path} += {json.dumps(line, ensure_ascii=False)}"
    else:
        value = ids.sub(obj) if isinstance(obj, str) else obj
        yield f"{label} | {path} = {json.dumps(value, ensure_ascii=False)}"


def diff(expected: Capture, actual: Capture, *, expected_name: str = "expected", actual_name: str = "actual",
         context: int = 3, max_lines: int = 400) -> str:
    """A unified diff of the normalised forms; empty when they match."""
    a, b = list(normalise(expected)), list(normalise(actual))
    if a == b:
        return ""
    out = list(difflib.unified_diff(a, b, expected_name, actual_name, n=context, lineterm=""))
    if len(out) > max_lines:
        out = out[:max_lines] + [f"... ({len(out) - max_lines} more diff lines)"]
    return "\n".join(out)
