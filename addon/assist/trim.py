"""Answers trimmed to what Cursor shows: no reasoning tags, code fences, labels, quotes or chatter.

Small models wrap a one-line answer in all of these ("Sure! Here is the branch name:\\n```\\nfix-login\\n```").
Pure functions, one per shape of answer, plus `FenceFilter`, the same trimming for an answer that
streams line by line (Cmd-K edits). `branch_name` also applies Git's rules for ref names
(`git check-ref-format --branch`).
"""

from __future__ import annotations

import re

_THINK = re.compile(r"^\s*<(think|thinking|reasoning)>.*?(?:</\1>|\Z)", re.S | re.I)
_FENCE = re.compile(r"^\s*(```|~~~)")
_LABEL = re.compile(
    r"^\s*(?:[*_#>]+\s*)?(?:suggested\s+|proposed\s+|the\s+)?"
    r"(?:commit\s+message|commit|branch\s+name|branch|title|chat\s+title|name|command|shell\s+command)"
    r"\s*(?:[*_]+\s*)?:\s*(?:[*_]+\s*)?", re.I)
_QUOTES = {'"': '"', "'": "'", "`": "`", "\u201c": "\u201d", "\u2018": "\u2019", "\u00ab": "\u00bb"}


def strip_thinking(text: str) -> str:
    """Reasoning some models write into the answer itself (`<think>...</think>`) removed; an
    unclosed one means the answer never started."""
    return _THINK.sub("", text, count=1)


def is_fence(line: str) -> bool:
    return bool(_FENCE.match(line))


def unfence(text: str) -> str:
    """The inside of the first fenced block when there is one, else the text."""
    lines = text.split("\n")
    start = next((i for i, line in enumerate(lines) if is_fence(line)), None)
    if start is None:
        return text
    end = next((i for i in range(start + 1, len(lines)) if is_fence(lines[i])), len(lines))
    return "\n".join(lines[start + 1:end])


def drop_lead_in(text: str) -> str:
    """Without a first line that only introduces the answer ("Here is the commit message:")."""
    lines = text.strip("\n").split("\n")
    if len(lines) > 1 and lines[0].rstrip().endswith(":") and not _LABEL.fullmatch(lines[0].strip() + " "):
        if len(lines[0]) < 80 and " " in lines[0].strip():
            return "\n".join(lines[1:])
    return "\n".join(lines)


def drop_label(text: str) -> str:
    """Without a leading "Commit message:" / "Title:" / "Command:" label."""
    return _LABEL.sub("", text, count=1)


def unquote(text: str) -> str:
    text = text.strip()
    while len(text) >= 2 and _QUOTES.get(text[0]) == text[-1]:
        text = text[1:-1].strip()
    return text


def _common(text: str) -> str:
    return drop_label(drop_lead_in(unfence(strip_thinking(text)).strip()).strip())


def first_line(text: str) -> str:
    return next((line.strip() for line in text.split("\n") if line.strip()), "")


def commit_message(text: str) -> str:
    """Subject and body as the model wrote them, lines right-trimmed."""
    body = unquote(_common(text))
    lines = [line.rstrip() for line in body.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def one_line(text: str) -> str:
    """A single line (a title, a name): the first line that says something."""
    return unquote(drop_label(first_line(_common(text))))


def title(text: str, max_chars: int = 80) -> str:
    """A short title: one line, no closing period, cut at a word boundary."""
    line = one_line(text).rstrip(".").strip()
    if len(line) <= max_chars:
        return line
    cut = line[:max_chars].rsplit(" ", 1)[0]
    return (cut or line[:max_chars]).rstrip(" ,;:-")


def command(text: str) -> str:
    """One shell command line, without a prompt sign (`$ `, `> `, `PS> `) before it."""
    line = one_line(text)
    return unquote(re.sub(r"^(?:PS\s*[^>]*>|[$#>%])\s+", "", line))


_REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\'\"`]+")
MAX_BRANCH_CHARS = 60


def branch_name(text: str) -> str:
    """A name Git accepts for a branch (git check-ref-format --branch), lower case, kebab-case words;
    "" when nothing usable is left."""
    name = one_line(text).lower()
    name = re.sub(r"\s+", "-", name)
    name = _REF_FORBIDDEN.sub("", name)
    while "@{" in name:
        name = name.replace("@{", "@")
    name = re.sub(r"\.{2,}", ".", name)
    name = re.sub(r"-{2,}", "-", name)
    name = "/".join(filter(None, map(_ref_component, name.split("/"))))
    if len(name) > MAX_BRANCH_CHARS:
        name = "/".join(filter(None, map(_ref_component, name[:MAX_BRANCH_CHARS].split("/"))))
    return "" if name in ("", "@", "head") else name


def _ref_component(part: str) -> str:
    """One `/`-separated part of a ref name: no leading or trailing `.` or `-`, no `.lock` at its end."""
    while True:
        before = part
        part = part.strip(".-")
        if part.endswith(".lock"):
            part = part[: -len(".lock")]
        if part == before:
            return part


def is_valid_branch_name(name: str) -> bool:
    """git check-ref-format --branch, for the names `branch_name` makes (no @{-N} forms)."""
    if not name or name == "@" or name.startswith("-") or name.endswith(("/", ".")) or "//" in name:
        return False
    if ".." in name or "@{" in name or _REF_FORBIDDEN.search(name):
        return False
    return all(part and not part.startswith(".") and not part.endswith(".lock") for part in name.split("/"))


class FenceFilter:
    """`unfence` + `strip_thinking` + `drop_lead_in` for an answer that streams: feed text as it comes,
    get back whole lines (with their newline) once it is sure they are content, and `finish()` the
    rest. A first line that is a fence opens a block that the next fence closes (what follows is
    dropped); a lead-in line right before such a fence is dropped; a fence as the very last line of an
    unfenced answer is dropped; blank lines before the first content are dropped."""

    def __init__(self) -> None:
        self._head = ""
        """Text not yet known to be past a leading reasoning block."""
        self._thinking = False
        self._started = False
        self._partial = ""
        self._mode = "start"  # start -> plain | fenced -> closed
        self._held: list[str] = []
        """Whole lines kept back: a possible lead-in, or a possible closing fence."""

    def feed(self, text: str) -> str:
        if not self._started:
            self._head += text
            text = self._skip_reasoning()
            if text is None:
                return ""
        self._partial += text
        out: list[str] = []
        while "\n" in self._partial:
            line, self._partial = self._partial.split("\n", 1)
            out.extend(self._line(line))
        return "".join(out)

    def finish(self) -> str:
        if not self._started:
            rest = self._skip_reasoning(final=True)
            self._partial += rest or ""
        out: list[str] = []
        last = self._partial
        self._partial = ""
        if last.strip():
            out.extend(self._line(last, complete=False))
        if self._mode == "plain" and self._held and not is_fence(self._held[0]):
            out.extend(self._held)
        elif self._mode == "start" and self._held:
            out.extend(self._held)  # a lone lead-in-looking line is the answer itself
        self._held = []
        return "".join(out)

    def _skip_reasoning(self, final: bool = False) -> str | None:
        """The text after a leading reasoning block once that is settled; None while undecided."""
        head = self._head.lstrip()
        if self._thinking or re.match(r"<(think|thinking|reasoning)>", head, re.I):
            self._thinking = True
            match = re.search(r"</(think|thinking|reasoning)>", head, re.I)
            if match is None:
                return "" if final else None
            rest = head[match.end():]
        elif not final and any(tag.startswith(head.lower()) for tag in ("<think>", "<thinking>", "<reasoning>")):
            return None
        else:
            rest = self._head
        self._started, self._head = True, ""
        return rest

    def _line(self, line: str, *, complete: bool = True) -> list[str]:
        end = "\n" if complete else ""
        if self._mode == "closed":
            return []
        if self._mode == "fenced":
            if is_fence(line):
                self._mode = "closed"
                return []
            return [line + end]
        if self._mode == "start":
            if not line.strip():
                if self._held:
                    self._held.append(line + end)  # between a lead-in and what it introduces
                return []
            if is_fence(line):
                self._mode, self._held = "fenced", []  # a held lead-in introduced the block
                return []
            if not self._held and line.rstrip().endswith(":") and complete:
                self._held = [line + end]
                return []
            held, self._held = self._held, []
            self._mode = "plain"
            return [*held, *self._line(line, complete=complete)]
        # plain: hold a fence line until something follows it
        if is_fence(line):
            self._held.append(line + end)
            return []
        held, self._held = self._held, []
        return [*held, line + end]
