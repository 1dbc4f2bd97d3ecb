"""`[features]` in the providers file: each of Cursor's other AI calls names one of the user's models
as "<provider name>/<model id>" (or a model id unique in the file, as [tab] does); `default` serves those left out; none at all passes the call upstream."""

from __future__ import annotations

import pytest

from byok.providers.config import FEATURES, ConfigFileError, ProvidersFile, parse_providers

PROVIDERS = """
[[providers]]
name = "fast"
kind = "openai_chat"
base_url = "https://api.example.com/v1"
api_key = "sk-x"
[[providers.models]]
id = "small"
[[providers.models]]
id = "org/with-slash"
[[providers]]
name = "claude"
kind = "anthropic"
base_url = "https://api.anthropic.com/v1"
api_key = "sk-y"
[[providers.models]]
id = "haiku"
max_output_tokens = 1024
"""


def parse(extra: str):
    config, _ = parse_providers(PROVIDERS + extra, "providers.toml")
    return config


def error(extra: str) -> ConfigFileError:
    with pytest.raises(ConfigFileError) as info:
        parse(extra)
    return info.value


def test_without_the_table_every_feature_passes_upstream():
    config = parse("")
    assert not config.features
    assert all(config.feature_route(f) is None for f in FEATURES)


def test_each_feature_names_its_model_and_default_serves_the_rest():
    config = parse('\n[features]\ncommit_message = "claude/haiku"\ndefault = "fast/small"\n')
    assert config.feature_route("commit_message").model_id == "haiku"
    for feature in ("branch_name", "chat_title", "terminal"):
        assert config.feature_route(feature).model_id == "small"


def test_a_feature_alone_leaves_the_others_upstream():
    config = parse('\n[features]\nterminal = "fast/small"\n')
    assert config.feature_route("terminal").provider == "fast"
    assert config.feature_route("commit_message") is None


def test_a_model_id_unique_in_the_file_names_its_model_like_tab():
    config = parse('\n[features]\ncommit_message = "haiku"\ndefault = "small"\n')
    assert config.feature_route("commit_message").provider == "claude"
    assert config.feature_route("terminal").provider == "fast"


def test_model_ids_may_hold_slashes():
    config = parse('\n[features]\nchat_title = "fast/org/with-slash"\n')
    assert config.feature_route("chat_title").model_id == "org/with-slash"


@pytest.mark.parametrize("extra, message, key_line", [
    ('\n[features]\ncommit = "fast/small"\n', "unknown key 'commit'", 3),
    ('\n[features]\ncommit_message = "nosuch"\n', "commit_message = 'nosuch' names no model in this file", 3),
    ('\n[features]\ncommit_message = 3\n', "must name one of your models", 3),
    ('\n[features]\nterminal = "fast/large"\n', "names no model in this file (models: fast/small, "
                                                "fast/org/with-slash, claude/haiku)", 3),
    ('\n[features]\nchat_title = "fast/small"\ndefault = "other/small"\n', "default = 'other/small' names no model", 4),
])
def test_mistakes_name_the_table_key_and_line(extra, message, key_line):
    err = error(extra)
    assert message in str(err) and err.where == "[features]"
    assert err.line == PROVIDERS.count("\n") + key_line


def test_the_table_must_be_a_table():
    with pytest.raises(ConfigFileError, match="features must be a table"):
        parse_providers('features = "fast/small"\n' + PROVIDERS, "providers.toml")


def test_a_changed_features_table_is_a_new_config(tmp_path):
    path = tmp_path / "providers.toml"
    path.write_text(PROVIDERS + '\n[features]\ndefault = "fast/small"\n')
    providers = ProvidersFile(path)
    generation = providers.generation
    path.write_text(PROVIDERS + '\n[features]\ndefault = "claude/haiku"\n  \n')
    assert providers.refresh() and providers.generation > generation
    assert providers.current().feature_route("terminal").model_id == "haiku"
