"""The user's providers file (TOML): models, their public ids, validation and live reload.

    [[providers]]
    name = "deepseek"
    kind = "openai_chat"            # openai_chat | openai_responses | anthropic
    base_url = "https://api.deepseek.com/v1"
    api_key_env = "DEEPSEEK_API_KEY"  # or api_key = "..."
    [[providers.models]]
    id = "deepseek-reasoner"
    display_name = "DeepSeek R1 (BYOK)"
    context_tokens = 128000
    max_output_tokens = 8192

Fill-in-the-middle models serve Tab (docs/tab.md), never the agent: kind `openai_completions`
(`POST {base_url}/completions`) or `mistral_fim` (`POST {base_url}/fim/completions`), with the model
key `fim` naming the prompt template (`suffix`, the default, lets the server apply the model's own;
`qwen`, `starcoder`, `codellama`, `deepseek` build the prompt with that family's FIM tokens).
`[tab] model = "<provider name>/<model id>"` (or a model id unique in the file) turns local Tab on;
any kind may serve it (a chat model gets a next-edit prompt).

Optional top-level tables configure the web tools' backends (docs/providers.md):

    [web_search]                    # WebSearch; without it the tool is not offered
    kind = "searxng"                # searxng | brave | tavily
    base_url = "http://127.0.0.1:8888"
    [image_generation]              # GenerateImage; an OpenAI-compatible images endpoint
    base_url = "https://api.openai.com/v1"
    model = "gpt-image-1"
    api_key_env = "OPENAI_API_KEY"

`[features]` names the model that answers each of Cursor's other AI calls (docs/features.md); a call
whose feature names none (and no `default`) passes to Cursor untouched:

    [features]
    commit_message = "deepseek/deepseek-chat"   # "<provider name>/<model id>"
    branch_name = "deepseek/deepseek-chat"
    chat_title = "deepseek/deepseek-chat"       # GetChatTitle, NameTab, NameAgent
    terminal = "deepseek/deepseek-chat"         # StreamTerminalAutocomplete, GetTerminalCompletion
    default = "deepseek/deepseek-chat"          # any of the above left out

A model's public id (what Cursor sends back as `requested_model.model_id`) is the first 4 bytes of
SHA-256(normalized_base_url + "\\0" + kind + "\\0" + model_id) as 8 lowercase hex characters.

Owns: parsing and validating the file (`load_providers` -> `ProvidersConfig`, or `ConfigFileError`
naming the file, the line when known, the entry and the key), and `ProvidersFile`, the holder of
the current config that reloads when the file changes and keeps the last good config on a bad edit.

Two kinds of problem, on purpose:
- file errors (syntax, unknown key, wrong type, duplicate id...) reject the whole file: one clear
  error, no user models from it, traffic passes upstream;
- run problems (an anthropic model without `max_output_tokens`, an unset key variable) leave the
  model in the picker, so a run on it ends with a visible `ConfigError` (`ModelRoute.require_ready`).

Keys never appear in messages, logs or `repr`: error texts name keys, never their values.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import threading
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..wire.errors import ConfigError
from .pricing import PRICE_KEYS, Prices

CHAT_KINDS = ("openai_chat", "openai_responses", "anthropic")
"""Kinds that can run the agent (a conversation with tools)."""
FIM_KINDS = ("openai_completions", "mistral_fim")
"""Fill-in-the-middle completion kinds: they serve Tab only."""
PROVIDER_KINDS = CHAT_KINDS + FIM_KINDS
FIM_TEMPLATES = ("suffix", "qwen", "starcoder", "codellama", "deepseek")
"""The model key `fim`: `suffix` sends prompt + suffix; the others build one prompt with FIM tokens."""
TAB_DEFAULT_MAX_TOKENS = 128
TAB_DEFAULT_MAX_LINES = 8

logger = logging.getLogger("byok.config")


SEARCH_KINDS = ("searxng", "brave", "tavily")
DEFAULT_BASE_URLS = {"brave": "https://api.search.brave.com", "tavily": "https://api.tavily.com"}


@dataclass(frozen=True)
class SearchConfig:
    """The validated `[web_search]` table (the backends are in agent/web/search.py). `repr` never shows the key."""

    kind: str
    base_url: str
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None
    max_results: int = 8


FEATURES = ("commit_message", "branch_name", "chat_title", "terminal")
"""The `[features]` keys besides `default`: Cursor's one-shot AI calls that a model of the user's answers."""


@dataclass(frozen=True)
class FeaturesConfig:
    """The validated `[features]` table: (feature or "default", public id of the model), in file order."""

    models: tuple[tuple[str, str], ...] = ()

    def public_id(self, feature: str) -> str | None:
        """The model answering `feature`: its own entry, else `default`, else None (pass upstream)."""
        named = dict(self.models)
        return named.get(feature) or named.get("default")

    def __bool__(self) -> bool:
        return bool(self.models)


@dataclass(frozen=True)
class TabConfig:
    """The validated `[tab]` table: which model serves Tab (by public id) and its budgets."""

    model: str
    """Public id of the route that serves Tab."""
    max_tokens: int = TAB_DEFAULT_MAX_TOKENS
    """The completion's token budget (sent as max_tokens)."""
    max_lines: int = TAB_DEFAULT_MAX_LINES
    """At most this many lines in one suggestion."""


@dataclass(frozen=True)
class ImageConfig:
    """The validated `[image_generation]` table (the backend is in agent/web/images.py). `repr` never shows the key."""

    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None
    size: str | None = None


def normalize_base_url(base_url: str) -> str:
    return base_url.rstrip("/")


def public_model_id(base_url: str, kind: str, model_id: str) -> str:
    digest = hashlib.sha256(f"{normalize_base_url(base_url)}\0{kind}\0{model_id}".encode()).digest()
    return digest[:4].hex()


@dataclass(frozen=True)
class ModelRoute:
    """One configured model and everything needed to call it. `repr` never shows the key."""

    public_id: str
    provider: str
    kind: str
    base_url: str
    model_id: str
    display_name: str
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None
    context_tokens: int | None = None
    max_output_tokens: int | None = None
    reasoning_effort: str | None = None
    thinking_budget_tokens: int | None = None
    extra_body: dict | None = None
    extra_headers: dict | None = field(default=None, repr=False)
    prompt_cache_key: bool = False
    """OpenAI kinds: send the conversation id as `prompt_cache_key` (per provider, opt-in)."""
    supports_images: bool = False
    supports_thinking: bool = False
    compact_at: float = 0.8
    """Compact before a call whose prompt would pass this fraction of `context_tokens`."""
    summary_model: str | None = None
    """Public id of the model that writes compaction summaries (None = this model)."""
    prices: Prices | None = None
    """USD per million tokens (`prices = { input, output, cache_read, cache_write }`), or None."""
    fim: str = "suffix"
    """FIM kinds: the prompt template (FIM_TEMPLATES)."""
    problems: tuple[str, ...] = ()
    """Static reasons a run on this model cannot start (it still shows in the picker)."""
    where: str = ""
    """Where the model is configured, for messages: `<file> [[providers]] #1 'x' model #2 'y'`."""

    def resolve_api_key(self) -> str | None:
        """The key to send, or None when it is not configured (a ConfigError for the run)."""
        if self.api_key:
            return self.api_key
        if self.api_key_env:
            return os.environ.get(self.api_key_env) or None
        return None

    def require_ready(self) -> str:
        """The API key for a run on this model; raises `ConfigError` saying what to fix.

        Checked at run start, not at load: an environment variable may be set later, and a model
        with a problem must still show in the picker so the user sees this message.
        """
        if self.problems:
            raise ConfigError(f"{self.where}: {self.problems[0]}")
        key = self.resolve_api_key()
        if key is None:
            if self.api_key_env:
                raise ConfigError(
                    f"{self.where}: environment variable {self.api_key_env} is not set or empty "
                    "(api_key_env); set it where mitmproxy runs, or use api_key",
                    bad_key=True,
                )
            raise ConfigError(f"{self.where}: no API key configured", bad_key=True)
        return key


@dataclass(frozen=True)
class ProvidersConfig:
    """A validated providers file: the models in file order, looked up by public id."""

    path: Path | None = None
    models: tuple[ModelRoute, ...] = ()
    web_search: SearchConfig | None = None
    """`[web_search]`: the WebSearch backend; None = WebSearch is not offered."""
    image_generation: ImageConfig | None = None
    """`[image_generation]`: the GenerateImage endpoint; None = GenerateImage is not offered."""
    tab: TabConfig | None = None
    """`[tab]`: the model serving Tab; None = Tab passes to Cursor untouched."""
    features: FeaturesConfig = FeaturesConfig()
    """`[features]`: the models answering Cursor's other AI calls (commit messages, titles, ...)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {m.public_id: m for m in self.models})

    def lookup(self, public_id: str) -> ModelRoute | None:
        return self._by_id.get(public_id)  # type: ignore[attr-defined]

    @property
    def agent_models(self) -> tuple[ModelRoute, ...]:
        """The models the agent can run on (the model picker): not the fill-in-the-middle ones."""
        return tuple(m for m in self.models if m.kind in CHAT_KINDS)

    @property
    def tab_route(self) -> ModelRoute | None:
        return None if self.tab is None else self.lookup(self.tab.model)

    def feature_route(self, feature: str) -> ModelRoute | None:
        """The model answering one of `FEATURES` (or `default`), or None: the call passes upstream."""
        public_id = self.features.public_id(feature)
        return None if public_id is None else self.lookup(public_id)

    def __len__(self) -> int:
        return len(self.models)


class ConfigFileError(ValueError):
    """The providers file cannot be used. `str()` is the one message shown to the user."""

    def __init__(self, path: Path | str, message: str, *, line: int | None = None,
                 col: int | None = None, where: str | None = None) -> None:
        self.path = Path(path)
        self.line = line
        self.col = col
        self.where = where
        self.detail = message
        loc = str(path)
        if line is not None:
            loc += f":{line}" + (f":{col}" if col is not None else "")
        super().__init__(f"{loc}: {where}: {message}" if where else f"{loc}: {message}")


# ---- validation ---------------------------------------------------------------------------------

PROVIDER_KEYS = frozenset(
    {"name", "kind", "base_url", "api_key_env", "api_key", "extra_headers", "prompt_cache_key", "models"}
)
MODEL_KEYS = frozenset(
    {
        "id", "display_name", "context_tokens", "max_output_tokens", "reasoning_effort",
        "thinking_budget_tokens", "extra_body", "supports_images", "supports_thinking",
        "compact_at", "summary_model", "prices", "fim",
    }
)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
WEB_SEARCH_KEYS = frozenset({"kind", "base_url", "api_key_env", "api_key", "max_results"})
IMAGE_GENERATION_KEYS = frozenset({"base_url", "model", "api_key_env", "api_key", "size"})
TAB_KEYS = frozenset({"model", "max_tokens", "max_lines"})
TABLES = ("web_search", "image_generation", "tab", "features")


class _Lines:
    """Best-effort source lines for semantic errors (tomllib keeps no positions).

    Maps the n-th `[[providers]]` / its m-th `[[providers.models]]` header to a line range and finds
    `key =` inside it. Inline-table spellings get no line; the message still names entry and key.
    """

    _HEADER = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.\"' -]+?)\s*\]\]?\s*(#.*)?$")

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.headers: list[tuple[int, str, bool]] = []  # (0-based line, table name, is array)
        for i, raw in enumerate(self.lines):
            m = self._HEADER.match(raw)
            if m and raw.lstrip().startswith("["):
                name = re.sub(r"\s+", "", m.group(1)).replace('"', "").replace("'", "")
                self.headers.append((i, name, raw.lstrip().startswith("[[")))

    def _range(self, p: int, m: int | None) -> tuple[int, int] | None:
        providers = [k for k, (_, n, arr) in enumerate(self.headers) if arr and n == "providers"]
        if p >= len(providers):
            return None
        k = providers[p]
        if m is not None:
            end = providers[p + 1] if p + 1 < len(providers) else len(self.headers)
            models = [j for j in range(k + 1, end)
                      if self.headers[j][2] and self.headers[j][1] == "providers.models"]
            if m >= len(models):
                return None
            k = models[m]
        start = self.headers[k][0]
        stop = self.headers[k + 1][0] if k + 1 < len(self.headers) else len(self.lines)
        return start, stop

    def find_table(self, table: str, key: str | None = None) -> int | None:
        """1-based line of `key` in the top-level `[table]`, or of its header."""
        for k, (start, name, is_array) in enumerate(self.headers):
            if name == table and not is_array:
                stop = self.headers[k + 1][0] if k + 1 < len(self.headers) else len(self.lines)
                return self._line_in(start, stop, key)
        return None

    def find(self, p: int, m: int | None = None, key: str | None = None) -> int | None:
        """1-based line of `key` in provider p (model m), or of the entry's header."""
        span = self._range(p, m)
        if span is None:
            return None
        return self._line_in(*span, key)

    def _line_in(self, start: int, stop: int, key: str | None) -> int:
        """1-based line of `key` in the table whose header is line `start` (0-based, body up to
        `stop`), or of the header when `key` is None or not there."""
        if key is not None:
            pat = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=")
            for i in range(start + 1, stop):
                if pat.match(self.lines[i]):
                    return i + 1
        return start + 1


class _Validator:
    """Turns the parsed TOML into routes; the first problem raises `ConfigFileError`."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.locate = _Lines(text)
        self.warnings: list[str] = []

    def fail(self, message: str, *, where: str | None, p: int | None = None,
             m: int | None = None, key: str | None = None) -> ConfigFileError:
        line = self.locate.find(p, m, key) if p is not None else None
        return ConfigFileError(self.path, message, line=line, where=where)

    def run(self, data: dict[str, Any]) -> ProvidersConfig:
        unknown = sorted(set(data) - {"providers", *TABLES})
        if unknown:
            raise self.fail(f"unknown top-level key {unknown[0]!r} (allowed: [[providers]], "
                            f"{', '.join(f'[{t}]' for t in TABLES)})", where=None)
        providers = data.get("providers", [])
        if not isinstance(providers, list) or not all(isinstance(p, dict) for p in providers):
            raise self.fail("providers must be an array of tables: write [[providers]]", where=None)
        routes: list[ModelRoute] = []
        seen_names: dict[str, str] = {}
        seen_ids: dict[str, str] = {}
        for p, entry in enumerate(providers):
            for m, (route, where) in enumerate(self.provider(p, entry, seen_names)):
                if route.public_id in seen_ids:
                    raise self.fail(
                        f"public id {route.public_id} is already used by {seen_ids[route.public_id]} "
                        "(same base_url, kind and id: list each model once)",
                        where=where, p=p, m=m, key="id",
                    )
                seen_ids[route.public_id] = where
                routes.append(route)
        routes = self._resolve_summary_models(routes, providers)
        return ProvidersConfig(self.path, tuple(routes),
                               web_search=self.web_search(data.get("web_search")),
                               image_generation=self.image_generation(data.get("image_generation")),
                               tab=self.tab(data.get("tab"), routes),
                               features=self.features(data.get("features"), routes))

    def _resolve_summary_models(self, routes: list[ModelRoute], providers: list[dict]) -> list[ModelRoute]:
        """`summary_model` names a model of the same provider by its id, or any model as
        "<provider name>/<model id>"; the route keeps the named model's public id."""
        out, k = [], 0
        for p, entry in enumerate(providers):
            for m, model in enumerate(entry["models"]):
                route = routes[k]
                k += 1
                ref = model.get("summary_model")
                if ref is None:
                    out.append(route)
                    continue
                where = f"[[providers]] #{p + 1} {entry['name']!r} model #{m + 1} {route.model_id!r}"
                if not isinstance(ref, str) or not ref.strip():
                    raise self.fail("summary_model must be a model id of this provider, or \"<provider>/<model id>\"",
                                    where=where, p=p, m=m, key="summary_model")
                same = [r for r in routes if r.provider == route.provider and r.model_id == ref]
                name, _, model_id = ref.partition("/")
                other = [r for r in routes if r.provider == name and r.model_id == model_id]
                target = (same or other or [None])[0]
                if target is None:
                    raise self.fail(f"summary_model {ref!r} names no model in this file; write a model id of "
                                    f"provider {route.provider!r}, or \"<provider>/<model id>\"",
                                    where=where, p=p, m=m, key="summary_model")
                if target.kind not in CHAT_KINDS:
                    raise self.fail(f"summary_model {ref!r} is a fill-in-the-middle model ({target.kind}); "
                                    "summaries need a chat model", where=where, p=p, m=m, key="summary_model")
                out.append(replace(route, summary_model=None if target.public_id == route.public_id
                                   else target.public_id))
        return out

    # ---- [web_search] and [image_generation] ------------------------------------------------------

    def table_fail(self, table: str, message: str, key: str | None = None) -> ConfigFileError:
        return ConfigFileError(self.path, message, line=self.locate.find_table(table, key), where=f"[{table}]")

    def _table(self, table: str, entry: Any, allowed: frozenset[str]) -> dict[str, Any] | None:
        if entry is None:
            return None
        if not isinstance(entry, dict):
            raise self.table_fail(table, f"{table} must be a table: write [{table}]")
        for key in entry:
            if key not in allowed:
                raise self.table_fail(table, f"unknown key {key!r}; allowed: {', '.join(sorted(allowed))}", key)
        return entry

    def _url(self, table: str, entry: dict[str, Any], required: bool, default: str | None = None) -> str:
        base_url = entry.get("base_url", default)
        if base_url is None and required:
            raise self.table_fail(table, "base_url is required: an http(s) URL", "base_url")
        parts = urlsplit(base_url) if isinstance(base_url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise self.table_fail(table, "base_url must be an http:// or https:// URL with a host", "base_url")
        if parts.username or parts.password:
            raise self.table_fail(table, "base_url must not carry credentials; use api_key_env or api_key",
                                  "base_url")
        return normalize_base_url(base_url)

    def _key(self, table: str, entry: dict[str, Any], required: bool) -> tuple[str | None, str | None]:
        has_env, has_key = "api_key_env" in entry, "api_key" in entry
        if has_env and has_key or (required and not (has_env or has_key)):
            raise self.table_fail(table, "set exactly one of api_key_env (name of an environment variable) or "
                                  "api_key", "api_key" if has_key else "api_key_env" if has_env else None)
        api_key_env, api_key = entry.get("api_key_env"), entry.get("api_key")
        if has_env and (not isinstance(api_key_env, str) or not _ENV_NAME.match(api_key_env)):
            raise self.table_fail(table, "api_key_env must be the name of an environment variable (the name, "
                                  "not the key)", "api_key_env")
        if has_key and (not isinstance(api_key, str) or not api_key.strip()):
            raise self.table_fail(table, "api_key must be a non-empty string", "api_key")
        if has_env and not os.environ.get(api_key_env or ""):
            self.warnings.append(f"[{table}]: environment variable {api_key_env} is not set; calls will fail "
                                 "until it is (set it where mitmproxy runs)")
        return api_key, api_key_env

    def web_search(self, raw: Any) -> SearchConfig | None:
        entry = self._table("web_search", raw, WEB_SEARCH_KEYS)
        if entry is None:
            return None
        kind = entry.get("kind")
        if kind == "provider":
            raise self.table_fail("web_search", 'kind = "provider" (the model provider\'s own server-side search) '
                                  f"is not supported in this version; use one of {', '.join(SEARCH_KINDS)}", "kind")
        if kind not in SEARCH_KINDS:
            got = f" (got {kind!r})" if isinstance(kind, str) else ""
            raise self.table_fail("web_search", f"kind must be one of {', '.join(SEARCH_KINDS)}{got}", "kind")
        base_url = self._url("web_search", entry, kind == "searxng", DEFAULT_BASE_URLS.get(kind))
        api_key, api_key_env = self._key("web_search", entry, required=kind != "searxng")
        max_results = entry.get("max_results", 8)
        if isinstance(max_results, bool) or not isinstance(max_results, int) or not 1 <= max_results <= 20:
            raise self.table_fail("web_search", "max_results must be an integer from 1 to 20", "max_results")
        return SearchConfig(kind, base_url, api_key=api_key, api_key_env=api_key_env, max_results=max_results)

    def tab(self, raw: Any, routes: list[ModelRoute]) -> TabConfig | None:
        entry = self._table("tab", raw, TAB_KEYS)
        if entry is None:
            return None
        if "model" not in entry:
            raise self.table_fail("tab", 'model is required: "<provider name>/<model id>" (or a model id unique '
                                  "in this file)", "model")
        route = self.named_model("tab", "model", entry["model"], routes)

        def positive(key: str, default: int, most: int) -> int:
            value = entry.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
                raise self.table_fail("tab", f"{key} must be an integer from 1 to {most}", key)
            return value

        return TabConfig(route.public_id, max_tokens=positive("max_tokens", TAB_DEFAULT_MAX_TOKENS, 4096),
                         max_lines=positive("max_lines", TAB_DEFAULT_MAX_LINES, 200))

    def image_generation(self, raw: Any) -> ImageConfig | None:
        entry = self._table("image_generation", raw, IMAGE_GENERATION_KEYS)
        if entry is None:
            return None
        base_url = self._url("image_generation", entry, True)
        model = entry.get("model")
        if not isinstance(model, str) or not model.strip():
            raise self.table_fail("image_generation", "model is required: the images model, e.g. \"gpt-image-1\"",
                                  "model")
        size = entry.get("size")
        if size is not None and (not isinstance(size, str) or not re.fullmatch(r"\d+x\d+|auto", size)):
            raise self.table_fail("image_generation", "size must look like \"1024x1024\" (or \"auto\")", "size")
        api_key, api_key_env = self._key("image_generation", entry, required=True)
        return ImageConfig(base_url, model, api_key=api_key, api_key_env=api_key_env, size=size)

    # ---- [features] --------------------------------------------------------------------------------

    def features(self, raw: Any, routes: list[ModelRoute]) -> FeaturesConfig:
        entry = self._table("features", raw, frozenset((*FEATURES, "default")))
        if entry is None:
            return FeaturesConfig()
        named = [(key, self.named_model("features", key, ref, routes)) for key, ref in entry.items()]
        for key, route in named:
            if route.kind in FIM_KINDS:
                raise self.table_fail("features", f"{key} names {route.provider}/{route.model_id}, a fill-in-the-middle "
                                      f"model ({route.kind}): it serves Tab only; name a chat model", key)
        return FeaturesConfig(tuple((key, route.public_id) for key, route in named))

    def named_model(self, table: str, key: str, ref: Any, routes: list[ModelRoute]) -> ModelRoute:
        """The model a top-level table ([tab], [features]) names: "<provider name>/<model id>" (the
        model id may hold slashes itself: the provider name ends at the first one), or a model id that
        is unique in this file."""
        shape = '"<provider name>/<model id>" (e.g. "deepseek/deepseek-chat") or a model id unique in this file'
        if not isinstance(ref, str) or not ref.strip():
            raise self.table_fail(table, f"{key} must name one of your models as {shape}", key)
        provider, _, model_id = ref.partition("/")
        for route in routes:
            if route.provider == provider and route.model_id == model_id:
                return route
        by_id = [r for r in routes if r.model_id == ref]
        if len(by_id) == 1:
            return by_id[0]
        if len(by_id) > 1:
            raise self.table_fail(table, f"{key} = {ref!r} is the id of {len(by_id)} models ("
                                  + ", ".join(f"{r.provider}/{r.model_id}" for r in by_id)
                                  + '); write "<provider name>/<model id>"', key)
        known = ", ".join(f"{r.provider}/{r.model_id}" for r in routes) or "none: add [[providers]] first"
        raise self.table_fail(table, f"{key} = {ref!r} names no model in this file (models: {known})", key)

    def provider(self, p: int, entry: dict[str, Any],
                 seen_names: dict[str, str]) -> list[tuple[ModelRoute, str]]:
        where = f"[[providers]] #{p + 1}"
        name = entry.get("name")
        if isinstance(name, str) and name.strip():
            where += f" {name!r}"

        def fail(message: str, key: str | None = None) -> ConfigFileError:
            return self.fail(message, where=where, p=p, key=key)

        for key in entry:
            if key not in PROVIDER_KEYS:
                hint = " (it belongs in [[providers.models]])" if key in MODEL_KEYS else ""
                raise fail(f"unknown key {key!r}{hint}; allowed: {', '.join(sorted(PROVIDER_KEYS))}", key)
        if not isinstance(name, str) or not name.strip():
            raise fail("name is required: a non-empty string", "name")
        if name in seen_names:
            raise fail(f"provider name {name!r} is already used by {seen_names[name]}", "name")
        seen_names[name] = where

        kind = entry.get("kind")
        if kind not in PROVIDER_KINDS:
            got = f" (got {kind!r})" if isinstance(kind, str) else ""
            raise fail(f"kind must be one of {', '.join(PROVIDER_KINDS)}{got}", "kind")

        base_url = entry.get("base_url")
        if not isinstance(base_url, str):
            raise fail("base_url is required: an http(s) URL such as https://api.openai.com/v1", "base_url")
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise fail("base_url must be an http:// or https:// URL with a host", "base_url")
        if parts.username or parts.password:
            raise fail("base_url must not carry credentials; use api_key_env or api_key", "base_url")

        has_env, has_key = "api_key_env" in entry, "api_key" in entry
        if has_env == has_key:
            raise fail("set exactly one of api_key_env (name of an environment variable) or api_key",
                       "api_key" if has_key else "api_key_env" if has_env else None)
        api_key_env = entry.get("api_key_env")
        api_key = entry.get("api_key")
        if has_env and (not isinstance(api_key_env, str) or not _ENV_NAME.match(api_key_env)):
            raise fail("api_key_env must be the name of an environment variable, like OPENAI_API_KEY "
                       "(the name, not the key)", "api_key_env")
        if has_key and (not isinstance(api_key, str) or not api_key.strip()):
            raise fail("api_key must be a non-empty string", "api_key")
        if has_env and not os.environ.get(api_key_env or ""):
            self.warnings.append(f"{where}: environment variable {api_key_env} is not set; runs on its "
                                 "models will fail until it is")

        extra_headers = entry.get("extra_headers")
        if extra_headers is not None and not (
            isinstance(extra_headers, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in extra_headers.items())
        ):
            raise fail("extra_headers must be a table of string values, e.g. { \"HTTP-Referer\" = \"...\" }",
                       "extra_headers")

        prompt_cache_key = entry.get("prompt_cache_key", False)
        if not isinstance(prompt_cache_key, bool):
            raise fail("prompt_cache_key must be true or false", "prompt_cache_key")
        if prompt_cache_key and kind not in ("openai_chat", "openai_responses"):
            raise fail("prompt_cache_key is for openai_chat / openai_responses (anthropic providers always get "
                       "cache_control breakpoints)", "prompt_cache_key")

        models = entry.get("models")
        if not isinstance(models, list) or not models or not all(isinstance(m, dict) for m in models):
            raise fail("needs at least one model: add a [[providers.models]] table with an id", "models")

        return [
            (replace(route, prompt_cache_key=prompt_cache_key), model_where)
            for route, model_where in (
                self.model(p, m, model, provider=name, kind=kind, base_url=base_url, api_key=api_key,
                           api_key_env=api_key_env, extra_headers=extra_headers, provider_where=where)
                for m, model in enumerate(models)
            )
        ]

    def model(self, p: int, m: int, entry: dict[str, Any], *, provider: str, kind: str,
              base_url: str, api_key: str | None, api_key_env: str | None,
              extra_headers: dict | None, provider_where: str) -> tuple[ModelRoute, str]:
        model_id = entry.get("id")
        where = f"{provider_where} model #{m + 1}"
        if isinstance(model_id, str) and model_id.strip():
            where += f" {model_id!r}"

        def fail(message: str, key: str | None = None) -> ConfigFileError:
            return self.fail(message, where=where, p=p, m=m, key=key)

        for key in entry:
            if key not in MODEL_KEYS:
                hint = " (it belongs in [[providers]])" if key in PROVIDER_KEYS else ""
                raise fail(f"unknown key {key!r}{hint}; allowed: {', '.join(sorted(MODEL_KEYS))}", key)
        if not isinstance(model_id, str) or not model_id.strip():
            raise fail("id is required: the provider's model name, e.g. \"gpt-4.1\"", "id")

        display_name = entry.get("display_name", f"{model_id} (BYOK)")
        if not isinstance(display_name, str) or not display_name.strip():
            raise fail("display_name must be a non-empty string", "display_name")

        def positive_int(key: str) -> int | None:
            value = entry.get(key)
            # bool is an int subclass: `true` is not a token count
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise fail(f"{key} must be a positive integer", key)
            return value

        context_tokens = positive_int("context_tokens")
        max_output_tokens = positive_int("max_output_tokens")
        thinking_budget = positive_int("thinking_budget_tokens")

        effort = entry.get("reasoning_effort")
        if effort is not None and (not isinstance(effort, str) or not effort.strip()):
            raise fail("reasoning_effort must be a string such as \"low\", \"medium\" or \"high\"",
                       "reasoning_effort")
        if effort is not None and kind == "anthropic":
            raise fail("reasoning_effort is for openai_chat / openai_responses; anthropic models use "
                       "thinking_budget_tokens", "reasoning_effort")
        if thinking_budget is not None and kind != "anthropic":
            raise fail("thinking_budget_tokens is for anthropic models; openai kinds use reasoning_effort "
                       "(or extra_body for provider-specific knobs)", "thinking_budget_tokens")
        if thinking_budget and max_output_tokens and thinking_budget >= max_output_tokens:
            raise fail("thinking_budget_tokens must be smaller than max_output_tokens (Anthropic counts "
                       "thinking inside max_tokens)", "thinking_budget_tokens")

        extra_body = entry.get("extra_body")
        if extra_body is not None and not isinstance(extra_body, dict):
            raise fail("extra_body must be a table, e.g. extra_body = { top_k = 20 }", "extra_body")

        def flag(key: str, default: bool) -> bool:
            value = entry.get(key, default)
            if not isinstance(value, bool):
                raise fail(f"{key} must be true or false", key)
            return value

        compact_at = entry.get("compact_at", 0.8)
        if isinstance(compact_at, bool) or not isinstance(compact_at, (int, float)) or not 0 < compact_at <= 1:
            raise fail("compact_at must be a fraction of context_tokens above 0 and at most 1, e.g. 0.8",
                       "compact_at")
        if "compact_at" in entry and context_tokens is None:
            raise fail("compact_at needs context_tokens (it is a fraction of the context window)", "compact_at")
        prices = None
        if "prices" in entry:
            table = entry["prices"]
            if not isinstance(table, dict):
                raise fail("prices must be a table: prices = { input = 3, output = 15, cache_read = 0.3, "
                           "cache_write = 3.75 } (USD per million tokens)", "prices")
            for key in table:
                if key not in PRICE_KEYS:
                    raise fail(f"unknown key {key!r} in prices; allowed: {', '.join(PRICE_KEYS)}", "prices")
            for key, value in table.items():
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != value:
                    raise fail(f"prices.{key} must be a number of USD per million tokens, 0 or more", "prices")
            if "input" not in table or "output" not in table:
                raise fail("prices needs input and output (USD per million tokens); cache_read and cache_write "
                           "are optional and default to the input price", "prices")
            prices = Prices.of(table)

        fim = entry.get("fim", "suffix")
        if "fim" in entry and kind not in FIM_KINDS:
            raise fail(f"fim is for fill-in-the-middle kinds ({', '.join(FIM_KINDS)}); a {kind} model serving Tab "
                       "gets a chat prompt", "fim")
        if fim not in FIM_TEMPLATES:
            got = f" (got {fim!r})" if isinstance(fim, str) else ""
            raise fail(f"fim must be one of {', '.join(FIM_TEMPLATES)}{got}", "fim")
        if kind == "mistral_fim" and fim != "suffix":
            raise fail("fim must be \"suffix\" for mistral_fim: Mistral's FIM endpoint takes prompt and suffix", "fim")
        if kind in FIM_KINDS:
            for key in ("reasoning_effort", "supports_images", "supports_thinking", "compact_at", "summary_model"):
                if key in entry:
                    raise fail(f"{key} is for chat models; a {kind} model only serves Tab", key)
        supports_images = flag("supports_images", False)
        supports_thinking = flag("supports_thinking", effort is not None or thinking_budget is not None)

        problems: list[str] = []
        if kind == "anthropic" and max_output_tokens is None:
            problems.append("anthropic models need max_output_tokens (sent as max_tokens); add it to "
                            "this [[providers.models]] entry")
        full_where = f"{self.path}: {where}"
        for problem in problems:
            self.warnings.append(f"{where}: {problem}")
        route = ModelRoute(
            public_id=public_model_id(base_url, kind, model_id),
            provider=provider,
            kind=kind,
            base_url=normalize_base_url(base_url),
            model_id=model_id,
            display_name=display_name,
            api_key=api_key,
            api_key_env=api_key_env,
            context_tokens=context_tokens,
            max_output_tokens=max_output_tokens,
            reasoning_effort=effort,
            thinking_budget_tokens=thinking_budget,
            extra_body=extra_body,
            extra_headers=dict(extra_headers) if extra_headers else None,
            supports_images=supports_images,
            supports_thinking=supports_thinking,
            compact_at=float(compact_at),
            prices=prices,
            fim=fim,
            problems=tuple(problems),
            where=full_where,
        )
        return route, where


def parse_providers(text: str, path: Path | str = "<providers>") -> tuple[ProvidersConfig, list[str]]:
    """Validate TOML text; returns the config and warnings (run problems, unset key variables)."""
    path = Path(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        # tomllib's message ends with "(at line L, column C)"; lift that into the location
        msg = str(e)
        m = re.search(r"\(at line (\d+), column (\d+)\)$", msg)
        if m:
            raise ConfigFileError(path, f"TOML syntax: {msg[: m.start()].strip()}",
                                  line=int(m.group(1)), col=int(m.group(2))) from None
        raise ConfigFileError(path, f"TOML syntax: {msg}") from None
    validator = _Validator(path, text)
    return validator.run(data), validator.warnings


def load_providers(path: Path | str) -> ProvidersConfig:
    """Read and validate the providers file. Raises `ConfigFileError` (also for unreadable files)."""
    config, _ = _load(Path(path))
    return config


def _load(path: Path) -> tuple[ProvidersConfig, list[str]]:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigFileError(path, f"cannot read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigFileError(path, f"not UTF-8 (byte {e.start})") from None
    return parse_providers(text, path)


# ---- live reload --------------------------------------------------------------------------------

_Signature = tuple[int, int, int] | None
"""(mtime_ns, size, inode) of the file, or None when it does not exist."""


def file_signature(path: Path) -> _Signature:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    except OSError:
        return (-1, -1, -1)  # unreadable: let the load report why
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class WatchedFile:
    """A config file reloaded when it changes: on access (one `stat`) and from `watch()`, a poll
    that runs the `stat` and the parse in a worker thread (the event loop carries live traffic).
    One reload at a time: while the poller reloads, an access keeps the config it has."""

    what = "config file"

    def __init__(self) -> None:
        self._reloading = threading.Lock()

    def refresh(self, *, force: bool = False) -> bool:
        """Reload if the file changed (or `force`); True when the config in use changed."""
        if not self._reloading.acquire(blocking=False):
            return False  # the poller is reloading it right now
        try:
            return self._reload(force)
        finally:
            self._reloading.release()

    def _reload(self, force: bool) -> bool:
        raise NotImplementedError

    async def watch(self, interval_s: float = 2.0) -> None:
        """Poll the file until cancelled (mitmproxy runs this as a background task)."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await asyncio.to_thread(self.refresh)
            except Exception:  # never let the watcher die on a surprise; log and keep polling
                logger.exception("%s watcher failed", self.what)


class ProvidersFile(WatchedFile):
    """The current providers config of one path; reloads when the file changes.

    `current()` costs one `stat`; the file is parsed only when (mtime_ns, size, inode) changed.
    A bad edit keeps the last good config and logs the error once per change; a missing file is an
    empty config (no user models), logged once. `watch()` polls so reloads are logged promptly even
    when nothing asks for the config.
    """

    what = "providers file"

    def __init__(self, path: Path | str | None = None) -> None:
        super().__init__()
        self.error_level = logging.ERROR
        """How a broken file is logged. The addon lowers it to WARNING while mitmproxy starts (an
        error logged then makes mitmproxy exit; a broken file must leave it running, no user models)."""
        self._path: Path | None = None
        self._config = ProvidersConfig()
        self._sig: _Signature | str = "unset"
        self.last_error: ConfigFileError | None = None
        """The error of the file as it is now, or None when it loaded (or is missing)."""
        self.generation = 0
        """Bumped on every change of the config in use."""
        if path is not None:
            self.set_path(path)

    @property
    def path(self) -> Path | None:
        return self._path

    def set_path(self, path: Path | str | None) -> None:
        """Switch to another file (the `byok_config` option changed) and load it now."""
        new = Path(path).expanduser() if path else None
        if new == self._path and self._sig != "unset":
            return
        self._path = new
        self._sig = "unset"
        self._config = ProvidersConfig(new)
        self.last_error = None
        self.generation += 1
        self.refresh()

    def current(self) -> ProvidersConfig:
        self.refresh()
        return self._config

    @property
    def models(self) -> tuple[ModelRoute, ...]:
        return self.current().models

    @property
    def agent_models(self) -> tuple[ModelRoute, ...]:
        """The models the agent can run on: the picker's (fill-in-the-middle models serve Tab only)."""
        return self.current().agent_models

    def lookup(self, public_id: str) -> ModelRoute | None:
        """The route for `requested_model.model_id`, or None (not a user model: pass upstream)."""
        return self.current().lookup(public_id)

    def _reload(self, force: bool) -> bool:
        if self._path is None:
            return False
        sig = file_signature(self._path)
        if sig == self._sig and not force:
            return False
        self._sig = sig
        if sig is None:
            self.last_error = None
            logger.info("providers file %s not found: no user models, all traffic passes upstream",
                        self._path)
            return self._use(ProvidersConfig(self._path))
        try:
            config, warnings = _load(self._path)
        except ConfigFileError as e:
            self.last_error = e
            kept = (f"keeping the last good config ({len(self._config)} models)" if self._config.models
                    else "no user models until it is fixed")
            logger.log(self.error_level, "providers file error: %s; %s", e, kept)
            return False
        self.last_error = None
        for warning in warnings:
            logger.warning("providers file %s: %s", self._path, warning)
        logger.info("providers file %s: %d model(s): %s", self._path, len(config),
                    ", ".join(f"{m.public_id}={m.provider}/{m.model_id}" for m in config.models) or "-")
        if config.features:
            logger.info("providers file %s: [features] %s", self._path, ", ".join(
                f"{feature}={route.provider}/{route.model_id}" for feature, public_id in config.features.models
                if (route := config.lookup(public_id)) is not None))
        return self._use(config)

    def _use(self, config: ProvidersConfig) -> bool:
        changed = (config.models, config.web_search, config.image_generation, config.tab, config.features) != (
            self._config.models, self._config.web_search, self._config.image_generation, self._config.tab,
            self._config.features)
        self._config = config
        if changed:
            self.generation += 1
        return changed


def redact(text: str, routes: Iterable[ModelRoute]) -> str:
    """Replace configured key material in `text` (for provider bodies or errors stored elsewhere)."""
    for route in routes:
        for secret in _secrets(route):
            text = text.replace(secret, "<redacted>")
    return text


def _secrets(route: ModelRoute) -> list[str]:
    out = []
    key = route.resolve_api_key()
    if key and len(key) >= 4:
        out.append(key)
    for value in (route.extra_headers or {}).values():
        if len(value) >= 8:  # header values may be tokens; short ones (e.g. "1") would redact noise
            out.append(value)
    return out
