"""Answers trimmed to what Cursor shows (addon/assist/trim.py): fences, reasoning tags, labels, quotes and
lead-ins go; Git's ref rules hold for every branch name; the streaming filter agrees with the whole-text one."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import given, settings, strategies as st

from byok.assist import trim


@pytest.mark.parametrize("raw, expected", [
    ("fix: handle empty diff", "fix: handle empty diff"),
    ("```\nfix: handle empty diff\n\nThe body.\n```", "fix: handle empty diff\n\nThe body."),
    ("Here is the commit message:\n```text\nfeat: add x\n```\nLet me know!", "feat: add x"),
    ("Commit message: feat: add x", "feat: add x"),
    ('"feat: add x"', "feat: add x"),
    ("<think>the diff adds x</think>\n\nfeat: add x  \n\n\n\nbody", "feat: add x\n\nbody"),
    ("**Commit message:** refactor(io): split reader", "refactor(io): split reader"),
])
def test_commit_messages(raw, expected):
    assert trim.commit_message(raw) == expected


def test_an_unclosed_reasoning_block_leaves_nothing():
    assert trim.commit_message("<think>still thinking about the") == ""


@pytest.mark.parametrize("raw, expected", [
    ("Fix flaky login test", "Fix flaky login test"),
    ('Title: "Fix flaky login test."', "Fix flaky login test"),
    ("Sure! Here's a title:\n\nRefactor the parser\n\nIt covers...", "Refactor the parser"),
    ("`Add dark mode`", "Add dark mode"),
])
def test_titles(raw, expected):
    assert trim.title(raw) == expected


def test_long_titles_are_cut_at_a_word():
    assert trim.title("word " * 40, max_chars=22) == "word word word word"


@pytest.mark.parametrize("raw, expected", [
    ("git status", "git status"),
    ("```bash\n$ git log --oneline -5\n```", "git log --oneline -5"),
    ("Command: `npm test`", "npm test"),
    ("PS C:\\work> Get-ChildItem", "Get-ChildItem"),
    ("> ls -la", "ls -la"),
])
def test_commands(raw, expected):
    assert trim.command(raw) == expected


@pytest.mark.parametrize("raw, expected", [
    ("fix-login-redirect", "fix-login-redirect"),
    ("Branch name: `feat/Add Dark Mode`", "feat/add-dark-mode"),
    ("```\nfix/..hidden..name.lock\n```", "fix/hidden.name"),
    ("-leading/.dots/trailing.", "leading/dots/trailing"),
    ("what~is^this:?*[thing]\\", "whatisthisthing]"),
    ("a//b///c", "a/b/c"),
    ("x@{y}", "x@y}"),
    ("@", ""),
    ("HEAD", ""),
    ("   ", ""),
])
def test_branch_names(raw, expected):
    assert trim.branch_name(raw) == expected


def test_branch_names_are_cut_to_length_and_stay_valid():
    name = trim.branch_name("feature/" + "very-long-name-" * 10)
    assert len(name) <= trim.MAX_BRANCH_CHARS and trim.is_valid_branch_name(name)


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=120))
def test_any_model_answer_becomes_a_valid_branch_name_or_nothing(text):
    name = trim.branch_name(text)
    assert name == "" or trim.is_valid_branch_name(name), name


@pytest.mark.parametrize("name", ["fix-login", "feat/add-dark-mode", "docs/readme.md-typo", "v1.2/fix"])
def test_our_validity_check_agrees_with_git(name, tmp_path):
    git = subprocess.run(["git", "check-ref-format", "--branch", name], capture_output=True, text=True)
    assert (git.returncode == 0) == trim.is_valid_branch_name(name)


# ---- the streaming filter (Cmd-K edits) -------------------------------------------------------------


def stream(text: str, sizes: list[int]) -> str:
    """`text` through a FenceFilter in pieces of the given sizes (cycled)."""
    f = trim.FenceFilter()
    out, i, k = [], 0, 0
    while i < len(text):
        n = max(1, sizes[k % len(sizes)])
        out.append(f.feed(text[i:i + n]))
        i, k = i + n, k + 1
    out.append(f.finish())
    return "".join(out)


@pytest.mark.parametrize("raw, expected", [
    ("    return 'Hi'\n", "    return 'Hi'\n"),
    ("```js\n  return 'Hi';\n```", "  return 'Hi';\n"),
    ("```js\n  return 'Hi';\n```\nThis changes the greeting.", "  return 'Hi';\n"),
    ("Here is the updated code:\n\n```python\ndef f():\n    pass\n```\n", "def f():\n    pass\n"),
    ("def f():\n    pass\n```", "def f():\n    pass\n"),
    ("<think>plan the edit</think>\nx = 1", "x = 1"),
    ("\n\nx = 1\n\ny = 2", "x = 1\n\ny = 2"),
    ("if x:\n    y()\n", "if x:\n    y()\n"),
    ("a = '```'\n", "a = '```'\n"),
])
@pytest.mark.parametrize("sizes", [[1], [3], [1000], [2, 7, 1]])
def test_the_fence_filter_trims_a_streamed_edit(raw, expected, sizes):
    assert stream(raw, sizes) == expected


def test_the_fence_filter_holds_back_only_what_it_must():
    f = trim.FenceFilter()
    assert f.feed("line one\nline tw") == "line one\n"
    assert f.feed("o\n```") == "line two\n"
    assert f.finish() == ""
