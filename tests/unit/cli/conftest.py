"""CLI test fixtures: HOME and every cursor-byok default location under tmp_path (nothing reads the
real `~`), wide output, and a store built like the proxy writes it."""

from __future__ import annotations

import pytest

from tests.support.cli_store import Built, build_store


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CURSOR_BYOK_HOME", str(home / ".cursor-byok"))
    monkeypatch.setenv("CURSOR_BYOK_CONFDIR", str(home / ".mitmproxy"))
    monkeypatch.setenv("COLUMNS", "240")
    return home


@pytest.fixture
def built(db_target, isolated_home) -> Built:
    """The store on each backend: a SQLite file, and a PostgreSQL schema (`--db postgresql://...`)."""
    return build_store(db_target, isolated_home)
