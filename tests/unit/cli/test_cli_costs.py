"""Dollars: per-model prices in the providers file (validated with file:line), cost arithmetic to the
cent per dialect (cache reads and writes included), `usage` and `trace` with costs and `--json`, a
model without prices shown with tokens only, and `usage --plot` drawing a real PNG."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from byok.providers.config import ConfigFileError, parse_providers
from byok.providers.pricing import Prices, cost, usd
from byok.cli import main
from byok.store import Store

PRICED = """\
[[providers]]
name = "anthropic"
kind = "anthropic"
base_url = "https://api.anthropic.com"
api_key = "sk-x"
[[providers.models]]
id = "claude-x"
max_output_tokens = 8000
prices = { input = 3, output = 15, cache_read = 0.3, cache_write = 3.75 }

[[providers]]
name = "openai"
kind = "openai_chat"
base_url = "https://api.openai.com/v1"
api_key = "sk-y"
[[providers.models]]
id = "gpt-x"
prices = { input = 1.25, output = 10, cache_read = 0.125 }
[[providers.models]]
id = "free-x"
"""


def test_prices_parse_and_are_optional():
    config, _ = parse_providers(PRICED, "p.toml")
    claude, gpt, free = config.models
    assert claude.prices == Prices(Decimal("3"), Decimal("15"), Decimal("0.3"), Decimal("3.75"))
    assert gpt.prices == Prices(Decimal("1.25"), Decimal("10"), Decimal("0.125"), None)
    assert free.prices is None


@pytest.mark.parametrize("value, words", [
    ('{ input = 3 }', "prices needs input and output"),
    ('{ input = 3, output = -1 }', "prices.output must be a number of USD per million tokens, 0 or more"),
    ('{ input = 3, output = true }', "prices.output must be a number"),
    ('{ input = 3, output = 1, cache = 1 }', "unknown key 'cache' in prices"),
    ('3', "prices must be a table"),
])
def test_bad_prices_name_file_line_and_key(value, words):
    text = PRICED.replace("prices = { input = 1.25, output = 10, cache_read = 0.125 }", f"prices = {value}")
    with pytest.raises(ConfigFileError) as e:
        parse_providers(text, "p.toml")
    assert str(e.value).startswith("p.toml:18: [[providers]] #2 'openai' model #1 'gpt-x': ")
    assert words in str(e.value)


def test_cost_to_the_cent_per_dialect():
    claude = Prices(Decimal(3), Decimal(15), Decimal("0.3"), Decimal("3.75"))
    # Anthropic: input excludes the cache; 1,000,000 each -> 3 + 0.3 + 3.75 + 15
    assert cost(claude, "anthropic", input_tokens=1_000_000, output_tokens=1_000_000,
                cache_read_tokens=1_000_000, cache_write_tokens=1_000_000) == Decimal("22.05")
    gpt = Prices(Decimal("1.25"), Decimal(10), Decimal("0.125"))
    # OpenAI: 120,000 prompt tokens of which 100,000 cached, 2,000 out
    assert cost(gpt, "openai_chat", input_tokens=120_000, output_tokens=2_000, cache_read_tokens=100_000) == (
        Decimal("0.025") + Decimal("0.0125") + Decimal("0.02"))
    # missing cache prices bill at the input price; missing counts are 0
    assert cost(Prices(Decimal(2), Decimal(8)), "anthropic", input_tokens=500_000, cache_write_tokens=500_000,
                output_tokens=None) == Decimal(2)
    assert usd(Decimal("22.05")) == "$22.05" and usd(Decimal("0.00341")) == "$0.0034" and usd(None) == "-"
    assert usd(Decimal("1234.5")) == "$1,234.50"


def priced_store(tmp_path):
    """Two days, three models (one without prices), usage with cache tokens."""
    config = tmp_path / "providers.toml"
    config.write_text(PRICED)
    parsed, _ = parse_providers(PRICED, config)
    ids = {m.model_id: m.public_id for m in parsed.models}
    store = Store.open(tmp_path / "byok.db")
    calls = [
        ("req-1", 0, "anthropic", "anthropic", "claude-x", "2026-02-01", (200_000, 10_000, 800_000, 100_000)),
        ("req-1", 1, "anthropic", "anthropic", "claude-x", "2026-02-01", (10_000, 5_000, 1_000_000, None)),
        ("req-2", 0, "openai", "openai_chat", "gpt-x", "2026-02-01", (400_000, 20_000, 300_000, None)),
        ("req-3", 0, "openai", "openai_chat", "free-x", "2026-02-02", (1_000, 100, None, None)),
        ("req-4", 0, "anthropic", "anthropic", "claude-x", "2026-02-02", (1_000_000, 0, 0, 0)),
    ]
    for request_id, index, provider, kind, model, day, (inp, out, read, write) in calls:
        llm = store.begin_llm_call({
            "request_id": request_id, "conversation_id": "c", "call_index": index,
            "model_call_id": f"mc-{request_id}-{index}", "provider": provider, "provider_kind": kind,
            "model_public_id": ids[model], "model": model, "started_at": f"{day}T10:00:00.000+00:00"})
        store.finish_llm_call(llm, {"status": "ok", "input_tokens": inp, "output_tokens": out,
                                    "cache_read_tokens": read, "cache_write_tokens": write})
    store.close()
    return tmp_path / "byok.db", config


# day 1, claude: input 210,000*3 + read 1,800,000*0.3 + write 100,000*3.75 + out 15,000*15 (per million)
CLAUDE_DAY1 = Decimal("0.63") + Decimal("0.54") + Decimal("0.375") + Decimal("0.225")   # 1.77
# day 1, gpt: uncached 100,000*1.25 + read 300,000*0.125 + out 20,000*10
GPT_DAY1 = Decimal("0.125") + Decimal("0.0375") + Decimal("0.2")                        # 0.3625
CLAUDE_DAY2 = Decimal(3)


def test_usage_json_costs_per_model_and_day_with_totals(tmp_path, capsys):
    db, config = priced_store(tmp_path)
    assert main(["usage", "--db", str(db), "--config", str(config), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {(r["day"], r["model"]): r for r in data["rows"]}
    assert rows[("2026-02-01", "anthropic/claude-x")]["cost_usd"] == float(CLAUDE_DAY1) == 1.77
    assert rows[("2026-02-01", "openai/gpt-x")]["cost_usd"] == float(GPT_DAY1)
    assert rows[("2026-02-02", "anthropic/claude-x")]["cost_usd"] == 3.0
    free = rows[("2026-02-02", "openai/free-x")]
    assert free["cost_usd"] is None and free["prices"] is None and free["input_tokens"] == 1000
    assert data["totals"]["cost_usd"] == float(CLAUDE_DAY1 + GPT_DAY1 + CLAUDE_DAY2) == 5.1325
    assert data["totals"]["input_tokens"] == 1_611_000
    assert data["unpriced_models"] == ["openai/free-x"]


@pytest.mark.parametrize("width", [60, 200])
def test_usage_table_shows_cost_and_says_prices_are_missing(tmp_path, capsys, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", str(width))
    db, config = priced_store(tmp_path)
    assert main(["usage", "--db", str(db), "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "$1.77" in out and "$0.3625" in out and "$3.00" in out and "$5.13" in out
    assert "prices not configured for openai/free-x: tokens only" in out
    lines = out.splitlines()
    assert any("2026-02-02" in ln and "openai/free-x" in ln for ln in lines)


def test_trace_shows_each_calls_cost(tmp_path, capsys):
    db, config = priced_store(tmp_path)
    assert main(["trace", "mc-req-1-0", "--db", str(db), "--config", str(config), "--json"]) == 0
    story = json.loads(capsys.readouterr().out)
    [call] = [c for c in story["runs"][0]["provider_calls"] if c["model_call_id"] == "mc-req-1-0"]
    # 200,000*3 + 800,000*0.3 + 100,000*3.75 + 10,000*15
    assert call["cost_usd"] == 1.365
    assert main(["trace", "mc-req-3-0", "--db", str(db), "--config", str(config), "--json"]) == 0
    [call] = json.loads(capsys.readouterr().out)["runs"][0]["provider_calls"]
    assert call["cost_usd"] is None
    assert main(["trace", "mc-req-1-0", "--db", str(db), "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "$1.37" in out  # 1.365 rounds half up to the cent on screen; JSON keeps the exact value
    assert main(["trace", "mc-req-3-0", "--db", str(db), "--config", str(config)]) == 0
    assert "prices not configured" in capsys.readouterr().out


def test_usage_plot_writes_a_real_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from matplotlib import image

    db, config = priced_store(tmp_path)
    png = tmp_path / "usage.png"
    assert main(["usage", "--db", str(db), "--config", str(config), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = image.imread(png)
    assert pixels.shape[:2] == (700, 1000)  # 10 x 7 inches at 100 dpi
    assert pixels.std() > 0.05  # not a blank canvas: bars, axes and text were drawn
    assert f"chart written to {png}" in capsys.readouterr().out


def test_usage_without_any_prices_says_so_and_draws_no_cost_panel(tmp_path, capsys):
    """Issue 24.4.8: no "$0.0000 + unpriced" total, no cost panel with an empty +-0.04 USD axis."""
    pytest.importorskip("matplotlib")
    from matplotlib import image

    db, _ = priced_store(tmp_path)
    unpriced = tmp_path / "no-prices.toml"
    unpriced.write_text("")  # a providers file with no models: nothing is priced
    png = tmp_path / "usage.png"
    assert main(["usage", "--db", str(db), "--config", str(unpriced), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    total = next(line for line in out.splitlines() if line.lstrip().startswith("total"))
    assert total.rstrip().endswith("no prices") and "$0" not in total
    assert "tokens only: no model has prices" in out
    assert image.imread(png).shape[:2] == (350, 1000)  # the tokens panel alone


def test_usage_json_without_any_prices_has_no_total_cost(tmp_path, capsys):
    """Nothing priced: the total is unknown (null), not $0, and every model is named as unpriced."""
    db, _ = priced_store(tmp_path)
    unpriced = tmp_path / "no-prices.toml"
    unpriced.write_text("")
    assert main(["usage", "--db", str(db), "--config", str(unpriced), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["totals"]["cost_usd"] is None and data["totals"]["cost_complete"] is False
    assert data["totals"]["input_tokens"] == 1_611_000
    assert all(row["cost_usd"] is None for row in data["rows"]) and data["unpriced_models"]
