"""Fuzzed settings.json editing (`cursor-byok setup`, addon/cli/jsonc.py), each at least FUZZ_CASES cases:
  jsonc_edit     any settings object written as JSONC (comments anywhere between tokens, any indentation,
                 trailing commas, CRLF) -> the two proxy keys set, every other setting and every comment
                 kept, and setting them again changes nothing
  jsonc_garbage  any text -> an edited document or a JsoncError, never another exception
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import strategies as st

from byok.cli.doctor import parse_jsonc
from byok.cli.jsonc import JsoncError, set_members
from tests.fuzz.test_fuzz_decoders import fuzz

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(1800)]

PROXY = {"http.proxy": "http://127.0.0.1:8080", "http.proxySupport": "on"}
comment_text = st.text(st.sampled_from('ab "{}[],:/\\*é'), max_size=12)
comments = st.one_of(
    st.just(""),
    comment_text.map(lambda t: f"/* {t.replace('*', '')} */"),
    comment_text.map(lambda t: f"// {t}\n"),
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8,
)
setting_names = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz.\"\\/é"), min_size=1, max_size=12)


@st.composite
def jsonc_documents(draw, keep_ours: bool):
    """(JSONC text, the settings it holds, the comments in it)."""
    names = draw(st.lists(setting_names, max_size=6, unique=True))
    if keep_ours:
        names += draw(st.lists(st.sampled_from(list(PROXY)), max_size=2, unique=True))
    else:
        names = [n for n in names if n not in PROXY]
    values = {n: draw(json_values) for n in names}
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    indent = draw(st.sampled_from(["", " ", "    ", "\t"]))
    notes: list[str] = []

    def comment() -> str:
        notes.append(draw(comments))
        return notes[-1]

    parts = [comment(), "{", comment()]
    for i, (name, value) in enumerate(values.items()):
        parts += ["\n", indent, comment(), json.dumps(name), comment(), ":", " ",
                  json.dumps(value, ensure_ascii=draw(st.booleans())), comment()]
        if i < len(values) - 1 or draw(st.booleans()):
            parts += [",", comment()]
    parts += ["\n", comment(), "}", comment(), "\n"]
    text = "".join(parts).replace("\n", newline)
    return text, values, [n.replace("\n", newline) for n in notes if n]


def _without_edits(text: str) -> str:
    """The text with our two members and every comma and space taken out (what must be unchanged)."""
    for key, value in PROXY.items():
        text = text.replace(f"{json.dumps(key)}: {json.dumps(value)}", "")
    return re.sub(r"[,\s]", "", text)


def check_edit(drawn) -> None:
    (before, values, notes), ours_present = drawn
    after = set_members(before, PROXY)
    assert parse_jsonc(after) == {**values, **PROXY}
    assert set_members(after, PROXY) == after
    if not ours_present:
        assert _without_edits(after) == re.sub(r"[,\s]", "", before)
    for note in notes:
        assert note.rstrip("\r\n") in after


def check_garbage(text: str) -> None:
    try:
        set_members(text, PROXY)
    except JsoncError:
        pass


def test_fuzz_jsonc_edit():
    fuzz("jsonc_edit", st.booleans().flatmap(
        lambda ours: st.tuples(jsonc_documents(ours), st.just(ours))), check_edit)


def test_fuzz_jsonc_garbage():
    fuzz("jsonc_garbage", st.one_of(
        st.text(st.sampled_from('{}[]":,/*\n \\ab1'), max_size=40),
        jsonc_documents(True).map(lambda d: d[0]).flatmap(
            lambda text: st.integers(0, len(text)).map(lambda cut: text[:cut]))), check_garbage)
