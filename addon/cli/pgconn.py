"""The CLI's read connection to a PostgreSQL store, shaped like the sqlite3 connection it gets for a
file: `execute(sql, params)` with `?` placeholders, rows readable by index and by column name.

The CLI's SQL is written once, for SQLite; the few SQLite-only spellings in it are rewritten here
(and nowhere else): `instr(a, b)` is `strpos(a, b)`, the tie-break on SQLite's `rowid` is the
request id, and a look into `sqlite_master` for a table the migrations always create is true.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

REWRITES = (
    (re.compile(r"\binstr\("), "strpos("),
    (re.compile(r"started_at_ms, rowid\b"), "started_at_ms, request_id"),
    (re.compile(r"SELECT 1 FROM sqlite_master WHERE name = '[a-z_]+'"), "SELECT 1"),
)


class Row(tuple):
    """A result row: `row[0]`, `row["name"]`, `row.keys()` and `dict(row)`, like sqlite3.Row."""

    _names: tuple[str, ...] = ()

    def __getitem__(self, key):  # type: ignore[override]
        if isinstance(key, str):
            return tuple.__getitem__(self, self._names.index(key))
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._names)


def _plain(value):
    # PostgreSQL sums integers as numeric: give the CLI the int SQLite would have
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def _row_factory(cursor):
    names = tuple(c.name for c in cursor.description or ())
    cls = type("Row", (Row,), {"_names": names})
    return lambda values: cls(_plain(v) for v in values)


def translate(sql: str, *, with_params: bool = True) -> str:
    """SQLite spellings -> PostgreSQL's; with parameters also `?` -> `%s` outside string literals and
    a literal `%` doubled (psycopg reads placeholders only when it is given parameters)."""
    for pattern, replacement in REWRITES:
        sql = pattern.sub(replacement, sql)
    if not with_params:
        return sql
    parts = sql.split("'")  # even indexes are outside quotes ('' inside a literal splits into two odd ones)
    return "'".join(p.replace("%", "%%").replace("?", "%s") if i % 2 == 0 else p.replace("%", "%%")
                    for i, p in enumerate(parts))


class PgConnection:
    """One autocommit psycopg connection (the proxy's migrations have run by the time it is opened)."""

    row_factory: Any = None  # accepted and ignored: rows always read by index and by name

    def __init__(self, conn) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()):
        cur = self.conn.cursor(row_factory=_row_factory)
        params = list(params)
        cur.execute(translate(sql, with_params=bool(params)), params or None)
        return cur

    def close(self) -> None:
        self.conn.close()


def connect(url: str, *, migrate: bool = True) -> PgConnection:
    """Open `url`, applying pending migrations first (a CLI ahead of the proxy still reads it) unless
    `migrate=False`. Raises DatabaseUnavailable (psycopg missing, server unreachable)."""
    from byok.store import db as dbmod

    dbmod.connect_postgres(url, max_size=1, migrate=migrate).close()  # checks psycopg and the server first
    import psycopg

    return PgConnection(psycopg.connect(url, autocommit=True))
