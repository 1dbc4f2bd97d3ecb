"""A throwaway PostgreSQL server for tests and benchmarks: initdb in a temp dir, a free loopback port
and a unix socket in the same dir, stopped and deleted at the end.

PostgreSQL refuses to run as root, and the tests run as root: the cluster then belongs to an
unprivileged user (`nobody`, or $BYOK_PG_USER) and its commands run through `runuser`. CI
(`.ci/run`) installs Debian's `postgresql` package; where no server binaries exist the fixtures
skip, except when $CI or $BYOK_REQUIRE_POSTGRES is set, where they fail.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

SUPERUSER = "byok"


class PostgresUnavailable(Exception):
    pass


def required() -> bool:
    return bool(os.environ.get("CI") or os.environ.get("BYOK_REQUIRE_POSTGRES"))


def find_bindir() -> Path:
    """The folder of initdb/pg_ctl/postgres: $PATH first, then Debian's /usr/lib/postgresql/<v>/bin."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(os.path.realpath(on_path)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if candidates:
        return Path(candidates[-1]).parent
    raise PostgresUnavailable("no PostgreSQL server binaries (initdb) on PATH or in /usr/lib/postgresql/*/bin; "
                              "on Debian: apt-get install -y postgresql")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """`start()` -> a running cluster; `url(dbname)`; `create_database()`; `stop()` removes everything."""

    def __init__(self, *, fsync: bool = False, max_connections: int = 200) -> None:
        self.bindir = find_bindir()
        self.root = Path(tempfile.mkdtemp(prefix="byok-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.fsync = fsync
        self.max_connections = max_connections
        self.owner = os.environ.get("BYOK_PG_USER", "nobody") if os.geteuid() == 0 else None
        self.started = False

    # ---- commands, as the cluster's owner ----------------------------------------------------

    def _cmd(self, *args: str) -> list[str]:
        command = [str(self.bindir / args[0]), *args[1:]]
        return ["runuser", "-u", self.owner, "--", *command] if self.owner else command

    def _run(self, *args: str) -> None:
        result = subprocess.run(self._cmd(*args), capture_output=True, text=True, cwd=self.root, timeout=120)
        if result.returncode != 0:
            raise PostgresUnavailable(f"{args[0]} failed ({result.returncode}): {result.stderr or result.stdout}")

    def start(self) -> "PostgresServer":
        if self.owner:
            user = pwd.getpwnam(self.owner)
            os.chown(self.root, user.pw_uid, user.pw_gid)
        os.chmod(self.root, 0o755)
        self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "--auth=trust", "--no-sync",
                  "-E", "UTF8", "--locale=C")
        options = (f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.root}"
                   f" -c max_connections={self.max_connections} -c shared_buffers=64MB"
                   f" -c fsync={'on' if self.fsync else 'off'} -c full_page_writes={'on' if self.fsync else 'off'}")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-o", options, "-w",
                  "-t", "60", "start")
        self.started = True
        return self

    def stop(self) -> None:
        try:
            if self.started:
                subprocess.run(self._cmd("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop"),
                               capture_output=True, timeout=60)
        finally:
            self.started = False
            shutil.rmtree(self.root, ignore_errors=True)

    def log(self) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # ---- databases -----------------------------------------------------------------------------

    def url(self, dbname: str = "postgres", *, tcp: bool = False, options: str | None = None) -> str:
        """A libpq URL: over the unix socket (default) or TCP on the loopback port."""
        host = "127.0.0.1" if tcp else str(self.root)
        query = f"?host={host}&port={self.port}"
        if options:
            from urllib.parse import quote

            query += f"&options={quote(options)}"
        return f"postgresql://{SUPERUSER}@/{dbname}{query}"

    def admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql)

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; returns its URL."""
        name = name or f"t_{uuid.uuid4().hex[:12]}"
        self.admin(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def create_schema_url(self, dbname: str, schema: str | None = None) -> str:
        """A URL whose connections work in a fresh schema of `dbname` (cheap isolation per test)."""
        import psycopg

        schema = schema or f"s_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(dbname), autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        return self.url(dbname, options=f"-c search_path={schema}")


def start_or_skip():
    """For pytest fixtures: a started server, or pytest.skip / pytest.fail when none can run."""
    import pytest

    server = None
    try:
        server = PostgresServer()
        return server.start()
    except PostgresUnavailable as e:
        if server is not None:
            server.stop()
        if required():
            pytest.fail(f"PostgreSQL is required here ($CI / $BYOK_REQUIRE_POSTGRES) but cannot start: {e}")
        pytest.skip(f"PostgreSQL not available: {e}")


def sql(url: str, query: str, params=()) -> list[tuple]:
    """The rows of one query on the database at `url` (its own connection: what another process sees)."""
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(query, params).fetchall()
