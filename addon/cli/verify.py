"""`cursor-byok verify`: the protocol assumptions cursor-byok relies on, checked against your own
recorded traffic (frames and wire facts of live or observe mode).

For each assumption (assumptions.py) one verdict: confirmed (counts, client versions), contradicted
(an example request id and what was seen instead) or not seen yet, with the documentation that
depends on it. `--json` is redacted by construction: ids, counts, versions, kinds and field numbers,
never contents or keys. Exit status 1 when an assumption is contradicted.
"""

from __future__ import annotations

import argparse
from datetime import date, datetime, timezone

from .common import console, db_arg, default_db, fail, iso_ms, open_db
from .output import emit_json, facts, line

STYLE = {"confirmed": ("confirmed", "green"), "contradicted": ("CONTRADICTED", "bold red"),
         "not_seen": ("not seen yet", "yellow")}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="check the protocol assumptions against your recorded traffic",
                       description="For each protocol assumption cursor-byok relies on, say whether the traffic "
                                   "recorded by the proxy (live or observe mode) confirms it, contradicts it (with an "
                                   "example request id) or has not shown it yet. Exit status 1 when one is "
                                   "contradicted.")
    p.add_argument("--db", type=db_arg, default=None,
                   help="SQLite store or postgresql:// URL (default: ~/.cursor-byok/byok.db)")
    p.add_argument("--since", type=_since, default=None, metavar="DATE",
                   help="only traffic from this UTC day (YYYY-MM-DD) or time (YYYY-MM-DDTHH:MM) on")
    p.add_argument("--json", action="store_true",
                   help="one redacted JSON document (ids, counts, versions, field numbers: safe to share)")
    p.set_defaults(func=run)


def _since(text: str) -> int:
    """Epoch ms of a UTC day or time."""
    try:
        if "T" in text or " " in text:
            moment = datetime.fromisoformat(text)
            moment = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
        else:
            moment = datetime.combine(date.fromisoformat(text), datetime.min.time(), tzinfo=timezone.utc)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a YYYY-MM-DD day or YYYY-MM-DDTHH:MM time: {text!r}") from None
    return int(moment.timestamp() * 1000)


def report(conn, since_ms: int | None = None) -> dict:
    from .assumptions import Evidence, as_json, run_all

    ev = Evidence(conn, since_ms or 0)
    frames, first, last = ev.rows("SELECT count(*), min(ts_ms), max(ts_ms) FROM frames WHERE ts_ms >= ?",
                                  [ev.since_ms])[0]
    streams = ev.rows("SELECT count(*) FROM rpc_streams WHERE started_ms >= ?", [ev.since_ms])[0][0]
    appends = ev.rows("SELECT count(*) FROM bidi_appends WHERE arrived_us >= ?", [ev.since_ms * 1000])[0][0]
    versions = [r[0] for r in ev.rows("SELECT DISTINCT client_version FROM rpc_clients WHERE client_version IS NOT"
                                      " NULL AND ts_ms >= ? ORDER BY 1", [ev.since_ms])]
    results = [as_json(a, v) for a, v in run_all(ev)]
    return {
        "since_ms": since_ms, "frames": frames, "streams": streams, "appends": appends,
        "first_frame_ms": first, "last_frame_ms": last, "client_versions": versions,
        "verdicts": {s: sum(r["verdict"] == s for r in results) for s in STYLE},
        "assumptions": results,
    }


def run(args: argparse.Namespace) -> int:
    try:
        conn = open_db(args.db or default_db())
    except FileNotFoundError as e:
        return fail(str(e))
    try:
        data = report(conn, args.since)
    finally:
        conn.close()
    contradicted = data["verdicts"]["contradicted"]
    if args.json:
        emit_json(data)
        return 1 if contradicted else 0
    out = console()
    window = f"{iso_ms(data['first_frame_ms'])} .. {iso_ms(data['last_frame_ms'])}" if data["frames"] else "no frames"
    line(out, ("cursor-byok verify", "bold"), f": {len(data['assumptions'])} assumptions against "
              f"{data['frames']:,} frames, {data['streams']:,} agent streams, {data['appends']:,} appends ({window}; "
              f"client versions: {', '.join(data['client_versions']) or 'none recorded'})")
    for r in data["assumptions"]:
        label, style = STYLE[r["verdict"]]
        line(out, "")
        line(out, (f"{label:<13}", style), " ", (r["id"], "bold"), f"  {r['title']}")
        rows = [("seen", r["summary"])]
        if r["seen_instead"]:
            rows.append(("seen instead", r["seen_instead"]))
        if r["example_request_id"]:
            rows.append(("example", f"{r['example_request_id']} (cursor-byok trace {r['example_request_id']})"))
        if r["client_versions"]:
            rows.append(("clients", ", ".join(r["client_versions"])))
        rows.append(("docs", ", ".join(r["docs"])))
        facts(out, rows, indent=4)
    v = data["verdicts"]
    line(out, "")
    line(out, f"{v['confirmed']} confirmed, {contradicted} contradicted, {v['not_seen']} not seen yet. "
              "Share it: cursor-byok verify --json > verify.json (no contents, no keys; docs/compatibility.md)")
    return 1 if contradicted else 0
