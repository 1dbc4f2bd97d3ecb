"""The store queries behind `trace`, `usage`, `drift` and the dashboard: one query layer, two presentations.

`conn` is what `byok.cli.common.open_db` returns: a sqlite3 connection reading rows by name, or, for a
team server's PostgreSQL store, `cli/pgconn.py`'s connection that reads the same way (it rewrites the
few SQLite spellings). Every function returns plain data (dicts, dataclasses); the CLI prints it with
rich, the dashboard renders it with jinja2. Lists that grow with the store take a page (`limit`,
`before`/`offset`): nothing here loads a whole history.

`user` arguments scope a query to one proxyauth user's rows (a team server); `ALL` means no scope.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass, field
from datetime import date
from decimal import Decimal
from pathlib import Path

from byok.agent.drift import WIRE_TYPES
from byok.providers.pricing import INPUT_INCLUDES_CACHE

ALL = object()
"""No user scope: every user's rows (the single user, a team admin, the CLI without --user)."""


# ---- trace: find an id -----------------------------------------------------------------------------


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
    # and the one-shot calls made for it (a branch name), which have no run
    rows += q("SELECT request_id FROM llm_calls c WHERE conversation_id = ? AND NOT EXISTS (SELECT 1 FROM runs r"
              " WHERE r.request_id = c.request_id) GROUP BY request_id ORDER BY min(started_at)", [ident]).fetchall()
    if rows:
        return Found("conversation", ident, [r[0] for r in rows], ident)
    row = q("SELECT request_id, conversation_id FROM llm_calls WHERE model_call_id = ?", [ident]).fetchone()
    if row:
        return Found("model_call", ident, [row[0]], row[1])
    # one-shot calls (commit messages, Cmd-K, Tab...): provider calls without a run or frames
    row = q("SELECT max(conversation_id) FROM llm_calls WHERE request_id = ? HAVING count(*) > 0", [ident]).fetchone()
    if row:
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



# ---- trace: the story as data ----------------------------------------------------------------------


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
    `purpose`: None for the turn's own calls, "summary" for a compaction (docs/conversations.md), the
    feature of a one-shot call (commit_message, branch_name, chat_title, terminal, cmd_k: docs/features.md)."""
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


def frames(conn: sqlite3.Connection, request_id: str, mode: str, *, offset: int = 0,
           limit: int | None = None) -> dict:
    """The request's frames: counts per kind (`summary`), or each frame decoded (`all`), in stream
    order; `offset`/`limit` take one page of that list (`count` is always the request's total)."""
    from byok.cli import frames as fr

    order = " ORDER BY ts_ms, CASE direction WHEN 'up' THEN 0 ELSE 1 END, seq"
    if mode == "summary" or limit is None:
        rows = conn.execute("SELECT direction, seq, ts_ms, flags, data FROM frames WHERE request_id = ?" + order,
                            [request_id]).fetchall()
        total, t0 = len(rows), rows[0]["ts_ms"] if rows else 0
    else:
        total, t0 = conn.execute("SELECT count(*), min(ts_ms) FROM frames WHERE request_id = ?",
                                 [request_id]).fetchone()
        rows = conn.execute("SELECT direction, seq, ts_ms, flags, data FROM frames WHERE request_id = ?" + order
                            + " LIMIT ? OFFSET ?", [request_id, limit, offset]).fetchall()
        t0 = t0 or 0
    decoded = []
    for r in rows:
        message = fr.decode(r["direction"], r["flags"], bytes(r["data"]))
        decoded.append((r, message, fr.kind_of(r["direction"], message, r["flags"])))
    if mode == "summary":
        counts: dict[tuple[str, str], int] = {}
        for r, _, kind in decoded:
            counts[(r["direction"], kind)] = counts.get((r["direction"], kind), 0) + 1
        return {"count": total, "per_kind": [{"direction": d, "kind": k, "count": n}
                                             for (d, k), n in counts.items()]}
    return {"count": total, "list": [
        {"ms": r["ts_ms"] - t0, "direction": r["direction"], "seq": r["seq"], "kind": kind,
         "error": kind == "end_stream" and bool(message),
         "detail": fr.describe(r["direction"], message, r["flags"], limit=100)}
        for r, message, kind in decoded]}


# ---- usage ---------------------------------------------------------------------------------------

TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
COUNT_FIELDS = ("calls", "errors", *TOKEN_FIELDS)


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
    model_public_id: str | None = None
    provider_kind: str | None = None
    cost: Decimal | None = None
    """USD, or None when the model has no prices."""


def usage_rows(conn: sqlite3.Connection, since: date | None = None, until: date | None = None,
               prices: dict | None = None, *, by: str = "model", user=ALL) -> list[Row]:
    """Per (day, model) sums; `prices` = public id -> Prices fills `cost`. With `by="user"` per
    (day, proxyauth user of the run), '-' for runs without one (the single user); with `by="purpose"` per
    (day, what the call was for: `agent` for a turn's own calls, else llm_calls.purpose). `Row.model`
    then holds the user or the purpose, and the cost is None when any of its models has no prices."""
    from byok.providers.pricing import cost

    sums = ", ".join(f"coalesce(sum(c.{f}), 0)" for f in TOKEN_FIELDS)
    key = {"user": "coalesce(r.user_id, c.user_id, '-')", "purpose": "coalesce(c.purpose, 'agent')"}.get(
        by, "coalesce(c.provider, '?') || '/' || coalesce(c.model, '?')")
    sql = (f"SELECT substr(c.started_at, 1, 10) AS day, {key}, count(*),"
           f" sum(CASE WHEN c.status = 'error' THEN 1 ELSE 0 END), {sums}, c.model_public_id, c.provider_kind"
           " FROM llm_calls c LEFT JOIN runs r ON r.request_id = c.request_id WHERE 1=1")
    params: list = []
    if since:
        sql += " AND substr(c.started_at, 1, 10) >= ?"
        params.append(since.isoformat())
    if until:
        sql += " AND substr(c.started_at, 1, 10) <= ?"
        params.append(until.isoformat())
    if user is not ALL:
        sql += " AND coalesce(r.user_id, c.user_id) = ?"  # a one-shot call has no run: its own user
        params.append(user)
    sql += " GROUP BY 1, 2, c.model_public_id, c.provider_kind ORDER BY 1, 2"
    rows = [Row(*row) for row in conn.execute(sql, params).fetchall()]
    for r in rows:
        model_prices = (prices or {}).get(r.model_public_id)
        if model_prices is not None:
            r.cost = cost(model_prices, r.provider_kind, input_tokens=r.input_tokens, output_tokens=r.output_tokens,
                          cache_read_tokens=r.cache_read_tokens, cache_write_tokens=r.cache_write_tokens)
    return rows if by == "model" else _per_key(rows)


def _per_key(rows: list[Row]) -> list[Row]:
    """Rows of one (day, key) over several models summed into one (cost None if any part is unpriced)."""
    merged: dict[tuple[str, str], Row] = {}
    for r in rows:
        into = merged.get((r.day, r.model))
        if into is None:
            merged[(r.day, r.model)] = Row(r.day, r.model, *(getattr(r, f) for f in COUNT_FIELDS), cost=r.cost)
            continue
        for f in COUNT_FIELDS:
            setattr(into, f, getattr(into, f) + getattr(r, f))
        into.cost = None if into.cost is None or r.cost is None else into.cost + r.cost
    return list(merged.values())


def load_prices(path: Path) -> tuple[dict, dict, str | None]:
    """(public id -> Prices, public id -> prices as JSON, why prices are unavailable or None)."""
    from byok.providers.config import ConfigFileError, load_providers

    if not path.exists():
        return {}, {}, f"no providers file at {path}"
    try:
        models = load_providers(path).models
    except ConfigFileError as e:
        return {}, {}, str(e)
    priced = {m.public_id: m.prices for m in models if m.prices is not None}
    return priced, {k: v.as_dict() for k, v in priced.items()}, None



@dataclass
class UsageReport:
    """`cursor-byok usage` as data: rows per day and model (or user, or purpose), totals, and the `--json`
    document."""

    by: str
    rows: list[Row]
    totals: dict
    total_cost: Decimal
    unpriced: list[str]
    """Models (provider/model) without prices: their tokens count, their dollars do not."""
    prices_json: dict
    prices_error: str | None

    @property
    def priced(self) -> bool:
        """Some row has a cost: with no prices at all the total is unknown (None), not $0."""
        return any(r.cost is not None for r in self.rows)

    def as_json(self) -> dict:
        out_rows = []
        for r in self.rows:
            item = asdict(r)
            item["cost_usd"] = None if r.cost is None else float(r.cost)
            item["prices"] = self.prices_json.get(r.model_public_id)
            del item["cost"]
            if self.by != "model":
                item = {"day": item.pop("day"), self.by: item.pop("model"),
                        **{k: v for k, v in item.items() if k not in ("model_public_id", "provider_kind", "prices")}}
            out_rows.append(item)
        return {"days": "UTC", "by": self.by, "rows": out_rows,
                "totals": {**self.totals, "cost_usd": float(self.total_cost) if self.priced else None,
                           "cost_complete": not self.unpriced},
                "unpriced_models": self.unpriced, "prices_error": self.prices_error}


def usage_report(conn, config: Path, since: date | None = None, until: date | None = None, *, by: str = "model",
                 user=ALL) -> UsageReport:
    """Rows, totals and cost from the providers file's prices as they are now (the `usage` command)."""
    prices, prices_json, prices_error = load_prices(config)
    rows = usage_rows(conn, since, until, prices, by=by, user=user)
    totals: dict = {f: sum(getattr(r, f) for r in rows) for f in COUNT_FIELDS}
    total_cost = sum((r.cost for r in rows if r.cost is not None), Decimal(0))
    per_model = rows if by == "model" else usage_rows(conn, since, until, prices, user=user)
    unpriced = sorted({r.model for r in per_model if r.cost is None})
    return UsageReport(by, rows, totals, total_cost, unpriced, prices_json, prices_error)


def prompt_tokens(kind: str | None, input_tokens: int, cache_read_tokens: int, cache_write_tokens: int) -> int:
    """Every prompt token of a call: the OpenAI dialects count cached tokens inside `input`, Anthropic
    reports cache reads and writes apart from it (pricing.py)."""
    if kind in INPUT_INCLUDES_CACHE:
        return input_tokens
    return input_tokens + cache_read_tokens + cache_write_tokens


def cache_hits(rows: list[Row]) -> dict:
    """The prompt cache's hit rate over usage rows (per model): cache-read prompt tokens / all prompt
    tokens, as the providers reported them. `rate` is None when no prompt token was reported."""
    per_model: dict[str, list[int]] = {}
    for r in rows:
        acc = per_model.setdefault(r.model, [0, 0])
        acc[0] += r.cache_read_tokens
        acc[1] += prompt_tokens(r.provider_kind, r.input_tokens, r.cache_read_tokens, r.cache_write_tokens)
    read, prompt = sum(a[0] for a in per_model.values()), sum(a[1] for a in per_model.values())
    return {"read": read, "prompt": prompt, "rate": read / prompt if prompt else None,
            "models": [{"model": m, "read": a[0], "prompt": a[1], "rate": a[0] / a[1] if a[1] else None}
                       for m, a in sorted(per_model.items())]}


# ---- drift ---------------------------------------------------------------------------------------


def drift_report(conn) -> dict:
    """The drift rows, newest first. A row written before its request's client version was known
    (RunSSE headers can arrive after the first append) takes the version of its example request."""
    rows = conn.execute(
        "SELECT d.*, c.client_version AS example_version FROM protocol_drift d"
        " LEFT JOIN rpc_clients c ON c.request_id = d.example_request_id").fetchall()
    merged: dict[tuple, dict] = {}
    for r in rows:
        version = r["client_version"] or r["example_version"] or None
        key = (r["direction"], r["path"], r["field_number"], r["wire_type"], r["kind"], version)
        row = merged.get(key)
        if row is None:
            merged[key] = {
                "direction": r["direction"], "path": r["path"], "field_number": r["field_number"],
                "wire_type": r["wire_type"], "wire_type_name": WIRE_TYPES.get(r["wire_type"], str(r["wire_type"])),
                "kind": r["kind"], "client_version": version, "count": r["count"],
                "first_seen_ms": r["first_seen_ms"], "last_seen_ms": r["last_seen_ms"],
                "example_request_id": r["example_request_id"]}
            continue
        row["count"] += r["count"]
        row["first_seen_ms"] = min(row["first_seen_ms"], r["first_seen_ms"])
        if r["last_seen_ms"] >= row["last_seen_ms"]:
            row["last_seen_ms"], row["example_request_id"] = r["last_seen_ms"], r["example_request_id"]
    frames = conn.execute("SELECT count(*), min(ts_ms), max(ts_ms) FROM frames").fetchone()
    versions = [r[0] for r in conn.execute(
        "SELECT DISTINCT client_version FROM rpc_clients WHERE client_version IS NOT NULL ORDER BY 1")]
    return {
        "frames_recorded": frames[0], "first_frame_ms": frames[1], "last_frame_ms": frames[2],
        "client_versions_seen": versions,
        "unknown": sorted(merged.values(), key=lambda u: (-u["last_seen_ms"], u["direction"], u["path"],
                                                          u["field_number"])),
    }




# ---- pages of the dashboard (each a bounded read) ---------------------------------------------------


def _marks(n: int) -> str:
    return ", ".join("?" * n)


def _scoped(sql: str, params: list, user, column: str = "user_id") -> str:
    if user is ALL:
        return sql
    params.append(user)
    return sql + f" AND {column} = ?"


@dataclass
class Page:
    items: list
    next_cursor: str | None
    """Pass as `before` for the next (older) page; None on the last page."""


def conversations(conn, prices: dict | None = None, *, user=ALL, before: str | None = None,
                  limit: int = 50) -> Page:
    """Conversations by last activity, newest first, one page (keyset `before` = "updated_ms:id")."""
    params: list = []
    sql = _scoped("SELECT id, user_id, created_at_ms, updated_at_ms FROM conversations WHERE 1=1", params, user)
    if before:
        ms, _, ident = before.partition(":")
        sql += " AND (updated_at_ms < ? OR (updated_at_ms = ? AND id < ?))"
        params += [int(ms), int(ms), ident]
    rows = conn.execute(sql + " ORDER BY updated_at_ms DESC, id DESC LIMIT ?", [*params, limit + 1]).fetchall()
    more = len(rows) > limit
    items = {r["id"]: {"id": r["id"], "user": r["user_id"], "created_ms": r["created_at_ms"],
                       "updated_ms": r["updated_at_ms"], "runs": 0, "running": 0, "failed": 0, "model": None,
                       "first_request_id": None, "title": None, "calls": 0, "input_tokens": 0,
                       "output_tokens": 0, "cost_usd": None, "priced": True, "model_name": None}
             for r in rows[:limit]}
    ids = list(items)
    if ids:
        for r in conn.execute(
                "SELECT conversation_id, count(*) AS n, sum(CASE WHEN status = 'running' THEN 1 ELSE 0 END) AS running,"
                " sum(CASE WHEN status = 'failed' THEN 1 ELSE 0 END) AS failed, max(model_public_id) AS model"
                f" FROM runs WHERE conversation_id IN ({_marks(len(ids))}) GROUP BY conversation_id", ids).fetchall():
            items[r["conversation_id"]].update(runs=r["n"], running=r["running"], failed=r["failed"], model=r["model"])
        _add_call_totals(conn, items, ids, prices)
        for ident in ids:
            first = conn.execute("SELECT request_id FROM runs WHERE conversation_id = ? ORDER BY started_at_ms"
                                 " LIMIT 1", [ident]).fetchone()
            if first is not None:
                items[ident]["first_request_id"] = first[0]
                items[ident]["title"] = request_text(conn, first[0])
    last = rows[limit - 1] if more else None
    return Page(list(items.values()), f"{last['updated_at_ms']}:{last['id']}" if last is not None else None)


def _add_call_totals(conn, items: dict, conversation_ids: list[str], prices: dict | None) -> None:
    from byok.providers.pricing import cost

    sums = ", ".join(f"coalesce(sum(c.{f}), 0) AS {f}" for f in TOKEN_FIELDS[:4])
    for r in conn.execute(
            f"SELECT r.conversation_id, c.model_public_id, c.provider_kind, count(*) AS calls, {sums},"
            " max(c.provider || '/' || c.model) AS model_name"
            " FROM runs r JOIN llm_calls c ON c.request_id = r.request_id"
            f" WHERE r.conversation_id IN ({_marks(len(conversation_ids))})"
            " GROUP BY r.conversation_id, c.model_public_id, c.provider_kind", conversation_ids).fetchall():
        item = items[r["conversation_id"]]
        item["model_name"] = r["model_name"]
        item["calls"] += r["calls"]
        item["input_tokens"] += r["input_tokens"]
        item["output_tokens"] += r["output_tokens"]
        model_prices = (prices or {}).get(r["model_public_id"])
        if model_prices is None:
            item["priced"] = False
            continue
        call_cost = float(cost(model_prices, r["provider_kind"], input_tokens=r["input_tokens"],
                               output_tokens=r["output_tokens"], cache_read_tokens=r["cache_read_tokens"],
                               cache_write_tokens=r["cache_write_tokens"]))
        item["cost_usd"] = (item["cost_usd"] or 0.0) + call_cost


def request_text(conn, request_id: str, limit: int = 120) -> str | None:
    """What the user asked in this request: the text of its run_request's user message (its first
    recorded up frame), cut to `limit` characters; None when not recorded."""
    from google.protobuf.message import DecodeError

    from byok.proto import agent_pb2 as apb

    row = conn.execute("SELECT data FROM frames WHERE request_id = ? AND direction = 'up' ORDER BY seq LIMIT 1",
                       [request_id]).fetchone()
    if row is None:
        return None
    try:
        message = apb.AgentClientMessage.FromString(bytes(row[0]))
    except DecodeError:
        return None
    if message.WhichOneof("message") != "run_request":
        return None
    text = " ".join(message.run_request.action.user_message_action.user_message.text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run_summaries(conn, request_ids: list[str], *, user=ALL) -> list[dict]:
    """One line per run (the live view): status, model, user, timings, frames so far, provider calls
    and tokens so far. Point reads by request id; runs of another user (with `user`) are left out."""
    if not request_ids:
        return []
    params = list(request_ids)
    rows = conn.execute(_scoped(
        "SELECT request_id, conversation_id, model_public_id, mode, action, status, started_at_ms, finished_at_ms,"
        f" error_code, error_message, user_id FROM runs WHERE request_id IN ({_marks(len(request_ids))})",
        params, user), params).fetchall()
    runs = {r["request_id"]: {**{k: r[k] for k in r.keys()}, "frames_down": 0, "frames_up": 0, "last_frame_ms": None,
                              "calls": 0, "input_tokens": 0, "output_tokens": 0, "running_calls": 0,
                              "model_name": None}
            for r in rows}
    ids = list(runs)
    if ids:
        for r in conn.execute(f"SELECT request_id, direction, count(*) AS n, max(ts_ms) AS last FROM frames"
                              f" WHERE request_id IN ({_marks(len(ids))}) GROUP BY request_id, direction", ids):
            run = runs[r["request_id"]]
            run["frames_down" if r["direction"] == "down" else "frames_up"] = r["n"]
            run["last_frame_ms"] = max(run["last_frame_ms"] or 0, r["last"])
        for r in conn.execute(
                "SELECT request_id, count(*) AS n, coalesce(sum(input_tokens), 0) AS i,"
                " coalesce(sum(output_tokens), 0) AS o, sum(CASE WHEN status = 'running' THEN 1 ELSE 0 END) AS busy,"
                " max(provider || '/' || model) AS model_name"
                f" FROM llm_calls WHERE request_id IN ({_marks(len(ids))}) GROUP BY request_id", ids):
            runs[r["request_id"]].update(calls=r["n"], input_tokens=r["i"], output_tokens=r["o"],
                                         running_calls=r["busy"], model_name=r["model_name"])
    return [runs[rid] for rid in request_ids if rid in runs]


def trace_runs(conn, found: Found, prices: dict | None, *, offset: int = 0, limit: int = 20) -> dict:
    """`collect` for one page of a trace's runs (a conversation of many runs is read a page at a time),
    frames counted but not decoded (the frames page decodes them, a page at a time)."""
    page = found.request_ids[offset:offset + limit]
    story = collect(conn, Found(found.kind, found.ident, page, found.conversation_id), "none", prices)
    for run in story["runs"]:
        run["frame_count"] = conn.execute("SELECT count(*) FROM frames WHERE request_id = ?",
                                          [run["request_id"]]).fetchone()[0]
        run["text"] = request_text(conn, run["request_id"], limit=2000)
    story.update(total_runs=len(found.request_ids), offset=offset, limit=limit)
    return story


def visible(conn, found: Found | None, user=ALL) -> Found | None:
    """`found` if this user may see it (`trace --user`): every request of it is theirs."""
    if found is None or user is ALL:
        return found
    return found if owners(conn, found.request_ids) == {user} else None


@dataclass
class Budget:
    user: str
    source: str
    tokens: int
    monthly_tokens: int | None
    dollars: float
    monthly_usd: float | None
    models: tuple[str, ...] = field(default_factory=tuple)

    @property
    def tokens_share(self) -> float | None:
        return None if not self.monthly_tokens else self.tokens / self.monthly_tokens

    @property
    def dollars_share(self) -> float | None:
        return None if not self.monthly_usd else self.dollars / self.monthly_usd


def budgets(conn, team, now_ms: int) -> list[Budget]:
    """This calendar month's use of every user the team file names or who ran something this month,
    measured exactly as the budget check measures it (store.usage_since, team.used_tokens/dollars)."""
    from byok.agent.team import month_start_ms, used_tokens
    from byok.store.store import usage_since

    config = team.file.current()
    since = month_start_ms(now_ms)
    names = set(config.users) | {m for _, members, _ in config.groups for m in members}
    names |= {r[0] for r in conn.execute("SELECT DISTINCT user_id FROM runs WHERE started_at_ms >= ?"
                                         " AND user_id IS NOT NULL", [since]).fetchall()}
    out = []
    for name in sorted(names):
        policy = config.policy(name)
        usage = usage_since(conn, name, since)
        out.append(Budget(name, policy.source, sum(used_tokens(kind, u) for (_, kind), u in usage.items()),
                          policy.monthly_tokens, team.dollars(usage), policy.monthly_usd, policy.models))
    return out
