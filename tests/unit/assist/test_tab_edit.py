"""The file of a StreamCpp request and the edit that answers it: UTF-16 columns, line endings,
contents_start_at_line, both cursor-line conventions, and the apply property."""

from __future__ import annotations

import pytest

from byok.assist.tab_edit import (
    Edit, apply_edit, cursor_index, index_to_utf16, insertion, line_ending, split_lines, tab_file, utf16_to_index,
)
from byok.proto import cpp_pb2 as cpb
from byok.wire.errors import ProtocolError


def current(contents: str, line: int, column: int, **fields) -> cpb.CurrentFileInfo:
    return cpb.CurrentFileInfo(relative_workspace_path="a.py", contents=contents, language_id="python",
                               cursor_position=cpb.CursorPosition(line=line, column=column), **fields)


def with_completion(contents: str, eol: str, line: int, char: int, completion: str) -> str:
    """The expected file: `completion` inserted at (line, char) of the contents' lines."""
    lines = contents.split("\n")
    text = lines[line]
    cr = "\r" if eol == "\r\n" and text.endswith("\r") else ""
    body = text[:-1] if cr else text
    lines[line] = body[:char] + completion.replace("\n", eol) + body[char:] + cr
    return "\n".join(lines)


@pytest.mark.parametrize("text,column,index", [
    ("abc", 0, 0), ("abc", 3, 3), ("a😀b", 1, 1), ("a😀b", 3, 2), ("a😀b", 4, 3),
    ("名前x", 2, 2), ("\tx", 1, 1), ("", 0, 0),
])
def test_utf16_columns(text, column, index):
    assert utf16_to_index(text, column) == index
    assert index_to_utf16(text, index) == column


@pytest.mark.parametrize("text,column,message", [
    ("a😀b", 2, "inside the character"), ("abc", 4, "past the end"), ("abc", -1, "negative"),
])
def test_bad_columns_are_protocol_errors(text, column, message):
    with pytest.raises(ProtocolError, match=message):
        utf16_to_index(text, column)


def test_line_endings_declared_detected_and_refused():
    assert line_ending("a\r\nb", None) == "\r\n" and line_ending("a\nb", None) == "\n"
    assert line_ending("a\nb", "\r\n") == "\r\n" and line_ending("a", "CRLF") == "\r\n" and line_ending("a", "lf") == "\n"
    with pytest.raises(ProtocolError, match="line_ending"):
        line_ending("a", "\r")
    assert split_lines("a\r\nb\nc\r\n", "\r\n") == ("a", "b", "c", "")


def test_cursor_line_conventions():
    assert cursor_index(3, 10, in_contents=True) == 3
    assert cursor_index(13, 10, in_contents=False) == 3


def test_emoji_line_insertion_applies():
    contents = "// header\r\nconst x = '😀';"
    file = tab_file(current(contents, 1, 13))
    assert (file.line_before, file.line_after, file.eol) == ("const x = '😀", "';", "\r\n")
    edit = insertion(file, "hello")
    assert edit == Edit(2, 2, "const x = '😀hello';")
    assert apply_edit(contents, file.eol, 0, edit) == "// header\r\nconst x = '😀hello';"


def test_multiline_crlf_completion_uses_the_files_line_ending():
    contents = "def f():\r\n    \r\nx = 1\r\n"
    file = tab_file(current(contents, 1, 4))
    edit = insertion(file, "a = 1\n    return a")
    assert edit.text == "    a = 1\r\n    return a"
    assert apply_edit(contents, "\r\n", 0, edit) == with_completion(contents, "\r\n", 1, 4, "a = 1\n    return a")


@pytest.mark.parametrize("in_contents", [True, False])
def test_contents_start_at_line_shifts_the_range(in_contents):
    contents = "b = 2\nc = \nd = 4"
    line = 1 if in_contents else 41
    file = tab_file(current(contents, line, 4, contents_start_at_line=40), in_contents=in_contents)
    assert file.cursor_line == 1 and file.first_line == 40
    edit = insertion(file, "3")
    assert (edit.start_line, edit.end_line, edit.text) == (42, 42, "c = 3")
    assert apply_edit(contents, "\n", 40, edit) == "b = 2\nc = 3\nd = 4"


def test_cursor_outside_the_contents_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="outside the contents"):
        tab_file(current("a\nb", 2, 0))
    with pytest.raises(ProtocolError, match="counted in the file"):
        tab_file(current("a\nb", 5, 0, contents_start_at_line=10), in_contents=False)


def test_replace_after_merges_a_closing_bracket():
    file = tab_file(current("print()", 0, 6))
    assert insertion(file, '"hi")', replace_after=1).text == 'print("hi")'


def test_an_empty_file_has_one_empty_line():
    file = tab_file(current("", 0, 0))
    assert file.lines == ("",) and insertion(file, "x").text == "x"


def test_observed_answers_tell_the_cursor_line_convention():
    from byok.tab_observe import verdict

    req = cpb.StreamCppRequest(current_file=current("a\nb\nc", 1, 0, contents_start_at_line=40))
    assert req.current_file.contents_start_at_line == 40
    frames = [cpb.StreamCppResponse(range_to_replace=cpb.LineRange(start_line_number=42, end_line_number_inclusive=42))]
    assert verdict(req, frames).endswith("Cursor replaced 42-42: cursor_position.line counts lines of the contents")
    frames[0].range_to_replace.start_line_number = frames[0].range_to_replace.end_line_number_inclusive = 2
    assert verdict(req, frames).endswith("counts lines of the whole file")
    assert "both readings fit" in verdict(cpb.StreamCppRequest(current_file=current("a\nb", 1, 0)), [
        cpb.StreamCppResponse(range_to_replace=cpb.LineRange(start_line_number=2, end_line_number_inclusive=2))])
    assert verdict(req, []).endswith("no range (no suggestion)")
