"""Tab on a chat model: the next edit of a small window around the cursor, streamed as it is written.

The model sees the window (WINDOW_BEFORE lines above the cursor's line to WINDOW_AFTER below it, less
trailing blank lines) with
`<|cursor|>` at the cursor, some file around it and the client's recent diff history, and answers the
window rewritten inside `<edit>` … `</edit>` (prompt/tab/). The answer replaces exactly the window's
lines (`range_to_replace` = the window), so it applies whatever the model changed.

`EditStream` turns the model's deltas into replacement text as it streams: nothing before `<edit>`;
held are the text while it still only copies the window (a reply that copies it all is no
suggestion), a tail that may become `</edit>`, a code fence or the cursor marker; the marker is
removed, an opening fence line and a closing one are dropped, one line break before `</edit>` is
dropped. `</edit>` ends the edit (`stopped`: close the provider request). A reply that never opens
`<edit>` is no suggestion; one cut off inside it raises `tab_trim.Truncated` (never a partial edit).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import jinja2

from byok.prompt.assets import ROOT as PROMPT_ROOT

from .tab_edit import TabFile
from .tab_trim import Truncated

WINDOW_BEFORE, WINDOW_AFTER = 2, 5
CONTEXT_BEFORE, CONTEXT_AFTER = 60, 30
MAX_DIFFS, MAX_DIFF_CHARS = 6, 4000
CURSOR = "<|cursor|>"
OPEN, CLOSE = "<edit>", "</edit>"
FENCE = "```"
PROMPT_DIR = PROMPT_ROOT / "tab"


@dataclass(frozen=True)
class Prompts:
    system: str
    request: jinja2.Template

    @classmethod
    def load(cls, folder: Path = PROMPT_DIR) -> "Prompts":
        """prompt/tab/: read once at import, so a broken file stops start-up, named."""
        env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False,
                                 trim_blocks=True, lstrip_blocks=True, autoescape=False)
        system = (folder / "prompt.md").read_text(encoding="utf-8").strip()
        request = env.from_string((folder / "request.md.j2").read_text(encoding="utf-8"))
        probe = {"PATH": "p", "LANGUAGE": "l", "DIFFS": ["\0D"], "BEFORE": "\0B", "WINDOW": "\0W", "AFTER": "\0A"}
        shown = request.render(**probe)
        missing = [k for k, v in probe.items() if isinstance(v, str) and v.startswith("\0") and v not in shown]
        if missing or "\0D" not in shown:
            raise ValueError(f"{folder / 'request.md.j2'}: the template must show {', '.join(probe)}")
        return cls(system, request)


PROMPTS = Prompts.load()


@dataclass(frozen=True)
class ChatWindow:
    first: int
    """Index of the window's first line (in the file's lines)."""
    last: int
    original: str
    """The window's lines as they are, joined by "\\n"."""
    user: str
    """The request message."""


def chat_window(file: TabFile, diff_history: list[str]) -> ChatWindow:
    lines, at = file.lines, file.cursor_line
    first, last = max(0, at - WINDOW_BEFORE), min(len(lines) - 1, at + WINDOW_AFTER)
    while last > at and not lines[last].strip():
        last -= 1  # models drop trailing blank lines: the window ends on code (or at the cursor)
    shown = list(lines[first:last + 1])
    shown[at - first] = file.line_before + CURSOR + file.line_after
    before = lines[max(0, first - CONTEXT_BEFORE):first]
    after = lines[last + 1:last + 1 + CONTEXT_AFTER]
    diffs, size = [], 0
    for diff in reversed([d for d in diff_history if d.strip()][-MAX_DIFFS:]):
        if size + len(diff) > MAX_DIFF_CHARS:
            break
        diffs.insert(0, diff.rstrip("\n"))
        size += len(diff)
    user = PROMPTS.request.render(
        PATH=file.path or "(untitled)", LANGUAGE=file.language or "plain text", DIFFS=diffs,
        BEFORE="".join(line + "\n" for line in before), WINDOW="\n".join(shown),
        AFTER="".join("\n" + line for line in after))
    return ChatWindow(first, last, "\n".join(lines[first:last + 1]), user)


def _tail_hold(text: str, sentinels: tuple[str, ...]) -> int:
    """The longest tail of `text` that is a proper start of one of `sentinels`."""
    for n in range(min(len(text), max(len(s) for s in sentinels) - 1), 0, -1):
        if any(len(s) > n and s.startswith(text[-n:]) for s in sentinels):
            return n
    return 0


def clean(body: str, *, final: bool) -> str:
    """The edit text in `body` (what follows `<edit>`): without an opening fence line, the cursor
    marker, and when `final` the last line break and a closing fence line."""
    if body.startswith(FENCE):
        body = body.split("\n", 1)[1] if "\n" in body else ""
    elif not final and FENCE.startswith(body):
        return ""  # may still become an opening fence
    text = body.replace(CURSOR, "")
    if final:
        text = text.removesuffix("\n")
        if text == FENCE or text.endswith("\n" + FENCE):
            text = text[:-len(FENCE)].removesuffix("\n")
    return text


class EditStream:
    """The replacement text of the window, released as the model writes it (see the module docstring)."""

    _HELD = ("\n" + CLOSE, "\n" + FENCE + "\n" + CLOSE, CLOSE, CURSOR)

    def __init__(self, original: str) -> None:
        self.original = original
        self.raw = ""
        self.opened = False
        self.stopped = False
        self.text = ""
        self.released = 0

    def feed(self, delta: str) -> str:
        if self.stopped or not delta:
            return ""
        self.raw += delta.replace("\r", "")
        body = self._body()
        if body is None or self.stopped:
            return ""  # not opened yet; or closed: the rest goes out with finish()
        text = clean(body[:len(body) - _tail_hold(body, self._HELD)], final=False)
        self.text = text[:len(text) - _tail_hold(text, self._HELD)]  # a line break the marker hid
        if self.released == 0 and self.original.startswith(self.text):
            return ""  # still only a copy of the window
        return self._release()

    def finish(self, *, truncated: bool = False) -> str:
        body = self._body()
        if body is None:
            return ""  # no edit offered
        if not self.stopped:
            raise Truncated("the model's edit ended before </edit>" + (" (token budget)" if truncated else ""))
        final = clean(body, final=True)
        if self.released == 0 and final == self.original:
            return ""
        if not final.startswith(self.text[:self.released]):
            raise AssertionError("released text is not a prefix of the final edit")
        self.text = final
        return self._release()

    @property
    def edit(self) -> str:
        return self.text[:self.released]

    def _body(self) -> str | None:
        start = self.raw.find(OPEN)
        if start < 0:
            return None
        self.opened = True
        body = self.raw[start + len(OPEN):]
        if body.startswith("\n"):
            body = body[1:]
        close = body.find(CLOSE)
        if close >= 0:
            self.stopped = True
            body = body[:close]
        return body

    def _release(self) -> str:
        out = self.text[self.released:]
        self.released = len(self.text)
        return out
