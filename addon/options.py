"""Every cursor-byok option: `--set name=value`, shown with its help in mitmweb's options editor."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mitmproxy import ctx, exceptions

DEFAULT_HOME = Path("~/.cursor-byok")
# Declared as str: mitmproxy 11's --set cannot parse float options.
SECONDS_OPTIONS = ("byok_route_wait_s", "byok_ack_timeout_s", "byok_heartbeat_s", "byok_provider_idle_s",
                   "byok_provider_headers_s")


def parse_seconds(name: str, value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise exceptions.OptionsError(f"{name} must be a number of seconds, not {value!r}") from None
    if not seconds > 0:
        raise exceptions.OptionsError(f"{name} must be a positive number of seconds, not {value!r}")
    return seconds
MODES = ("intercept", "observe")


@dataclass(frozen=True)
class Settings:
    """A typed snapshot of the options, for modules that must not import mitmproxy."""

    config: Path
    db: Path | str
    """A SQLite path, or a postgresql:// URL (kept as given)."""
    mode: str
    record: bool
    verbose_llm: bool
    hosts: tuple[str, ...]
    route_wait_s: float
    ack_timeout_s: float
    heartbeat_s: float
    deterministic: bool
    gc_days: int = 0
    provider_idle_s: float = 300.0
    provider_headers_s: float = 300.0
    web_fetch_private: bool = False
    web_fetch_max_kb: int = 2048
    web_fetch_check_redirects: bool = True
    team: Path | None = None
    """The team file (docs/team.md); None: the single-user proxy."""
    replica: str = ""
    """This process's name among replicas sharing one PostgreSQL ('' = host:pid)."""
    warm_cache_mib: int = 256

    def is_cursor_host(self, host: str) -> bool:
        return any(fnmatch.fnmatchcase(host.lower(), pattern) for pattern in self.hosts)


class Options:
    """Declares and validates the options (one small addon, no traffic hooks)."""

    def load(self, loader) -> None:
        loader.add_option(
            "byok_config", str, str(DEFAULT_HOME / "providers.toml"),
            "cursor-byok providers file (TOML): your providers, API keys (or the env vars holding them) and "
            "models. Missing file = no user models, all traffic passes upstream. Reloaded when it changes.",
        )
        loader.add_option(
            "byok_db", str, str(DEFAULT_HOME / "byok.db"),
            "cursor-byok database (conversations, blobs, runs, provider calls, frames): a SQLite file path, "
            "or a postgresql://user:password@host/dbname URL (the team server; docs/team.md). "
            "Created and migrated at start.",
        )
        loader.add_option(
            "byok_team", str, "",
            "cursor-byok team file (TOML, docs/team.md): which proxyauth user may use which models, with whose "
            "API key, within which monthly budget. Set, every local run needs a proxyauth user. Empty: off "
            "(one user, every model).",
        )
        loader.add_option(
            "byok_replica", str, "",
            "This proxy's name when several share one PostgreSQL store (docs/team.md): recorded with each run, "
            "and named when a client's append reaches another replica. Empty: host name and process id.",
        )
        loader.add_option(
            "byok_mode", str, "intercept",
            "intercept: answer Agent runs on your models locally, pass everything else upstream. "
            "observe: answer nothing, record and decode the real Cursor <-> backend traffic.",
            choices=MODES,
        )
        loader.add_option(
            "byok_record", bool, True, "Record every Connect frame of the agent RPCs in the database, and the "
            "wire facts `cursor-byok verify` checks (Connect headers, appends as they arrived, Cursor hosts)."
        )
        loader.add_option(
            "byok_verbose_llm", bool, False,
            "Also store provider request bodies (keys redacted) and raw SSE bytes for each provider call.",
        )
        loader.add_option(
            "byok_hosts", Sequence[str], ["*.cursor.sh"],
            "Host patterns (fnmatch) of Cursor's backend whose Agent RPCs cursor-byok may answer.",
        )
        loader.add_option(
            "byok_route_wait_s", str, "30",
            "Seconds a RunSSE or an early BidiAppend waits for its request's run_request before failing.",
        )
        loader.add_option(
            "byok_ack_timeout_s", str, "30",
            "Seconds to wait for the client to acknowledge a blob SET before the run fails.",
        )
        loader.add_option(
            "byok_heartbeat_s", str, "5",
            "Send a heartbeat on an idle RunSSE stream after this many seconds (waiting on a provider or tool).",
        )
        loader.add_option(
            "byok_provider_idle_s", str, "300",
            "Seconds a provider's response stream may stay silent (no event, no keep-alive) before the run "
            "ends with a retryable provider error. Long: reasoning models may think silently for minutes.",
        )
        loader.add_option(
            "byok_provider_headers_s", str, "300",
            "Seconds to wait for a provider's response headers before the run ends with a retryable provider "
            "error (some servers send none until the first token, or load the model first).",
        )
        loader.add_option(
            "byok_gc_days", int, 0,
            "At start-up, delete stored blobs that no checkpoint or message references any more and that "
            "are older than this many days (0: never). Also: `cursor-byok gc`.",
        )
        loader.add_option(
            "byok_web_fetch_private", bool, False,
            "Let WebFetch reach loopback, link-local and private addresses (localhost, your LAN). Off: such "
            "URLs are refused before you are asked, so the model cannot aim your machine at them.",
        )
        loader.add_option(
            "byok_web_fetch_check_redirects", bool, True,
            "WebFetch: once you approved a URL, the proxy follows its redirects itself (headers only), checks "
            "each next address before it is requested, and has Cursor fetch where they end. Off: Cursor follows "
            "redirects on its own and only where it ended up is checked, after the fetch.",
        )
        loader.add_option(
            "byok_web_fetch_max_kb", int, 2048,
            "WebFetch reads at most this many KB of a page Cursor fetched; the rest is cut and the model is told.",
        )
        loader.add_option(
            "byok_warm_cache_mib", int, 256,
            "MiB of conversation history kept in memory between turns, least recently used first out: a "
            "conversation continued from where its last turn left it reads only its new messages from the "
            "database. Counted as stored history (held in memory it takes about 1.7 times as much). 0: keep none.",
        )
        loader.add_option(
            "byok_deterministic", bool, False,
            "Fixed clock and counting ids, so scenario captures regenerate byte for byte (tests only).",
        )

    def configure(self, updated: set[str]) -> None:
        for name in SECONDS_OPTIONS:
            if name in updated:
                parse_seconds(name, getattr(ctx.options, name))
        if "byok_gc_days" in updated and ctx.options.byok_gc_days < 0:
            raise exceptions.OptionsError("byok_gc_days must be 0 (off) or a number of days")
        if "byok_web_fetch_max_kb" in updated and ctx.options.byok_web_fetch_max_kb <= 0:
            raise exceptions.OptionsError("byok_web_fetch_max_kb must be a positive number of KB")
        if "byok_warm_cache_mib" in updated and ctx.options.byok_warm_cache_mib < 0:
            raise exceptions.OptionsError("byok_warm_cache_mib must be 0 (keep none) or a number of MiB")
        if "byok_hosts" in updated and not ctx.options.byok_hosts:
            raise exceptions.OptionsError("byok_hosts must name at least one host pattern")


def db_target(value: str) -> Path | str:
    from byok.store.sql import is_postgres_url

    return value if is_postgres_url(value) else Path(value).expanduser()


def current() -> Settings:
    o = ctx.options
    return Settings(
        config=Path(o.byok_config).expanduser(),
        db=db_target(o.byok_db),
        mode=o.byok_mode,
        record=o.byok_record,
        verbose_llm=o.byok_verbose_llm,
        hosts=tuple(o.byok_hosts),
        route_wait_s=parse_seconds("byok_route_wait_s", o.byok_route_wait_s),
        ack_timeout_s=parse_seconds("byok_ack_timeout_s", o.byok_ack_timeout_s),
        heartbeat_s=parse_seconds("byok_heartbeat_s", o.byok_heartbeat_s),
        deterministic=o.byok_deterministic,
        gc_days=o.byok_gc_days,
        provider_idle_s=parse_seconds("byok_provider_idle_s", o.byok_provider_idle_s),
        provider_headers_s=parse_seconds("byok_provider_headers_s", o.byok_provider_headers_s),
        web_fetch_private=o.byok_web_fetch_private,
        web_fetch_max_kb=o.byok_web_fetch_max_kb,
        web_fetch_check_redirects=o.byok_web_fetch_check_redirects,
        team=Path(o.byok_team).expanduser() if o.byok_team else None,
        replica=o.byok_replica,
        warm_cache_mib=o.byok_warm_cache_mib,
    )
