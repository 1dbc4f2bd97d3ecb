import gzip
import json
import struct

import pytest
from hypothesis import given, strategies as st

from byok.wire.connect import (
    Code, ConnectError, EnvelopeDecoder, ErrorDetail, FLAG_END_STREAM, b64decode_lenient, decode_all, encode_end_stream, encode_envelope, parse_end_stream, split_envelopes, unary_error_body,
)
from byok.proto import aiserver_pb2 as spb


def test_envelope_is_flag_plus_big_endian_length_plus_payload():
    assert encode_envelope(b"\x0a\x03abc") == b"\x00\x00\x00\x00\x05\x0a\x03abc"


def test_success_end_stream_is_the_captured_bytes():
    assert encode_end_stream() == b"\x02\x00\x00\x00\x02{}"


def test_error_end_stream_is_flagged_json_with_unpadded_details():
    detail = ErrorDetail("aiserver.v1.ErrorDetails", b"\x01")
    data = encode_end_stream(ConnectError(Code.UNAVAILABLE, "overloaded", [detail]))
    flags, length = struct.unpack(">BI", data[:5])
    assert flags == FLAG_END_STREAM and length == len(data) - 5
    assert json.loads(data[5:]) == {
        "error": {"code": "unavailable", "message": "overloaded",
                  "details": [{"type": "aiserver.v1.ErrorDetails", "value": "AQ"}]}
    }
    err = parse_end_stream(data[5:])
    assert err.code is Code.UNAVAILABLE and err.details == [detail]


def test_captured_error_details_value_decodes():
    value = ("CAISVQoUQXV0aGVudGljYXRpb24gZXJyb3ISMklmIHlvdSBhcmUgbG9nZ2VkIGluLCB0cnkgbG9nZ2luZyBvdXQgYW5kIGJhY2sg"
             "aW4uIABSBwoFbG9naW4YAQ")
    details = spb.ErrorDetails.FromString(b64decode_lenient(value))
    assert details.error == spb.ErrorDetails.ERROR_NOT_LOGGED_IN
    assert details.is_expected is True
    assert details.details.title == "Authentication error"
    assert details.details.is_retryable is False


def _stream():
    return (encode_envelope(b"one") + encode_envelope(b"two", compress=True) + encode_envelope(b"")
            + encode_end_stream())


def test_decoder_whole_and_byte_by_byte_agree():
    data = _stream()
    whole = decode_all(data)
    decoder = EnvelopeDecoder()
    by_byte = [f for i in range(len(data)) for f in decoder.feed(data[i:i + 1])]
    decoder.close()
    assert [f.payload for f in whole] == [b"one", b"two", b"", b"{}"]
    assert by_byte == whole
    assert whole[1].flags == 0x01 and whole[-1].end_stream


def test_gzip_flag_inflates_payload():
    frame = b"\x01" + struct.pack(">I", len(gzip.compress(b"hello"))) + gzip.compress(b"hello")
    assert decode_all(frame)[0].payload == b"hello"


def test_bad_gzip_is_invalid_argument():
    with pytest.raises(ConnectError) as e:
        decode_all(b"\x01\x00\x00\x00\x03abc")
    assert e.value.code is Code.INVALID_ARGUMENT


def test_truncated_frame_is_reported_on_close():
    decoder = EnvelopeDecoder()
    assert decoder.feed(encode_envelope(b"hello")[:-1]) == []
    with pytest.raises(ConnectError, match="truncated") as e:
        decoder.close()
    assert e.value.code is Code.INVALID_ARGUMENT


def test_oversize_frame_fails_before_buffering_payload():
    decoder = EnvelopeDecoder(max_message_bytes=10)
    with pytest.raises(ConnectError) as e:
        decoder.feed(b"\x00\x00\x00\x00\x0b")  # header alone announces 11 bytes
    assert e.value.code is Code.RESOURCE_EXHAUSTED


def test_gzip_bomb_is_bounded():
    bomb = gzip.compress(b"\x00" * 100_000)
    with pytest.raises(ConnectError) as e:
        decode_all(b"\x01" + struct.pack(">I", len(bomb)) + bomb, max_message_bytes=1000)
    assert e.value.code is Code.RESOURCE_EXHAUSTED


def test_frame_after_end_stream_is_rejected():
    with pytest.raises(ConnectError, match="after end-stream"):
        decode_all(encode_end_stream() + encode_envelope(b"x"))


def test_split_envelopes_keeps_incomplete_tail():
    data = encode_envelope(b"a") + encode_envelope(b"bc")[:4]
    frames, tail = split_envelopes(data)
    assert frames == [(0, b"a")] and len(tail) == 4


def test_unary_error_body_has_http_status():
    status, body = unary_error_body(ConnectError(Code.INVALID_ARGUMENT, "bad"))
    assert status == 400 and json.loads(body) == {"code": "invalid_argument", "message": "bad"}


def test_malformed_end_stream_json_is_an_error():
    with pytest.raises(ConnectError):
        parse_end_stream(b"{not json")


@given(st.lists(st.tuples(st.binary(max_size=300), st.booleans()), max_size=8), st.integers(1, 64))
def test_round_trip_with_arbitrary_chunking(messages, chunk):
    data = b"".join(encode_envelope(m, compress=c) for m, c in messages) + encode_end_stream()
    decoder = EnvelopeDecoder()
    frames = [f for i in range(0, len(data), chunk) for f in decoder.feed(data[i:i + chunk])]
    decoder.close()
    assert [f.payload for f in frames[:-1]] == [m for m, _ in messages]
    assert frames[-1].end_stream and parse_end_stream(frames[-1].payload) is None
