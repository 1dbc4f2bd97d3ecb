import asyncio
import logging
import os
import textwrap
from pathlib import Path

import pytest

from byok.providers.config import (
    ConfigFileError, ModelRoute, ProvidersFile, load_providers, parse_providers, public_model_id, redact,
)
from byok.wire.errors import ConfigError
from tests.support.waiting import until

SECRET = "sk-test-THIS-MUST-NEVER-LEAK-1234567890"
HEADER_SECRET = "hdr-secret-ALSO-NEVER-LEAK-0987654321"

GOOD = f"""\
[[providers]]
name = "deepseek"
kind = "openai_chat"
base_url = "https://api.deepseek.com/v1/"
api_key_env = "BYOK_TEST_DEEPSEEK_KEY"

[[providers.models]]
id = "deepseek-reasoner"
display_name = "DeepSeek R1 (BYOK)"
context_tokens = 128000
max_output_tokens = 8192
reasoning_effort = "high"

[[providers.models]]
id = "deepseek-chat"

[[providers]]
name = "anthropic"
kind = "anthropic"
base_url = "https://api.anthropic.com"
api_key = "{SECRET}"
extra_headers = {{ "x-extra" = "{HEADER_SECRET}" }}

[[providers.models]]
id = "claude-sonnet-4-5"
max_output_tokens = 16000
thinking_budget_tokens = 8000
supports_images = true
extra_body = {{ metadata = {{ user_id = "me" }} }}

[[providers.models]]
id = "claude-no-max"
"""


def write(tmp_path: Path, text: str, name: str = "providers.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def error_of(tmp_path: Path, text: str) -> ConfigFileError:
    path = write(tmp_path, text)
    with pytest.raises(ConfigFileError) as info:
        load_providers(path)
    assert str(path) in str(info.value)
    return info.value


# ---- public ids ---------------------------------------------------------------------------------


def test_public_ids_are_pinned():
    # sha256("https://api.deepseek.com/v1\0openai_chat\0deepseek-reasoner")[:4], checked with sha256sum
    assert public_model_id("https://api.deepseek.com/v1", "openai_chat", "deepseek-reasoner") == "41062f21"
    assert public_model_id("https://api.deepseek.com/v1/", "openai_chat", "deepseek-reasoner") == "41062f21"
    assert public_model_id("https://api.anthropic.com", "anthropic", "claude-sonnet-4-5") == "f5841541"
    assert public_model_id("https://api.anthropic.com/v1", "anthropic", "claude-sonnet-4-5") == "c2c7547e"
    assert public_model_id("https://api.deepseek.com/v1", "openai_chat", "deepseek-chat") == "612672df"


# ---- a good file --------------------------------------------------------------------------------


def test_good_file_loads_in_order_with_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("BYOK_TEST_DEEPSEEK_KEY", "sk-env")
    config = load_providers(write(tmp_path, GOOD))
    assert [m.model_id for m in config.models] == [
        "deepseek-reasoner", "deepseek-chat", "claude-sonnet-4-5", "claude-no-max"]
    r1, chat, claude, nomax = config.models
    assert r1.public_id == "41062f21" and r1.base_url == "https://api.deepseek.com/v1"
    assert config.lookup("41062f21") is r1 and config.lookup("ffffffff") is None
    assert r1.supports_thinking and not r1.supports_images and r1.reasoning_effort == "high"
    assert chat.display_name == "deepseek-chat (BYOK)" and not chat.supports_thinking
    assert chat.context_tokens is None and chat.max_output_tokens is None
    assert claude.supports_thinking and claude.supports_images and claude.thinking_budget_tokens == 8000
    assert claude.extra_body == {"metadata": {"user_id": "me"}}
    assert claude.extra_headers == {"x-extra": HEADER_SECRET}
    assert r1.require_ready() == "sk-env" and claude.require_ready() == SECRET


def test_explicit_supports_thinking_wins(tmp_path):
    config = load_providers(write(tmp_path, """\
        [[providers]]
        name = "o"
        kind = "openai_responses"
        base_url = "http://localhost:8000/v1"
        api_key = "k"
        [[providers.models]]
        id = "m"
        reasoning_effort = "low"
        supports_thinking = false
        """))
    assert config.models[0].supports_thinking is False


def test_empty_file_is_no_models(tmp_path):
    assert load_providers(write(tmp_path, "# nothing yet\n")).models == ()


# ---- run-time problems: the model shows, the run fails with ConfigError ---------------------------


def test_anthropic_without_max_output_tokens_is_a_run_error(tmp_path):
    config = load_providers(write(tmp_path, GOOD))
    nomax = config.models[3]
    assert nomax.problems
    with pytest.raises(ConfigError) as info:
        nomax.require_ready()
    assert "max_output_tokens" in info.value.message and "claude-no-max" in info.value.message
    assert SECRET not in info.value.message


def test_missing_key_variable_is_a_run_error_naming_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("BYOK_TEST_DEEPSEEK_KEY", raising=False)
    config = load_providers(write(tmp_path, GOOD))
    with pytest.raises(ConfigError) as info:
        config.models[0].require_ready()
    assert info.value.bad_key and "BYOK_TEST_DEEPSEEK_KEY" in info.value.message
    assert str(tmp_path / "providers.toml") in info.value.message
    monkeypatch.setenv("BYOK_TEST_DEEPSEEK_KEY", "late")
    assert config.models[0].require_ready() == "late"  # checked per run, not at load


# ---- file errors --------------------------------------------------------------------------------


def test_toml_syntax_error_names_file_line_and_column(tmp_path):
    err = error_of(tmp_path, '[[providers]]\nname = "x"\nkind = openai_chat\n')
    assert err.line == 3 and err.col is not None
    assert str(err).startswith(f"{tmp_path / 'providers.toml'}:3:")
    assert "TOML syntax" in str(err)


PROVIDER = """\
[[providers]]
name = "p"
kind = "openai_chat"
base_url = "https://example.com/v1"
api_key_env = "X_KEY"
{extra}
[[providers.models]]
id = "m"
{model}
"""


@pytest.mark.parametrize(
    "extra, model, key, words",
    [
        ('kinds = "x"', "", "kinds", "unknown key 'kinds'"),
        ("", "context_token = 5", "context_token", "unknown key 'context_token'"),
        ("", 'base_url = "x"', "base_url", "belongs in [[providers]]"),
        ("", "max_output_tokens = 0", "max_output_tokens", "positive integer"),
        ("", "context_tokens = true", "context_tokens", "positive integer"),
        ("", 'context_tokens = "1000"', "context_tokens", "positive integer"),
        ("", "reasoning_effort = 3", "reasoning_effort", "string"),
        ("", "thinking_budget_tokens = 1000", "thinking_budget_tokens", "anthropic"),
        ("", "extra_body = 3", "extra_body", "table"),
        ("", 'supports_images = "yes"', "supports_images", "true or false"),
        ("", 'display_name = ""', "display_name", "non-empty"),
        ("extra_headers = { a = 1 }", "", "extra_headers", "string values"),
    ],
)
def test_semantic_errors_name_entry_key_and_line(tmp_path, extra, model, key, words):
    text = PROVIDER.format(extra=extra, model=model)
    err = error_of(tmp_path, text)
    assert words in str(err), str(err)
    assert "[[providers]] #1 'p'" in str(err)
    expected_line = max(i for i, line in enumerate(text.splitlines(), 1) if line.startswith(key + " ="))
    assert err.line == expected_line, str(err)


@pytest.mark.parametrize(
    "replace, words",
    [
        (('kind = "openai_chat"', 'kind = "openai"'), "kind must be one of openai_chat, openai_responses, anthropic"),
        (('base_url = "https://example.com/v1"', 'base_url = "ftp://example.com"'), "http:// or https://"),
        (('base_url = "https://example.com/v1"', 'base_url = "https://u:pw@example.com"'), "credentials"),
        (('base_url = "https://example.com/v1"\n', ""), "base_url is required"),
        (('api_key_env = "X_KEY"', 'api_key_env = "X_KEY"\napi_key = "k"'), "exactly one of"),
        (('api_key_env = "X_KEY"\n', ""), "exactly one of"),
        (('api_key_env = "X_KEY"', 'api_key_env = "sk-abc def"'), "name of an environment variable"),
        (('name = "p"\n', ""), "name is required"),
        (('id = "m"', 'name = "m"'), "unknown key 'name'"),
        (('id = "m"', 'display_name = "m"'), "id is required"),
    ],
)
def test_provider_level_errors(tmp_path, replace, words):
    err = error_of(tmp_path, PROVIDER.format(extra="", model="").replace(*replace))
    assert words in str(err), str(err)


def test_provider_without_models(tmp_path):
    err = error_of(tmp_path, '[[providers]]\nname="p"\nkind="anthropic"\nbase_url="https://a"\napi_key="k"\n')
    assert "at least one model" in str(err) and err.line == 1


def test_unknown_top_level_key(tmp_path):
    err = error_of(tmp_path, 'provider = 1\n')
    assert "unknown top-level key 'provider'" in str(err)


def test_reasoning_effort_on_anthropic_and_budget_not_below_max(tmp_path):
    base = '[[providers]]\nname="a"\nkind="anthropic"\nbase_url="https://a"\napi_key="k"\n[[providers.models]]\nid="c"\n'
    assert "thinking_budget_tokens" in str(error_of(tmp_path, base + 'reasoning_effort="high"\n'))
    err = error_of(tmp_path, base + "max_output_tokens=1000\nthinking_budget_tokens=1000\n")
    assert "smaller than max_output_tokens" in str(err) and err.line == 9


def test_duplicate_public_id_and_duplicate_name(tmp_path):
    one = PROVIDER.format(extra="", model="")
    err = error_of(tmp_path, one + one.replace('name = "p"', 'name = "q"'))
    assert "public id" in str(err) and "#2 'q' model #1 'm'" in str(err) and err.line == 17
    err = error_of(tmp_path, one + one.replace('id = "m"', 'id = "n"'))
    assert "provider name 'p' is already used" in str(err)


def test_unreadable_and_non_utf8(tmp_path):
    with pytest.raises(ConfigFileError, match="cannot read"):
        load_providers(tmp_path / "nope.toml")
    path = tmp_path / "bin.toml"
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigFileError, match="not UTF-8"):
        load_providers(path)


# ---- keys stay secret ---------------------------------------------------------------------------


def test_repr_and_logs_never_show_keys(tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("BYOK_TEST_DEEPSEEK_KEY", SECRET + "-env")
    caplog.set_level(logging.DEBUG)
    path = write(tmp_path, GOOD)
    holder = ProvidersFile(path)
    routes = holder.models
    assert len(routes) == 4
    for route in routes:
        assert SECRET not in repr(route) and HEADER_SECRET not in repr(route)
    assert SECRET not in repr(holder.current())
    # a bad edit whose broken line holds a key
    path.write_text(GOOD.replace('kind = "anthropic"', 'kind = "anthropicc"') + f'\napi_key = "{SECRET}"\n')
    os.utime(path, ns=(1, 1))
    holder.refresh()
    path.write_text(GOOD.replace(f'api_key = "{SECRET}"', f'api_key = {SECRET}'))  # syntax error on key line
    holder.refresh()
    assert holder.last_error is not None and SECRET not in str(holder.last_error)
    path.write_text(GOOD.replace(f'api_key = "{SECRET}"', f'api_key = ["{SECRET}"]'))
    holder.refresh()
    assert "api_key must be a non-empty string" in str(holder.last_error)
    text = caplog.text
    assert text and SECRET not in text and HEADER_SECRET not in text


def test_redact_replaces_keys_and_long_header_values(tmp_path, monkeypatch):
    monkeypatch.setenv("BYOK_TEST_DEEPSEEK_KEY", "sk-from-env-42")
    routes = load_providers(write(tmp_path, GOOD)).models
    out = redact(f"a {SECRET} b {HEADER_SECRET} c sk-from-env-42", routes)
    assert out == "a <redacted> b <redacted> c <redacted>"


# ---- live reload --------------------------------------------------------------------------------


def bump(path: Path, text: str) -> None:
    """Write and force a new mtime (coarse timestamps on some filesystems)."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    os.utime(path, ns=(before + 1_000_000_000, before + 1_000_000_000))


def test_reload_on_change_and_bad_reload_keeps_last_good(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="byok.config")
    path = write(tmp_path, PROVIDER.format(extra="", model=""))
    holder = ProvidersFile(path)
    first = holder.current()
    gen = holder.generation
    assert [m.model_id for m in first.models] == ["m"]
    assert holder.current() is first and holder.generation == gen  # unchanged: no re-parse

    bump(path, PROVIDER.format(extra="", model='display_name = "Mine"'))
    assert holder.current().models[0].display_name == "Mine" and holder.generation == gen + 1
    good = holder.current()

    caplog.clear()
    bump(path, "[[providers]\n")
    assert holder.current() is good and holder.last_error is not None
    assert holder.current() is good  # same bad file: logged once
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "keeping the last good config (1 models)" in errors[0].getMessage()
    assert str(path) in errors[0].getMessage()

    bump(path, PROVIDER.format(extra="", model='id = "n"').replace('id = "m"\n', ""))
    assert [m.model_id for m in holder.models] == ["n"] and holder.last_error is None


def test_missing_file_is_empty_and_logged_once_then_appears(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="byok.config")
    path = tmp_path / "later.toml"
    holder = ProvidersFile(path)
    assert holder.models == () and holder.lookup("41062f21") is None
    holder.current()
    holder.current()
    assert sum("not found" in r.getMessage() for r in caplog.records) == 1
    assert holder.last_error is None
    bump(path, PROVIDER.format(extra="", model=""))
    assert len(holder.models) == 1
    path.unlink()
    assert holder.models == ()


def test_set_path_switches_files(tmp_path):
    a = write(tmp_path, PROVIDER.format(extra="", model=""), "a.toml")
    b = write(tmp_path, PROVIDER.format(extra="", model="").replace('id = "m"', 'id = "other"'), "b.toml")
    holder = ProvidersFile(a)
    holder.set_path(b)
    assert holder.models[0].model_id == "other" and holder.path == b
    holder.set_path(None)
    assert holder.models == ()


def test_watch_polls_until_cancelled(tmp_path):
    path = write(tmp_path, PROVIDER.format(extra="", model=""))
    holder = ProvidersFile(path)

    async def scenario():
        task = asyncio.create_task(holder.watch(0.01))
        gen = holder.generation
        bump(path, PROVIDER.format(extra="", model='display_name = "W"'))
        await until(lambda: holder.generation != gen, "the watcher to reload the file")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return holder._config.models[0].display_name  # read without refresh: the watcher did it

    assert asyncio.run(scenario()) == "W"


def test_parse_providers_reports_warnings():
    config, warnings = parse_providers(GOOD, "mem.toml")
    assert len(config.models) == 4
    assert any("claude-no-max" in w and "max_output_tokens" in w for w in warnings)
    assert all(SECRET not in w for w in warnings)


def test_route_repr_has_no_key():
    route = ModelRoute("00000000", "p", "openai_chat", "https://x", "m", "M", api_key=SECRET,
                       extra_headers={"authorization": HEADER_SECRET})
    assert SECRET not in repr(route) and HEADER_SECRET not in repr(route)


def test_every_example_in_the_user_docs_is_valid():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "providers.md").read_text()
    blocks = doc.split("```toml\n")[1:]
    assert len(blocks) >= 5
    for block in blocks:
        config, _ = parse_providers(block.split("```", 1)[0], "docs/providers.md")
        assert config.models or config.web_search or config.image_generation  # each block configures something
    for row in [line for line in doc.splitlines() if line.startswith("| `http")]:
        base_url, kind, model_id, public_id = (c.strip().strip("`") for c in row.strip("|").split("|"))
        assert public_model_id(base_url, kind, model_id) == public_id


# ---- compaction keys (compact_at, summary_model) ----------------------------------------------------

TWO_PROVIDERS = """\
[[providers]]
name = "p"
kind = "openai_chat"
base_url = "https://example.com/v1"
api_key = "k"
[[providers.models]]
id = "big"
context_tokens = 1000000
{big}
[[providers.models]]
id = "small"

[[providers]]
name = "q"
kind = "anthropic"
base_url = "https://a.example.com"
api_key = "k"
[[providers.models]]
id = "claude/x"
max_output_tokens = 4096
"""


def test_compaction_keys_default_and_resolve(tmp_path):
    config = load_providers(write(tmp_path, TWO_PROVIDERS.format(big="")))
    big = config.models[0]
    assert big.compact_at == 0.8 and big.summary_model is None
    config = load_providers(write(tmp_path, TWO_PROVIDERS.format(big='compact_at = 0.95\nsummary_model = "small"')))
    big, small, claude = config.models
    assert big.compact_at == 0.95 and big.summary_model == small.public_id
    config = load_providers(write(tmp_path, TWO_PROVIDERS.format(big='summary_model = "q/claude/x"')))
    assert config.models[0].summary_model == config.models[2].public_id
    config = load_providers(write(tmp_path, TWO_PROVIDERS.format(big='summary_model = "big"')))
    assert config.models[0].summary_model is None  # itself: the same as not setting it


@pytest.mark.parametrize(
    "line, words",
    [
        ("compact_at = 0", "above 0 and at most 1"),
        ("compact_at = 1.5", "above 0 and at most 1"),
        ("compact_at = true", "above 0 and at most 1"),
        ('compact_at = "0.8"', "above 0 and at most 1"),
        ('summary_model = "nope"', "summary_model 'nope' names no model"),
        ('summary_model = "q/small"', "names no model"),
        ('summary_model = ""', "summary_model must be"),
    ],
)
def test_compaction_key_errors_name_the_line(tmp_path, line, words):
    text = TWO_PROVIDERS.format(big=line)
    err = error_of(tmp_path, text)
    assert words in str(err), str(err)
    assert "[[providers]] #1 'p' model #1 'big'" in str(err)
    assert err.line == text.splitlines().index(line) + 1


def test_compact_at_needs_context_tokens(tmp_path):
    text = TWO_PROVIDERS.format(big="").replace('id = "small"', 'id = "small"\ncompact_at = 0.5')
    err = error_of(tmp_path, text)
    assert "compact_at needs context_tokens" in str(err) and "model #2 'small'" in str(err)
    assert err.line == text.splitlines().index("compact_at = 0.5") + 1


def test_prompt_cache_key_is_a_per_provider_opt_in_for_openai_kinds(tmp_path):
    chat = '[[providers]]\nname="o"\nkind="openai_chat"\nbase_url="https://o"\napi_key="k"\n{extra}[[providers.models]]\nid="m"\n'
    [plain] = load_providers(write(tmp_path, chat.format(extra=""))).models
    assert plain.prompt_cache_key is False
    [opted] = load_providers(write(tmp_path, chat.format(extra="prompt_cache_key = true\n"))).models
    assert opted.prompt_cache_key is True
    assert "true or false" in str(error_of(tmp_path, chat.format(extra='prompt_cache_key = "yes"\n')))
    anthropic = chat.replace('kind="openai_chat"', 'kind="anthropic"')
    err = error_of(tmp_path, anthropic.format(extra="prompt_cache_key = true\n"))
    assert "cache_control breakpoints" in str(err) and err.line == 6
