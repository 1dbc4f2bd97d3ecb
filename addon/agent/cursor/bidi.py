"""Decoding the two agent RPC request bodies (sans-IO).

RunSSE: one Connect envelope holding `aiserver.v1.BidiRequestId{request_id}`.
BidiAppend (unary `application/proto`, or enveloped if sent as `application/connect+proto`):
`BidiAppendRequest{data = lowercase hex of AgentClientMessage, request_id, append_seqno}`, or, from
newer clients, the serialized message as raw bytes in `data_binary` (field 4) with `data` empty.
Only hex is accepted in `data` (no base64, no raw-bytes guessing); if both fields are set they must
hold the same message.
"""

from __future__ import annotations

import binascii
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from byok.proto import agent_pb2 as apb, aiserver_pb2 as spb

from ...wire.connect import Code, ConnectError, decode_all


@dataclass
class UnusableAppend(ConnectError):
    """An append that names its request and seqno but carries no usable message. The seqno is used
    up: the runtime ends that request's local run (nothing after it could be delivered)."""

    request_id: str = ""
    seqno: int = 0


BEFORE_RUN_REQUEST = ("client_heartbeat", "prewarm_request")
"""Client messages that may precede a run's run_request (they carry no state)."""
FORMS = ("data", "data_binary", "both")
"""How an append carries its message: hex `data`, raw `data_binary` (newer clients), or both."""


@dataclass(frozen=True)
class Append:
    request_id: str
    seqno: int
    message: apb.AgentClientMessage
    raw: bytes
    """The serialized AgentClientMessage exactly as the client sent it."""
    form: str = "data"
    """Which field carried it (FORMS)."""


def _unwrap(body: bytes, content_type: str) -> bytes:
    if content_type.startswith("application/connect+"):
        frames = [f for f in decode_all(body) if not f.end_stream]
        if len(frames) != 1:
            raise ConnectError(Code.INVALID_ARGUMENT, f"expected one request message, got {len(frames)}")
        return frames[0].payload
    return body


def decode_run_sse(body: bytes, content_type: str = "application/connect+proto") -> str:
    payload = _unwrap(body, content_type)
    try:
        request_id = spb.BidiRequestId.FromString(payload).request_id
    except DecodeError as e:
        raise ConnectError(Code.INVALID_ARGUMENT, f"RunSSE body is not a BidiRequestId: {e}") from e
    if not request_id:
        raise ConnectError(Code.INVALID_ARGUMENT, "RunSSE request has no request_id")
    return request_id


def decode_bidi_append(body: bytes, content_type: str = "application/proto") -> Append:
    if not body:
        raise ConnectError(Code.INVALID_ARGUMENT, "BidiAppend contains no AgentClientMessage")
    payload = _unwrap(body, content_type)
    try:
        request = spb.BidiAppendRequest.FromString(payload)
    except DecodeError as e:
        raise ConnectError(Code.INVALID_ARGUMENT, f"BidiAppend body is not a BidiAppendRequest: {e}") from e
    if not request.request_id.request_id:
        raise ConnectError(Code.INVALID_ARGUMENT, "BidiAppend has no request_id")
    try:
        raw, message, form = append_message(request)
    except ConnectError as e:
        raise UnusableAppend(e.code, e.message, e.details, request.request_id.request_id, request.append_seqno) from e
    return Append(request.request_id.request_id, request.append_seqno, message, raw, form)


def append_message(request: spb.BidiAppendRequest) -> tuple[bytes, apb.AgentClientMessage, str]:
    """(serialized message, message, form) of one append, from `data` (hex) or `data_binary` (raw).
    Raises ConnectError(invalid_argument) when neither is set, one does not decode, or the two differ."""
    if not request.data and not request.data_binary:
        raise ConnectError(Code.INVALID_ARGUMENT, "BidiAppend contains no AgentClientMessage")
    hex_raw = None
    if request.data:
        try:
            hex_raw = binascii.unhexlify(request.data)
        except (binascii.Error, ValueError) as e:
            raise ConnectError(Code.INVALID_ARGUMENT, "BidiAppend data is not hex-encoded AgentClientMessage") from e
    raw = request.data_binary or hex_raw
    field = "data_binary" if request.data_binary else "data"
    try:
        message = apb.AgentClientMessage.FromString(raw)
    except DecodeError as e:
        raise ConnectError(Code.INVALID_ARGUMENT, f"BidiAppend {field} is not an AgentClientMessage: {e}") from e
    if hex_raw is None or not request.data_binary:
        return raw, message, field
    if hex_raw != raw:  # both set: equal bytes, or at least the same message
        try:
            same = apb.AgentClientMessage.FromString(hex_raw) == message
        except DecodeError:
            same = False
        if not same:
            raise ConnectError(Code.INVALID_ARGUMENT, "BidiAppend data and data_binary hold different messages")
    return raw, message, "both"


def encode_bidi_append(request_id: str, seqno: int, message: apb.AgentClientMessage, form: str = "data") -> bytes:
    """The client side (used by the Cursor-like client and tests): the message in `form` (FORMS)."""
    if form not in FORMS:
        raise ValueError(f"append form must be one of {FORMS}, not {form!r}")
    raw = message.SerializeToString()
    request = spb.BidiAppendRequest(request_id=spb.BidiRequestId(request_id=request_id), append_seqno=seqno)
    if form in ("data", "both"):
        request.data = raw.hex()
    if form in ("data_binary", "both"):
        request.data_binary = raw
    return request.SerializeToString()
