"""Protobuf wire format at the byte level (sans-IO): rewrite one field, keep every other byte.

Used where cursor-byok changes a field of an upstream answer it otherwise passes on untouched
(GetServerConfig's `http2_config`, `agent_url_config`; GetDefaultModelForCli's `model`). Decoding
and re-encoding with generated classes would reorder fields and could drop what a newer server
sends; walking the wire keeps the upstream bytes exactly, unknown fields included.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

VARINT, FIXED64, LEN, START_GROUP, END_GROUP, FIXED32 = 0, 1, 2, 3, 4, 5


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message."""


@dataclass(frozen=True, slots=True)
class Field:
    number: int
    wire_type: int
    start: int
    """Offset of the tag."""
    value_start: int
    """Offset of the value (after the length prefix for LEN fields)."""
    end: int

    def value(self, data: bytes) -> bytes:
        return data[self.value_start:self.end]


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise WireError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError("varint longer than 10 bytes")


def encode_varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # negative int32/int64 are ten-byte two's complement
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def encode_tag(number: int, wire_type: int) -> bytes:
    return encode_varint(number << 3 | wire_type)


def encode_len(number: int, value: bytes) -> bytes:
    return encode_tag(number, LEN) + encode_varint(len(value)) + value


def encode_varint_field(number: int, value: int) -> bytes:
    return encode_tag(number, VARINT) + encode_varint(value)


def iter_fields(data: bytes) -> Iterator[Field]:
    """Every top-level field in order. Groups are skipped whole (they are deprecated and rare)."""
    pos = 0
    while pos < len(data):
        start = pos
        key, pos = read_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        value_start, pos = _skip(data, pos, wire_type, number)
        yield Field(number, wire_type, start, value_start, pos)


def _skip(data: bytes, pos: int, wire_type: int, number: int) -> tuple[int, int]:
    if wire_type == VARINT:
        _, end = read_varint(data, pos)
        return pos, end
    if wire_type == FIXED64:
        end = pos + 8
    elif wire_type == FIXED32:
        end = pos + 4
    elif wire_type == LEN:
        length, pos = read_varint(data, pos)
        end = pos + length
    elif wire_type == START_GROUP:
        start = pos
        while True:
            if pos >= len(data):
                raise WireError(f"unterminated group {number}")
            key, after = read_varint(data, pos)
            if key >> 3 == number and key & 7 == END_GROUP:
                return start, after
            _, pos = _skip(data, after, key & 7, key >> 3)
    else:
        raise WireError(f"invalid wire type {wire_type} for field {number}")
    if end > len(data):
        raise WireError(f"field {number} runs past the end of the message")
    return pos, end


def values(data: bytes, number: int) -> list[Field]:
    return [f for f in iter_fields(data) if f.number == number]


def replace_field(data: bytes, number: int, encoded: bytes | None) -> bytes:
    """`data` with every occurrence of field `number` removed and `encoded` (one or more complete
    encoded fields, or None to only remove) put where the first occurrence was, else at the end.
    Every other byte stays as it was."""
    out = bytearray()
    placed = encoded is None
    pos = 0
    for f in iter_fields(data):
        if f.number != number:
            continue
        out += data[pos:f.start]
        if not placed:
            out += encoded
            placed = True
        pos = f.end
    out += data[pos:]
    if not placed:
        out += encoded
    return bytes(out)


def merged_message(data: bytes, number: int) -> bytes:
    """The value of an embedded-message field as protobuf reads it: all occurrences merged
    (concatenated), so a later occurrence's scalars win."""
    return b"".join(f.value(data) for f in values(data, number) if f.wire_type == LEN)


def last_varint(data: bytes, number: int) -> int | None:
    found = [f for f in values(data, number) if f.wire_type == VARINT]
    return read_varint(data, found[-1].value_start)[0] if found else None
