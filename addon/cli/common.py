"""What every `cursor-byok` subcommand shares: default locations, the console, opening the store.

Defaults follow the proxy's own options (`byok_db`, `byok_config`, mitmproxy's `confdir`), and every
one of them can be moved with an environment variable, so tests and unusual set-ups never touch `~`:

    CURSOR_BYOK_HOME      folder of byok.db and providers.toml   (default ~/.cursor-byok)
    CURSOR_BYOK_CONFDIR   mitmproxy's confdir (CA files)          (default ~/.mitmproxy)
    CURSOR_BYOK_PROXY     the proxy's URL                         (default http://127.0.0.1:8080)
"""

from __future__ import annotations

import os
import sqlite3
import sys
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console

from .output import line, make_console

DEFAULT_PROXY = "http://127.0.0.1:8080"
CA_CERT = "mitmproxy-ca-cert.pem"
"""The public CA certificate Cursor has to trust (mitmproxy writes it into its confdir on first start)."""
CA_KEY = "mitmproxy-ca.pem"
"""Key + certificate mitmproxy signs with."""


def byok_home() -> Path:
    return Path(os.environ.get("CURSOR_BYOK_HOME") or "~/.cursor-byok").expanduser()


def default_db() -> Path:
    return byok_home() / "byok.db"


def db_arg(text: str) -> Path | str:
    """A `--db` value: a SQLite path, or a postgresql:// URL kept as it is."""
    from byok.store.sql import is_postgres_url

    return text if is_postgres_url(text) else Path(text)


def default_config() -> Path:
    return byok_home() / "providers.toml"


def default_confdir() -> Path:
    return Path(os.environ.get("CURSOR_BYOK_CONFDIR") or "~/.mitmproxy").expanduser()


def default_proxy() -> str:
    return os.environ.get("CURSOR_BYOK_PROXY") or DEFAULT_PROXY


def console(stderr: bool = False) -> Console:
    """A console that honours COLUMNS, never wraps lines we print and never reads markup (output.py)."""
    return make_console(stderr)


def open_db(path: Path | str, *, must_exist: bool = True) -> sqlite3.Connection:
    """The store, migrated (read paths use plain sqlite3 rows by name). A postgresql:// URL opens the
    team server's store through pgconn.py, whose connection reads the same way.

    Opening through the store's own `connect` applies pending migrations, so a CLI one version ahead
    of the proxy still reads an old file; a missing file is an error unless `must_exist=False`.
    """
    from byok.store import db as dbmod
    from byok.store.sql import is_postgres_url

    if is_postgres_url(str(path)):  # the team server's store (docs/team.md)
        from .pgconn import connect

        try:
            return connect(str(path))
        except dbmod.DatabaseUnavailable as e:
            raise FileNotFoundError(str(e)) from None
    path = Path(path).expanduser()
    if must_exist and not path.exists():
        raise FileNotFoundError(f"no database at {path} (the proxy creates it on start; see --db)")
    conn = dbmod.connect(path).conn
    conn.row_factory = sqlite3.Row
    return conn


def iso_ms(ms: int | float | None) -> str:
    """UTC wall time of an epoch-ms value, or '-'."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def fail(message: str, code: int = 2) -> int:
    line(console(stderr=True), ("error:", "red"), " ", message)
    return code


def platform_name(value: str | None = None) -> str:
    """'macos' | 'windows' | 'linux' for `sys.platform` (or an explicit override)."""
    value = value or sys.platform
    if value in ("darwin", "macos", "mac"):
        return "macos"
    if value.startswith("win"):
        return "windows"
    return "linux"


STATUS_URL = "http://cursor-byok.invalid/status"
"""Answered by the running proxy itself (byok.status): what it serves and whether its environment has
each model's key variable. The `.invalid` host never resolves, so nothing else can answer it."""


def proxy_status(proxy: str, timeout: float = 2.0) -> dict | None:
    """The running proxy's own account of what it serves, or None when it does not answer (not
    running, not a cursor-byok proxy, or an older one)."""
    import httpx

    try:
        response = httpx.get(STATUS_URL, proxy=proxy, timeout=timeout, trust_env=False)
        data = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("service") != "cursor-byok" or not isinstance(data.get("config"), dict):
        return None
    return data
