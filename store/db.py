"""Opening the database: SQLite (a path) or PostgreSQL (a `postgresql://` URL), migrated, in one place.

SQLite durability: WAL with `synchronous=FULL`, so a transaction that returned is on disk even if the
machine loses power right after; a kill -9 of the proxy can never lose it (docs/benchmarks.md has
the measured cost). Foreign keys on, and a busy timeout so a CLI reading the DB never fails a write.

PostgreSQL: a psycopg 3 pool of autocommit connections (a transaction is an explicit `atomic()`),
with the server's own durability (`synchronous_commit` as the server sets it). Migrations run under
an advisory lock, so replicas starting together migrate once.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from . import migrations
from .sql import PostgresDatabase, SqliteDatabase, is_postgres_url, redact_url

BUSY_TIMEOUT_MS = 5000
POOL_MAX_SIZE = 4
"""Connections one process may hold; also the number of store threads with PostgreSQL (aio.py)."""
POOL_TIMEOUT_S = 30.0


class DatabaseUnavailable(Exception):
    """The database cannot be opened (no driver, server unreachable, bad URL)."""


def connect(target: str | Path, *, synchronous: str = "FULL"):
    """Open `target` (a SQLite path, or a postgresql:// URL) and apply pending migrations."""
    if is_postgres_url(target):
        return connect_postgres(str(target))
    return connect_sqlite(target, synchronous=synchronous)


def connect_sqlite(path: str | Path, *, synchronous: str = "FULL") -> SqliteDatabase:
    """Open (creating parent folders), set pragmas and apply pending migrations."""
    if str(path) != ":memory:":
        Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        path = Path(path).expanduser()
    conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    _use_wal(conn)
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("PRAGMA foreign_keys = ON")
    db = SqliteDatabase(conn)
    migrations.apply(db)
    return db


def connect_sqlite_reader(path: str | Path) -> SqliteDatabase:
    """A second connection to a migrated SQLite file, for reads only: in WAL mode it reads while the
    writer connection commits, so a run's reads never wait for another run's fsync."""
    conn = sqlite3.connect(str(Path(path).expanduser()), check_same_thread=False, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA query_only = ON")
    return SqliteDatabase(conn)


def _use_wal(conn: sqlite3.Connection) -> None:
    """Switch a new file to WAL. The switch needs the file to itself and may answer "locked" without
    waiting (another process is creating the same new file): retry within the busy timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def connect_postgres(url: str, *, max_size: int = POOL_MAX_SIZE, migrate: bool = True) -> PostgresDatabase:
    from byok.extras import missing_message

    if (message := missing_message("team", "a postgresql:// database")) is not None:
        raise DatabaseUnavailable(message)
    import psycopg
    from psycopg_pool import ConnectionPool

    try:  # one plain connection first: a bad URL or a server that is down fails now, with libpq's reason
        psycopg.connect(url, connect_timeout=10).close()
    except psycopg.Error as e:
        raise DatabaseUnavailable(f"cannot reach PostgreSQL at {redact_url(url)}: {e}") from None
    pool = ConnectionPool(url, min_size=1, max_size=max_size, kwargs={"autocommit": True},
                          timeout=POOL_TIMEOUT_S, open=True, name="byok")
    db = PostgresDatabase(pool)
    if migrate:
        migrations.apply(db)
    return db
