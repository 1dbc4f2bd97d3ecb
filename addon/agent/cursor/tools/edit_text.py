"""The text domain of Write / StrReplace (seed §30): everything is LF.

Owns LF normalisation (whole and streaming), the exact old_string -> new_string replacement, and the
unified diff with its line counts. Pure functions; no protobuf.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass


def to_lf(text: str) -> str:
    """CRLF and lone CR -> LF (applied to decoded JSON text, so an escaped "\\r\\n" counts too)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


class LFStream:
    """Streaming `to_lf`: a chunk ending in CR holds it back until the next chunk says whether an LF
    follows (so a CRLF split across chunks yields one newline, never two)."""

    def __init__(self) -> None:
        self._cr = False

    def feed(self, chunk: str) -> str:
        if self._cr:
            chunk = "\r" + chunk
        self._cr = chunk.endswith("\r")
        if self._cr:
            chunk = chunk[:-1]
        return to_lf(chunk)

    def finish(self) -> str:
        held, self._cr = self._cr, False
        return "\n" if held else ""


class ReplaceError(Exception):
    """old_string is missing or ambiguous: a tool error the model can fix."""


def replace_exact(before: str, old: str, new: str, *, replace_all: bool) -> tuple[str, int]:
    """(after, occurrences replaced). All three texts must already be LF."""
    count = before.count(old)
    if count == 0:
        raise ReplaceError("old_string was not found in the file; read the file again and copy the exact text")
    if count > 1 and not replace_all:
        raise ReplaceError(
            f"old_string occurs {count} times in the file; include more surrounding lines to make it unique, "
            "or set replace_all to replace every occurrence"
        )
    return before.replace(old, new), count


@dataclass(frozen=True)
class Diff:
    text: str
    lines_added: int
    lines_removed: int


def diff(before: str, after: str, path: str) -> Diff:
    """Unified diff (3 lines of context) and the added/removed line counts of before -> after."""
    a = before.splitlines(keepends=True)
    b = after.splitlines(keepends=True)
    added = removed = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            removed += i2 - i1
        if tag in ("replace", "insert"):
            added += j2 - j1
    out = []
    for line in difflib.unified_diff(a, b, fromfile=path, tofile=path, n=3):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return Diff("".join(out), added, removed)


def count_lines(text: str) -> int:
    return len(text.splitlines())
