"""Output for people and pipes: nothing is read as markup, and ids never wrap.

Every `cursor-byok` command prints through these helpers:
- the console never interprets markup or emoji codes: text the user or a provider wrote (ids, model
  names, errors, `[[providers]]`) prints as written; styles come from `Text` objects only;
- `line(...)` prints one logical line that is never broken by us (a terminal may still fold it at its
  edge, a pipe receives it whole);
- `table(...)` prints a table when its natural width fits the console, otherwise the same rows as
  key/value records, one value per line, so an id or an error is never cut into pieces;
- `emit_json(...)` is the `--json` form: one JSON document on stdout.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

Cell = str | Text


def make_console(stderr: bool = False) -> Console:
    """Width from the terminal (or COLUMNS); markup, emoji codes and highlighting off."""
    return Console(stderr=stderr, soft_wrap=True, highlight=False, markup=False, emoji=False)


def styled(text: Any, style: str | None = None) -> Text:
    """A piece of text printed exactly as written (never markup), optionally styled."""
    return Text(str(text), style=style or "")


def line(out: Console, *parts: Cell | tuple[Any, str | None]) -> None:
    """Print one line from plain strings, `Text`s and (text, style) pairs; never wrapped by us."""
    text = Text()
    for part in parts:
        if isinstance(part, tuple):
            text.append(str(part[0]), style=part[1] or "")
        elif isinstance(part, Text):
            text.append_text(part)
        else:
            text.append(str(part))
    out.print(text, soft_wrap=True, overflow="ignore", no_wrap=True, crop=False)


def heading(out: Console, title: str, style: str = "bold") -> None:
    """A section heading (a rule would cut a long id to the console width)."""
    line(out, ("── ", "dim"), (title, style), (" ──", "dim"))


def facts(out: Console, rows: Iterable[tuple[str, Cell]], indent: int = 0) -> None:
    """`key  value` lines, keys padded to one column; values are never wrapped."""
    rows = [(k, v) for k, v in rows]
    width = max((len(k) for k, _ in rows), default=0)
    for key, value in rows:
        line(out, " " * indent, (f"{key:<{width}}  ", "dim"), value if isinstance(value, Text) else str(value))


@dataclass
class Column:
    name: str
    justify: str = "left"
    in_records: bool = True
    """Shown in the key/value fallback (off when the record's title already says it)."""


def table(out: Console, title: str | None, columns: Sequence[Column | str], rows: Sequence[Sequence[Cell]], *,
          row_styles: Sequence[str | None] | None = None, record_title=None, compact=None,
          footer: Sequence[Cell] | None = None) -> None:
    """A table if it fits the console unwrapped, else the rows as key/value records.

    `record_title(i, row)` names a record in the fallback (default: the first column's value);
    `compact(row)` instead turns each row into one line (for long lists such as frames);
    `footer` (totals) is one more row, set apart.
    """
    cols = [c if isinstance(c, Column) else Column(c) for c in columns]
    grid = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for c in cols:
        grid.add_column(c.name, justify=c.justify, no_wrap=True)
    for i, row in enumerate(rows):
        grid.add_row(*_cells(row), style=(row_styles[i] if row_styles else None))
    if footer is not None:
        grid.add_section()
        grid.add_row(*_cells(footer), style="bold")
    needed = Measurement.get(out, out.options.update_width(1_000_000), grid).maximum
    if needed <= out.width:
        out.print(grid)
        return
    if title:
        line(out, (title, "italic"))
    all_rows = list(rows) + ([footer] if footer is not None else [])
    if compact is not None:
        for i, row in enumerate(all_rows):
            text = compact(row)
            style = row_styles[i] if row_styles and i < len(rows) else None
            line(out, styled(text, style) if isinstance(text, str) else text)
        return
    for i, row in enumerate(all_rows):
        cells = _cells(row)
        name = record_title(i, row) if record_title else cells[0]
        style = (row_styles[i] if row_styles and i < len(rows) else None) or ("bold" if i >= len(rows) else None)
        line(out, ("• ", "dim"), name if isinstance(name, Text) else styled(name, style))
        rest = [(c.name, v) for c, v in zip(cols, cells) if c.in_records][0 if record_title else 1:]
        facts(out, [(k, v) for k, v in rest if _plain(v) != ""], indent=4)


def _cells(row: Sequence[Cell]) -> list[Cell]:
    return [c if isinstance(c, Text) else str(c) for c in row]


def _plain(value: Cell) -> str:
    return value.plain if isinstance(value, Text) else value


def emit_json(obj: Any) -> None:
    """The `--json` form: one indented document, UTF-8 kept readable."""
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, indent=2, default=str) + "\n")
