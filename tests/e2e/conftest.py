"""Fixtures for end-to-end tests: one mitmdump per test module (isolation by conversation and
request ids), a scripted provider and a fake official Cursor backend, all on loopback."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.e2e.harness import ROOT, Proxy, model_entry, providers_toml, public_id
from tests.support.fake_cursor import FakeCursor
from tests.support.scripted_provider import ScriptedProvider

pytestmark = pytest.mark.e2e


def run(coro):
    """Drive an async scenario from a sync test (no event-loop plugin needed)."""
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def provider():
    with ScriptedProvider() as p:
        yield p


@pytest.fixture
def fresh_provider(provider):
    """Drops the scripts a test left queued: one that fails before consuming its scripts must not
    answer the next test's calls. A module sharing `provider` uses it for every test with
    `pytest.mark.usefixtures("fresh_provider")`."""
    yield
    provider.clear()


@pytest.fixture(scope="module")
def upstream():
    with FakeCursor() as f:
        yield f


def start_proxy(home: Path, provider: ScriptedProvider, upstream: FakeCursor | None = None,
                kinds=("openai_chat",), binary: str = "mitmdump", extra_args: list[str] | None = None,
                **options) -> tuple[Proxy, dict[str, str]]:
    entries = {kind: model_entry(provider.base_url, kind=kind, model_id=f"{kind}-model",
                                 name=f"scripted-{kind}",
                                 **({"extra": {"max_output_tokens": 4096}} if kind == "anthropic" else {}))
               for kind in kinds}
    home.mkdir(parents=True, exist_ok=True)
    (home / "providers.toml").write_text(providers_toml(list(entries.values())))
    scripts = []
    if upstream is not None:
        scripts = [str(ROOT / "tests" / "support" / "redirect_upstream.py")]
        options = {"test_upstream": f"127.0.0.1:{upstream.port}", "ssl_insecure": "true", **options}
    proxy = Proxy(home, options=options, extra_scripts=scripts, binary=binary, extra_args=extra_args or []).start()
    return proxy, {kind: public_id(entry) for kind, entry in entries.items()}
