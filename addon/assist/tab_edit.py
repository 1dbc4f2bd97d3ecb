"""The file a StreamCpp request carries, and the edit that answers it: lines, columns, line endings.

Conventions (PROTOCOL 11.1; where the facts leave a choice, it is one function here with a test for
each alternative, and observe mode logs what real clients send):

- `contents` holds the file from line `contents_start_at_line` (0-based) on, or all of it at 0.
- `cursor_position.line` is 0-based. `CURSOR_LINE_IN_CONTENTS` (the peers' reading): it counts lines
  of `contents`; the alternative counts lines of the whole file, so the index into `contents` is
  `line - contents_start_at_line` (`cursor_index`).
- `cursor_position.column` counts UTF-16 code units of the line, without its line ending (an editor
  column: an emoji is 2, a CJK character 1, a tab 1).
- Line endings: `line_ending` when set (`\\r\\n` / `\\n`, or the names CRLF / LF), else `\\r\\n` when
  the contents hold one, else `\\n`. Lines are the contents split there; the text we send uses the
  same ending, so the answer applies byte for byte.
- `range_to_replace` names whole lines, 1-based in the whole file, the last inclusive:
  `start_line_number = contents_start_at_line + index + 1`. The replaced text is those lines without
  the last one's line ending; `text` is all of their replacement (not an insertion).

`apply_edit` is that rule as a function: the property every answer must pass is
`apply_edit(file, edit) == file with the completion inserted at the cursor`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..wire.errors import ProtocolError

CURSOR_LINE_IN_CONTENTS = True
"""cursor_position.line counts lines of `contents` (False: lines of the whole file)."""
LINE_ENDINGS = {"\r\n": "\r\n", "\n": "\n", "crlf": "\r\n", "lf": "\n"}


@dataclass(frozen=True)
class TabFile:
    """The current file of a StreamCpp request, split into lines (without line endings)."""

    path: str
    language: str
    lines: tuple[str, ...]
    eol: str
    first_line: int
    """contents_start_at_line: the 0-based file line of lines[0]."""
    cursor_line: int
    """Index into `lines`."""
    cursor_char: int
    """Index (Python characters) into lines[cursor_line]."""

    @property
    def line_before(self) -> str:
        return self.lines[self.cursor_line][:self.cursor_char]

    @property
    def line_after(self) -> str:
        return self.lines[self.cursor_line][self.cursor_char:]

    def range_line(self, index: int) -> int:
        """The 1-based file line number of lines[index] (range_to_replace)."""
        return self.first_line + index + 1


@dataclass(frozen=True)
class Edit:
    """An answer: replace file lines start..end (1-based, inclusive) with `text`."""

    start_line: int
    end_line: int
    text: str


def line_ending(contents: str, declared: str | None) -> str:
    if declared:
        eol = LINE_ENDINGS.get(declared if declared in ("\r\n", "\n") else declared.strip().lower())
        if eol is None:
            raise ProtocolError(f"current_file.line_ending {declared!r} is neither \\r\\n nor \\n")
        return eol
    return "\r\n" if "\r\n" in contents else "\n"


def split_lines(contents: str, eol: str) -> tuple[str, ...]:
    """The contents' lines without their endings. With CRLF, a line that ends in a bare \\n (a mixed
    file) keeps what it has before it; the last line has no ending."""
    lines = contents.split("\n")
    if eol == "\r\n":
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    return tuple(lines)


def cursor_index(line: int, contents_start_at_line: int, *, in_contents: bool = CURSOR_LINE_IN_CONTENTS) -> int:
    """The index into the contents' lines of a cursor_position.line, under either convention."""
    return line if in_contents else line - contents_start_at_line


def cursor_file_lines(current_file) -> dict[str, int]:
    """The 1-based file line of the cursor under each reading of cursor_position.line (for observing
    which one Cursor's own answers confirm: their range_to_replace holds the cursor's line)."""
    line, start = current_file.cursor_position.line, current_file.contents_start_at_line
    return {"contents": start + line + 1, "file": line + 1}


def position_facts(current_file, *, in_contents: bool = CURSOR_LINE_IN_CONTENTS) -> dict:
    """Where a request puts its cursor, as numbers only (never contents): the `tab_positions` row that
    `cursor-byok verify` checks the conventions with. `column_fits`: `ok`, `line_outside` (the cursor's
    line is not in the contents), `past_end` or `inside_pair` (the column, in UTF-16 units)."""
    contents, position = current_file.contents, current_file.cursor_position
    lines = split_lines(contents, "\r\n" if "\r\n" in contents else "\n")
    index = cursor_index(position.line, current_file.contents_start_at_line, in_contents=in_contents)
    if not 0 <= index < len(lines):
        fits = "line_outside"
    else:
        try:
            utf16_to_index(lines[index], position.column)
            fits = "ok"
        except ProtocolError as e:
            fits = next((name for text, name in (("inside the character", "inside_pair"), ("negative", "negative")
                                                 ) if text in str(e)), "past_end")
    return {"cursor_line": position.line, "cursor_column": position.column,
            "contents_start_at_line": current_file.contents_start_at_line, "contents_lines": len(lines),
            "total_lines": current_file.total_number_of_lines or None,
            "line_ending": current_file.line_ending if current_file.HasField("line_ending") else None,
            "column_fits": fits}


def utf16_to_index(text: str, column: int) -> int:
    """The Python index of a UTF-16 column in `text`; a column inside a surrogate pair, past the end
    or negative is a ProtocolError."""
    if column < 0:
        raise ProtocolError(f"cursor column {column} is negative")
    units = 0
    for i, ch in enumerate(text):
        if units == column:
            return i
        units += 2 if ord(ch) > 0xFFFF else 1
        if units > column:
            raise ProtocolError(f"cursor column {column} falls inside the character {ch!r} (2 UTF-16 units)")
    if units == column:
        return len(text)
    raise ProtocolError(f"cursor column {column} is past the end of its line ({units} UTF-16 units)")


def index_to_utf16(text: str, index: int) -> int:
    return sum(2 if ord(ch) > 0xFFFF else 1 for ch in text[:index])


def tab_file(current_file, *, in_contents: bool = CURSOR_LINE_IN_CONTENTS) -> TabFile:
    """A `CurrentFileInfo` as a TabFile; a cursor outside the contents is a ProtocolError."""
    contents = current_file.contents
    eol = line_ending(contents, current_file.line_ending if current_file.HasField("line_ending") else None)
    lines = split_lines(contents, eol)
    start = current_file.contents_start_at_line
    if start < 0:
        raise ProtocolError(f"contents_start_at_line {start} is negative")
    position = current_file.cursor_position
    index = cursor_index(position.line, start, in_contents=in_contents)
    if not 0 <= index < len(lines):
        raise ProtocolError(
            f"cursor line {position.line} is outside the contents ({len(lines)} lines from file line {start}, "
            f"cursor lines counted {'in the contents' if in_contents else 'in the file'})")
    char = utf16_to_index(lines[index], position.column)
    return TabFile(path=current_file.relative_workspace_path, language=current_file.language_id, lines=lines,
                   eol=eol, first_line=start, cursor_line=index, cursor_char=char)


def insertion(file: TabFile, completion: str, *, replace_after: int = 0) -> Edit:
    """The edit that inserts `completion` ("\\n" line breaks) at the cursor: the cursor's line
    replaced by itself with the completion in it, line breaks in the file's ending. `replace_after`
    characters after the cursor are replaced too (a closing bracket the completion already has)."""
    text = file.line_before + completion.replace("\n", file.eol) + file.line_after[replace_after:]
    line = file.range_line(file.cursor_line)
    return Edit(line, line, text)


def apply_edit(contents: str, eol: str, first_line: int, edit: Edit) -> str:
    """`contents` (starting at 0-based file line `first_line`) with `edit` applied, as Cursor applies it:
    the lines' contents replaced, the last replaced line's own ending kept."""
    lines = contents.split("\n")
    start, end = edit.start_line - first_line - 1, edit.end_line - first_line - 1
    if not 0 <= start <= end < len(lines):
        raise ValueError(f"range {edit.start_line}..{edit.end_line} is outside the contents")
    replacement = edit.text.split("\n")
    if eol == "\r\n" and lines[end].endswith("\r"):
        replacement[-1] += "\r"
    lines[start:end + 1] = replacement
    return "\n".join(lines)
