"""`cursor-byok trace <id>`: what happened to a conversation, request, model call or tool call.

The id is looked up as a request id, conversation id, model_call_id, tool call id, tool round id,
inside stored message payloads, and finally as a unique prefix of a request or conversation id.
The story: each run's status and error, its provider calls (timings, tokens, errors), its tool calls
(arguments and results) and its frames (a count per kind, or every frame with `--frames all`).
`collect` builds the story as plain data (the `--json` form); `print_story` renders it for people.
"""

from __future__ import annotations

import argparse
from decimal import Decimal
from pathlib import Path

from byok.providers.pricing import usd
from byok.dashboard.queries import Found, collect, find, owners

from .common import console, db_arg, default_config, default_db, fail, iso_ms, StoreUnavailable, open_db
from .output import Column, emit_json, facts, heading, line, styled, table

STATUS_STYLE = {"completed": "green", "ok": "green", "running": "yellow", "failed": "red", "error": "red",
                "canceled": "magenta", "abandoned": "magenta"}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "trace", help="print the story of a conversation / request / model call / tool call id",
        description="Find an id in the store (request, conversation, model_call_id, tool call id, tool round "
                    "id, or a unique prefix) and print what happened: run status, provider calls with timings "
                    "and errors, tool calls with results, frames.")
    p.add_argument("id", help="any id cursor-byok logs or stores")
    p.add_argument("--db", type=db_arg, default=None,
                   help="SQLite store or postgresql:// URL (default: ~/.cursor-byok/byok.db)")
    p.add_argument("--frames", choices=("none", "summary", "all"), default=None,
                   help="frames per run: counts per kind (default), every frame, or none")
    p.add_argument("--user", default=None, metavar="NAME",
                   help="only what belongs to this proxyauth user (team server): another user's id is not found")
    p.add_argument("--json", action="store_true", help="print the story as one JSON document")
    p.add_argument("--config", type=Path, default=None,
                   help="providers file with the models' prices, for each call's cost "
                        "(default: ~/.cursor-byok/providers.toml)")
    p.set_defaults(func=run)


def _shown(db) -> str:
    from byok.store.sql import is_postgres_url, redact_url

    return redact_url(db) if is_postgres_url(str(db)) else str(db)


def run(args: argparse.Namespace) -> int:
    db = args.db or default_db()
    try:
        conn = open_db(db)
    except StoreUnavailable as e:
        return fail(str(e))
    found = find(conn, args.id)
    if found is not None and args.user is not None and owners(conn, found.request_ids) != {args.user}:
        found = None  # another user's (or nobody's): as if it did not exist
    if found is None:
        message = (f"{args.id!r} is not a request, conversation, model call, tool call or tool round id "
                   f"in {_shown(db)}" + (f" of user {args.user}" if args.user is not None else ""))
        if args.json:
            emit_json({"error": message})
        else:
            line(console(), styled(message, "red"))
        return 1
    frames_mode = args.frames or "summary"  # as --help says: every frame only with --frames all
    from byok.dashboard.queries import load_prices

    prices, _, _ = load_prices(args.config or default_config())
    story = collect(conn, found, frames_mode, prices)
    if args.json:
        emit_json(story)
    else:
        print_story(console(), story, found)
    return 0


# ---- the story for people ------------------------------------------------------------------------


def print_story(out, story: dict, found: Found) -> None:
    what = found.kind.replace("_", " ")
    parts: list = [(f"{what} {found.ident}", "bold")]
    if found.conversation_id and found.kind != "conversation":
        parts.append(f"  (conversation {found.conversation_id})")
    line(out, *parts)
    for run_story in story["runs"]:
        print_run(out, run_story, found)


def _ms(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _n(value) -> str:
    return "-" if value is None else f"{value:,}"


def print_run(out, story: dict, found: Found) -> None:
    heading(out, f"request {story['request_id']}")
    run = story["run"]
    purposes = sorted({c["purpose"] for c in story["provider_calls"] if c.get("purpose")})
    if run is None and purposes:
        facts(out, [("call", f"one-shot {', '.join(purposes)}: no run, no frames (docs/tab.md, docs/features.md)")])
    elif run is None:
        facts(out, [("run", "no run row (observed or never claimed): frames only")])
    else:
        rows: list[tuple[str, object]] = [
            ("status", styled(run["status"], STATUS_STYLE.get(run["status"]))),
            ("conversation", run["conversation_id"]),
            ("model", run["model_public_id"] or "-"),
            ("mode / action", f"{run['mode'] or '-'} / {run['action'] or '-'}"),
        ]
        duration = ("" if run["finished_at_ms"] is None
                    else f"  ({(run['finished_at_ms'] - run['started_at_ms']) / 1000:.2f} s)")
        rows.append(("started", iso_ms(run["started_at_ms"]) + duration))
        if run["usage"]:
            rows.append(("usage", " ".join(f"{k}={v}" for k, v in run["usage"].items())))
        if run["error_code"] or run["error_message"]:
            rows.append(("error", styled(f"{run['error_code']}: {run['error_message']}", "red")))
        facts(out, rows)
    _print_calls(out, story["provider_calls"], found)
    _print_tools(out, story["tool_calls"], found)
    if story["frames"] is not None:
        _print_frames(out, story["frames"])


def _print_calls(out, calls: list[dict], found: Found) -> None:
    if not calls:
        line(out, ("no provider calls", "dim"))
        return
    columns = [Column("#", "right", in_records=False), Column("model_call_id"), Column("provider / model"), Column("status"),
               Column("finish"), Column("ttfb ms", "right"), Column("ttft ms", "right"), Column("total ms", "right"),
               Column("in", "right"), Column("out", "right"), Column("cache r/w"), Column("cost", "right"),
               Column("error")]
    rows, styles = [], []
    for c in calls:
        rows.append([
            str(c["call_index"]), c["model_call_id"] or "-", f"{c['provider']} / {c['model']} ({c['provider_kind']})",
            styled(c["status"], STATUS_STYLE.get(c["status"])),
            (c["finish_reason"] or "-") + (f" ({c['purpose']})" if c.get("purpose") else ""),
            _ms(c["ttfb_ms"]), _ms(c["ttft_ms"]), _ms(c["total_ms"]),
            _n(c["input_tokens"]), _n(c["output_tokens"]), f"{_n(c['cache_read_tokens'])}/{_n(c['cache_write_tokens'])}",
            "-" if c["cost_usd"] is None else usd(Decimal(str(c["cost_usd"]))), styled(c["error"] or "", "red"),
        ])
        styles.append("bold reverse" if found.kind == "model_call" and c["model_call_id"] == found.ident else None)
    table(out, "provider calls", columns, rows, row_styles=styles,
          record_title=lambda i, row: f"call {row[0]}")
    unpriced = sorted({f"{c['provider']}/{c['model']}" for c in calls if c["cost_usd"] is None})
    if unpriced:
        line(out, ("prices not configured for " + ", ".join(unpriced) + ": tokens only", "dim"))


def _print_tools(out, calls: list[dict], found: Found) -> None:
    if not calls:
        return
    columns = ["round", "#", Column("call id", in_records=False), Column("tool", in_records=False), "arguments",
               "done", "result"]
    rows, styles = [], []
    for c in calls:
        if c["status"] == "pending":
            done = styled("pending", "yellow")
        else:
            done = styled(f"#{c['completion_seq']}" + (" error" if c["status"] == "error" else ""),
                          "red" if c["status"] == "error" else "green")
        rows.append([c["round_id"], str(c["call_index"]), c["call_id"], c["name"], _clip(c["arguments"], 120), done,
                     _clip(c["result"] or "", 160)])
        focus = (found.kind == "tool_call" and c["call_id"] == found.ident) or (
            found.kind == "tool_round" and c["round_id"] == found.ident)
        styles.append("bold" if focus else None)
    table(out, "tool calls", columns, rows, row_styles=styles, record_title=lambda i, row: f"{row[3]} {row[2]}")


def _clip(text: str, n: int) -> str:
    text = (text or "").replace("\n", "\\n")
    return text if len(text) <= n else text[: n - 1] + "…"


def _print_frames(out, frames: dict) -> None:
    from . import frames as fr

    if not frames["count"]:
        line(out, ("no frames recorded (byok_record=false, or recorded by another database)", "dim"))
        return
    if "per_kind" in frames:
        rows = [[f["direction"], f["kind"], str(f["count"])] for f in frames["per_kind"]]
        table(out, f"frames ({frames['count']}; --frames all lists them)",
              ["dir", Column("kind"), Column("count", "right")], rows,
              compact=lambda row: f"{row[0]:<4} {row[2]:>5}  {row[1]}")
        return
    rows, styles = [], []
    for f in frames["list"]:
        rows.append([str(f["ms"]), "↓" if f["direction"] == "down" else "↑", str(f["seq"]), f["kind"], f["detail"]])
        styles.append("dim" if f["kind"] in fr.HEARTBEAT_KINDS else ("red" if f["error"] else None))
    table(out, f"frames ({frames['count']})",
          [Column("+ms", "right"), "dir", Column("seq", "right"), "kind", "detail"], rows, row_styles=styles,
          compact=lambda row: f"+{row[0]} {row[1]} {row[2]} {row[3]} {row[4]}".rstrip())
