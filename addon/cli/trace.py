"""`cursor-byok trace <id>`: what happened to a conversation, request, model call or tool call.

The id is looked up as a request id, conversation id, model_call_id, tool call id, tool round id,
inside stored message payloads, and finally as a unique prefix of a request or conversation id.
The story: each run's status and error, its provider calls (timings, tokens, errors), its tool calls
(arguments and results) and its frames (a count per kind, or every frame with `--frames all`).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table
from rich.text import Text

from .common import console, default_db, fail, iso_ms, open_db

STATUS_STYLE = {"completed": "green", "ok": "green", "running": "yellow", "failed": "red", "error": "red",
                "canceled": "magenta", "abandoned": "magenta"}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "trace", help="print the story of a conversation / request / model call / tool call id",
        description="Find an id in the store (request, conversation, model_call_id, tool call id, tool round "
                    "id, or a unique prefix) and print what happened: run status, provider calls with timings "
                    "and errors, tool calls with results, frames.")
    p.add_argument("id", help="any id cursor-byok logs or stores")
    p.add_argument("--db", type=Path, default=None, help="SQLite store (default: ~/.cursor-byok/byok.db)")
    p.add_argument("--frames", choices=("none", "summary", "all"), default=None,
                   help="frames per run: counts per kind (default), every frame, or none")
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
    rows = q("SELECT DISTINCT request_id, conversation_id FROM messages WHERE request_id IS NOT NULL"
             " AND instr(payload, ?) > 0 ORDER BY id", [json.dumps(ident)]).fetchall()
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


def run(args: argparse.Namespace) -> int:
    db = args.db or default_db()
    try:
        conn = open_db(db)
    except FileNotFoundError as e:
        return fail(str(e))
    found = find(conn, args.id)
    out = console()
    if found is None:
        out.print(f"[red]{args.id!r} is not a request, conversation, model call, tool call or tool round id "
                  f"in {db}[/red]")
        return 1
    frames_mode = args.frames or ("summary" if len(found.request_ids) > 1 or found.kind == "conversation" else "all")
    what = found.kind.replace("_", " ")
    out.print(f"[bold]{what} {found.ident}[/bold]"
              + (f"  (conversation {found.conversation_id})" if found.conversation_id and found.kind != "conversation"
                 else ""))
    for request_id in found.request_ids:
        print_run(out, conn, request_id, found, frames_mode)
    return 0


def _ms(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def print_run(out, conn: sqlite3.Connection, request_id: str, found: Found, frames_mode: str) -> None:
    run = conn.execute("SELECT * FROM runs WHERE request_id = ?", [request_id]).fetchone()
    out.rule(f"request {request_id}")
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="dim")
    facts.add_column()
    if run is None:
        facts.add_row("run", "no run row (observed or never claimed): frames only")
    else:
        status = Text(run["status"], style=STATUS_STYLE.get(run["status"], ""))
        facts.add_row("status", status)
        facts.add_row("conversation", run["conversation_id"])
        facts.add_row("model", run["model_public_id"] or "-")
        facts.add_row("mode / action", f"{run['mode'] or '-'} / {run['action'] or '-'}")
        duration = ("" if run["finished_at_ms"] is None
                    else f"  ({(run['finished_at_ms'] - run['started_at_ms']) / 1000:.2f} s)")
        facts.add_row("started", iso_ms(run["started_at_ms"]) + duration)
        if run["usage"]:
            facts.add_row("usage", " ".join(f"{k}={v}" for k, v in json.loads(run["usage"]).items()))
        if run["error_code"] or run["error_message"]:
            facts.add_row("error", Text(f"{run['error_code']}: {run['error_message']}", style="red"))
    out.print(facts)
    _calls(out, conn, request_id, found)
    _tools(out, conn, request_id, found)
    if frames_mode != "none":
        _frames(out, conn, request_id, frames_mode)


def _calls(out, conn: sqlite3.Connection, request_id: str, found: Found) -> None:
    calls = conn.execute("SELECT * FROM llm_calls WHERE request_id = ? ORDER BY call_index", [request_id]).fetchall()
    if not calls:
        out.print("[dim]no provider calls[/dim]")
        return
    table = Table(title="provider calls", title_justify="left", show_edge=False)
    for col in ("#", "model_call_id", "provider / model", "status", "finish", "ttfb ms", "ttft ms", "total ms",
                "in", "out", "cache r/w", "error"):
        table.add_column(col, justify="right" if col.endswith("ms") or col in ("#", "in", "out") else "left",
                         overflow="fold")
    for c in calls:
        focus = found.kind == "model_call" and c["model_call_id"] == found.ident
        table.add_row(
            str(c["call_index"]), c["model_call_id"] or "-", f"{c['provider']} / {c['model']} ({c['provider_kind']})",
            Text(c["status"], style=STATUS_STYLE.get(c["status"], "")), c["finish_reason"] or "-",
            _ms(c["ttfb_ms"]), _ms(c["ttft_ms"]), _ms(c["total_ms"]),
            _n(c["input_tokens"]), _n(c["output_tokens"]), f"{_n(c['cache_read_tokens'])}/{_n(c['cache_write_tokens'])}",
            Text(c["error"] or "", style="red"), style="bold reverse" if focus else None,
        )
    out.print(table)


def _n(value) -> str:
    return "-" if value is None else str(value)


def _tools(out, conn: sqlite3.Connection, request_id: str, found: Found) -> None:
    rows = conn.execute(
        "SELECT r.id AS round_id, r.status AS round_status, r.assistant, c.* FROM tool_rounds r"
        " JOIN tool_round_calls c ON c.round_id = r.id WHERE r.request_id = ? ORDER BY r.created_at_ms, c.call_index",
        [request_id]).fetchall()
    if not rows:
        return
    results = {}
    for (payload,) in conn.execute("SELECT payload FROM messages WHERE request_id = ? AND role = 'tool'", [request_id]):
        p = json.loads(payload)
        results[(p.get("tool_round_id"), p.get("call_index"))] = p
    table = Table(title="tool calls", title_justify="left", show_edge=False)
    for col in ("round", "#", "call id", "tool", "arguments", "done", "result"):
        table.add_column(col, overflow="fold")
    for r in rows:
        args = ""
        try:
            calls = json.loads(r["assistant"]).get("tool_calls", [])
            args = next((c.get("arguments", "") for c in calls if c.get("call_id") == r["call_id"]), "")
        except ValueError:
            pass
        result = results.get((r["round_id"], r["call_index"]))
        if r["completion_seq"] is None:
            done, text = Text("pending", style="yellow"), ""
        else:
            done = Text(f"#{r['completion_seq']}" + (" error" if r["is_error"] else ""),
                        style="red" if r["is_error"] else "green")
            text = (result or {}).get("content", "")
            text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
        focus = (found.kind == "tool_call" and r["call_id"] == found.ident) or (
            found.kind == "tool_round" and r["round_id"] == found.ident)
        table.add_row(r["round_id"], str(r["call_index"]), r["call_id"], r["name"], _clip(args, 120), done,
                      _clip(text, 160), style="bold" if focus else None)
    out.print(table)


def _clip(text: str, n: int) -> str:
    text = (text or "").replace("\n", "\\n")
    return text if len(text) <= n else text[: n - 1] + "…"


def _frames(out, conn: sqlite3.Connection, request_id: str, mode: str) -> None:
    from . import frames as fr

    rows = conn.execute("SELECT direction, seq, ts_ms, flags, data FROM frames WHERE request_id = ?"
                        " ORDER BY ts_ms, CASE direction WHEN 'up' THEN 0 ELSE 1 END, seq", [request_id]).fetchall()
    if not rows:
        out.print("[dim]no frames recorded (byok_record=false, or recorded by another database)[/dim]")
        return
    decoded = []
    for r in rows:
        message = fr.decode(r["direction"], r["flags"], bytes(r["data"]))
        decoded.append((r, message, fr.kind_of(r["direction"], message, r["flags"])))
    if mode == "summary":
        counts: dict[tuple[str, str], int] = {}
        for r, _, kind in decoded:
            counts[(r["direction"], kind)] = counts.get((r["direction"], kind), 0) + 1
        table = Table(title=f"frames ({len(rows)}; --frames all lists them)", title_justify="left", show_edge=False)
        table.add_column("dir")
        table.add_column("kind")
        table.add_column("count", justify="right")
        for (direction, kind), n in counts.items():
            table.add_row(direction, kind, str(n))
        out.print(table)
        return
    t0 = rows[0]["ts_ms"]
    table = Table(title=f"frames ({len(rows)})", title_justify="left", show_edge=False)
    for col in ("+ms", "dir", "seq", "kind", "detail"):
        table.add_column(col, justify="right" if col in ("+ms", "seq") else "left", overflow="fold")
    for r, message, kind in decoded:
        style = "dim" if kind in fr.HEARTBEAT_KINDS else ("red" if kind == "end_stream" and message else None)
        table.add_row(str(r["ts_ms"] - t0), "↓" if r["direction"] == "down" else "↑", str(r["seq"]), kind,
                      fr.describe(r["direction"], message, r["flags"], limit=100), style=style)
    out.print(table)
