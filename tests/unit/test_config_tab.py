"""The providers file's fill-in-the-middle kinds, the model key `fim` and the `[tab]` table."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from byok.providers.config import ConfigFileError, FIM_TEMPLATES, load_providers, parse_providers

FIM_FILE = """\
[[providers]]
name = "ollama"
kind = "openai_completions"
base_url = "http://127.0.0.1:11434/v1"
api_key = "ollama"
[[providers.models]]
id = "qwen2.5-coder:1.5b-base"
fim = "qwen"
[[providers.models]]
id = "starcoder2:3b"

[[providers]]
name = "mistral"
kind = "mistral_fim"
base_url = "https://codestral.mistral.ai/v1"
api_key = "k"
[[providers.models]]
id = "codestral-latest"

[[providers]]
name = "deepseek"
kind = "openai_chat"
base_url = "https://api.deepseek.com/v1"
api_key = "k"
[[providers.models]]
id = "deepseek-chat"
"""


def load(tmp_path: Path, text: str):
    path = tmp_path / "providers.toml"
    path.write_text(textwrap.dedent(text))
    return load_providers(path)


def error(tmp_path: Path, text: str) -> ConfigFileError:
    with pytest.raises(ConfigFileError) as info:
        load(tmp_path, text)
    return info.value


def test_fim_kinds_load_and_stay_out_of_the_agent_picker(tmp_path):
    config = load(tmp_path, FIM_FILE + '\n[tab]\nmodel = "ollama/qwen2.5-coder:1.5b-base"\n')
    qwen, starcoder, codestral, chat = config.models
    assert (qwen.fim, starcoder.fim, codestral.fim) == ("qwen", "suffix", "suffix")
    assert config.agent_models == (chat,)
    assert config.tab.model == qwen.public_id and config.tab_route is qwen
    assert (config.tab.max_tokens, config.tab.max_lines) == (128, 8)


def test_tab_model_by_unique_id_and_budgets(tmp_path):
    config = load(tmp_path, FIM_FILE + '\n[tab]\nmodel = "deepseek-chat"\nmax_tokens = 64\nmax_lines = 3\n')
    assert config.tab_route.model_id == "deepseek-chat" and config.tab_route.kind == "openai_chat"
    assert (config.tab.max_tokens, config.tab.max_lines) == (64, 3)


def test_no_tab_table_is_no_local_tab(tmp_path):
    assert load(tmp_path, FIM_FILE).tab is None


@pytest.mark.parametrize("tab,message", [
    ('model = "ollama/nope"', "names no model"),
    ("model = 5", "model must name one of your models"),
    ('model = "ollama/starcoder2:3b"\nmax_tokens = 0', "max_tokens must be an integer"),
    ('model = "ollama/starcoder2:3b"\nmax_lines = true', "max_lines must be an integer"),
    ('model = "ollama/starcoder2:3b"\nspeed = 1', "unknown key 'speed'"),
])
def test_bad_tab_tables(tmp_path, tab, message):
    e = error(tmp_path, FIM_FILE + "\n[tab]\n" + tab + "\n")
    assert message in str(e) and "[tab]" in str(e) and e.line is not None


def test_an_ambiguous_model_id_needs_the_provider(tmp_path):
    twice = FIM_FILE + FIM_FILE.replace('name = "ollama"', 'name = "ollama2"').replace(
        'name = "mistral"', 'name = "mistral2"').replace('name = "deepseek"', 'name = "deepseek2"').replace(
        "127.0.0.1:11434", "127.0.0.1:11435").replace("codestral.mistral.ai", "m.example").replace(
        "api.deepseek.com", "d.example")
    e = error(tmp_path, twice + '\n[tab]\nmodel = "deepseek-chat"\n')
    assert "is the id of 2 models" in str(e)
    assert load(tmp_path, twice + '\n[tab]\nmodel = "deepseek2/deepseek-chat"\n').tab_route.provider == "deepseek2"


@pytest.mark.parametrize("kind,extra,message", [
    ("openai_chat", 'fim = "qwen"', "fim is for fill-in-the-middle kinds"),
    ("openai_completions", 'fim = "llama"', "fim must be one of " + ", ".join(FIM_TEMPLATES)),
    ("mistral_fim", 'fim = "qwen"', 'fim must be "suffix" for mistral_fim'),
    ("openai_completions", 'reasoning_effort = "low"', "reasoning_effort is for chat models"),
    ("openai_completions", "supports_images = true", "supports_images is for chat models"),
])
def test_fim_key_rules(tmp_path, kind, extra, message):
    text = f"""\
        [[providers]]
        name = "p"
        kind = "{kind}"
        base_url = "http://127.0.0.1:1/v1"
        api_key = "k"
        [[providers.models]]
        id = "m"
        {extra}
        """
    assert message in str(error(tmp_path, text))


def test_a_summary_model_must_be_a_chat_model(tmp_path):
    text = FIM_FILE.replace('id = "deepseek-chat"', 'id = "deepseek-chat"\nsummary_model = "ollama/starcoder2:3b"')
    assert "summaries need a chat model" in str(error(tmp_path, text))


def test_tab_change_counts_as_a_config_change(tmp_path):
    from byok.providers.config import ProvidersFile

    path = tmp_path / "providers.toml"
    path.write_text(FIM_FILE)
    holder = ProvidersFile(path)
    generation = holder.generation
    path.write_text(FIM_FILE + '\n[tab]\nmodel = "mistral/codestral-latest"\n# changed size\n')
    assert holder.refresh() and holder.generation == generation + 1
    assert holder.current().tab_route.kind == "mistral_fim"


def test_parse_is_pure_text(tmp_path):
    config, warnings = parse_providers(FIM_FILE, tmp_path / "x.toml")
    assert len(config.models) == 4 and warnings == []


def test_a_features_model_must_be_a_chat_model(tmp_path):
    e = error(tmp_path, FIM_FILE + '\n[features]\ncommit_message = "ollama/starcoder2:3b"\n')
    assert "a fill-in-the-middle model" in str(e) and "[features]" in str(e)
    assert load(tmp_path, FIM_FILE + '\n[features]\ncommit_message = "deepseek/deepseek-chat"\n').features
