"""Dashboard unit fixtures: the CLI tests' store (built like the proxy writes it, on SQLite and on
PostgreSQL) and a Dashboard over it with a fixed clock."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from byok.dashboard.views import Dashboard, Request, Sources, Viewer
from tests.e2e.harness import model_entry, providers_toml, public_id
from tests.support.cli_store import Built, build_store
from tests.unit.cli.conftest import isolated_home  # noqa: F401 (fixture)

NOW_MS = 1_767_484_800_000  # 2026-01-04T00:00Z, the day after the store's last call
PRICED = model_entry("https://api.deepseek.example/v1", model_id="deepseek-chat", name="deepseek",
                     extra={"prices": "{ input = 0.27, output = 1.10, cache_read = 0.07 }"})


@pytest.fixture
def built(db_target, isolated_home) -> Built:  # noqa: F811
    """The CLI tests' store, its deepseek calls on the priced model of PRICES."""
    from byok.store import Store

    b = build_store(db_target, isolated_home)
    store = Store.open(b.db)
    priced = public_id(PRICED)
    for table in ("llm_calls", "runs"):
        store.db.execute(f"UPDATE {table} SET model_public_id = ? WHERE model_public_id = 'abcd1234'", [priced])
    store.close()
    return b


@pytest.fixture
def providers_file(tmp_path) -> Path:
    path = tmp_path / "providers.toml"
    path.write_text(providers_toml([PRICED]))
    return path


@pytest.fixture
def dashboard(built, providers_file):
    board = Dashboard(built.db, Sources(config=lambda: providers_file, clock_ms=lambda: NOW_MS,
                                        live_request_ids=lambda: [built.request_ok, built.request_failed]))
    yield board
    board.close()


def get(board: Dashboard, target: str, viewer: Viewer = Viewer(None, admin=True), **kwargs):
    request = Request.parse(kwargs.pop("method", "GET"), target, kwargs.pop("headers", {}), kwargs.pop("body", b""))
    return asyncio.run(board.handle(request, viewer))
