"""Protocol drift: fields and oneof branches in agent frames that our schema does not know.

Cursor changes its protocol with every release. protobuf keeps what it cannot name as unknown
fields, so nothing breaks loudly; this module makes it visible. It is sans-IO and transport-blind:

    findings = unknowns(message)                      # one decoded AgentClient/ServerMessage
    tally.observe(direction, message, request_id, client_version=..., ts_ms=...)

`unknowns` walks every set message field (repeated and map values included) and reports each
unknown field by the path of field names from the frame's root message, e.g.
`AgentClientMessage.conversation_action` + field 23 + wire type 2. An unknown field in a message that
has a (non-optional) oneof and no known field set is reported as kind `oneof_branch`: protobuf decodes
a branch it does not know exactly that way (the oneof stays empty). Everything else is `field`.

`DriftTally` sums findings per (direction, path, field number, wire type, kind, client version) with
first/last seen and an example request id, and hands the rows to the store in batches
(`Store.record_drift`). Any transport's recorder path (RunSSE + BidiAppend today, HTTP/2 Run later)
calls `observe` with the messages it decoded, on the store thread: never on the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf import unknown_fields
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

WIRE_TYPES = {0: "varint", 1: "i64", 2: "len", 3: "sgroup", 4: "egroup", 5: "i32"}
MAX_DEPTH = 64
"""Deeper nesting than any real frame; protobuf itself stops decoding at 100."""


@dataclass(frozen=True, slots=True)
class Unknown:
    path: str
    """Field names from the root message, e.g. `AgentServerMessage.interaction_update`."""
    field_number: int
    wire_type: int
    kind: str
    """`field` or `oneof_branch`."""


def _looks_like_a_new_branch(message: Message) -> bool:
    """The message has a (non-`optional`) oneof and nothing it knows is set: exactly how protobuf
    decodes a oneof branch it has no name for. A new field next to known ones is a `field`."""
    if message.ListFields():
        return False
    return any(not (len(o.fields) == 1 and o.name == "_" + o.fields[0].name)  # proto3 `optional` is synthetic
               for o in message.DESCRIPTOR.oneofs)


def unknowns(message: Message) -> list[Unknown]:
    """Every unknown field in `message` and the messages inside it."""
    out: list[Unknown] = []
    _walk(message, message.DESCRIPTOR.name, out, 0)
    return out


def _walk(message: Message, path: str, out: list[Unknown], depth: int) -> None:
    if depth > MAX_DEPTH:
        return
    found = unknown_fields.UnknownFieldSet(message)
    if len(found):
        kind = "oneof_branch" if _looks_like_a_new_branch(message) else "field"
        for f in found:
            out.append(Unknown(path, f.field_number, f.wire_type, kind))
    for fd, value in message.ListFields():
        if fd.type not in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
            continue
        child = f"{path}.{fd.name}"
        if fd.message_type.GetOptions().map_entry:
            value_fd = fd.message_type.fields_by_name["value"]
            if value_fd.type == FieldDescriptor.TYPE_MESSAGE:
                for item in value.values():
                    _walk(item, child + "[]", out, depth + 1)
        elif fd.is_repeated:
            for item in value:
                _walk(item, child + "[]", out, depth + 1)
        else:
            _walk(value, child, out, depth + 1)


def describe(findings: list[Unknown]) -> str:
    """`AgentClientMessage field 99 (len, oneof_branch)`, for log lines."""
    return ", ".join(f"{u.path} field {u.field_number} ({WIRE_TYPES.get(u.wire_type, u.wire_type)}, {u.kind})"
                     for u in findings)


@dataclass
class DriftRow:
    direction: str
    path: str
    field_number: int
    wire_type: int
    kind: str
    client_version: str
    count: int
    first_seen_ms: int
    last_seen_ms: int
    example_request_id: str


@dataclass
class DriftTally:
    """Sums findings until `take()`; one instance per writer thread (not shared across threads)."""

    rows: dict[tuple, DriftRow] = field(default_factory=dict)

    def observe(self, direction: str, message: Message, request_id: str | None, *,
                client_version: str | None = None, ts_ms: int = 0) -> list[Unknown]:
        """Count the unknown fields of one decoded frame message ("up" = client to server)."""
        found = unknowns(message)
        for u in found:
            key = (direction, u.path, u.field_number, u.wire_type, u.kind, client_version or "")
            row = self.rows.get(key)
            if row is None:
                self.rows[key] = DriftRow(direction, u.path, u.field_number, u.wire_type, u.kind,
                                          client_version or "", 1, ts_ms, ts_ms, request_id or "")
            else:
                row.count += 1
                row.first_seen_ms = min(row.first_seen_ms, ts_ms)
                if ts_ms >= row.last_seen_ms:
                    row.last_seen_ms = ts_ms
                    row.example_request_id = request_id or row.example_request_id
        return found

    def take(self) -> list[DriftRow]:
        rows, self.rows = list(self.rows.values()), {}
        return rows
