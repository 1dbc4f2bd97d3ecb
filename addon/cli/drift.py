"""`cursor-byok drift`: fields and oneof branches Cursor sent (or its backend answered) that our schema
does not know, counted from the recorded agent frames of every mode.

A row is one (direction, message path, field number, wire type, kind, client version) with how often
it was seen, first and last sighting and an example request id (`cursor-byok trace <id>`, and
`cursor-byok captures export <id>` for a bug report). Nothing here means nothing unknown was seen in
the frames recorded so far (with `byok_record=false`, nothing is recorded, so nothing is counted).
"""

from __future__ import annotations

import argparse

from .common import console, db_arg, default_db, fail, iso_ms, StoreUnavailable, open_db
from .output import Column, emit_json, line, table

WIRE_TYPES = {0: "varint", 1: "i64", 2: "len", 3: "sgroup", 4: "egroup", 5: "i32"}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("drift", help="unknown protocol fields and oneof branches seen in agent frames",
                       description="Report every unknown field and unknown oneof branch seen in recorded agent "
                                   "frames (both directions, every mode): message path, field number, wire type, "
                                   "client version, count, first/last seen and an example request id.")
    p.add_argument("--db", type=db_arg, default=None,
                   help="SQLite store or postgresql:// URL (default: ~/.cursor-byok/byok.db)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON document")
    p.set_defaults(func=run)


def report(conn) -> dict:
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


def run(args: argparse.Namespace) -> int:
    try:
        conn = open_db(args.db or default_db())
    except StoreUnavailable as e:
        return fail(str(e))
    data = report(conn)
    if args.json:
        emit_json(data)
        return 0
    out = console()
    versions = ", ".join(data["client_versions_seen"]) or "none recorded"
    if not data["unknown"]:
        line(out, ("no protocol drift", "green"), f": nothing unknown in {data['frames_recorded']:,} recorded frames "
                  f"(client versions: {versions})")
        return 0
    line(out, (f"protocol drift: {len(data['unknown'])} unknown field(s) or branch(es)", "bold yellow"),
         f" in {data['frames_recorded']:,} recorded frames (client versions: {versions})")
    rows = [[u["direction"], u["path"], str(u["field_number"]), u["wire_type_name"], u["kind"],
             u["client_version"] or "?", f"{u['count']:,}", iso_ms(u["first_seen_ms"]), iso_ms(u["last_seen_ms"]),
             u["example_request_id"]] for u in data["unknown"]]
    table(out, None, ["dir", "message path", Column("field", "right"), "wire", "kind", "client",
                      Column("count", "right"), "first seen", "last seen", "example request"], rows,
          record_title=lambda i, row: f"{row[0]} {row[1]} field {row[2]}")
    line(out, "Report a break: cursor-byok drift --json > drift.json; cursor-byok captures export <example request> "
              "--redact-paths --out bug.jsonl (docs/compatibility.md)")
    return 0
