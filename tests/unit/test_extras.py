"""Issue 24.4.2 and 24.4.9: a missing optional extra is one clear line naming the command that works
from a checkout (the package is not published, so `pip install 'cursor-byok[team]'` cannot)."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest
from mitmproxy.test import taddons

from byok import extras
from byok.main import make_addons


@pytest.fixture
def without_psycopg(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **k: None if name.startswith("psycopg") else real(name, *a, **k))


def test_the_message_names_the_missing_modules_and_the_checkout_command(without_psycopg):
    message = extras.missing_message("team", "a postgresql:// database")
    assert message.startswith("a postgresql:// database needs the optional 'team' dependencies")
    assert "psycopg, psycopg_pool not installed" in message and ".venv/bin/pip install -e '.[team]'" in message
    assert extras.missing_message("plot", "--plot") is None or "matplotlib" in extras.missing_message("plot", "--plot")


def test_mitmdump_says_it_in_one_line_without_a_traceback(without_psycopg, caplog):
    from mitmproxy.addons.proxyauth import ProxyAuth
    from mitmproxy.addons.proxyserver import Proxyserver

    addons = make_addons()
    backend = next(a for a in addons if type(a).__name__ == "Backend")

    async def start():
        with taddons.context(Proxyserver(), ProxyAuth(), *addons) as tctx:
            tctx.options.update(byok_db="postgresql://byok:secret@127.0.0.1:5/byok", byok_config="/nonexistent.toml")
            await backend.running()

    asyncio.run(start())
    assert backend.store is None
    [record] = [r for r in caplog.records if "cannot open its database" in r.getMessage()]
    assert record.levelname == "ERROR" and record.exc_info is None  # mitmproxy exits on it, no traceback
    assert ".venv/bin/pip install -e '.[team]'" in record.getMessage() and "secret" not in record.getMessage()
