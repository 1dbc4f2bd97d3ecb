"""`cursor-byok gc`: delete stored blobs nothing references any more (mark and sweep).

Roots are the checkpoints the proxy published and the blobs stored messages refer to; everything
reachable from them through the blob reference edges is kept, and so is every blob younger than
`--days` (runs in progress write their blobs before they publish them). Safe while the proxy runs:
SQLite's busy timeout serialises the write with the proxy's own (PostgreSQL's row locks do the same).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import console, default_db, fail
from .output import line


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gc", help="delete stored blobs no checkpoint or message references any more",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("--db", default=None,
                   help="SQLite store or postgresql:// URL (default: ~/.cursor-byok/byok.db)")
    p.add_argument("--days", type=int, default=7, help="keep unreferenced blobs younger than this (default 7)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from byok.store import Store
    from byok.store.db import DatabaseUnavailable
    from byok.store.sql import is_postgres_url

    path = args.db or default_db()
    if args.days < 0:
        return fail("--days must be 0 or more")
    if not is_postgres_url(path) and not Path(path).exists():
        return fail(f"no database at {path}")
    try:
        store = Store.open(path)
    except DatabaseUnavailable as e:
        return fail(str(e))
    try:
        stats = store.gc(retention_ms=args.days * 86_400_000)
    finally:
        store.close()
    line(console(), f"{stats.marked} blobs reachable, {stats.swept} deleted ({stats.swept_bytes / 1e6:.1f} MB), "
                    f"{stats.kept_young} unreferenced but younger than {args.days} day(s) kept")
    return 0
