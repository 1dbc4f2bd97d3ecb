"""Where a streamed completion ends, and how much of it can be shown yet. Pure; fed the model's deltas.

    cut = CompletionFilter(Rules.around(file, stops, max_lines))
    for delta in model:
        send(cut.feed(delta))          # only text no later rule can take back
        if cut.stopped: break          # a rule ended the completion: close the provider request
    send(cut.finish(truncated=...))    # the rest, after the final trims ("" and nothing sent: no suggestion)

The completion ends (text before the point is kept, the rest dropped, `stopped` set):
- at a stop string (the template's tokens, end-of-text tokens);
- single-line mode (text after the cursor on its line): at the first line break;
- multi-line mode: before line `max_lines + 1`, before a blank line, before a line indented less than
  the cursor's line, before a line that repeats the next non-blank line of the file.
At the provider's own end, a trailing blank line or a last line that repeats the next line is
dropped, and in single-line mode a tail that repeats the start of the text after the cursor (closing
brackets and quotes, or all of it) is dropped, so the line does not get `))`. A completion that is
blank, or only repeats what follows the cursor (whitespace aside), is no suggestion.

Text is released as soon as no rule can take it back: held are a tail that may become a stop string,
in single-line mode a tail that may repeat the text after the cursor, in multi-line mode the line
break and indentation before a line that may still turn out blank, dedented or a repeat, and
everything while the completion so far could still only repeat the suffix. Released text is always
a prefix of the final completion (checked, and fuzzed).

A completion cut by the provider's token budget (`finish(truncated=True)` before any rule ended it)
raises `Truncated`: the caller ends the call with an error, never a partial suggestion.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .tab_edit import TabFile

CLOSERS = frozenset(")]}>\"'`;,:")
"""Characters after the cursor that a completion may already end with (merged, not doubled)."""
_SPACE = re.compile(r"\s+")


class Truncated(Exception):
    """The provider stopped at its token budget before the completion ended."""


def _norm(text: str) -> str:
    return _SPACE.sub("", text)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


@dataclass(frozen=True)
class Rules:
    line_after: str
    """The cursor line after the cursor."""
    next_line: str
    """The first non-blank line after the cursor's line, stripped ("" when none)."""
    suffix_norm: str
    """Everything after the cursor in the window, without whitespace."""
    base_indent: int
    stops: tuple[str, ...] = ()
    max_lines: int = 8

    @property
    def single_line(self) -> bool:
        return bool(self.line_after.strip())

    @classmethod
    def around(cls, file: TabFile, stops: tuple[str, ...], max_lines: int, following: int = 60) -> "Rules":
        after = file.lines[file.cursor_line + 1:file.cursor_line + 1 + following]
        line = file.lines[file.cursor_line]
        base = _indent(line) if line.strip() else _indent(file.line_before)
        return cls(line_after=file.line_after, next_line=next((a.strip() for a in after if a.strip()), ""),
                   suffix_norm=_norm(file.line_after + "\n" + "\n".join(after)), base_indent=base,
                   stops=stops, max_lines=max_lines)


class CompletionFilter:
    def __init__(self, rules: Rules) -> None:
        self.rules = rules
        self.raw = ""
        self.text = ""
        self.released = 0
        self.stopped = False
        self._longest_stop = max((len(s) for s in rules.stops), default=0)

    def feed(self, delta: str) -> str:
        """Take the model's next text; return what can be shown now."""
        if self.stopped or not delta:
            return ""
        self.raw += delta.replace("\r", "")
        self.text, self.stopped = self._cut(self.raw)
        return self._release(self._safe_end())

    def finish(self, *, truncated: bool = False) -> str:
        """The provider's stream ended (or a rule stopped it): the rest of the final completion."""
        if truncated and not self.stopped:
            raise Truncated(f"the completion was cut at the token budget after {len(self.raw)} characters")
        text = self._final(self.text)
        if not text.startswith(self.text[:self.released]):
            raise AssertionError("released text is not a prefix of the final completion")
        self.text = text
        return self._release(len(text))

    @property
    def completion(self) -> str:
        """What was released so far (after `finish`: the whole completion)."""
        return self.text[:self.released]

    # ---- rules ----------------------------------------------------------------------------------

    def _cut(self, raw: str) -> tuple[str, bool]:
        """(the text up to where a rule ends the completion, whether one did)."""
        r = self.rules
        found = [i for i in (raw.find(s) for s in r.stops) if i >= 0]
        stopped = bool(found)
        text = raw[:min(found)] if found else raw
        starts = [m.start() for m in re.finditer("\n", text)]
        for k, at in enumerate(starts, start=1):  # at: the k-th line break, line k follows it
            if r.single_line or k >= r.max_lines:
                return text[:at], True
            end = starts[k] if k < len(starts) else None
            line = text[at + 1:end]
            if line.strip() and _indent(line) < r.base_indent:
                return text[:at], True
            if end is not None and (not line.strip() or (r.next_line and line.strip() == r.next_line)):
                return text[:at], True
        return text, stopped

    def _safe_end(self) -> int:
        """How much of `self.text` no rule can take back. Each hold looks at what the holds before it
        left visible (a tail that may become a stop string is not yet part of the completion)."""
        r, text = self.rules, self.text
        end = len(text)
        if not self.stopped:
            for n in range(min(self._longest_stop - 1, len(text)), 0, -1):
                if any(s.startswith(text[-n:]) for s in r.stops):
                    end = len(text) - n
                    break
        visible = text[:end]
        if self.released == 0 and r.suffix_norm.startswith(_norm(visible)):
            return 0  # it may still only repeat what follows the cursor
        if r.single_line:
            return end - self._overlap(visible, any_chars=True)
        at = visible.rfind("\n")
        if at >= 0:
            last = visible[at + 1:]
            if not last.strip() or (r.next_line and r.next_line.startswith(last.strip())):
                return at  # blank, or a repeat of the next line in the making
        return end

    def _overlap(self, text: str, *, any_chars: bool) -> int:
        """The longest tail of `text` that is also the start of the text after the cursor (single-line
        mode); with `any_chars` False only one made of closers, or the whole of it."""
        after = self.rules.line_after
        for k in range(min(len(after), len(text)), 0, -1):
            if text.endswith(after[:k]) and (any_chars or k == len(after) or set(after[:k]) <= CLOSERS):
                return k
        return 0

    def _final(self, text: str) -> str:
        r = self.rules
        if not r.single_line:
            while "\n" in text:
                at = text.rfind("\n")
                last = text[at + 1:]
                if last.strip() and not (r.next_line and last.strip() == r.next_line):
                    break
                text = text[:at]
        else:
            text = text[:len(text) - self._overlap(text, any_chars=False)]
        if self.released == 0 and (not text.strip() or r.suffix_norm.startswith(_norm(text))):
            return ""
        return text

    def _release(self, end: int) -> str:
        if end <= self.released:
            return ""
        out = self.text[self.released:end]
        self.released = end
        return out
