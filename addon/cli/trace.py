"""`cursor-byok trace <id>`: what happened to a conversation, request, model call or tool call.

The id is looked up as a request id, conversation id, model_call_id, tool call id, tool round id,
inside stored message payloads, and finally as a unique prefix of a request or conversation id.
The story: each run's status and error, its provider calls (timings, tokens, errors), its tool calls
(arguments and results) and its frames (a count per kind, or every frame with `--frames all`).
`collect` builds the story as plain data (the `--json` form); `print_story` renders it for people.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path


from byok.providers.pricing import usd

from .common import console, db_arg, default_config, default_db, fail, iso_ms, open_db
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


@dataclass
class Found:
    kind: str
    """request | conversation | model_call | tool_call | tool_round | message"""
    ident: str
    request_ids: list[str]
    conversation_id: str | None


def find(conn: sqlite3.Connection, ident: str, *, prefixes: bool = True) -> Found | None:
    q = conn.execute
    row = q("SELECT conversation_id FROM runs WHERE request_id = ?", [ident]).fetchone()
    if row:
        return Found("request", ident, [ident], row[0])
    rows = q("SELECT request_id FROM runs WHERE conversation_id = ? ORDER BY started_at_ms, rowid", [ident]).fetchall()
    if rows:
        return Found("conversation", ident, [r[0] for r in rows], ident)
    row = q("SELECT request_id, conversation_id FROM llm_calls WHERE model_call_id = ?", [ident]).fetchone()
    if row:
        return Found("model_call", ident, [row[0]], row[1])
    row = q("SELECT conversation_id FROM llm_calls WHERE request_id = ?", [ident]).fetchone()
    if row:  # a one-shot call (Tab, commit message, ...): provider calls, no run
        return Found("request", ident, [ident], row[0])
    rows = q("SELECT DISTINCT r.request_id, r.conversation_id FROM tool_round_calls c"
             " JOIN tool_rounds r ON r.id = c.round_id WHERE c.call_id = ?", [ident]).fetchall()
    if rows:
        return Found("tool_call", ident, [r[0] for r in rows], rows[0][1])
    row = q("SELECT request_id, conversation_id FROM tool_rounds WHERE id = ?", [ident]).fetchone()
    if row:
        return Found("tool_round", ident, [row[0]], row[1])
    # runs passed upstream (and everything in observe mode) have frames but no runs row
    row = q("SELECT max(conversation_id) FROM frames WHERE request_id = ? HAVING count(*) > 0", [ident]).fetchone()
    if row:
        return Found("request", ident, [ident], row[0])
    rows = q("SELECT request_id FROM frames WHERE conversation_id = ? GROUP BY request_id ORDER BY min(ts_ms)",
             [ident]).fetchall()
    if rows:
        return Found("conversation", ident, [r[0] for r in rows], ident)
    rows = q("SELECT request_id, conversation_id FROM messages WHERE request_id IS NOT NULL"
             " AND instr(payload, ?) > 0 GROUP BY request_id, conversation_id ORDER BY min(id)",
             [json.dumps(ident)]).fetchall()
    if rows:
        return Found("message", ident, [r[0] for r in rows], rows[0][1])
    if prefixes and len(ident) >= 4:
        like = ident.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        hits = {r[0] for r in q("SELECT request_id FROM runs WHERE request_id LIKE ? ESCAPE '\\'"
                                " UNION SELECT conversation_id FROM runs WHERE conversation_id LIKE ? ESCAPE '\\'",
                                [like, like]).fetchall()}
        if len(hits) == 1:
            return find(conn, hits.pop(), prefixes=False)
    return None


def owners(conn, request_ids: list[str]) -> set[str | None]:
    """The proxyauth users of these requests: their runs, or for requests passed upstream the client
    that sent them (None: no proxyauth user)."""
    users: set[str | None] = set()
    for request_id in request_ids:
        row = conn.execute("SELECT user_id FROM runs WHERE request_id = ?", [request_id]).fetchone()
        if row is None:
            row = conn.execute("SELECT user_id FROM rpc_clients WHERE request_id = ?", [request_id]).fetchone()
        users.add(row[0] if row is not None else None)
    return users


def _shown(db) -> str:
    from byok.store.sql import is_postgres_url, redact_url

    return redact_url(db) if is_postgres_url(str(db)) else str(db)


def run(args: argparse.Namespace) -> int:
    db = args.db or default_db()
    try:
        conn = open_db(db)
    except FileNotFoundError as e:
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
    frames_mode = args.frames or ("summary" if len(found.request_ids) > 1 or found.kind == "conversation" else "all")
    from .usage import load_prices

    prices, _, _ = load_prices(args.config or default_config())
    story = collect(conn, found, frames_mode, prices)
    if args.json:
        emit_json(story)
    else:
        print_story(console(), story, found)
    return 0


# ---- the story as data ---------------------------------------------------------------------------


def collect(conn: sqlite3.Connection, found: Found, frames_mode: str, prices: dict | None = None) -> dict:
    return {
        "kind": found.kind, "id": found.ident, "conversation_id": found.conversation_id,
        "runs": [collect_run(conn, request_id, frames_mode, prices) for request_id in found.request_ids],
    }


def collect_run(conn: sqlite3.Connection, request_id: str, frames_mode: str, prices: dict | None = None) -> dict:
    row = conn.execute("SELECT * FROM runs WHERE request_id = ?", [request_id]).fetchone()
    run = None
    if row is not None:
        run = {k: row[k] for k in ("status", "conversation_id", "model_public_id", "mode", "action", "started_at_ms",
                                   "finished_at_ms", "error_code", "error_message")}
        run["usage"] = json.loads(row["usage"]) if row["usage"] else None
    return {"request_id": request_id, "run": run, "provider_calls": provider_calls(conn, request_id, prices),
            "tool_calls": tool_calls(conn, request_id),
            "frames": None if frames_mode == "none" else frames(conn, request_id, frames_mode)}


CALL_FIELDS = ("call_index", "model_call_id", "provider", "provider_kind", "model_public_id", "model", "started_at",
               "status", "finish_reason", "ttfb_ms", "ttft_ms", "total_ms", "input_tokens", "output_tokens",
               "cache_read_tokens", "cache_write_tokens", "reasoning_tokens", "error", "purpose")


def provider_calls(conn: sqlite3.Connection, request_id: str, prices: dict | None = None) -> list[dict]:
    """Each call as stored, with `cost_usd` from its model's prices (None: no prices configured).
    `purpose`: None for the turn's own calls, "summary" for a compaction (docs/conversations.md)."""
    from byok.providers.pricing import cost

    rows = conn.execute("SELECT * FROM llm_calls WHERE request_id = ? ORDER BY call_index", [request_id]).fetchall()
    out = []
    for r in rows:
        call = {k: r[k] if k in r.keys() else None for k in CALL_FIELDS}
        model_prices = (prices or {}).get(r["model_public_id"])
        call["cost_usd"] = None if model_prices is None else float(cost(
            model_prices, r["provider_kind"], input_tokens=r["input_tokens"], output_tokens=r["output_tokens"],
            cache_read_tokens=r["cache_read_tokens"], cache_write_tokens=r["cache_write_tokens"]))
        out.append(call)
    return out


def tool_arguments(assistant_json: str | None) -> dict[str, str]:
    """call id -> its arguments as JSON text, from a staged round's assistant message.

    The round keeps the AI-SDK shape (`content[]` parts `{type: tool-call, toolCallId, input}`); older
    stores kept `tool_calls[]` with `call_id` / `arguments` (a JSON string)."""
    try:
        message = json.loads(assistant_json or "{}")
    except ValueError:
        return {}
    out: dict[str, str] = {}
    content = message.get("content") if isinstance(message, dict) else None
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict) and part.get("type") == "tool-call" and "toolCallId" in part:
            value = part.get("input", part.get("args", {}))
            out[str(part["toolCallId"])] = value if isinstance(value, str) else json.dumps(
                value, ensure_ascii=False, separators=(",", ":"))
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    for call in calls if isinstance(calls, list) else []:
        if isinstance(call, dict) and "call_id" in call:
            value = call.get("arguments", "")
            out.setdefault(str(call["call_id"]), value if isinstance(value, str) else json.dumps(value))
    return out


def tool_calls(conn: sqlite3.Connection, request_id: str) -> list[dict]:
    rows = conn.execute(
        "SELECT r.id AS round_id, r.status AS round_status, r.assistant, c.* FROM tool_rounds r"
        " JOIN tool_round_calls c ON c.round_id = r.id WHERE r.request_id = ? ORDER BY r.created_at_ms, c.call_index",
        [request_id]).fetchall()
    results: dict = {}
    for (payload,) in conn.execute("SELECT payload FROM messages WHERE request_id = ? AND role IN ('tool', 'assistant')",
                                   [request_id]):
        p = json.loads(payload)
        if p.get("kind") == "tool":
            results[(p.get("tool_round_id"), p.get("call_index"))] = p
    out = []
    arguments_of: dict[str, dict[str, str]] = {}
    for r in rows:
        if r["round_id"] not in arguments_of:
            arguments_of[r["round_id"]] = tool_arguments(r["assistant"])
        result = results.get((r["round_id"], r["call_index"]))
        content = None
        if r["completion_seq"] is not None:
            content = (result or {}).get("content", "")
            content = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        out.append({
            "round_id": r["round_id"], "call_index": r["call_index"], "call_id": r["call_id"], "name": r["name"],
            "arguments": arguments_of[r["round_id"]].get(r["call_id"], ""),
            "status": "pending" if r["completion_seq"] is None else ("error" if r["is_error"] else "ok"),
            "completion_seq": r["completion_seq"], "result": content,
        })
    return out


def frames(conn: sqlite3.Connection, request_id: str, mode: str) -> dict:
    from . import frames as fr

    rows = conn.execute("SELECT direction, seq, ts_ms, flags, data FROM frames WHERE request_id = ?"
                        " ORDER BY ts_ms, CASE direction WHEN 'up' THEN 0 ELSE 1 END, seq", [request_id]).fetchall()
    decoded = []
    for r in rows:
        message = fr.decode(r["direction"], r["flags"], bytes(r["data"]))
        decoded.append((r, message, fr.kind_of(r["direction"], message, r["flags"])))
    if mode == "summary":
        counts: dict[tuple[str, str], int] = {}
        for r, _, kind in decoded:
            counts[(r["direction"], kind)] = counts.get((r["direction"], kind), 0) + 1
        return {"count": len(rows), "per_kind": [{"direction": d, "kind": k, "count": n}
                                                 for (d, k), n in counts.items()]}
    t0 = rows[0]["ts_ms"] if rows else 0
    return {"count": len(rows), "list": [
        {"ms": r["ts_ms"] - t0, "direction": r["direction"], "seq": r["seq"], "kind": kind,
         "error": kind == "end_stream" and bool(message),
         "detail": fr.describe(r["direction"], message, r["flags"], limit=100)}
        for r, message, kind in decoded]}


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
        facts(out, [("call", f"one-shot ({', '.join(purposes)}): no run, no conversation")])
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
