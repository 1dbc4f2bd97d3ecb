"""Where a streamed completion ends and what is released when: stop strings, single- and multi-line
rules, the suffix rules, the token budget."""

from __future__ import annotations

import pytest

from byok.assist.tab_edit import tab_file
from byok.assist.tab_trim import CompletionFilter, Rules, Truncated
from byok.proto import cpp_pb2 as cpb

STOPS = ("<|endoftext|>", "<|fim_pad|>")


def rules(contents: str, line: int, column: int, *, max_lines: int = 8, stops=STOPS) -> Rules:
    file = tab_file(cpb.CurrentFileInfo(contents=contents, cursor_position=cpb.CursorPosition(line=line, column=column)))
    return Rules.around(file, stops, max_lines)


def run(r: Rules, deltas: list[str], *, truncated: bool = False) -> tuple[list[str], str, bool]:
    """(what each feed released, the final completion, whether a rule stopped it)."""
    cut = CompletionFilter(r)
    released = []
    for delta in deltas:
        released.append(cut.feed(delta))
        if cut.stopped:
            break
    stopped = cut.stopped
    released.append(cut.finish(truncated=truncated))
    assert "".join(released) == cut.completion
    return released, cut.completion, stopped


BODY = "def f(a, b):\n    \n\nprint(f(1, 2))\n"


def test_first_tokens_go_out_at_once():
    released, completion, stopped = run(rules(BODY, 1, 4), ["re", "turn a", " + b"])
    assert released[:3] == ["re", "turn a", " + b"] and completion == "return a + b" and not stopped


def test_a_blank_line_ends_a_multiline_completion():
    _, completion, stopped = run(rules(BODY, 1, 4), ["return a + b\n", "\n", "def g():\n    pass"])
    assert completion == "return a + b" and stopped


def test_stop_strings_cut_and_a_partial_one_is_held():
    released, completion, stopped = run(rules(BODY, 1, 4), ["return a<|end", "oftext|>junk"])
    assert released[0] == "return a" and completion == "return a" and stopped


def test_a_partial_stop_that_does_not_complete_is_released():
    released, completion, _ = run(rules(BODY, 1, 4), ["x = '<|end", "s'"])
    assert released == ["x = '", "<|ends'", ""] and completion == "x = '<|ends'"


def test_single_line_mode_stops_at_the_line_break_and_merges_a_closing_bracket():
    released, completion, stopped = run(rules("print()\n", 0, 6), ['"hi"', ')\nmore()'])
    assert completion == '"hi"' and stopped
    assert released[0] == '"hi"'  # the ")" that repeats the text after the cursor was held, then dropped


def test_single_line_keeps_a_tail_that_is_not_a_closer_unless_it_is_all_of_the_rest():
    assert run(rules("x = foo bar\n", 0, 8), ["baz b"])[1] == "baz b"  # a "b" that starts "bar" is no closer
    assert run(rules("x = (a)\n", 0, 5), ["b, a)"])[1] == "b, "  # all of the rest: not doubled


def test_only_repeating_the_suffix_is_no_suggestion():
    contents = "def f():\n    \n    return x\n"
    released, completion, _ = run(rules(contents, 1, 4), ["\n    ret", "urn x"])
    assert completion == "" and released == ["", "", ""]


def test_a_completion_starting_like_the_suffix_is_released_once_it_differs():
    contents = "x = \ny = 2\n"
    released, completion, _ = run(rules(contents, 0, 4), ["y", " = 3"])
    assert released[0] == "" and completion == "y = 3"  # held while it could be a repeat of "y = 2"


def test_a_dedented_line_ends_the_completion():
    contents = "    if x:\n\nz = 0\n"
    released, completion, stopped = run(rules(contents, 0, 9), ["\n        y()", "\n    w()\nq()"])
    assert completion == "\n        y()\n    w()" and stopped


def test_a_line_repeating_the_next_line_of_the_file_ends_it():
    contents = "a = foo(\nbar()\n"
    _, completion, stopped = run(rules(contents, 0, 8), ["1)\n", "bar()\n", "baz"])
    assert completion == "1)" and stopped


def test_the_last_line_repeating_the_next_line_is_dropped_at_the_end():
    contents = "a = foo(\nbar()\n"
    released, completion, _ = run(rules(contents, 0, 8), ["1)\nba", "r()"])
    assert completion == "1)" and "".join(released) == "1)"


def test_max_lines():
    _, completion, stopped = run(rules("\n", 0, 0, max_lines=2), ["a\nb\nc"])
    assert completion == "a\nb" and stopped


def test_trailing_line_breaks_are_dropped():
    assert run(rules("\n", 0, 0), ["a = 1\n"])[1] == "a = 1"


def test_blank_output_is_no_suggestion():
    assert run(rules("\n", 0, 0), ["   "])[1] == ""


def test_cut_by_the_token_budget_is_an_error():
    with pytest.raises(Truncated):
        run(rules(BODY, 1, 4), ["return a"], truncated=True)


def test_the_budget_after_a_rule_stopped_it_is_fine():
    assert run(rules(BODY, 1, 4), ["return a\n\nx"], truncated=True)[1] == "return a"


def test_carriage_returns_from_the_model_are_dropped():
    assert run(rules("\n", 0, 0), ["a = 1\r\n", "b = 2"])[1] == "a = 1\nb = 2"
