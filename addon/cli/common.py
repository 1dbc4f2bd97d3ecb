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
from dataclasses import dataclass
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


class StoreUnavailable(FileNotFoundError):
    """The store cannot be opened; `str()` says why and what to do (one line, no traceback). A
    FileNotFoundError, as open_db raised before, so callers that catch that keep working."""


def open_db(path: Path | str, *, must_exist: bool = True, migrate: bool = True) -> sqlite3.Connection:
    """The store (read paths use plain sqlite3 rows by name). A postgresql:// URL opens the team
    server's store through pgconn.py, whose connection reads the same way.

    Opening through the store's own `connect` applies pending migrations, so a CLI one version ahead
    of the proxy still reads an old file; `migrate=False` opens it as it is and writes nothing (a
    SQLite file read-only). A missing file is an error unless `must_exist=False`. Raises
    StoreUnavailable (also when the `team` extra a postgresql:// URL needs is not installed).
    """
    from byok.store import db as dbmod
    from byok.store.sql import is_postgres_url

    if is_postgres_url(str(path)):  # the team server's store (docs/team.md)
        from .pgconn import connect

        try:
            return connect(str(path), migrate=migrate)
        except dbmod.DatabaseUnavailable as e:
            raise StoreUnavailable(str(e)) from None
    path = Path(path).expanduser()
    if must_exist and not path.exists():
        raise StoreUnavailable(f"no database at {path} (the proxy creates it on start; see --db)")
    if migrate:
        conn = dbmod.connect(path).conn
    else:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
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


@dataclass(frozen=True)
class ProxyAnswer:
    """What the proxy said to `GET http://cursor-byok.invalid/status`."""

    http_status: int | None
    """None: nothing answered (not running, refused, timed out)."""
    data: dict | None
    """The status document, when it is a cursor-byok that answered 200."""

    @property
    def needs_credentials(self) -> bool:
        return self.http_status == 407


def ask_proxy(proxy: str, timeout: float = 2.0) -> ProxyAnswer:
    import httpx

    try:
        response = httpx.get(STATUS_URL, proxy=proxy, timeout=timeout, trust_env=False)
    except httpx.ProxyError as e:  # a 407 through an https-style proxy arrives as an error
        return ProxyAnswer(407 if "407" in str(e) else None, None)
    except (httpx.HTTPError, ValueError):
        return ProxyAnswer(None, None)
    try:
        data = response.json() if response.status_code == 200 else None
    except ValueError:
        data = None
    if not isinstance(data, dict) or data.get("service") != "cursor-byok" or not isinstance(data.get("config"), dict):
        data = None
    return ProxyAnswer(response.status_code, data)


def proxy_status(proxy: str, timeout: float = 2.0) -> dict | None:
    """The running proxy's own account of what it serves, or None when it does not answer (not
    running, not a cursor-byok proxy, an older one, or one that wants credentials)."""
    return ask_proxy(proxy, timeout).data


def shown_proxy(proxy: str) -> str:
    """The proxy URL fit for output: a password in it replaced by ***."""
    scheme, sep, rest = proxy.partition("://")
    if not sep:
        scheme, rest = "", proxy
    userinfo, at, host = rest.rpartition("@")
    if not at:
        return proxy
    user = userinfo.split(":", 1)[0]
    return f"{scheme}{sep}{user}{':***' if ':' in userinfo else ''}@{host}"


CREDENTIALS_FIX = ("the proxy requires a user name and password (proxyauth): pass --proxy "
                   "http://USER:PASSWORD@HOST:PORT, or set CURSOR_BYOK_PROXY to that URL")
