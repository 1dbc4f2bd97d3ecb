"""`cursor-byok usage`: tokens per model and day, from the provider calls in the store.

Numbers are what providers reported (a call without usage adds nothing, it is not estimated).
`--png` draws a stacked bar chart when matplotlib happens to be installed; it is not a dependency.
"""

from __future__ import annotations

import argparse
import sqlite3
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path

from .common import console, default_db, fail, open_db
from .output import Column, emit_json, line, table

TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("usage", help="tokens per model and day (from the provider calls in the store)",
                       description="Tokens per model and day from llm_calls: input, output, cache read/write, "
                                   "reasoning, calls and failed calls. Days are UTC.")
    p.add_argument("--db", type=Path, default=None, help="SQLite store (default: ~/.cursor-byok/byok.db)")
    p.add_argument("--since", type=_day, default=None, metavar="YYYY-MM-DD", help="first day to include")
    p.add_argument("--until", type=_day, default=None, metavar="YYYY-MM-DD", help="last day to include")
    p.add_argument("--json", action="store_true", help="print the rows and totals as one JSON document")
    p.add_argument("--png", type=Path, default=None, help="also write a chart (needs matplotlib installed)")
    p.set_defaults(func=run)


def _day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a YYYY-MM-DD day: {text!r}") from None


@dataclass
class Row:
    day: str
    model: str
    calls: int
    errors: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int


def usage_rows(conn: sqlite3.Connection, since: date | None = None, until: date | None = None) -> list[Row]:
    sums = ", ".join(f"coalesce(sum({f}), 0)" for f in TOKEN_FIELDS)
    sql = (f"SELECT substr(started_at, 1, 10) AS day, coalesce(provider, '?') || '/' || coalesce(model, '?'),"
           f" count(*), sum(status = 'error'), {sums} FROM llm_calls WHERE 1=1")
    params: list = []
    if since:
        sql += " AND substr(started_at, 1, 10) >= ?"
        params.append(since.isoformat())
    if until:
        sql += " AND substr(started_at, 1, 10) <= ?"
        params.append(until.isoformat())
    sql += " GROUP BY 1, 2 ORDER BY 1, 2"
    return [Row(*row) for row in conn.execute(sql, params).fetchall()]


def run(args: argparse.Namespace) -> int:
    try:
        conn = open_db(args.db or default_db())
    except FileNotFoundError as e:
        return fail(str(e))
    rows = usage_rows(conn, args.since, args.until)
    totals = {f: sum(getattr(r, f) for r in rows) for f in COUNT_FIELDS}
    if args.json:
        emit_json({"days": "UTC", "rows": [asdict(r) for r in rows], "totals": totals})
    elif not rows:
        line(console(), "no provider calls" + (f" since {args.since}" if args.since else "") + " in the store")
        return 0
    else:
        print_table(console(), rows, totals)
    if args.png and rows:
        return write_png(rows, args.png)
    return 0


COUNT_FIELDS = ("calls", "errors", *TOKEN_FIELDS)
HEADERS = ("calls", "failed", "input", "output", "cache read", "cache write", "reasoning")


def print_table(out, rows: list[Row], totals: dict) -> None:
    columns = [Column("day", in_records=False), Column("model", in_records=False), *(Column(h, "right") for h in HEADERS)]
    cells = [[r.day, r.model, *(f"{getattr(r, f):,}" for f in COUNT_FIELDS)] for r in rows]
    table(out, "tokens per model and day (UTC)", columns, cells,
          record_title=lambda i, row: f"{row[0]}  {row[1]}",
          footer=["total", "", *(f"{totals[f]:,}" for f in COUNT_FIELDS)])


def write_png(rows: list[Row], path: Path) -> int:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return fail("--png needs matplotlib, which is not installed (it is optional: pip install matplotlib)", 1)
    days = sorted({r.day for r in rows})
    models = sorted({r.model for r in rows})
    fig, ax = plt.subplots(figsize=(max(6, len(days) * 0.6), 4))
    bottom = [0] * len(days)
    for model in models:
        values = [sum(r.input_tokens + r.output_tokens for r in rows if r.day == d and r.model == model) for d in days]
        ax.bar(days, values, bottom=bottom, label=model)
        bottom = [a + b for a, b in zip(bottom, values)]
    ax.set_ylabel("input + output tokens")
    ax.legend(fontsize="small")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    line(console(), f"chart written to {path}")
    return 0
