"""The incremental JSON string-field scanner and the streaming LF normaliser (edit cards, seed §30)."""

from __future__ import annotations

import json
import random

import pytest

from byok.agent.cursor.tools.edit_text import LFStream, to_lf
from byok.agent.cursor.tools.jsonscan import REPLACEMENT, JsonFieldScanner

SAMPLES = [
    {"path": "/w/a.py", "contents": "line1\nline2\r\n\ttab \"quoted\" back\\slash /slash"},
    {"path": "/w/ü.txt", "contents": "emoji 😀 and 中文 and \u0001 control \b\f"},
    {"contents": "first", "path": "/w/b"},
    {"path": "/w/c", "old_string": "x", "new_string": "y\r\nz", "replace_all": True},
    {"n": 1, "nested": {"a": [1, "}", {"b": "\"]"}]}, "path": "p", "flag": False, "nul": None, "contents": ""},
    {"contents": "\U0001F600" + "é" * 50, "path": ""},
]


def scan(text: str, chunks: list[str], wanted=None) -> dict[str, tuple[str, bool]]:
    scanner = JsonFieldScanner(wanted)
    got: dict[str, list] = {}
    for chunk in chunks:
        for ev in scanner.feed(chunk):
            parts, _ = got.setdefault(ev.key, ([], False))
            assert not got[ev.key][1], f"{ev.key} continued after done"
            parts.append(ev.text)
            got[ev.key] = (parts, ev.done)
    assert not scanner.failed
    return {k: ("".join(v[0]), v[1]) for k, v in got.items()}


def splits(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), k=min(len(text) - 1, rng.randint(1, 12)))) if len(text) > 1 else []
    pieces, last = [], 0
    for c in cuts + [len(text)]:
        pieces.append(text[last:c])
        last = c
    return pieces


def expected(obj: dict) -> dict[str, tuple[str, bool]]:
    return {k: (v, True) for k, v in obj.items() if isinstance(v, str)}


@pytest.mark.parametrize("obj", SAMPLES)
@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_whole_bytewise_and_random_splits(obj, ensure_ascii):
    text = json.dumps(obj, ensure_ascii=ensure_ascii, indent=None)
    assert scan(text, [text]) == expected(obj)
    assert scan(text, list(text)) == expected(obj)
    rng = random.Random(hash(text) & 0xFFFF)
    for _ in range(50):
        assert scan(text, splits(text, rng)) == expected(obj)


def test_pretty_printed_with_whitespace():
    obj = SAMPLES[4]
    text = json.dumps(obj, indent=2)
    assert scan(text, list(text)) == expected(obj)


def test_wanted_filter_and_emits_before_completion():
    scanner = JsonFieldScanner({"contents"})
    events = scanner.feed('{"contents": "abc')
    assert [(e.key, e.text, e.done) for e in events] == [("contents", "abc", False)]
    events = scanner.feed('def", "path": "/x"}')
    assert [(e.key, e.text, e.done) for e in events] == [("contents", "def", True)]
    assert scanner.finished


def test_surrogate_pair_split_at_every_position():
    text = '{"c":"a\\ud83d\\ude00b"}'
    for cut in range(len(text) + 1):
        assert scan(text, [text[:cut], text[cut:]]) == {"c": ("a😀b", True)}


@pytest.mark.parametrize("raw,decoded", [
    ('"\\ud83dx"', REPLACEMENT + "x"),          # lone high, then a plain char
    ('"\\ud83d\\n"', REPLACEMENT + "\n"),        # lone high, then another escape
    ('"\\ud83d\\u0041"', REPLACEMENT + "A"),     # high followed by a non-low \u escape
    ('"\\ude00"', REPLACEMENT),                  # lone low
    ('"\\ud83d"', REPLACEMENT),                  # lone high at the end of the string
    ('"\\ud83d\\ud83d\\ude00"', REPLACEMENT + "😀"),
])
def test_broken_surrogates_decode_to_replacement(raw, decoded):
    text = '{"c":' + raw + "}"
    assert scan(text, [text]) == {"c": (decoded, True)}
    assert scan(text, list(text)) == {"c": (decoded, True)}


@pytest.mark.parametrize("text", ['[1,2]', '{"a" 1}', '{"a":"\\x"}', '{"a":"\\u12g4"}', '{,}'])
def test_invalid_json_stops_without_raising(text):
    scanner = JsonFieldScanner()
    for ch in text:
        scanner.feed(ch)
    assert scanner.failed


def test_text_after_the_object_is_ignored():
    scanner = JsonFieldScanner()
    assert [e.text for e in scanner.feed('{"a":"x"} {"a":"y"}')] == ["x"]


# ---- LF -----------------------------------------------------------------------------------------

LF_SAMPLES = ["a\r\nb", "a\rb", "a\r\r\nb\r", "\r\n\r\n", "\r", "no newline", "x\n\r\ny\r\rz"]


@pytest.mark.parametrize("text", LF_SAMPLES)
def test_lf_stream_matches_whole_for_every_split(text):
    assert "\r" not in to_lf(text)
    for cut in range(len(text) + 1):
        s = LFStream()
        out = s.feed(text[:cut]) + s.feed(text[cut:]) + s.finish()
        assert out == to_lf(text)
    s = LFStream()
    assert "".join(s.feed(c) for c in text) + s.finish() == to_lf(text)
