"""The team file: which proxyauth user may use which models, with whose API key, within which budget.

    admins = ["alice"]                 # who sees every user's usage, budgets and traces on the dashboard

    [defaults]                         # every authenticated user
    models = ["*"]                     # fnmatch patterns on model id, public id or "provider/model id"
    monthly_tokens = 2000000           # input + output tokens per calendar month (UTC); absent = no limit
    monthly_usd = 20.0                 # needs `prices` on the models (docs/providers.md)

    [groups.research]
    members = ["alice", "carol"]
    models = ["claude-*"]
    monthly_usd = 200

    [users.bob]
    monthly_tokens = 10000000
    keys.anthropic = { api_key_env = "BOB_ANTHROPIC_KEY" }   # bob's own key for provider "anthropic"

Each setting of a user comes from the most specific place that sets it: `[users.NAME]`, then the
first `[groups.*]` (in file order) that lists the user, then `[defaults]`. `keys` merge the same way
per provider. A user the file does not name gets `[defaults]`. Pure: no mitmproxy, no store.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..providers.config import ConfigFileError, ModelRoute, WatchedFile, file_signature
from ..wire.errors import AccessDenied, BudgetExceeded, ConfigError

log = logging.getLogger("byok.team")

POLICY_KEYS = frozenset({"models", "monthly_tokens", "monthly_usd", "keys"})
GROUP_KEYS = POLICY_KEYS | {"members"}
KEY_KEYS = frozenset({"api_key", "api_key_env"})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class OwnKey:
    """A user's own key for one provider. `repr` never shows the key."""

    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None


@dataclass(frozen=True)
class UserPolicy:
    user: str
    models: tuple[str, ...] = ("*",)
    monthly_tokens: int | None = None
    monthly_usd: float | None = None
    keys: dict[str, OwnKey] = field(default_factory=dict)
    source: str = "[defaults]"
    """Where the policy's settings came from, for messages."""

    def allows(self, route: ModelRoute) -> bool:
        names = (route.model_id, route.public_id, f"{route.provider}/{route.model_id}")
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.models for name in names)

    def route_for(self, route: ModelRoute) -> ModelRoute:
        """The route with this user's own key for its provider, if they have one."""
        own = self.keys.get(route.provider)
        if own is None:
            return route
        return dataclasses.replace(route, api_key=own.api_key, api_key_env=own.api_key_env)

    @property
    def has_budget(self) -> bool:
        return self.monthly_tokens is not None or self.monthly_usd is not None


@dataclass(frozen=True)
class TeamConfig:
    path: Path | None = None
    defaults: dict = field(default_factory=dict)
    groups: tuple[tuple[str, frozenset[str], dict], ...] = ()
    users: dict[str, dict] = field(default_factory=dict)
    admins: frozenset[str] = frozenset()
    """proxyauth users who see every user's usage, budgets and traces on the dashboard."""

    def policy(self, user: str) -> UserPolicy:
        layers = [("[defaults]", self.defaults)]
        layers += [(f"[groups.{name}]", settings) for name, members, settings in reversed(self.groups)
                   if user in members]
        if user in self.users:
            layers.append((f"[users.{user}]", self.users[user]))
        merged: dict[str, Any] = {}
        keys: dict[str, OwnKey] = {}
        sources = []
        for where, settings in layers:  # least specific first: later layers override
            if settings:
                sources.append(where)
            for key, value in settings.items():
                if key == "keys":
                    keys.update(value)
                elif key != "members":
                    merged[key] = value
        return UserPolicy(user=user, models=tuple(merged.get("models", ("*",))),
                          monthly_tokens=merged.get("monthly_tokens"), monthly_usd=merged.get("monthly_usd"),
                          keys=keys, source=" + ".join(sources) or "[defaults]")


def month_start_ms(now_ms: int) -> int:
    """Epoch ms of the start of the calendar month (UTC) that `now_ms` falls in."""
    now = datetime.fromtimestamp(now_ms / 1000, tz=timezone.utc)
    return int(datetime(now.year, now.month, 1, tzinfo=timezone.utc).timestamp() * 1000)


def next_month_start(now_ms: int) -> str:
    now = datetime.fromtimestamp(now_ms / 1000, tz=timezone.utc)
    year, month = (now.year + 1, 1) if now.month == 12 else (now.year, now.month + 1)
    return f"{year:04d}-{month:02d}-01"


# ---- loading -------------------------------------------------------------------------------------


def parse_team(text: str, path: Path | str = "<team>") -> TeamConfig:
    path = Path(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigFileError(path, f"not valid TOML: {e}") from None

    def fail(where: str, message: str) -> ConfigFileError:
        return ConfigFileError(path, message, where=where)

    unknown = sorted(set(data) - {"defaults", "groups", "users", "admins"})
    if unknown:
        raise fail(unknown[0], "unknown table (expected admins = [...], [defaults], [groups.NAME], [users.NAME])")
    admins = data.get("admins", [])
    if not isinstance(admins, list) or not all(isinstance(a, str) and a for a in admins):
        raise fail("admins", "admins must be a list of user names (admins = [\"alice\"])")

    def settings(where: str, table: Any, allowed: frozenset[str]) -> dict:
        if not isinstance(table, dict):
            raise fail(where, "must be a table")
        extra = sorted(set(table) - allowed)
        if extra:
            raise fail(where, f"unknown key {extra[0]!r} (expected one of {', '.join(sorted(allowed))})")
        out: dict[str, Any] = {}
        if "models" in table:
            models = table["models"]
            if not isinstance(models, list) or not all(isinstance(m, str) and m for m in models):
                raise fail(where, "models must be a list of model patterns (strings)")
            out["models"] = tuple(models)
        if "monthly_tokens" in table:
            value = table["monthly_tokens"]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise fail(where, "monthly_tokens must be a whole number of tokens, 0 or more")
            out["monthly_tokens"] = value
        if "monthly_usd" in table:
            value = table["monthly_usd"]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise fail(where, "monthly_usd must be a number of dollars, 0 or more")
            out["monthly_usd"] = float(value)
        if "keys" in table:
            keys = table["keys"]
            if not isinstance(keys, dict):
                raise fail(where, "keys must be a table of provider name = { api_key_env = ... }")
            out["keys"] = {name: own_key(f"{where} keys.{name}", spec) for name, spec in keys.items()}
        if "members" in table:
            members = table["members"]
            if not isinstance(members, list) or not all(isinstance(m, str) and m for m in members):
                raise fail(where, "members must be a list of user names")
            out["members"] = frozenset(members)
        return out

    def own_key(where: str, spec: Any) -> OwnKey:
        if not isinstance(spec, dict) or set(spec) - KEY_KEYS or len(spec) != 1:
            raise fail(where, "must be { api_key_env = \"VAR\" } or { api_key = \"...\" }")
        if "api_key_env" in spec:
            name = spec["api_key_env"]
            if not isinstance(name, str) or not _ENV_NAME.match(name):
                raise fail(where, "api_key_env must be an environment variable name")
            return OwnKey(api_key_env=name)
        if not isinstance(spec["api_key"], str) or not spec["api_key"]:
            raise fail(where, "api_key must be a non-empty string")
        return OwnKey(api_key=spec["api_key"])

    defaults = settings("[defaults]", data.get("defaults", {}), POLICY_KEYS)
    groups = []
    for name, table in (data.get("groups") or {}).items():
        group = settings(f"[groups.{name}]", table, GROUP_KEYS)
        if "members" not in group:
            raise fail(f"[groups.{name}]", "a group needs members = [...]")
        groups.append((name, group.pop("members"), group))
    users = {name: settings(f"[users.{name}]", table, POLICY_KEYS)
             for name, table in (data.get("users") or {}).items()}
    return TeamConfig(path=path, defaults=defaults, groups=tuple(groups), users=users, admins=frozenset(admins))


class TeamFile(WatchedFile):
    """The team file of one path, reloaded when it changes (a bad edit keeps the last good one).

    Broken or missing at start, it is an error (mitmproxy exits): the team rules must be known
    before anyone is served."""

    what = "team file"

    def __init__(self, path: Path | str | None = None) -> None:
        super().__init__()
        self.path = Path(path).expanduser() if path else None
        self._config = TeamConfig(self.path)
        self._sig: tuple | None | str = "unset"
        self.last_error: ConfigFileError | None = None
        if self.path is not None:
            self.refresh()

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def current(self) -> TeamConfig:
        self.refresh()
        return self._config

    def policy(self, user: str) -> UserPolicy:
        return self.current().policy(user)

    def _reload(self, force: bool) -> bool:
        if self.path is None:
            return False
        sig = file_signature(self.path)
        if sig == self._sig and not force:
            return False
        self._sig = sig
        if sig is None:
            self.last_error = ConfigFileError(self.path, "team file not found")
            log.error("team file %s not found: no user may start a local run until it exists", self.path)
            self._config = TeamConfig(self.path, defaults={"models": ()})
            return True
        try:
            self._config = parse_team(self.path.read_text(encoding="utf-8"), self.path)
        except (ConfigFileError, OSError, UnicodeDecodeError) as e:
            self.last_error = e if isinstance(e, ConfigFileError) else ConfigFileError(self.path, str(e))
            log.error("team file error: %s; keeping the last good team config", self.last_error)
            return False
        self.last_error = None
        config = self._config
        log.info("team file %s: %d group(s), %d user(s) named, defaults: %s", self.path, len(config.groups),
                 len(config.users), ", ".join(f"{k}={v}" for k, v in config.defaults.items() if k != "keys") or "-")
        return True


def used_tokens(kind: str | None, usage: dict[str, int]) -> int:
    """Prompt plus output tokens of one model's calls. Anthropic reports cache reads and writes apart
    from `input`; OpenAI-style providers count them inside it."""
    prompt = usage["input"] + (usage["cache_read"] + usage["cache_write"] if kind == "anthropic" else 0)
    return prompt + usage["output"]


# ---- what the engine asks ----------------------------------------------------------------------------


class Team:
    """The turn's questions to the team file: may this user use this model, with whose key, and is
    their monthly budget left. Without a team file (the single-user default) every answer is yes."""

    def __init__(self, file: TeamFile | None = None, prices_of: Callable[[str | None], Any] = lambda public_id: None,
                 ) -> None:
        self.file = file if file is not None and file.enabled else None
        self.prices_of = prices_of
        """public model id -> its `prices` in the providers file as it is now (pricing.Prices) or None."""

    @property
    def enabled(self) -> bool:
        return self.file is not None

    def policy(self, user: str | None) -> UserPolicy | None:
        if self.file is None:
            return None
        if user is None:
            raise AccessDenied("this cursor-byok serves a team: sign in through the proxy's authentication "
                               "(proxyauth: the user name and password in Cursor's http.proxy URL)")
        return self.file.policy(user)

    def route_for(self, user: str | None, route: ModelRoute) -> ModelRoute:
        policy = self.policy(user)
        if policy is None:
            return route
        if not policy.allows(route):
            raise AccessDenied(f"user {user} may not use model {route.model_id} ({route.public_id}); "
                               f"their models are {', '.join(policy.models) or 'none'} ({policy.source})")
        if policy.monthly_usd is not None and route.prices is None:
            raise ConfigError(f"user {user} has a dollar budget (monthly_usd, {policy.source}) but model "
                              f"{route.model_id} ({route.public_id}) has no prices in the providers file")
        return policy.route_for(route)

    async def check_budget(self, store, user: str | None, now_ms: Callable[[], int]) -> None:
        """Raise BudgetExceeded when `user` has used their monthly budget (before a provider call).
        `now_ms` is read only when there is a budget (a test clock counts its reads)."""
        policy = self.policy(user)
        if policy is None or not policy.has_budget:
            return
        now_ms = now_ms()
        usage = await store.usage_since(user, month_start_ms(now_ms))
        tokens = sum(used_tokens(kind, u) for (_, kind), u in usage.items())
        resets = next_month_start(now_ms)
        if policy.monthly_tokens is not None and tokens >= policy.monthly_tokens:
            raise BudgetExceeded(
                f"user {user} has used {tokens:,} of {policy.monthly_tokens:,} tokens this month "
                f"({policy.source}); the budget resets on {resets} UTC")
        if policy.monthly_usd is not None:
            dollars = self.dollars(usage)
            if dollars >= policy.monthly_usd:
                raise BudgetExceeded(
                    f"user {user} has used ${dollars:,.2f} of ${policy.monthly_usd:,.2f} this month "
                    f"({policy.source}); the budget resets on {resets} UTC")

    def dollars(self, usage: dict) -> float:
        """Cost of per-model token sums at the models' prices as configured now (pricing.py's formula
        per dialect). A model that has no prices any more adds nothing."""
        from ..providers.pricing import cost

        total = 0.0
        for (public_id, kind), u in usage.items():
            prices = self.prices_of(public_id)
            if prices is not None:
                total += float(cost(prices, kind, input_tokens=u["input"], output_tokens=u["output"],
                                    cache_read_tokens=u["cache_read"], cache_write_tokens=u["cache_write"]))
        return total
