"""A minimal, careful editor for VS Code's settings.json (JSON with comments and trailing commas).

It finds the members of the top-level object and changes only what it is asked to: a member's value
is replaced in place, a new member goes before the closing brace (after a comma added behind the last
value), a member is removed with its own line. Every other byte (comments, order, indentation, line
endings, other settings) stays as it was. Nothing is reformatted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


class JsoncError(ValueError):
    pass


@dataclass(frozen=True)
class Member:
    key: str
    key_start: int
    value_start: int
    value_end: int
    comma: int | None
    """Index of the comma after the value, if any."""


@dataclass(frozen=True)
class TopObject:
    open: int
    close: int
    members: tuple[Member, ...]


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    def error(self, what: str) -> JsoncError:
        line = self.text.count("\n", 0, self.i) + 1
        return JsoncError(f"{what} at line {line}")

    def skip(self) -> None:
        """Whitespace and comments."""
        text, n = self.text, len(self.text)
        while self.i < n:
            c = text[self.i]
            if c in " \t\r\n\ufeff":
                self.i += 1
            elif text.startswith("//", self.i):
                end = text.find("\n", self.i)
                self.i = n if end < 0 else end
            elif text.startswith("/*", self.i):
                end = text.find("*/", self.i + 2)
                if end < 0:
                    raise self.error("unterminated comment")
                self.i = end + 2
            else:
                return

    def string(self) -> str:
        start, text, n = self.i, self.text, len(self.text)
        j = start + 1
        while j < n and text[j] != '"':
            if text[j] == "\n":
                break
            j += 2 if text[j] == "\\" else 1
        if j >= n or text[j] != '"':
            self.i = start
            raise self.error("unterminated string")
        self.i = j + 1
        try:
            return json.loads(text[start:self.i])
        except ValueError:
            self.i = start
            raise self.error("malformed string") from None

    def value(self) -> None:
        """Skip one value: a string, an object or array (comments inside allowed), or a literal."""
        text, n = self.text, len(self.text)
        if self.i >= n:
            raise self.error("missing value")
        c = text[self.i]
        if c == '"':
            self.string()
            return
        if c in "{[":
            stack = [c]
            self.i += 1
            while stack:
                self.skip()
                if self.i >= n:
                    raise self.error("unterminated " + ("object" if stack[-1] == "{" else "array"))
                c = text[self.i]
                if c == '"':
                    self.string()
                elif c in "{[":
                    stack.append(c)
                    self.i += 1
                elif c in "}]":
                    if (stack[-1], c) not in (("{", "}"), ("[", "]")):
                        raise self.error(f"unexpected {c!r}")
                    stack.pop()
                    self.i += 1
                else:
                    self.i += 1
            return
        start = self.i
        while self.i < n and text[self.i] not in ",}] \t\r\n/":
            self.i += 1
        if self.i == start:
            raise self.error(f"unexpected {c!r}")


def top_object(text: str) -> TopObject | None:
    """The top-level object's members; None for a document that is only whitespace and comments."""
    s = _Scanner(text)
    s.skip()
    if s.i >= len(text):
        return None
    if text[s.i] != "{":
        raise s.error("settings are not a JSON object")
    open_at = s.i
    s.i += 1
    members = []
    while True:
        s.skip()
        if s.i >= len(text):
            raise s.error("the top-level object is not closed")
        if text[s.i] == "}":
            close = s.i
            break
        if text[s.i] != '"':
            raise s.error("expected a setting name")
        key_start = s.i
        key = s.string()
        s.skip()
        if s.i >= len(text) or text[s.i] != ":":
            raise s.error(f"expected ':' after {key!r}")
        s.i += 1
        s.skip()
        value_start = s.i
        s.value()
        value_end = s.i
        s.skip()
        comma = None
        if s.i < len(text) and text[s.i] == ",":
            comma = s.i
            s.i += 1
        elif s.i < len(text) and text[s.i] != "}":
            raise s.error(f"expected ',' or '}}' after the value of {key!r}")
        members.append(Member(key, key_start, value_start, value_end, comma))
    s.i = close + 1
    s.skip()
    if s.i < len(text):
        raise s.error("text after the top-level object")
    return TopObject(open_at, close, tuple(members))


def parse(text: str) -> dict:
    """The settings as a dict: comments dropped, trailing commas (outside strings) ignored, a BOM
    allowed. Raises ValueError for a document that does not read."""
    text = text.removeprefix("\ufeff")
    s = _Scanner(text)
    out, n = [], len(text)
    while s.i < n:
        c = text[s.i]
        if c == '"':
            start = s.i
            s.string()
            out.append(text[start:s.i])
        elif text.startswith("//", s.i) or text.startswith("/*", s.i):
            s.skip()
        elif c == ",":
            s.i += 1
            s.skip()
            if s.i >= n or text[s.i] not in "}]":
                out.append(",")
        else:
            out.append(c)
            s.i += 1
    cleaned = "".join(out)
    return json.loads(cleaned) if cleaned.strip() else {}


def _newline(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def _line_start(text: str, at: int) -> int:
    return text.rfind("\n", 0, at) + 1


def _indent(text: str, obj: TopObject) -> str:
    for m in obj.members:
        start = _line_start(text, m.key_start)
        prefix = text[start:m.key_start]
        if prefix.strip() == "" and start > obj.open:
            return prefix
    return "    "


def set_members(text: str, values: dict[str, object]) -> str:
    """`text` with each key of `values` set (JSON-encoded): every occurrence edited in place, missing
    ones added before the closing brace. Creates a document when `text` is empty."""
    obj = top_object(text)
    newline = _newline(text)
    if obj is None:
        body = ("," + newline).join(f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in values.items())
        return text + "{" + newline + body + newline + "}" + newline
    edits: list[tuple[int, int, str]] = []
    present = {m.key for m in obj.members}
    for m in obj.members:
        if m.key in values:
            edits.append((m.value_start, m.value_end, json.dumps(values[m.key])))
    missing = [k for k in values if k not in present]
    if missing:
        indent = _indent(text, obj)
        last = obj.members[-1] if obj.members else None
        if last is not None and last.comma is None:
            edits.append((last.value_end, last.value_end, ","))
        trailing = "," if last is not None and last.comma is not None else ""
        lines = ("," + newline).join(f"{indent}{json.dumps(k)}: {json.dumps(values[k])}" for k in missing)
        start = _line_start(text, obj.close)
        if text[start:obj.close].strip() == "":  # the brace on its own line: insert above it
            edits.append((start, start, lines + trailing + newline))
        else:
            edits.append((obj.close, obj.close, newline + lines + trailing + newline))
    return _apply(text, edits)


def remove_members(text: str, keys: set[str]) -> str:
    """`text` without the members named (each with its own line when it has one to itself)."""
    obj = top_object(text)
    if obj is None:
        return text
    edits: list[tuple[int, int, str]] = []
    members = list(obj.members)
    gone = [i for i, m in enumerate(members) if m.key in keys]
    for i in gone:
        m = members[i]
        start = m.key_start
        end = m.comma + 1 if m.comma is not None else m.value_end
        line_start = _line_start(text, start)
        line_end = text.find("\n", end)
        line_end = len(text) if line_end < 0 else line_end
        if text[line_start:start].strip() == "" and text[end:line_end].strip() == "":
            start, end = line_start, min(line_end + 1, len(text))
        edits.append((start, end, ""))
    kept = [m for i, m in enumerate(members) if i not in gone]
    if kept and members[-1].key in keys and members[-1].comma is None and kept[-1].comma is not None:
        edits.append((kept[-1].comma, kept[-1].comma + 1, ""))  # the new last member had no comma before
    return _apply(text, edits)


def _apply(text: str, edits: list[tuple[int, int, str]]) -> str:
    """Apply from the end backwards; of two edits at one place the one listed first ends up first."""
    for _, (start, end, new) in sorted(enumerate(edits), key=lambda e: (e[1][0], e[0]), reverse=True):
        text = text[:start] + new + text[end:]
    return text
