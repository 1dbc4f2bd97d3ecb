"""Opening the SQLite database: pragmas and migrations, in one place.

Durability: WAL with `synchronous=FULL`, so a transaction that returned is on disk even if the
machine loses power right after; a kill -9 of the proxy can never lose it (docs/benchmarks.md has
the measured cost). Foreign keys on, and a busy timeout so a CLI reading the DB never fails a write.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlite_utils import Database

from . import migrations

BUSY_TIMEOUT_MS = 5000


def connect(path: str | Path, *, synchronous: str = "FULL") -> Database:
    """Open (creating parent folders), set pragmas and apply pending migrations."""
    if str(path) != ":memory:":
        Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        path = Path(path).expanduser()
    conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("PRAGMA foreign_keys = ON")
    db = Database(conn)
    migrations.apply(db)
    return db
