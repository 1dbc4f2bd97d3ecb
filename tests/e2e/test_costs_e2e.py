"""Dollars through a real mitmdump: turns on an Anthropic and an OpenAI Chat model whose providers report
cache reads (and Anthropic cache writes); `usage --json` and `trace --json` price them to the cent from
the providers file's `prices`, and `usage --plot` draws the PNG."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from byok.cli.client import user_turn_request
from tests.e2e.conftest import run
from tests.e2e.harness import Proxy, model_entry, providers_toml, public_id
from tests.support.scripted_provider import ANTHROPIC, CHAT, Usage

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]
CLI = str(Path(sys.executable).with_name("cursor-byok"))


@pytest.fixture(scope="module")
def priced(tmp_path_factory, provider):
    home = tmp_path_factory.mktemp("costs")
    entries = [
        model_entry(provider.base_url, kind="anthropic", model_id="claude-priced", name="anth",
                    extra={"max_output_tokens": 4096,
                           "prices": "{ input = 3, output = 15, cache_read = 0.3, cache_write = 3.75 }"}),
        model_entry(provider.base_url, kind="openai_chat", model_id="gpt-priced", name="oai",
                    extra={"prices": "{ input = 1.25, output = 10, cache_read = 0.125 }"}),
    ]
    (home / "providers.toml").write_text(providers_toml(entries))
    proxy = Proxy(home).start()
    yield proxy, [public_id(e) for e in entries]
    proxy.stop()


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["COLUMNS"] = "60"
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=60, env=env)


def test_costs_to_the_cent_per_dialect(priced, provider, tmp_path):
    proxy, (claude, gpt) = priced
    provider.enqueue("anthropic", ANTHROPIC.text_reply("cached answer", usage=Usage(
        input_tokens=20_000, output_tokens=3_000, cache_read_tokens=150_000, cache_write_tokens=10_000)))
    provider.enqueue("openai_chat", CHAT.text_reply("cached too", usage=Usage(
        input_tokens=90_000, output_tokens=1_500, cache_read_tokens=80_000)))

    async def turns():
        async with proxy.client() as client:
            for model in (claude, gpt):
                result = await client.run(user_turn_request("price me", model_id=model))
                assert result.end_error is None

    run(turns())
    deadline = time.monotonic() + 10
    while True:
        done = cli("usage", "--db", str(proxy.db), "--config", str(proxy.config), "--json")
        data = json.loads(done.stdout)
        if data["totals"]["calls"] >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    rows = {r["model"]: r for r in data["rows"]}
    # 20,000*3 + 150,000*0.3 + 10,000*3.75 + 3,000*15 per million = 0.06 + 0.045 + 0.0375 + 0.045
    assert rows["anth/claude-priced"]["cost_usd"] == 0.1875
    assert rows["anth/claude-priced"]["cache_write_tokens"] == 10_000
    # (90,000 - 80,000)*1.25 + 80,000*0.125 + 1,500*10 per million = 0.0125 + 0.01 + 0.015
    assert rows["oai/gpt-priced"]["cost_usd"] == 0.0375
    assert round(data["totals"]["cost_usd"], 2) == 0.23 and data["totals"]["cost_complete"]
    table = cli("usage", "--db", str(proxy.db), "--config", str(proxy.config))
    assert "$0.1875" in table.stdout and "$0.0375" in table.stdout and "$0.2250" in table.stdout
    import sqlite3

    with sqlite3.connect(proxy.db) as db:
        [(model_call_id,)] = db.execute("SELECT model_call_id FROM llm_calls WHERE model = 'claude-priced'").fetchall()
    story = json.loads(cli("trace", model_call_id, "--db", str(proxy.db), "--config", str(proxy.config),
                           "--json").stdout)
    assert [c["cost_usd"] for c in story["runs"][0]["provider_calls"]] == [0.1875]
    png = tmp_path / "usage.png"
    plotted = cli("usage", "--db", str(proxy.db), "--config", str(proxy.config), "--plot", str(png))
    assert plotted.returncode == 0, plotted.stderr
    from matplotlib import image

    assert image.imread(png).shape[:2] == (700, 1000)
