"""`cursor-byok drift`: fields and oneof branches Cursor sent (or its backend answered) that our schema
does not know, counted from the recorded agent frames of every mode.

A row is one (direction, message path, field number, wire type, kind, client version) with how often
it was seen, first and last sighting and an example request id (`cursor-byok trace <id>`, and
`cursor-byok captures export <id>` for a bug report). Nothing here means nothing unknown was seen in
the frames recorded so far (with `byok_record=false`, nothing is recorded, so nothing is counted).
"""

from __future__ import annotations

import argparse

from byok.dashboard.queries import drift_report

from .common import StoreUnavailable, console, db_arg, default_db, fail, iso_ms, open_db
from .output import Column, emit_json, line, table


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("drift", help="unknown protocol fields and oneof branches seen in agent frames",
                       description="Report every unknown field and unknown oneof branch seen in recorded agent "
                                   "frames (both directions, every mode): message path, field number, wire type, "
                                   "client version, count, first/last seen and an example request id.")
    p.add_argument("--db", type=db_arg, default=None,
                   help="SQLite store or postgresql:// URL (default: ~/.cursor-byok/byok.db)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON document")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        conn = open_db(args.db or default_db())
    except StoreUnavailable as e:
        return fail(str(e))
    data = drift_report(conn)
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
