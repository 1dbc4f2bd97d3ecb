"""Fixtures shared by unit and e2e tests: a real PostgreSQL server for the session (started on first
use only), and a database or schema of it per test."""

from __future__ import annotations

import pytest

from tests.support.postgres import start_or_skip


@pytest.fixture(scope="session")
def pg_server():
    server = start_or_skip()
    try:
        server.admin('CREATE DATABASE "byok_tests"')
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server) -> str:
    """A postgresql:// URL of a fresh, empty schema (the store migrates it on open)."""
    return pg_server.create_schema_url("byok_tests")


@pytest.fixture(params=["sqlite", "postgresql"])
def db_target(request, tmp_path) -> str:
    """Where a store lives, on each backend: a SQLite path, or a postgresql:// URL."""
    if request.param == "sqlite":
        return str(tmp_path / "byok.db")
    return request.getfixturevalue("pg_url")
