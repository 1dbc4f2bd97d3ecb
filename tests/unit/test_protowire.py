"""The byte-level protobuf walker: rewrite one field, keep every other byte."""

import pytest
from hypothesis import given, strategies as st

from byok.proto import aiserver_pb2 as spb
from byok.wire.protowire import (
    WireError, encode_len, encode_varint, encode_varint_field, iter_fields, last_varint, merged_message, read_varint, replace_field,
)


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_varints_round_trip(value):
    encoded = encode_varint(value)
    assert read_varint(encoded, 0) == (value, len(encoded))


def test_negative_varints_are_ten_bytes_as_protobuf_writes_them():
    expected = spb.ChatConfig(full_context_token_limit=-1).SerializeToString()
    assert encode_varint_field(2, -1) == expected


def test_fields_are_walked_in_order_with_their_spans():
    data = spb.GetServerConfigResponse(config_version="v1", http2_config=3, use_nlb_for_nal=True).SerializeToString()
    fields = list(iter_fields(data))
    assert [(f.number, f.wire_type) for f in fields] == [(6, 2), (7, 0), (26, 0)]
    assert fields[0].value(data) == b"v1"
    assert b"".join(data[f.start:f.end] for f in fields) == data


def test_replace_keeps_every_other_byte_in_place():
    before = encode_len(6, b"v1") + encode_varint_field(7, 2) + encode_len(99, b"unknown") + encode_varint_field(7, 4)
    after = replace_field(before, 7, encode_varint_field(7, 3))
    assert after == encode_len(6, b"v1") + encode_varint_field(7, 3) + encode_len(99, b"unknown")
    assert replace_field(before, 7, None) == encode_len(6, b"v1") + encode_len(99, b"unknown")
    assert replace_field(encode_len(6, b"v1"), 7, encode_varint_field(7, 1)) == encode_len(6, b"v1") + b"\x38\x01"
    assert last_varint(before, 7) == 4 and last_varint(after, 7) == 3 and last_varint(b"", 7) is None


def test_embedded_messages_merge_like_protobuf():
    data = encode_len(27, encode_len(1, b"a")) + encode_len(95, b"x") + encode_len(27, encode_len(2, b"b"))
    merged = merged_message(data, 27)
    assert spb.AgentUrlConfig.FromString(merged) == spb.AgentUrlConfig(agent_url="a", agentn_url="b")
    assert spb.GetServerConfigResponse.FromString(data).agent_url_config == spb.AgentUrlConfig.FromString(merged)


def test_groups_are_skipped_whole():
    group = encode_varint(5 << 3 | 3) + encode_varint_field(1, 9) + encode_varint(5 << 3 | 4)
    data = group + encode_varint_field(7, 1)
    assert [f.number for f in iter_fields(data)] == [5, 7]


@pytest.mark.parametrize("bad", [b"\x08", b"\x0a\x05ab", b"\x0f", b"\x00\x01", b"\xff" * 11, b"\x2b\x08\x01"])
def test_malformed_bytes_are_a_wire_error(bad):
    with pytest.raises(WireError):
        list(iter_fields(bad))
