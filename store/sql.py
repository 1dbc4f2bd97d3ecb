"""The two databases behind the store, behind one small surface.

The store speaks one SQL for both: `?` placeholders, `INSERT ... ON CONFLICT DO NOTHING`,
`RETURNING id`, `coalesce`, `WITH RECURSIVE`. Each backend offers the same few calls:

    db.dialect                      "sqlite" | "postgresql"
    db.execute(sql, params)         a cursor-like result: fetchone(), fetchall(), rowcount
    db.executemany(sql, rows)
    db.query(sql, params)           rows as dicts
    db.atomic()                     a transaction (nested: a savepoint)
    db.close()

SQLite is `sqlite_utils.Database` itself (one connection, used by one thread at a time; see aio.py).
PostgreSQL is a psycopg 3 connection pool: each thread that calls the store borrows a connection
for one statement, or for the whole `atomic()` block, so several store threads can work at once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from sqlite_utils import Database

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(target: object) -> bool:
    return isinstance(target, str) and target.startswith(POSTGRES_SCHEMES)


def redact_url(url: str) -> str:
    """A connection URL fit for a log line: the password replaced."""
    if "@" not in url.split("?")[0]:
        return url
    scheme, rest = url.split("://", 1)
    userinfo, host = rest.split("@", 1)
    user = userinfo.split(":", 1)[0]
    return f"{scheme}://{user}{':***' if ':' in userinfo else ''}@{host}"


class SqliteDatabase(Database):
    """sqlite-utils' Database with the store's surface (it already has execute, query, atomic)."""

    dialect = "sqlite"

    @contextmanager
    def atomic(self) -> Iterator["SqliteDatabase"]:
        """A transaction that takes the write lock at BEGIN (IMMEDIATE): one that began with a read
        and then writes could not wait on another connection's write, only fail with "locked"."""
        if self.conn.in_transaction:
            with super().atomic():  # a savepoint inside ours
                yield self
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
        else:
            self.conn.execute("COMMIT")

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.conn.executemany(sql, rows)

    def close(self) -> None:
        self.conn.close()


class Result:
    """A finished PostgreSQL statement: its rows are already fetched, its connection returned."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list | None, rowcount: int) -> None:
        self._rows = rows or []
        self.rowcount = rowcount

    def fetchone(self):
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list:
        return list(self._rows)

    def __iter__(self):
        return iter(self._rows)


@lru_cache(maxsize=512)
def to_pyformat(sql: str) -> str:
    """`?` placeholders -> psycopg's `%s` (a literal `%` doubled). The store's SQL never has `?` in literals."""
    return sql.replace("%", "%%").replace("?", "%s")


class PostgresDatabase:
    dialect = "postgresql"

    def __init__(self, pool) -> None:
        self.pool = pool
        self._local = threading.local()

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """This thread's connection: the one of the enclosing `atomic()`, or one borrowed now."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            yield conn
            return
        with self.pool.connection() as conn:
            self._local.conn = conn
            try:
                yield conn
            finally:
                self._local.conn = None

    @contextmanager
    def atomic(self) -> Iterator["PostgresDatabase"]:
        with self.connection() as conn, conn.transaction():
            yield self

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> Result:
        with self.connection() as conn:
            cur = conn.execute(to_pyformat(sql), params) if params else conn.execute(sql)
            rows = cur.fetchall() if cur.description is not None else None
            return Result(rows, cur.rowcount)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        with self.connection() as conn, conn.cursor() as cur:
            cur.executemany(to_pyformat(sql), rows)

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[dict]:
        from psycopg.rows import dict_row

        with self.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            cur.execute(to_pyformat(sql) if params else sql, params or None)
            return cur.fetchall()

    def close(self) -> None:
        self.pool.close()
