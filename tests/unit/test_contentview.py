"""The Cursor Agent content view: frames built with the real protobufs, rendered without a proxy;
then the mitmproxy side (priority by flow path, "auto" picks it, registration)."""

from __future__ import annotations

import gzip
import hashlib
import json

import pytest
from mitmproxy import contentviews
from mitmproxy.test import taddons, tflow, tutils

from byok import contentview as cv
from byok.wire import connect
from byok.agent.cursor import updates
from byok.agent.cursor.bidi import encode_bidi_append
from byok.wire.errors import error_details
from byok.cli.client import user_turn_request
from byok.proto import agent_pb2 as apb, aiserver_pb2 as spb


def text(line: cv.Line) -> str:
    return "".join(t for _, t in line)


def texts(lines: list[cv.Line]) -> list[str]:
    return [text(line) for line in lines]


def env(message, **kwargs) -> bytes:
    return connect.encode_envelope(message.SerializeToString(), **kwargs)


def varint(n: int) -> bytes:
    out = b""
    while n > 0x7F:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def field(number: int, wire_type: int, payload: bytes) -> bytes:
    tag = varint(number << 3 | wire_type)
    return tag + (varint(len(payload)) + payload if wire_type == 2 else payload)


BLOB = json.dumps({"role": "user", "content": "x" * 2000}).encode()
BLOB_ID = hashlib.sha256(BLOB).digest()


def exec_read(exec_id: int) -> apb.AgentServerMessage:
    message = apb.AgentServerMessage()
    message.exec_server_message.id = exec_id
    message.exec_server_message.exec_id = "ex-7"
    message.exec_server_message.read_args.path = "/w/a.py"
    return message


# ---- server side --------------------------------------------------------------------------------------


def test_server_stream_frames_kinds_ids_and_json():
    data = b"".join([
        env(updates.text_delta("Hello")),
        env(updates.kv_set(3, BLOB_ID, BLOB)),
        env(updates.tool_call_started("call_1\nx", "mc-9", apb.ToolCall())),
        env(exec_read(2)),
        env(updates.heartbeat()),
        connect.encode_end_stream(),
    ])
    lines = texts(cv.render_server_stream(data))
    assert lines[0] == f"[0] MSG flags=0x00 len={len(updates.text_delta('Hello').SerializeToString())} interaction_update.text_delta"
    assert json.loads(lines[1]) == {"interaction_update": {"text_delta": {"text": "Hello"}}}
    assert lines[2].startswith("[1] MSG flags=0x00 len=") and "kv_server_message.set_blob_args" in lines[2]
    assert f"kv=3 blob={BLOB_ID.hex()[:12]}" in lines[2]
    kv = json.loads(lines[3])["kv_server_message"]
    assert kv["id"] == 3 and kv["set_blob_args"]["blob_id"] == BLOB_ID.hex()
    # the big blob: size and sha256 (so it can be matched with its id), not the bytes
    shown = kv["set_blob_args"]["blob_data"]
    assert shown.startswith(f"<{len(BLOB)} bytes sha256={hashlib.sha256(BLOB).hexdigest()[:16]}")
    assert len(shown) < 200
    assert "interaction_update.tool_call_started" in lines[4] and "call=call_1\\nx model_call=mc-9" in lines[4]
    assert "exec_server_message.read_args" in lines[6] and "exec=2 exec_id=ex-7" in lines[6]
    assert json.loads(lines[7])["exec_server_message"]["read_args"] == {"path": "/w/a.py"}
    assert "interaction_update.heartbeat" in lines[8]
    assert lines[10] == "[5] END flags=0x02(end) len=2 ok" and lines[11].strip() == "{}"
    assert len(lines) == 12
    assert cv.describe_stream(data, "RunSSE") == "RunSSE: 6 frame(s), ended"


def test_gzip_frame_is_inflated():
    message = updates.text_delta("compressed " * 50)
    data = env(message, compress=True) + connect.encode_end_stream()
    lines = texts(cv.render_server_stream(data))
    wire_len = connect.HEADER.unpack_from(data)[1]
    assert lines[0] == (f"[0] MSG flags=0x01(gzip) len={wire_len}->{message.ByteSize()} "
                        "interaction_update.text_delta")
    assert json.loads(lines[1])["interaction_update"]["text_delta"]["text"] == "compressed " * 50


def test_bad_gzip_frame_is_an_error_line_and_rendering_goes_on():
    data = connect.HEADER.pack(connect.FLAG_COMPRESSED, 4) + b"nope" + env(updates.text_delta("after"))
    lines = cv.render_server_stream(data)
    assert lines[0][1][0] == "error" and "bad gzip" in text(lines[0])
    assert "interaction_update.text_delta" in text(lines[1])


def test_truncated_tail_is_shown_as_incomplete():
    whole = env(updates.text_delta("one")) + env(updates.text_delta("two"))
    cut = whole[:-2]
    lines = texts(cv.render_server_stream(cut))
    assert len(lines) == 3 and "text_delta" in lines[0]
    assert lines[2] == f"[1] incomplete frame: {len(updates.text_delta('two').SerializeToString()) - 2} of " \
                       f"{len(updates.text_delta('two').SerializeToString())} payload bytes, flags=0x00 " \
                       "(stream still running, or cut)"
    assert cv.describe_stream(cut, "RunSSE").endswith("1 frame(s), no end-stream yet, 12 bytes of an incomplete frame")
    header_only = texts(cv.render_server_stream(whole[:3]))
    assert header_only == ["[0] incomplete frame: 3 bytes of a frame header (stream still running, or cut)"]


def test_error_end_stream_with_error_details():
    detail = error_details(spb.ErrorDetails.ERROR_PROVIDER_ERROR, title="Provider error",
                           detail="upstream exploded (HTTP 500)", retryable=True)
    data = env(updates.text_delta("partial")) + connect.encode_end_stream(
        connect.ConnectError(connect.Code.UNAVAILABLE, "provider failed:\nHTTP 500", [detail]))
    lines = cv.render_server_stream(data)
    head = lines[2]
    assert text(head) == "[1] END flags=0x02(end) len=%d error unavailable: provider failed:\\nHTTP 500" % (
        len(data) - len(env(updates.text_delta("partial"))) - 5)
    assert ("error", "error unavailable: provider failed:\\nHTTP 500") in head
    end_json = json.loads(text(lines[3]))
    assert end_json["error"]["code"] == "unavailable"
    assert text(lines[4]).strip().startswith("detail aiserver.v1.ErrorDetails: ")
    decoded = json.loads(text(lines[4]).split(": ", 1)[1])
    assert decoded["error"] == "ERROR_PROVIDER_ERROR"
    assert decoded["details"]["detail"] == "upstream exploded (HTTP 500)" and decoded["details"]["is_retryable"] is True


def test_end_stream_that_is_not_json_and_frames_after_it():
    data = (connect.HEADER.pack(connect.FLAG_END_STREAM, 3) + b"\x08\x01\x02"
            + env(updates.text_delta("late")))
    lines = cv.render_server_stream(data)
    assert "end-stream is not JSON" in text(lines[0])
    assert text(lines[2]).startswith("[1] after end-stream! MSG")


def test_undecodable_payload_is_shown_as_bytes():
    data = connect.encode_envelope(b"\xff\xff\xff\xff")
    lines = cv.render_server_stream(data)
    assert "not decodable" in text(lines[0]) and text(lines[1]).strip() == "ffffffff"


def test_unknown_fields_are_shown_where_they_are():
    known = updates.text_delta("hi").SerializeToString()
    # a newer server: field 99 inside text_delta's InteractionUpdate, field 60 at the top level
    update = apb.InteractionUpdate(text_delta=apb.TextDeltaUpdate(text="hi")).SerializeToString() + field(99, 0, varint(7))
    payload = field(1, 2, update) + field(60, 2, b"new thing")
    assert known != payload
    lines = texts(cv.render_server_stream(connect.encode_envelope(payload)))
    assert "unknown fields: interaction_update#99, #60" in lines[0]
    body = json.loads(lines[1])
    assert body["#60"] == "new thing" and body["interaction_update"]["#99"] == 7


def test_long_strings_are_shortened_with_their_size():
    message = updates.text_delta("y" * 10000)
    body = json.loads(texts(cv.render_server_stream(env(message)))[1])
    shown = body["interaction_update"]["text_delta"]["text"]
    assert shown.startswith("y" * cv.TEXT_HEAD + "… <10000 chars sha256=") and len(shown) < 600


def test_checkpoint_blob_ids_are_hex():
    state = apb.ConversationStateStructure(root_prompt_messages_json=[BLOB_ID], turns=[BLOB_ID])
    body = json.loads(texts(cv.render_server_stream(env(updates.checkpoint(state))))[1])
    assert body["conversation_checkpoint_update"]["turns"] == [BLOB_ID.hex()]


# ---- client side --------------------------------------------------------------------------------------


def test_bidi_append_run_request():
    request = user_turn_request("hello", model_id="abcd1234", conversation_id="conv-1")
    body = encode_bidi_append("req-1", 0, apb.AgentClientMessage(run_request=request))
    lines = texts(cv.render_bidi_append(body, "application/proto"))
    assert lines[0].startswith("BidiAppend request_id=req-1 seqno=0 data=")
    assert lines[1] == "run_request  conversation=conv-1 model=abcd1234 action=user_message_action"
    decoded = json.loads(lines[2])
    assert decoded["run_request"]["action"]["user_message_action"]["user_message"]["text"] == "hello"


def test_bidi_append_kv_reply_and_exec_control():
    ack = apb.AgentClientMessage(kv_client_message=apb.KvClientMessage(id=4, set_blob_result=apb.SetBlobResult()))
    lines = texts(cv.render_bidi_append(encode_bidi_append("r", 5, ack), "application/proto"))
    assert "seqno=5" in lines[0] and lines[1] == "kv_client_message.set_blob_result  kv=4"
    close = apb.AgentClientMessage(exec_client_control_message=apb.ExecClientControlMessage(
        stream_close=apb.ExecClientStreamClose(id=9)))
    lines = texts(cv.render_bidi_append(encode_bidi_append("r", 6, close), "application/proto"))
    assert lines[1] == "exec_client_control_message.stream_close  exec=9"


def test_bidi_append_with_unknown_field_in_the_client_message():
    message = apb.AgentClientMessage(client_heartbeat=apb.ClientHeartbeat())
    raw = message.SerializeToString() + field(77, 2, b"\x01\x02\x03")
    body = spb.BidiAppendRequest(data=raw.hex(), request_id=spb.BidiRequestId(request_id="r"),
                                 append_seqno=2).SerializeToString()
    lines = texts(cv.render_bidi_append(body, "application/proto"))
    assert lines[1] == "client_heartbeat  unknown fields: #77"
    assert json.loads(lines[2]) == {"client_heartbeat": {}, "#77": "010203"}


def test_bidi_append_enveloped_and_gzip_body():
    message = apb.AgentClientMessage(client_heartbeat=apb.ClientHeartbeat())
    unary = encode_bidi_append("req-e", 1, message)
    enveloped = connect.encode_envelope(unary, compress=True)
    lines = texts(cv.render_bidi_append(enveloped, "application/connect+proto"))
    assert lines[0] == "enveloped (application/connect+proto): 1 frame(s)"
    assert lines[1] == "[0] MSG flags=0x01(gzip)" and "request_id=req-e seqno=1" in lines[2]
    assert lines[3] == "client_heartbeat"
    # a content-encoding: gzip body mitmproxy could not decode reaches the view compressed
    lines = texts(cv.render_bidi_append(gzip.compress(unary), "application/proto"))
    assert "request_id=req-e" in lines[0]


def test_bidi_append_in_every_form():
    message = apb.AgentClientMessage(kv_client_message=apb.KvClientMessage(id=4, set_blob_result=apb.SetBlobResult()))
    size = len(message.SerializeToString())
    for form, carried in (("data", f"data={2 * size} hex chars"), ("data_binary", f"data_binary={size} bytes"),
                          ("both", f"data={2 * size} hex chars data_binary={size} bytes")):
        lines = texts(cv.render_bidi_append(encode_bidi_append("r", 5, message, form), "application/proto"))
        assert lines[0] == f"BidiAppend request_id=r seqno=5 {carried}", form
        assert lines[1] == "kv_client_message.set_blob_result  kv=4", form
    other = apb.AgentClientMessage(client_heartbeat=apb.ClientHeartbeat()).SerializeToString()
    mixed = spb.BidiAppendRequest(data=message.SerializeToString().hex(), data_binary=other,
                                  request_id=spb.BidiRequestId(request_id="r")).SerializeToString()
    assert "data and data_binary hold different messages" in texts(cv.render_bidi_append(mixed))[1]
    bad = spb.BidiAppendRequest(data_binary=b"\xff\xff", request_id=spb.BidiRequestId(request_id="r"))
    assert "data_binary is not an AgentClientMessage" in texts(cv.render_bidi_append(bad.SerializeToString()))[1]


def test_bidi_append_bad_data():
    not_hex = spb.BidiAppendRequest(data="zz", request_id=spb.BidiRequestId(request_id="g")).SerializeToString()
    assert "data is not hex" in texts(cv.render_bidi_append(not_hex))[1]
    not_message = spb.BidiAppendRequest(data="ffff", request_id=spb.BidiRequestId(request_id="g")).SerializeToString()
    assert "not an AgentClientMessage" in texts(cv.render_bidi_append(not_message))[1]
    assert "not a BidiAppendRequest" in texts(cv.render_bidi_append(b"\xff\x00garbage"))[0]


def test_run_sse_request():
    body = connect.encode_envelope(spb.BidiRequestId(request_id="req-9").SerializeToString())
    lines = texts(cv.render_run_sse_request(body))
    assert lines[0] == f"[0] MSG flags=0x00 len={len(body) - 5} BidiRequestId  request_id=req-9"
    assert json.loads(lines[1]) == {"request_id": "req-9"}


# ---- mitmproxy --------------------------------------------------------------------------------------------


def flow_for(path: str, *, request_body: bytes = b"", response_body: bytes | None = None,
             request_type: str = "application/proto", response_type: str = "application/connect+proto"):
    flow = tflow.tflow(req=tutils.treq(host="api2.cursor.sh", port=443, path=path.encode(), method=b"POST",
                                       content=request_body),
                       resp=tutils.tresp(content=response_body or b"") if response_body is not None else None)
    flow.request.headers["content-type"] = request_type
    if flow.response is not None:
        flow.response.headers["content-type"] = response_type
    return flow


@pytest.fixture
def registered():
    registrar = cv.ContentViewRegistrar()
    registrar.load(None)
    yield registrar.view


def priority(view: cv.CursorAgentView, data: bytes, *, content_type=None, flow=None, http_message=None) -> float:
    return view.render_priority(data, contentviews.Metadata(flow=flow, content_type=content_type,
                                                            http_message=http_message))


def auto(message, flow) -> tuple[str, list[str]]:
    """What mitmproxy's "auto" view shows: (the chosen view's title line, the rest)."""
    with taddons.context():  # prettify_message reads ctx.options
        result = contentviews.prettify_message(message, flow)
    assert result.view_name == cv.VIEW_NAME, result
    title, *lines = result.text.split("\n")
    return title, lines


def test_auto_picks_the_view_for_run_sse_and_bidi_append(registered):
    stream = env(updates.text_delta("auto")) + connect.encode_end_stream()
    flow = flow_for("/agent.v1.AgentService/RunSSE",
                    request_body=connect.encode_envelope(spb.BidiRequestId(request_id="q").SerializeToString()),
                    request_type="application/connect+proto", response_body=stream)
    description, lines = auto(flow.response, flow)
    assert description == "Cursor Agent: RunSSE response: 2 frame(s), ended"
    assert "interaction_update.text_delta" in lines[0]
    description, lines = auto(flow.request, flow)
    assert description.startswith("Cursor Agent: RunSSE request")
    append = flow_for("/aiserver.v1.BidiService/BidiAppend", request_body=encode_bidi_append(
        "q", 0, apb.AgentClientMessage(client_heartbeat=apb.ClientHeartbeat())), response_body=b"",
        response_type="application/proto")
    description, lines = auto(append.request, append)
    assert description == "Cursor Agent: BidiAppend" and lines[1] == "client_heartbeat"


def test_priority_only_for_the_agent_rpcs(registered):
    view = registered
    run = flow_for("/agent.v1.AgentService/RunSSE", response_body=b"x")
    assert priority(view, b"x", content_type="application/connect+proto", flow=run,
                                http_message=run.response) == cv.PRIORITY
    # an empty stream that just started is still ours (mitmweb shows "no bytes yet")
    assert priority(view, b"", flow=run, http_message=run.response) == cv.PRIORITY
    append = flow_for("/aiserver.v1.BidiService/BidiAppend", response_body=b"")
    assert priority(view, b"", flow=append, http_message=append.response,
                                content_type="application/proto") < 0
    other = flow_for("/aiserver.v1.AiService/AvailableModels", response_body=b"x")
    assert priority(view, b"x", content_type="application/proto", flow=other, http_message=other.response) < 0
    assert priority(view, b"x", content_type="application/connect+proto", flow=other,
                                http_message=other.response) == cv.GENERIC_PRIORITY
    assert priority(view, b"x", content_type="text/html") < 0
    description, _ = view.render(b"", flow=run, http_message=run.response)
    assert description == "Cursor Agent: RunSSE response: no bytes yet"


def test_registrar_replaces_a_stale_view_of_the_same_name():
    first, second = cv.ContentViewRegistrar(), cv.ContentViewRegistrar()
    first.load(None)
    assert contentviews.registry[cv.VIEW_NAME] is first.view
    second.load(None)  # a reloaded script
    assert contentviews.registry[cv.VIEW_NAME] is second.view


def test_malformed_end_stream_error_shapes_do_not_break_the_view():
    for body in (b'{"error": "just a string"}', b'{"error": {"code": "internal", "details": ["x", 3]}}', b"[1, 2]"):
        lines = texts(cv.render_server_stream(connect.HEADER.pack(connect.FLAG_END_STREAM, len(body)) + body))
        assert lines[0].startswith("[0] END flags=0x02(end)")


def test_a_gzip_frame_inflating_past_the_limit_is_an_error_line():
    bomb = gzip.compress(b"\0" * (cv.connect.DEFAULT_MAX_MESSAGE_BYTES + 10))
    lines = cv.render_server_stream(connect.HEADER.pack(connect.FLAG_COMPRESSED, len(bomb)) + bomb)
    assert "inflates to more than" in text(lines[0])


def test_http2_run_streams_are_decoded_both_ways(registered):
    """Issue 14: an HTTP/2 Run's request is the client's messages, its response the run's."""
    from byok.cli.client import user_turn_request

    up = connect.encode_envelope(apb.AgentClientMessage(
        run_request=user_turn_request("hi", model_id="m1", conversation_id="c1")).SerializeToString())
    up += connect.encode_envelope(apb.AgentClientMessage(kv_client_message=apb.KvClientMessage(
        id=3, set_blob_result=apb.SetBlobResult())).SerializeToString())
    down = connect.encode_envelope(apb.AgentServerMessage(interaction_update=apb.InteractionUpdate(
        text_delta=apb.TextDeltaUpdate(text="hey"))).SerializeToString()) + connect.encode_end_stream()
    flow = flow_for("/agent.v1.AgentService/Run", request_body=up, response_body=down,
                    request_type="application/connect+proto")
    view = registered
    assert priority(view, up, content_type="application/connect+proto", flow=flow,
                                http_message=flow.request) == cv.PRIORITY
    title, lines = view.render(up, content_type="application/connect+proto", flow=flow, http_message=flow.request)
    text = ["".join(t for _, t in line) for line in lines]
    assert title == "Cursor Agent: Run request: 2 frame(s), ended"  # a request stream ends with the request
    assert "run_request  conversation=c1 model=m1" in text[0] and "kv_client_message.set_blob_result  kv=3" in text[2]
    title, lines = view.render(down, content_type="application/connect+proto", flow=flow, http_message=flow.response)
    assert title == "Cursor Agent: Run response: 2 frame(s), ended"
    assert view.render(b"", flow=flow, http_message=flow.request)[0] == "Cursor Agent: Run request: no bytes yet"
    flow.request.timestamp_end = None  # mitmweb shows it while the request still streams
    title, _ = view.render(up, content_type="application/connect+proto", flow=flow, http_message=flow.request)
    assert title == "Cursor Agent: Run request: 2 frame(s), still streaming"


def test_stream_cpp_request_and_frames_are_decoded(registered):
    from byok.proto import cpp_pb2 as cpb

    request = cpb.StreamCppRequest(current_file=cpb.CurrentFileInfo(
        relative_workspace_path="a.py", contents="x = \r\ny", cursor_position=cpb.CursorPosition(line=0, column=4),
        contents_start_at_line=7, line_ending="\r\n"))
    frames = b"".join(env(m) for m in (
        cpb.StreamCppResponse(model_info=cpb.StreamCppResponse.ModelInfo()),
        cpb.StreamCppResponse(range_to_replace=cpb.LineRange(start_line_number=8, end_line_number_inclusive=8)),
        cpb.StreamCppResponse(text="x = 1"), cpb.StreamCppResponse(done_stream=True))) + connect.encode_end_stream()
    flow = flow_for("/aiserver.v1.AiService/StreamCpp", request_body=env(request),
                    request_type="application/connect+proto", response_body=frames)
    description, lines = auto(flow.request, flow)
    assert description == "Cursor: StreamCpp request: 1 frame(s), ended"
    assert "file=a.py cursor=0:4 lines=2 contents_start_at_line=7 line_ending='\\r\\n'" in lines[0]
    description, lines = auto(flow.response, flow)
    assert description == "Cursor: StreamCpp response: 5 frame(s), ended"
    heads = [line for line in lines if line.startswith("[")]
    assert ["model_info" in heads[0], "range 8-8" in heads[1], "text 'x = 1'" in heads[2],
            "done_stream" in heads[3], "ok" in heads[4]] == [True] * 5


def test_unary_tab_rpcs_are_decoded(registered):
    from byok.proto import cpp_pb2 as cpb

    flow = flow_for("/aiserver.v1.AiService/CppConfig", request_body=cpb.CppConfigRequest(model="m").SerializeToString(),
                    response_body=cpb.CppConfigResponse(is_on=True).SerializeToString(), response_type="application/proto")
    description, lines = auto(flow.response, flow)
    assert description == "Cursor: CppConfig response" and any("is_on: true" in line for line in lines)


def test_the_one_shot_calls_and_is_connected_are_decoded(registered):
    """Issue 23: commit messages (unary, proto and JSON), Cmd-K (a server stream of wrapped responses),
    IsConnected."""
    from byok.proto import features_pb2 as fpb

    request = fpb.WriteGitCommitMessageRequest(diffs=["+x"], previous_commit_messages=["Add y"])
    answer = fpb.WriteGitCommitMessageResponse(commit_message="Add x")
    flow = flow_for("/aiserver.v1.AiService/WriteGitCommitMessage", request_body=request.SerializeToString(),
                    response_body=answer.SerializeToString(), response_type="application/proto")
    assert auto(flow.request, flow) == ("Cursor: WriteGitCommitMessage request", [
        f"aiserver.v1.WriteGitCommitMessageRequest  {request.ByteSize()} bytes",
        '    diffs: ["+x"]', '    previous_commit_messages: ["Add y"]'])
    assert auto(flow.response, flow)[1][1] == '    commit_message: "Add x"'
    json_flow = flow_for("/aiserver.v1.AiService/WriteGitCommitMessage", request_body=b'{"diffs": ["+x"]}',
                         request_type="application/json", response_body=b"{}", response_type="application/json")
    assert auto(json_flow.request, json_flow)[1] == ['{"diffs": ["+x"]}']

    edit = fpb.StreamCmdKResponseContextWrapped(real_response=fpb.StreamCmdKResponse(
        edit_stream=fpb.StreamCmdKResponse.EditStream(text="  return 1\n", edit_id=1)))
    stream = env(edit) + connect.encode_end_stream()
    cmd_k = flow_for("/aiserver.v1.CmdKService/StreamCmdK", request_type="application/connect+proto",
                     request_body=env(fpb.StreamCmdKRequest(session_id="s")), response_body=stream)
    title, lines = auto(cmd_k.response, cmd_k)
    assert title == "Cursor: StreamCmdK response: 2 frame(s), ended"
    assert "real_response.edit_stream" in lines[0] and '"text": "  return 1\\n"' in lines[1]
    assert auto(cmd_k.request, cmd_k)[0] == "Cursor: StreamCmdK request: 1 frame(s), ended"  # a request ends itself

    probe = flow_for("/aiserver.v1.NetworkService/IsConnected", response_body=b"", response_type="application/proto")
    assert auto(probe.response, probe)[0] == "Cursor: IsConnected response"


def test_a_scalar_oneof_branch_is_named_not_walked():
    """Found by fuzzing: a frame whose oneof branch is a string (StreamNextCursorPrediction's text)."""
    from byok.proto import cpp_pb2 as cpb

    frame = connect.encode_envelope(b"\n\x00")  # field 1 (text), empty string
    lines = texts(cv.render_unary(frame, cpb.StreamNextCursorPredictionResponse, "application/connect+proto"))
    assert lines[0].startswith("[0] MSG") and lines[0].split()[-1] == "text"
