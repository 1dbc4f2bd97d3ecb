"""`cursor-byok usage`: tokens and dollars per model and day, from the provider calls in the store.

Numbers are what providers reported (a call without usage adds nothing, it is not estimated). Costs
use each model's `prices` in the providers file as it is now (byok.providers.pricing has the formula per
dialect); a model without prices shows tokens only, and the output says prices are not configured.
`--plot FILE.png` draws tokens and cost per day and model with matplotlib (the optional `plot` extra).
"""

from __future__ import annotations

import argparse
from datetime import date
from decimal import Decimal
from pathlib import Path

from byok.dashboard.queries import COUNT_FIELDS, Row, usage_report

from .common import StoreUnavailable, console, db_arg, default_config, default_db, fail, open_db
from .output import Column, emit_json, line, table

PLOT_SIZE_IN, PLOT_DPI = (10, 7), 100


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("usage", help="tokens and cost per model and day (from the provider calls in the store)",
                       description="Tokens and cost per model and day from llm_calls: input, output, cache "
                                   "read/write, reasoning, calls, failed calls and USD from the prices in the "
                                   "providers file. Days are UTC.")
    p.add_argument("--db", type=db_arg, default=None,
                   help="SQLite store or postgresql:// URL (default: ~/.cursor-byok/byok.db)")
    p.add_argument("--config", type=Path, default=None,
                   help="providers file with the models' prices (default: ~/.cursor-byok/providers.toml)")
    p.add_argument("--since", type=_day, default=None, metavar="YYYY-MM-DD", help="first day to include")
    p.add_argument("--until", type=_day, default=None, metavar="YYYY-MM-DD", help="last day to include")
    p.add_argument("--by", choices=("model", "user", "purpose"), default="model",
                   help="rows per day and model (default), per day and proxyauth user (team server), or per day "
                        "and purpose (agent, summary, commit_message, branch_name, chat_title, terminal, cmd_k, tab)")
    p.add_argument("--json", action="store_true", help="print the rows and totals as one JSON document")
    p.add_argument("--plot", "--png", dest="plot", type=Path, default=None, metavar="FILE.png",
                   help="also draw tokens (and cost, when prices are set) per day and model into a PNG (needs "
                        "matplotlib: .venv/bin/pip install -e '.[plot]' in the checkout)")
    p.set_defaults(func=run)


def _day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a YYYY-MM-DD day: {text!r}") from None


def run(args: argparse.Namespace) -> int:
    from byok.extras import missing_message

    if args.plot and (lacking := missing_message("plot", "--plot")) is not None:
        return fail(lacking, 1)  # before any output: not a table and then a failure
    try:
        conn = open_db(args.db or default_db())
    except StoreUnavailable as e:
        return fail(str(e))
    report = usage_report(conn, args.config or default_config(), args.since, args.until, by=args.by)
    rows = report.rows
    if args.json:
        emit_json(report.as_json())
    elif not rows:
        line(console(), "no provider calls" + (f" since {args.since}" if args.since else "") + " in the store")
        return 0
    else:
        out = console()
        print_table(out, rows, report.totals, report.total_cost, report.unpriced, by=args.by)
        if report.unpriced:
            line(out, ("prices not configured for " + ", ".join(report.unpriced) + ": tokens only", "yellow"),
                 " (add prices = { input = ..., output = ..., cache_read = ..., cache_write = ... } in USD per "
                 "million tokens to the model in the providers file)")
        if report.prices_error:
            line(out, ("prices unavailable: ", "yellow"), report.prices_error)
        line(out, ("costs use the prices in the providers file as it is now (USD)", "dim"))
    if args.plot and rows:
        return write_plot(rows, args.plot)
    return 0


HEADERS = ("calls", "failed", "input", "output", "cache read", "cache write", "reasoning")


def print_table(out, rows: list[Row], totals: dict, total_cost: Decimal, unpriced: list[str], *,
                by: str = "model") -> None:
    from byok.providers.pricing import usd

    columns = [Column("day", in_records=False), Column(by, in_records=False),
               *(Column(h, "right") for h in HEADERS), Column("cost", "right")]
    cells = [[r.day, r.model, *(f"{getattr(r, f):,}" for f in COUNT_FIELDS),
              usd(r.cost) if r.cost is not None else "no prices"] for r in rows]
    if all(r.cost is None for r in rows):
        total = "no prices"  # not "$0.0000": nothing was priced
    else:
        total = usd(total_cost) + (" + unpriced" if unpriced else "")
    table(out, f"tokens and cost per {by} and day (UTC)", columns, cells,
          record_title=lambda i, row: f"{row[0]}  {row[1]}",
          footer=["total", "", *(f"{totals[f]:,}" for f in COUNT_FIELDS), total])


def write_plot(rows: list[Row], path: Path) -> int:
    """Stacked bar charts, one bar per day, one colour per model: tokens, then USD (only when some
    row has a price: an empty cost panel would only show a meaningless axis)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    days = sorted({r.day for r in rows})
    models = sorted({r.model for r in rows})
    with_cost = any(r.cost is not None for r in rows)
    if with_cost:
        fig, (tokens_ax, cost_ax) = plt.subplots(2, 1, figsize=PLOT_SIZE_IN, dpi=PLOT_DPI, sharex=True)
    else:
        fig, tokens_ax = plt.subplots(1, 1, figsize=(PLOT_SIZE_IN[0], PLOT_SIZE_IN[1] / 2), dpi=PLOT_DPI)
        cost_ax = None
    colors = plt.get_cmap("tab10")
    tokens_bottom = [0.0] * len(days)
    cost_bottom = [0.0] * len(days)
    for i, model in enumerate(models):
        mine = {r.day: r for r in rows if r.model == model}
        tokens = [float(sum(getattr(mine[d], f) for f in ("input_tokens", "output_tokens", "cache_read_tokens",
                                                           "cache_write_tokens"))) if d in mine else 0.0
                  for d in days]
        costs = [float(mine[d].cost) if d in mine and mine[d].cost is not None else 0.0 for d in days]
        color = colors(i % 10)
        priced = any(r.cost is not None for r in mine.values())
        tokens_ax.bar(days, tokens, bottom=tokens_bottom, label=model, color=color)
        if cost_ax is not None:
            cost_ax.bar(days, costs, bottom=cost_bottom, label=model if priced else f"{model} (no prices)",
                        color=color)
        tokens_bottom = [a + b for a, b in zip(tokens_bottom, tokens)]
        cost_bottom = [a + b for a, b in zip(cost_bottom, costs)]
    tokens_ax.set_title("tokens per day (input + output + cache read/write)")
    tokens_ax.set_ylabel("tokens")
    tokens_ax.legend(fontsize="small")
    if cost_ax is not None:
        cost_ax.set_title("cost per day (USD, from the providers file's prices)")
        cost_ax.set_ylabel("USD")
        cost_ax.legend(fontsize="small")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=PLOT_DPI)
    plt.close(fig)
    line(console(), f"chart written to {path}" + ("" if with_cost else " (tokens only: no model has prices)"))
    return 0
