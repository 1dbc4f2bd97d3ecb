"""Fuzzed Tab: the StreamCpp request decoder and the edit computation (FUZZ_CASES each, default 10000).

  tab_request   StreamCpp bodies (envelopes, gzip, junk, random StreamCppRequest messages with files of
                emoji, CJK, tabs, CRLF) -> the one-shot decoder + tab_file under both cursor-line
                conventions -> a TabFile whose cursor maps back to the request's column, or a typed error
  tab_edit      random files, cursors, contents_start_at_line and model output in random pieces ->
                CompletionFilter + the frames' text -> applying range_to_replace/text gives the file
                with the released completion inserted at the cursor; released text never shrinks
  tab_chat      random model replies in random pieces -> EditStream releases a prefix of its final edit
"""

from __future__ import annotations

import gzip

import pytest
from hypothesis import strategies as st

from byok.assist.tab import STREAM_CPP, Answer
from byok.assist.tab_chat import CLOSE, CURSOR, FENCE, OPEN, EditStream
from byok.assist.tab_edit import Edit, apply_edit, index_to_utf16, tab_file
from byok.assist.tab_trim import CompletionFilter, Rules, Truncated
from byok.proto import cpp_pb2 as cpb
from byok.router import ONE_SHOT_PATHS
from byok.transports.one_shot import decode_request
from byok.wire import connect
from byok.wire.errors import ProtocolError
from tests.fuzz.test_fuzz_decoders import envelope, fuzz, proto_message

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(1800)]

ALPHABET = st.sampled_from(list("ab x=()[]{}:;'\"\t_") + ["😀", "名", "前", "é", "\r", "\n", "\r\n", "<", "|"])
line_text = st.lists(ALPHABET.filter(lambda c: c not in ("\n", "\r\n")), max_size=12).map("".join)


@st.composite
def files(draw):
    """(contents, eol used, line, column as UTF-16, contents_start_at_line)."""
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    lines = draw(st.lists(line_text.map(lambda s: s.replace("\r", "")), min_size=1, max_size=6))
    contents = eol.join(lines) + draw(st.sampled_from(["", eol]))
    row = draw(st.integers(0, len(lines) - 1))
    column = index_to_utf16(lines[row], draw(st.integers(0, len(lines[row]))))
    return contents, eol, row, column, draw(st.sampled_from([0, 0, 7, 1000]))


@st.composite
def stream_cpp_bodies(draw):
    kind = draw(st.integers(0, 3))
    if kind == 0:
        message = draw(proto_message(cpb.StreamCppRequest.DESCRIPTOR))
    else:
        contents, eol, row, column, start = draw(files())
        if kind == 2:  # cursor anywhere, declared endings of any spelling
            row, column = draw(st.integers(-2, 8)), draw(st.integers(-2, 40))
        current = cpb.CurrentFileInfo(contents=contents, contents_start_at_line=start,
                                      cursor_position=cpb.CursorPosition(line=row, column=column),
                                      rely_on_filesync=draw(st.booleans()))
        if draw(st.booleans()):
            current.line_ending = draw(st.sampled_from(["\n", "\r\n", "CRLF", "lf", "\r", "", "x"]))
        message = cpb.StreamCppRequest(current_file=current)
    payload = message.SerializeToString()
    if kind == 3:
        payload = draw(st.binary(max_size=60))
    flags = draw(st.sampled_from([0, 0, 1, 2, 5]))
    if flags & 1:
        payload = gzip.compress(payload) if draw(st.booleans()) else payload
    body = envelope(payload, flags)
    if draw(st.integers(0, 9)) == 0:
        body = body[:draw(st.integers(0, len(body)))] + draw(st.binary(max_size=8))
    return body


def test_fuzz_stream_cpp_request_decoder():
    service = ONE_SHOT_PATHS[STREAM_CPP]

    def check(body):
        try:
            message = decode_request(service, body, "application/connect+proto")
        except connect.ConnectError:
            return
        for in_contents in (True, False):
            try:
                file = tab_file(message.current_file, in_contents=in_contents)
            except ProtocolError:
                continue
            position = message.current_file.cursor_position
            assert 0 <= file.cursor_line < len(file.lines)
            assert index_to_utf16(file.lines[file.cursor_line], file.cursor_char) == position.column
            assert file.range_line(file.cursor_line) >= 1

    fuzz("tab_request", stream_cpp_bodies(), check)


model_text = st.lists(st.one_of(ALPHABET, st.sampled_from(["\n\n", "    ", "<|endoftext|>", "<|end", ")", "\n    "])),
                      max_size=14).map("".join)


@st.composite
def completions(draw):
    contents, eol, row, column, start = draw(files())
    text = draw(model_text)
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=5)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
    return contents, eol, row, column, start, pieces, draw(st.integers(1, 4)), draw(st.booleans())


def test_fuzz_edit_computation():
    def check(case):
        contents, _, row, column, start, pieces, max_lines, truncated = case
        current = cpb.CurrentFileInfo(contents=contents, contents_start_at_line=start,
                                      cursor_position=cpb.CursorPosition(line=row, column=column))
        file = tab_file(current)
        eol = file.eol  # detected: a one-line file has no ending to go by
        cut = CompletionFilter(Rules.around(file, ("<|endoftext|>", "<|fim_pad|>"), max_lines))
        line = file.range_line(file.cursor_line)
        answer = Answer(line, line, file.eol, before=file.line_before, after=file.line_after)
        frames, released = [], ""
        for piece in pieces:
            out = cut.feed(piece)
            assert cut.text.startswith(released + out) or not out
            released += out
            frames += answer.text(out)
            if cut.stopped:
                break
        try:
            out = cut.finish(truncated=truncated)
        except Truncated:
            return
        released += out
        frames += answer.end(out)
        assert released == cut.completion and "\r" not in released
        assert frames[-1].done_stream
        ranges = [f for f in frames if f.HasField("range_to_replace")]
        if not released:
            assert not ranges and len(frames) == 1
            return
        assert len(ranges) == 1 and frames.index(ranges[0]) == 0
        edit = Edit(line, line, "".join(f.text for f in frames))
        lines = contents.split("\n")
        target = lines[file.cursor_line]
        cr = "\r" if eol == "\r\n" and target.endswith("\r") else ""
        body = target[:-1] if cr else target
        lines[file.cursor_line] = body[:file.cursor_char] + released.replace("\n", eol) + body[file.cursor_char:] + cr
        assert apply_edit(contents, eol, start, edit) == "\n".join(lines)

    fuzz("tab_edit", completions(), check)


reply_text = st.lists(st.one_of(ALPHABET, st.sampled_from([OPEN, CLOSE, "\n" + CLOSE, CURSOR, FENCE, "\n", "<ed", "</"])),
                      max_size=16).map("".join)


@st.composite
def replies(draw):
    original = draw(st.lists(line_text.map(lambda s: s.replace("\r", "")), min_size=1, max_size=4).map("\n".join))
    text = draw(st.one_of(reply_text, st.just(OPEN + "\n" + original + "\n" + CLOSE)))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=6)))
    return original, [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]


def test_fuzz_chat_edit_stream():
    def check(case):
        original, pieces = case
        stream = EditStream(original)
        released = ""
        for piece in pieces:
            released += stream.feed(piece)
            if stream.stopped:
                break
        try:
            released += stream.finish()
        except Truncated:
            return
        assert released == stream.edit and CURSOR not in released
        if "".join(pieces) == OPEN + "\n" + original + "\n" + CLOSE:
            assert released == ""

    fuzz("tab_chat", replies(), check)
