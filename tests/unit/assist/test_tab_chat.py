"""Tab on a chat model: the window, the prompt, and the streamed parse of `<edit>` … `</edit>`."""

from __future__ import annotations

import pytest

from byok.assist.tab_chat import CURSOR, PROMPTS, EditStream, Prompts, chat_window
from byok.assist.tab_edit import tab_file
from byok.assist.tab_trim import Truncated
from byok.proto import cpp_pb2 as cpb

ORIGINAL = "def add(a, b):\n    return a +\n\nprint(add(1, 2))"


def run(deltas: list[str], original: str = ORIGINAL, truncated: bool = False) -> tuple[list[str], str]:
    stream = EditStream(original)
    released = []
    for delta in deltas:
        released.append(stream.feed(delta))
        if stream.stopped:
            break
    released.append(stream.finish(truncated=truncated))
    assert "".join(released) == stream.edit
    return released, stream.edit


def test_the_edit_streams_once_it_differs_from_the_window():
    released, edit = run(["Sure:\n<edit>\ndef add(a, b):\n", "    return a + b\n", "\nprint(add(1, 2))\n</edit>", "tail"])
    assert edit == "def add(a, b):\n    return a + b\n\nprint(add(1, 2))"
    assert released[0] == "" and released[1].startswith("def add(a, b):\n    return a + b")


def test_an_unchanged_window_is_no_suggestion():
    assert run(["<edit>\n" + ORIGINAL + "\n</edit>"])[1] == ""


def test_no_edit_tags_is_no_suggestion():
    assert run(["Nothing to change."])[1] == ""


def test_cut_inside_the_edit_is_truncated():
    with pytest.raises(Truncated):
        run(["<edit>\ndef sub(a, b):\n"], truncated=True)
    with pytest.raises(Truncated):
        run(["<edit>\ndef sub(a, b):\n"])


def test_cursor_marker_and_fences_are_removed():
    body = "```python\ndef add(a, b):\n    return a + b" + CURSOR + "\n\nprint(add(1, 2))\n```\n"
    released, edit = run(["<edit>\n", body[:12], body[12:30], body[30:], "</edit>"])
    assert edit == "def add(a, b):\n    return a + b\n\nprint(add(1, 2))"
    assert all(CURSOR not in r and "```" not in r for r in released)


def test_a_partial_close_tag_is_held():
    stream = EditStream("x")
    assert stream.feed("<edit>\ny = 1\n</ed") == "y = 1"
    assert stream.feed("it>") == ""
    assert stream.finish() == "" and stream.edit == "y = 1"


def test_window_and_prompt():
    contents = "\n".join(f"line {i}" for i in range(20))
    file = tab_file(cpb.CurrentFileInfo(relative_workspace_path="src/a.py", language_id="python", contents=contents,
                                        cursor_position=cpb.CursorPosition(line=10, column=3)))
    win = chat_window(file, ["@@ -1 +1 @@\n-a\n+b\n", "  "])
    assert (win.first, win.last) == (8, 15)
    assert win.original == "\n".join(f"line {i}" for i in range(8, 16))
    assert "<window>\nline 8\nline 9\nlin" + CURSOR + "e 10\n" in win.user
    assert "src/a.py (python)" in win.user and "+b" in win.user and "line 0\n" in win.user
    assert "<edit>" in PROMPTS.system


def test_a_template_without_its_placeholders_stops_start_up(tmp_path):
    (tmp_path / "prompt.md").write_text("system")
    (tmp_path / "request.md.j2").write_text("{{ PATH }} {{ LANGUAGE }} {{ WINDOW }}")
    with pytest.raises(ValueError, match="must show"):
        Prompts.load(tmp_path)
