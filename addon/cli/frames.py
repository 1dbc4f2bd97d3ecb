"""Agent frames for people: decode a recorded frame, turn it into JSON, describe it in one line.

Shared by captures (JSON form), `trace` (stored frames) and `smoke` (frames as they arrive). A frame
is (direction, kind, flags, payload): `down` payloads are `agent.v1.AgentServerMessage`, `up` payloads
`agent.v1.AgentClientMessage`, and an end-stream (flags & 0x02) carries Connect's JSON trailer.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from byok.wire import connect
from byok.proto import agent_pb2 as apb

HEARTBEAT_KINDS = frozenset({"interaction_update.heartbeat", "client_heartbeat"})


def is_end_stream(flags: int) -> bool:
    return bool(flags & connect.FLAG_END_STREAM)


def decode(direction: str, flags: int, payload: bytes) -> Message | dict | None:
    """The protobuf message (or the end-stream JSON dict); None when the bytes do not decode."""
    if is_end_stream(flags):
        try:
            return json.loads(payload or b"{}")
        except ValueError:
            return None
    cls = apb.AgentServerMessage if direction == "down" else apb.AgentClientMessage
    try:
        return cls.FromString(payload)
    except DecodeError:
        return None


def kind_of(direction: str, message: Message | dict | None, flags: int = 0) -> str:
    """`interaction_update.text_delta`, `kv_client_message.set_blob_result`, `end_stream`, ..."""
    if is_end_stream(flags):
        return "end_stream"
    if not isinstance(message, Message):
        return "undecodable"
    kind = message.WhichOneof("message") or "empty"
    if kind in ("interaction_update", "kv_server_message", "kv_client_message"):
        inner = getattr(message, kind).WhichOneof("message")
        return f"{kind}.{inner}" if inner else kind
    return kind


def to_json(message: Message | dict | None) -> Any:
    """JSON form used in captures: proto field names, bytes as base64, defaults omitted."""
    if isinstance(message, Message):
        return json_format.MessageToDict(message, preserving_proto_field_name=True)
    return message


def from_json(direction: str, flags: int, obj: Any) -> bytes:
    """Inverse of `to_json` (used after redaction rewrote strings inside a frame)."""
    if is_end_stream(flags):
        return json.dumps(obj, separators=(",", ":")).encode()
    cls = apb.AgentServerMessage if direction == "down" else apb.AgentClientMessage
    message = cls()
    json_format.ParseDict(obj, message)
    return message.SerializeToString()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _clip(text: str, limit: int = 80) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short(blob_id: bytes) -> str:
    return blob_id.hex()[:12]


def describe(direction: str, message: Message | dict | None, flags: int = 0, limit: int = 80) -> str:
    """One human line about a frame (the kind is printed separately)."""
    if is_end_stream(flags):
        if not message:
            return "ok {}"
        error = (message or {}).get("error", {}) if isinstance(message, dict) else {}
        return _clip(f"{error.get('code', '?')}: {error.get('message', '')}", limit * 2)
    if not isinstance(message, Message):
        return "(bytes do not decode)"
    kind = message.WhichOneof("message")
    if kind is None:
        return ""
    sub = getattr(message, kind)
    if kind == "interaction_update":
        inner = sub.WhichOneof("message")
        value = getattr(sub, inner) if inner else None
        if inner in ("text_delta", "thinking_delta"):
            return repr(_clip(value.text, limit))
        if inner == "thinking_completed":
            return f"{value.thinking_duration_ms} ms"
        if inner == "token_delta":
            return f"{value.tokens} tokens"
        if inner == "turn_ended":
            names = {"input_tokens": "in", "output_tokens": "out", "cache_read_tokens": "cache_read",
                     "cache_write_tokens": "cache_write"}
            return " ".join(f"{short}={getattr(value, f)}" for f, short in names.items() if value.HasField(f))
        return _generic(value, limit)
    if kind == "kv_server_message":
        if sub.WhichOneof("message") == "set_blob_args":
            return f"kv {sub.id} SET {_short(sub.set_blob_args.blob_id)} ({len(sub.set_blob_args.blob_data)} B)"
        return f"kv {sub.id} GET {_short(sub.get_blob_args.blob_id)}"
    if kind == "kv_client_message":
        inner = sub.WhichOneof("message")
        if inner == "get_blob_result":
            r = sub.get_blob_result
            return f"kv {sub.id} " + (f"error {r.error.message!r}" if r.HasField("error") else f"{len(r.blob_data)} B")
        return f"kv {sub.id} ack"
    if kind == "conversation_checkpoint_update":
        return (f"{len(sub.root_prompt_messages_json)} roots, {len(sub.turns)} turns, "
                f"{len(sub.pending_tool_calls)} pending")
    if kind in ("exec_server_message", "exec_client_message"):
        inner = sub.WhichOneof("message")
        detail = _generic(getattr(sub, inner), limit - 20) if inner else ""
        return _clip(f"exec {sub.id} {inner or ''} {detail}".strip(), limit)
    if kind == "run_request":
        action = sub.action.WhichOneof("action") or "-"
        text = sub.action.user_message_action.user_message.text if action == "user_message_action" else ""
        return _clip(f"model {sub.requested_model.model_id} {action} {text!r}" if text else
                     f"model {sub.requested_model.model_id} {action}", limit)
    return _generic(sub, limit)


def _generic(message: Message, limit: int) -> str:
    try:
        obj = json_format.MessageToDict(message, preserving_proto_field_name=True)
    except Exception:  # unknown shapes never stop a trace
        return ""
    return _clip(json.dumps(obj, ensure_ascii=False, separators=(",", ":")), limit)
