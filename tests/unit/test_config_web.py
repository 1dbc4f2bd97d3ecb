"""`[web_search]` and `[image_generation]` in the providers file: parsed beside the providers, every
mistake a file error naming the table, the key and the line."""

from __future__ import annotations

import pytest

from byok.providers.config import ConfigFileError, parse_providers
from byok.agent.web.search import search_backend
from byok.providers.config import SearchConfig

PROVIDER = """
[[providers]]
name = "p"
kind = "openai_chat"
base_url = "https://api.example.com/v1"
api_key = "sk-x"
[[providers.models]]
id = "m"
"""


def parse(extra: str):
    config, warnings = parse_providers(PROVIDER + extra, "providers.toml")
    return config, warnings


def error(extra: str) -> ConfigFileError:
    with pytest.raises(ConfigFileError) as info:
        parse(extra)
    return info.value


def test_no_tables_means_no_backends():
    config, _ = parse("")
    assert config.web_search is None and config.image_generation is None


def test_searxng_needs_only_its_base_url():
    config, _ = parse('\n[web_search]\nkind = "searxng"\nbase_url = "http://127.0.0.1:8888/"\n')
    assert config.web_search == SearchConfig("searxng", "http://127.0.0.1:8888", max_results=8)
    assert search_backend(config.web_search).kind == "searxng"


def test_hosted_apis_default_their_base_url_and_need_a_key(monkeypatch):
    monkeypatch.delenv("BRAVE_KEY_UNSET", raising=False)
    config, warnings = parse('\n[web_search]\nkind = "brave"\napi_key_env = "BRAVE_KEY_UNSET"\nmax_results = 3\n')
    assert config.web_search.base_url == "https://api.search.brave.com" and config.web_search.max_results == 3
    assert any("BRAVE_KEY_UNSET is not set" in w for w in warnings)
    config, _ = parse('\n[web_search]\nkind = "tavily"\napi_key = "tvly-secret"\n')
    assert config.web_search.base_url == "https://api.tavily.com"
    assert "tvly-secret" not in repr(config.web_search)
    err = error('\n[web_search]\nkind = "tavily"\n')
    assert "set exactly one of api_key_env" in str(err) and err.where == "[web_search]"


def test_provider_kind_is_refused_with_a_reason():
    err = error('\n[web_search]\nkind = "provider"\n')
    assert 'kind = "provider"' in str(err) and "not supported in this version" in str(err)
    assert err.line == PROVIDER.count("\n") + 3


@pytest.mark.parametrize(("extra", "message", "key_line"), [
    ('\n[web_search]\nkind = "bing"\n', "kind must be one of searxng, brave, tavily (got 'bing')", 3),
    ('\n[web_search]\nkind = "searxng"\n', "base_url is required", 2),
    ('\n[web_search]\nkind = "searxng"\nbase_url = "ftp://x"\n', "base_url must be an http:// or https:// URL", 4),
    ('\n[web_search]\nkind = "searxng"\nbase_url = "http://x"\nmax_results = 0\n', "max_results must be an integer", 5),
    ('\n[web_search]\nkind = "searxng"\nbase_url = "http://x"\nlimit = 3\n', "unknown key 'limit'", 5),
    ('\n[image_generation]\nbase_url = "https://api.openai.com/v1"\napi_key = "k"\n', "model is required", 2),
    ('\n[image_generation]\nbase_url = "https://x/v1"\nmodel = "m"\napi_key = "k"\nsize = "big"\n', "size must look like", 6),
    ('\n[image_generation]\nbase_url = "https://x/v1"\nmodel = "m"\n', "set exactly one of api_key_env", 2),
])
def test_mistakes_name_the_table_key_and_line(extra, message, key_line):
    err = error(extra)
    assert message in str(err)
    assert err.line == PROVIDER.count("\n") + key_line


def test_image_generation_parses():
    config, _ = parse('\n[image_generation]\nbase_url = "https://api.openai.com/v1/"\nmodel = "gpt-image-1"\n'
                      'api_key_env = "OPENAI_API_KEY"\nsize = "1024x1024"\n')
    image = config.image_generation
    assert (image.base_url, image.model, image.api_key_env, image.size) == (
        "https://api.openai.com/v1", "gpt-image-1", "OPENAI_API_KEY", "1024x1024")


def test_other_top_level_keys_are_still_refused():
    assert "unknown top-level key 'search'" in str(error('\n[search]\nkind = "searxng"\n'))
