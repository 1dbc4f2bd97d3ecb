"""Decoding the two agent RPC request bodies (sans-IO).

RunSSE: one Connect envelope holding `aiserver.v1.BidiRequestId{request_id}`.
BidiAppend (unary `application/proto`, or enveloped if sent as `application/connect+proto`):
`BidiAppendRequest{data = lowercase hex of AgentClientMessage, request_id, append_seqno}`.
Only hex is accepted in `data`: no base64, no raw-bytes guessing.
"""

from __future__ import annotations

import binascii
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from byok.proto import agent_pb2 as apb, aiserver_pb2 as spb

from ..connect import Code, ConnectError, decode_all


@dataclass(frozen=True)
class Append:
    request_id: str
    seqno: int
    message: apb.AgentClientMessage
    raw: bytes
    """The serialized AgentClientMessage exactly as the client sent it."""


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
    if not request.data:
        raise ConnectError(Code.INVALID_ARGUMENT, "BidiAppend contains no AgentClientMessage")
    try:
        raw = binascii.unhexlify(request.data)
    except (binascii.Error, ValueError) as e:
        raise ConnectError(Code.INVALID_ARGUMENT, "BidiAppend data is not hex-encoded AgentClientMessage") from e
    try:
        message = apb.AgentClientMessage.FromString(raw)
    except DecodeError as e:
        raise ConnectError(Code.INVALID_ARGUMENT, f"BidiAppend data is not an AgentClientMessage: {e}") from e
    return Append(request.request_id.request_id, request.append_seqno, message, raw)


def encode_bidi_append(request_id: str, seqno: int, message: apb.AgentClientMessage) -> bytes:
    """The client side (used by the Cursor-like client and tests)."""
    return spb.BidiAppendRequest(
        data=message.SerializeToString().hex(),
        request_id=spb.BidiRequestId(request_id=request_id),
        append_seqno=seqno,
    ).SerializeToString()
