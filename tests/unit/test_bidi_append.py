"""BidiAppend bodies: the message in hex `data`, in raw `data_binary` (newer clients), or both."""

import pytest

from byok.wire import connect
from byok.agent.cursor.bidi import decode_bidi_append, encode_bidi_append
from byok.proto import agent_pb2 as apb, aiserver_pb2 as spb

ACK = apb.AgentClientMessage(kv_client_message=apb.KvClientMessage(id=3, set_blob_result=apb.SetBlobResult()))


def body(**fields) -> bytes:
    return spb.BidiAppendRequest(request_id=spb.BidiRequestId(request_id="r"), append_seqno=7, **fields).SerializeToString()


@pytest.mark.parametrize("form", ["data", "data_binary", "both"])
def test_every_form_decodes_to_the_same_append(form):
    append = decode_bidi_append(encode_bidi_append("r", 7, ACK, form))
    assert (append.request_id, append.seqno, append.message, append.raw, append.form) == \
        ("r", 7, ACK, ACK.SerializeToString(), form)


def test_both_fields_may_differ_in_bytes_but_not_in_message():
    # the same message with its fields in another order: other bytes, same message
    raw = ACK.SerializeToString()
    inner = apb.KvClientMessage(id=3, set_blob_result=apb.SetBlobResult()).SerializeToString()
    reordered_inner = inner[2:] + inner[:2]  # set_blob_result (3) before id (1)
    reordered = b"\x1a" + bytes([len(reordered_inner)]) + reordered_inner
    assert reordered != raw and apb.AgentClientMessage.FromString(reordered) == ACK
    assert decode_bidi_append(body(data=raw.hex(), data_binary=reordered)).message == ACK
    other = apb.AgentClientMessage(client_heartbeat=apb.ClientHeartbeat()).SerializeToString()
    with pytest.raises(connect.ConnectError, match="data and data_binary hold different messages") as e:
        decode_bidi_append(body(data=raw.hex(), data_binary=other))
    assert e.value.code is connect.Code.INVALID_ARGUMENT


@pytest.mark.parametrize("fields, words", [
    ({}, "contains no AgentClientMessage"),
    ({"data": "zz"}, "data is not hex"),
    ({"data": "ffff"}, "data is not an AgentClientMessage"),
    ({"data_binary": b"\xff\xff"}, "data_binary is not an AgentClientMessage"),
    ({"data": "zz", "data_binary": ACK.SerializeToString()}, "data is not hex"),
])
def test_bad_appends_are_invalid_argument(fields, words):
    with pytest.raises(connect.ConnectError, match=words) as e:
        decode_bidi_append(body(**fields))
    assert e.value.code is connect.Code.INVALID_ARGUMENT


def test_enveloped_data_binary_append():
    enveloped = connect.encode_envelope(encode_bidi_append("r", 1, ACK, "data_binary"), compress=True)
    append = decode_bidi_append(enveloped, "application/connect+proto")
    assert append.message == ACK and append.form == "data_binary"
