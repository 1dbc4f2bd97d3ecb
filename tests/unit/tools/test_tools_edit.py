"""Write / StrReplace: hidden read -> compute -> hidden write, LF normalisation, replacement rules,
typed EditResult branches and the streaming edit card."""

from __future__ import annotations

import json
import random

import pytest

from byok.agent.cursor.tools import edit
from byok.agent.cursor.tools.base import RunToolContext, ToolArgsError
from byok.agent.cursor.tools.edit_text import diff
from byok.wire.errors import ProtocolError
from byok.proto import agent_pb2 as apb
from tests.support.fake_call_io import FakeCallIO, run_tool

CTX = RunToolContext(conversation_id="conv-1", workspace_paths=("/ws",))


def read_ok(content: str, **kw) -> tuple[str, apb.ReadResult]:
    return "read_result", apb.ReadResult(success=apb.ReadSuccess(path="/ws/f.txt", content=content, **kw))


NOT_FOUND = ("read_result", apb.ReadResult(file_not_found=apb.ReadFileNotFound(path="/ws/f.txt")))
WRITE_OK = ("write_result", apb.WriteResult(success=apb.WriteSuccess(path="/ws/f.txt")))


def fake(*replies) -> FakeCallIO:
    io = FakeCallIO(context=CTX)
    for r in replies:
        io.reply(r)
    return io


# ---- Write --------------------------------------------------------------------------------------

def test_write_new_file_two_execs_same_tool_call_id():
    io = fake(NOT_FOUND, WRITE_OK)
    card, out = run_tool(edit.WRITE, json.dumps({"path": "f.txt", "contents": "a\r\nb\rc\n"}), io)
    assert edit.WRITE.variant == "edit_tool_call"
    assert card == apb.EditArgs(path="/ws/f.txt", stream_content="a\nb\nc\n")
    read, write = io.execs
    assert (read.id, write.id) == (1, 2)
    assert read.message.read_args == apb.ReadArgs(path="/ws/f.txt", tool_call_id=io.call_id)
    assert write.message.write_args == apb.WriteArgs(path="/ws/f.txt", file_text="a\nb\nc\n", tool_call_id=io.call_id)
    assert read.message.exec_id == write.message.exec_id == "call-1\nfc_1"
    s = out.result.success
    assert (s.path, s.lines_added, s.lines_removed) == ("/ws/f.txt", 3, 0)
    assert (s.before_full_file_content, s.after_full_file_content) == ("", "a\nb\nc\n")
    assert s.diff_string.startswith("--- /ws/f.txt\n+++ /ws/f.txt\n@@ -0,0 +1,3 @@\n+a\n")
    assert out.content == "Created /ws/f.txt (3 lines)" and not out.is_error


def test_write_existing_file_diff_and_crlf_before():
    io = fake(read_ok("one\r\ntwo\r\nthree\r\n"), WRITE_OK)
    _, out = run_tool(edit.WRITE, {"path": "/ws/f.txt", "contents": "one\nTWO\nthree\nfour\n"}, io)
    s = out.result.success
    assert s.before_full_file_content == "one\ntwo\nthree\n"
    assert (s.lines_added, s.lines_removed) == (2, 1)
    assert out.content == "Updated /ws/f.txt: +2 -1 lines"


def test_write_content_with_error_words_is_success():
    io = fake(NOT_FOUND, WRITE_OK)
    _, out = run_tool(edit.WRITE, {"path": "/ws/f.txt", "contents": "Error: failure\n"}, io)
    assert not out.is_error and out.result.WhichOneof("result") == "success"


@pytest.mark.parametrize("raw,message", [
    ({"contents": "x"}, "missing path"),
    ({"path": "/a"}, "missing contents"),
    ({"path": "/a", "contents": 5}, "missing contents"),
])
def test_write_args_errors(raw, message):
    with pytest.raises(ToolArgsError, match=message):
        edit.WRITE.parse(raw, "c", CTX)


@pytest.mark.parametrize("read,kind,content", [
    (("read_result", apb.ReadResult(permission_denied=apb.ReadPermissionDenied(path="/ws/f.txt"))),
     "read_permission_denied", "Permission denied reading /ws/f.txt"),
    (("read_result", apb.ReadResult(rejected=apb.ReadRejected(path="/ws/f.txt", reason="ignored"))),
     "rejected", "Reading /ws/f.txt was rejected: ignored"),
    (("read_result", apb.ReadResult(error=apb.ReadError(path="/ws/f.txt", error="EIO"))),
     "error", "Error reading /ws/f.txt: EIO"),
    (read_ok("partial", truncated=True), "error", "/ws/f.txt is too large to edit safely (the client returned only part of it)"),
    (("read_result", apb.ReadResult(success=apb.ReadSuccess(path="/ws/f.txt", data=b"\0"))), "error",
     "/ws/f.txt is not a text file; it cannot be edited"),
])
def test_write_read_failures_do_not_write(read, kind, content):
    io = fake(read)
    _, out = run_tool(edit.WRITE, {"path": "/ws/f.txt", "contents": "x"}, io)
    assert len(io.execs) == 1
    assert out.is_error and out.result.WhichOneof("result") == kind and out.content == content


@pytest.mark.parametrize("write,kind,content", [
    (apb.WriteResult(permission_denied=apb.WritePermissionDenied(path="/ws/f.txt", error="EACCES", is_readonly=True)),
     "write_permission_denied", "Permission denied writing /ws/f.txt: EACCES"),
    (apb.WriteResult(no_space=apb.WriteNoSpace(path="/ws/f.txt")), "error",
     "Cannot write /ws/f.txt: no space left on the device"),
    (apb.WriteResult(error=apb.WriteError(path="/ws/f.txt", error="EIO")), "error", "Error writing /ws/f.txt: EIO"),
    (apb.WriteResult(rejected=apb.WriteRejected(path="/ws/f.txt", reason="user said no")), "rejected",
     "Writing /ws/f.txt was rejected: user said no"),
])
def test_write_failures(write, kind, content):
    _, out = run_tool(edit.WRITE, {"path": "/ws/f.txt", "contents": "x"}, fake(NOT_FOUND, ("write_result", write)))
    assert out.is_error and out.result.WhichOneof("result") == kind and out.content == content
    if kind == "write_permission_denied":
        assert out.result.write_permission_denied.is_readonly


def test_wrong_result_type_is_protocol_error():
    with pytest.raises(ProtocolError):
        run_tool(edit.WRITE, {"path": "/ws/f.txt", "contents": "x"}, fake(("write_result", apb.WriteResult())))


# ---- StrReplace ---------------------------------------------------------------------------------

def test_str_replace_exact_unique():
    io = fake(read_ok("def f():\r\n    return 1\r\n"), WRITE_OK)
    card, out = run_tool(edit.STR_REPLACE, {"path": "f.txt", "old_string": "return 1\r\n",
                                            "new_string": "return 2\n"}, io)
    assert card == apb.EditArgs(path="/ws/f.txt", stream_content="return 2\n")
    assert io.execs[1].args.file_text == "def f():\n    return 2\n"
    assert out.result.success.after_full_file_content == "def f():\n    return 2\n"
    assert out.content == "Updated /ws/f.txt: +1 -1 lines"


def test_str_replace_not_found_and_ambiguous_do_not_write():
    io = fake(read_ok("a a a"))
    _, out = run_tool(edit.STR_REPLACE, {"path": "/ws/f.txt", "old_string": "b", "new_string": "c"}, io)
    assert len(io.execs) == 1 and out.is_error
    assert out.content.startswith("old_string was not found in the file")
    assert out.result.error.model_visible_error == out.content
    io = fake(read_ok("a a a"))
    _, out = run_tool(edit.STR_REPLACE, {"path": "/ws/f.txt", "old_string": "a", "new_string": "c"}, io)
    assert len(io.execs) == 1 and out.is_error and "occurs 3 times" in out.content


def test_str_replace_all():
    io = fake(read_ok("a\na\nb\n"), WRITE_OK)
    _, out = run_tool(edit.STR_REPLACE, {"path": "/ws/f.txt", "old_string": "a", "new_string": "c",
                                         "replace_all": True}, io)
    assert io.execs[1].args.file_text == "c\nc\nb\n"
    assert out.content == "Updated /ws/f.txt: +2 -2 lines (2 occurrences replaced)"


def test_str_replace_missing_file_is_error():
    _, out = run_tool(edit.STR_REPLACE, {"path": "/ws/f.txt", "old_string": "a", "new_string": "b"}, fake(NOT_FOUND))
    assert out.is_error and out.result == apb.EditResult(file_not_found=apb.EditFileNotFound(path="/ws/f.txt"))
    assert out.content == "File not found: /ws/f.txt"


@pytest.mark.parametrize("raw,message", [
    ({"path": "/a", "new_string": "x"}, "missing old_string"),
    ({"path": "/a", "old_string": "x"}, "missing new_string"),
    ({"path": "/a", "old_string": "", "new_string": "x"}, "must not be empty"),
    ({"path": "/a", "old_string": "x\r\n", "new_string": "x\n"}, "must differ"),
    ({"path": "/a", "old_string": "x", "new_string": "y", "replace_all": "yes"}, "invalid replace_all"),
])
def test_str_replace_args_errors(raw, message):
    with pytest.raises(ToolArgsError, match=message):
        edit.STR_REPLACE.parse(raw, "c", CTX)


def test_diff_no_trailing_newline():
    d = diff("a\nb", "a\nc", "p")
    assert d.text.endswith("+c\n\\ No newline at end of file\n")
    assert (d.lines_added, d.lines_removed) == (1, 1)


def test_error_result():
    assert edit.WRITE.error_result("bad") == apb.EditResult(error=apb.EditError(error="bad", model_visible_error="bad"))


# ---- streaming card -----------------------------------------------------------------------------

def collect(stream, chunks):
    deltas, partials = [], []
    for chunk in chunks:
        for u in stream.feed(chunk):
            assert u.WhichOneof("message") in ("tool_call_delta", "partial_tool_call")
            if u.HasField("tool_call_delta"):
                assert (u.tool_call_delta.call_id, u.tool_call_delta.model_call_id) == ("call\n1", "m1")
                deltas.append(u.tool_call_delta.tool_call_delta.edit_tool_call_delta.stream_content_delta)
            else:
                p = u.partial_tool_call
                assert (p.call_id, p.model_call_id) == ("call\n1", "m1")
                partials.append(p.tool_call.edit_tool_call.args.path)
    return deltas, partials


def test_write_stream_content_before_path_and_lf():
    stream = edit.WRITE.stream("call\n1", "m1")
    text = json.dumps({"contents": "a\r\nb\rc", "path": "/ws/x"})
    deltas, partials = collect(stream, list(text))
    assert "".join(deltas) == "a\nb\nc" and partials == ["/ws/x"]
    first = edit.WRITE.stream("call\n1", "m1").feed('{"contents":"hel')
    assert [u.tool_call_delta.tool_call_delta.edit_tool_call_delta.stream_content_delta for u in first] == ["hel"]


def test_stream_holds_trailing_cr():
    stream = edit.WRITE.stream("call\n1", "m1")
    deltas, _ = collect(stream, ['{"path":"p","contents":"a\\r', '\\nb\\r', '"}'])
    assert deltas == ["a", "\nb", "\n"]


def test_str_replace_streams_new_string_only_random_splits():
    obj = {"path": "/ws/é.py", "old_string": "OLD\r\n", "new_string": "new 😀\r\nline\"2\"", "replace_all": False}
    for ensure_ascii in (True, False):
        text = json.dumps(obj, ensure_ascii=ensure_ascii)
        rng = random.Random(7)
        for _ in range(30):
            cuts = sorted(rng.sample(range(1, len(text)), 6))
            chunks = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
            deltas, partials = collect(edit.STR_REPLACE.stream("call\n1", "m1"), chunks)
            assert "".join(deltas) == "new 😀\nline\"2\"" and partials == ["/ws/é.py"]
