"""Connect protocol codec, sans-IO: bytes in, frames out; frames in, bytes out.

Wire format (Connect streaming): `flags:u8 | length:u32 big-endian | payload`.
flags 0x01 = payload gzip-compressed, 0x02 = end-stream (payload is UTF-8 JSON, never protobuf).
A unary call (`application/proto`, BidiAppend) has no envelope; its errors are a JSON body with an
HTTP status. Error details are `{"type": <full message name>, "value": <base64 without padding>}`.
"""

from __future__ import annotations

import base64
import enum
import gzip
import json
import struct
import zlib
from dataclasses import dataclass, field

FLAG_COMPRESSED = 0x01
FLAG_END_STREAM = 0x02
HEADER = struct.Struct(">BI")
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # a checkpoint with a 2 MB tool result fits many times


class Code(enum.Enum):
    """Connect error codes; the values are the wire strings."""

    CANCELED = "canceled"
    """The run was canceled, usually by the client or a newer run."""
    UNKNOWN = "unknown"
    INVALID_ARGUMENT = "invalid_argument"
    """The client broke the protocol (bad frame, unknown id, hash mismatch...)."""
    DEADLINE_EXCEEDED = "deadline_exceeded"
    NOT_FOUND = "not_found"
    ALREADY_EXISTS = "already_exists"
    """A second RunSSE for a request id that is live or finished."""
    PERMISSION_DENIED = "permission_denied"
    RESOURCE_EXHAUSTED = "resource_exhausted"
    """A frame above the size limit."""
    FAILED_PRECONDITION = "failed_precondition"
    ABORTED = "aborted"
    OUT_OF_RANGE = "out_of_range"
    UNIMPLEMENTED = "unimplemented"
    INTERNAL = "internal"
    UNAVAILABLE = "unavailable"
    """Provider failures and proxy shutdown: the client may retry."""
    DATA_LOSS = "data_loss"
    UNAUTHENTICATED = "unauthenticated"

    @property
    def http_status(self) -> int:
        """HTTP status for a unary error response (Connect spec table)."""
        return _HTTP_STATUS[self]


_HTTP_STATUS = {
    Code.CANCELED: 499, Code.UNKNOWN: 500, Code.INVALID_ARGUMENT: 400, Code.DEADLINE_EXCEEDED: 504,
    Code.NOT_FOUND: 404, Code.ALREADY_EXISTS: 409, Code.PERMISSION_DENIED: 403,
    Code.RESOURCE_EXHAUSTED: 429, Code.FAILED_PRECONDITION: 400, Code.ABORTED: 409,
    Code.OUT_OF_RANGE: 400, Code.UNIMPLEMENTED: 501, Code.INTERNAL: 500, Code.UNAVAILABLE: 503,
    Code.DATA_LOSS: 500, Code.UNAUTHENTICATED: 401,
}


@dataclass(frozen=True)
class ErrorDetail:
    """One Connect error detail: a protobuf message's full name and its serialized bytes."""

    type: str
    value: bytes

    def to_json(self) -> dict:
        return {"type": self.type, "value": b64encode_unpadded(self.value)}


@dataclass
class ConnectError(Exception):
    """The one error type of this codec; `code` decides what the peer sees."""

    code: Code
    message: str
    details: list[ErrorDetail] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(f"{self.code.value}: {self.message}")

    def to_json(self) -> dict:
        body: dict = {"code": self.code.value, "message": self.message}
        if self.details:
            body["details"] = [d.to_json() for d in self.details]
        return body


@dataclass(frozen=True)
class Frame:
    """One decoded envelope. `payload` is already decompressed."""

    flags: int
    payload: bytes

    @property
    def end_stream(self) -> bool:
        return bool(self.flags & FLAG_END_STREAM)


def b64encode_unpadded(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii").rstrip("=")


def b64decode_lenient(text: str) -> bytes:
    """Standard or URL-safe base64, padding optional (Connect allows both)."""
    text = text.strip()
    padded = text + "=" * (-len(text) % 4)
    if "-" in text or "_" in text:
        return base64.urlsafe_b64decode(padded)
    return base64.b64decode(padded, validate=True)


def encode_envelope(payload: bytes, *, flags: int = 0, compress: bool = False) -> bytes:
    if compress:
        payload = gzip.compress(payload, mtime=0)
        flags |= FLAG_COMPRESSED
    return HEADER.pack(flags, len(payload)) + payload


def encode_end_stream(error: ConnectError | None = None, *, metadata: dict | None = None) -> bytes:
    """The end-stream envelope: `{}` on success, `{"error": ...}` otherwise."""
    body: dict = {}
    if error is not None:
        body["error"] = error.to_json()
    if metadata:
        body["metadata"] = metadata
    return encode_envelope(json.dumps(body, separators=(",", ":")).encode(), flags=FLAG_END_STREAM)


def parse_end_stream(payload: bytes) -> ConnectError | None:
    """Decode an end-stream payload; None means success. Malformed JSON is a protocol error."""
    try:
        body = json.loads(payload.decode("utf-8")) if payload else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConnectError(Code.INVALID_ARGUMENT, f"malformed end-stream JSON: {e}") from e
    if not isinstance(body, dict):
        raise ConnectError(Code.INVALID_ARGUMENT, "end-stream JSON is not an object")
    return error_from_json(body["error"]) if body.get("error") else None


def error_from_json(obj: object) -> ConnectError:
    """The error of an end-stream or unary error body; a malformed one is itself an INVALID_ARGUMENT."""
    if not isinstance(obj, dict):
        raise ConnectError(Code.INVALID_ARGUMENT, "Connect error is not a JSON object")
    try:
        code = Code(obj.get("code", "unknown"))
    except (ValueError, TypeError):
        code = Code.UNKNOWN
    message = obj.get("message", "")
    if not isinstance(message, str):
        raise ConnectError(Code.INVALID_ARGUMENT, "Connect error message is not a string")
    raw_details = obj.get("details", [])
    if not isinstance(raw_details, list):
        raise ConnectError(Code.INVALID_ARGUMENT, "Connect error details are not a list")
    details = []
    for d in raw_details:
        if not (isinstance(d, dict) and isinstance(d.get("type"), str) and isinstance(d.get("value"), str)):
            raise ConnectError(Code.INVALID_ARGUMENT, "Connect error detail needs string type and value")
        try:
            details.append(ErrorDetail(d["type"], b64decode_lenient(d["value"])))
        except ValueError as e:  # binascii.Error is a ValueError
            raise ConnectError(Code.INVALID_ARGUMENT, f"Connect error detail value is not base64: {e}") from e
    return ConnectError(code, message, details)


def unary_error_body(error: ConnectError) -> tuple[int, bytes]:
    """(HTTP status, JSON body) for a unary error response such as a rejected BidiAppend."""
    return error.code.http_status, json.dumps(error.to_json(), separators=(",", ":")).encode()


def _gunzip(data: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as e:
        raise ConnectError(Code.INVALID_ARGUMENT, f"bad gzip frame: {e}") from e
    if len(out) > limit:
        raise ConnectError(Code.RESOURCE_EXHAUSTED, f"decompressed frame is larger than {limit} bytes")
    if not inflater.eof:
        raise ConnectError(Code.INVALID_ARGUMENT, "bad gzip frame: truncated")
    return out


class EnvelopeDecoder:
    """Feed bytes as they arrive; get whole frames back.

    Frames split across reads are buffered; several frames in one read all come out. A length
    above `max_message_bytes` fails at once (before buffering the payload). `close()` says whether
    the stream ended cleanly on a frame boundary.
    """

    def __init__(self, *, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self.max_message_bytes = max_message_bytes
        self._buffer = bytearray()
        self._ended = False

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[Frame]:
        self._buffer += data
        frames: list[Frame] = []
        while len(self._buffer) >= HEADER.size:
            flags, length = HEADER.unpack_from(self._buffer)
            if length > self.max_message_bytes:
                raise ConnectError(
                    Code.RESOURCE_EXHAUSTED,
                    f"frame of {length} bytes is larger than the limit of {self.max_message_bytes}",
                )
            if len(self._buffer) < HEADER.size + length:
                break
            payload = bytes(self._buffer[HEADER.size : HEADER.size + length])
            del self._buffer[: HEADER.size + length]
            if self._ended:
                raise ConnectError(Code.INVALID_ARGUMENT, "frame after end-stream")
            if flags & FLAG_COMPRESSED:
                payload = _gunzip(payload, self.max_message_bytes)
            frame = Frame(flags, payload)
            self._ended = frame.end_stream
            frames.append(frame)
        return frames

    def close(self) -> None:
        """Raise if the stream stopped inside a frame."""
        if self._buffer:
            raise ConnectError(
                Code.INVALID_ARGUMENT, f"truncated frame: {len(self._buffer)} bytes left over"
            )


def decode_all(data: bytes, **kwargs) -> list[Frame]:
    """Decode a complete body; a truncated tail is an error."""
    decoder = EnvelopeDecoder(**kwargs)
    frames = decoder.feed(data)
    decoder.close()
    return frames


def split_envelopes(data: bytes) -> tuple[list[tuple[int, bytes]], bytes]:
    """Lenient split for display: raw (flags, payload) pairs and whatever tail is incomplete."""
    frames = []
    i = 0
    while i + HEADER.size <= len(data):
        flags, length = HEADER.unpack_from(data, i)
        if i + HEADER.size + length > len(data):
            break
        frames.append((flags, data[i + HEADER.size : i + HEADER.size + length]))
        i += HEADER.size + length
    return frames, data[i:]


