"""`cursor-byok doctor`: checks every link between Cursor and your model, and says how to fix each.

Checks (each ok / warn / FAIL with a fix): mitmproxy's CA files in the confdir and whether the OS
trusts that CA, the providers file, the team file, the database (and whether it is the one the
running proxy writes), that the proxy port listens (serves the same CA, wants credentials), whether
an agent run reached the proxy recently, and Cursor's own proxy settings. When no run reached the
proxy recently it walks through "no request reached us" step by step. It only reads: nothing is
installed, changed or migrated (an empty database stays empty), and every path can be pointed
elsewhere (tests never read `~`). A password in --proxy is never printed.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from rich.text import Text

from .common import (
    CA_CERT, CA_KEY, CREDENTIALS_FIX, ProxyAnswer, StoreUnavailable, ask_proxy, console, db_arg, default_config,
    default_confdir, default_db, default_proxy, iso_ms, platform_name, shown_proxy,
)
from .output import line

STYLE = {"ok": ("ok", "green"), "warn": ("warn", "yellow"), "fail": ("FAIL", "bold red"), "info": ("info", "cyan")}
LINUX_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem")


@dataclass
class Check:
    name: str
    status: str
    """ok | warn | fail | info"""
    message: str
    fix: list[str] = field(default_factory=list)
    facts: dict = field(default_factory=dict, repr=False)
    """What the check found, for later steps (the database check: whether the proxy writes it)."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor", help="check CA, providers file, database, proxy, recent traffic and Cursor's settings",
        description="Check each link between Cursor and your model and explain how to fix what is broken "
                    "(read-only). Exit status 1 when a check fails.")
    p.add_argument("--confdir", type=Path, default=None, help="mitmproxy confdir holding the CA (default ~/.mitmproxy)")
    p.add_argument("--config", type=Path, default=None, help="providers file (default ~/.cursor-byok/providers.toml)")
    p.add_argument("--db", type=db_arg, default=None,
                   help="SQLite store or postgresql:// URL (default: ~/.cursor-byok/byok.db)")
    p.add_argument("--proxy", default=None,
                   help="the proxy's URL, with USER:PASSWORD@ when it wants proxyauth (default http://127.0.0.1:8080)")
    p.add_argument("--team", type=Path, default=None,
                   help="team file to check (default: the one the running proxy reports, if any)")
    p.add_argument("--cursor-settings", type=Path, default=None,
                   help="Cursor's settings.json (default: the per-OS location)")
    p.add_argument("--os", choices=("macos", "linux", "windows"), default=None,
                   help="whose set-up to check and explain (default: this machine's)")
    p.add_argument("--recent", type=float, default=60, metavar="MINUTES",
                   help="an agent run within this many minutes counts as recent traffic (default 60)")
    p.add_argument("--timeout", type=float, default=2.0, help="seconds for each network check (default 2)")
    p.add_argument("--system-ca-bundle", type=Path, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=run)


# ---- the checks ------------------------------------------------------------------------------------


def check_ca(confdir: Path) -> tuple[Check, bytes | None]:
    cert = confdir / CA_CERT
    start = f"start the proxy once (`mitmdump -s addon/cursor_byok.py`): mitmproxy creates its CA in {confdir}"
    if not cert.exists():
        return Check("CA", "fail", f"no {CA_CERT} in {confdir}", [
            start, "or point --confdir at the folder you run mitmproxy with (`--set confdir=...`)"]), None
    try:
        from cryptography import x509

        pem = cert.read_bytes()
        parsed = x509.load_pem_x509_certificate(pem)
    except Exception as e:  # any unreadable file is the same finding
        return Check("CA", "fail", f"{cert} is not a PEM certificate ({e})", [
            f"move {confdir} aside and restart the proxy to create a new CA (then trust the new one)"]), None
    expires = parsed.not_valid_after_utc
    if expires.timestamp() < time.time():
        return Check("CA", "fail", f"{cert} expired on {expires:%Y-%m-%d}", [
            f"move {confdir} aside, restart the proxy, trust the new CA"]), pem
    problems = [] if (confdir / CA_KEY).exists() else [f"{CA_KEY} (the signing key) is missing"]
    subject = parsed.subject.rfc4514_string()
    if problems:
        return Check("CA", "fail", f"{cert}: {problems[0]}", [f"move {confdir} aside and restart the proxy"]), pem
    return Check("CA", "ok", f"{cert} ({subject}, valid until {expires:%Y-%m-%d})"), pem


def _der_blocks(pem_text: bytes) -> list[bytes]:
    import base64

    blocks = re.findall(rb"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", pem_text, re.S)
    out = []
    for block in blocks:
        try:
            out.append(base64.b64decode(b"".join(block.split())))
        except ValueError:
            continue
    return out


def check_trust(pem: bytes | None, os_name: str, bundle: Path | None, confdir: Path) -> Check:
    if pem is None:
        return Check("CA trust", "info", "skipped: no CA to look for")
    der = _der_blocks(pem)[:1]
    cert = confdir / CA_CERT
    if os_name == "linux":
        candidates = [bundle] if bundle else [Path(os.environ["SSL_CERT_FILE"])] if os.environ.get("SSL_CERT_FILE") \
            else [Path(p) for p in LINUX_BUNDLES]
        for path in candidates:
            if path.exists():
                if der and der[0] in _der_blocks(path.read_bytes()):
                    return Check("CA trust", "ok", f"the CA is in the system bundle {path}")
                return Check("CA trust", "warn", f"the CA is not in the system bundle {path}", [
                    f"sudo cp {cert} /usr/local/share/ca-certificates/mitmproxy.crt && sudo update-ca-certificates",
                    f"or start Cursor with NODE_EXTRA_CA_CERTS={cert} (docs/cursor-setup.md)"])
        return Check("CA trust", "info", "no system CA bundle found to check; see docs/cursor-setup.md")
    if os_name == "macos" and platform_name() == "macos":
        try:
            found = subprocess.run(["security", "find-certificate", "-a", "-c", "mitmproxy", "-p"],
                                   capture_output=True, timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired) as e:
            return Check("CA trust", "info", f"could not ask the keychain ({e})")
        if der and der[0] in _der_blocks(found):
            return Check("CA trust", "ok", "the CA is in a keychain (check it is marked 'Always Trust')")
        return Check("CA trust", "warn", "the CA is not in any keychain", [
            f"sudo security add-trusted-cert -d -r trustRoot -k /Library/Keychains/System.keychain {cert}"])
    return Check("CA trust", "info", f"not checked automatically on {os_name}: docs/cursor-setup.md shows how to "
                 "trust the CA")


def _served_summary(served: dict) -> str:
    models = served["config"].get("models") or []
    names = ", ".join(f"{m.get('display_name')} [{m.get('public_id')}]" for m in models)
    return f"{len(models)} model(s)" + (f": {names}" if names else "")


def check_providers(path: Path, served: dict | None = None) -> Check:
    """The providers file as this shell reads it, and, when the proxy answers its status, what the
    running proxy really serves (it keeps the last good config over a bad edit, and only its own
    environment holds the key variables)."""
    from byok.providers.config import ConfigFileError, load_providers

    proxy_config = (served or {}).get("config") or {}
    served_models = {m.get("public_id"): m for m in proxy_config.get("models") or [] if isinstance(m, dict)}
    if not path.exists():
        return Check("providers", "warn", f"{path} does not exist: no user models, Cursor's picker shows only its own",
                     ["write it (docs/providers.md), the running proxy picks it up within seconds"])
    try:
        config = load_providers(path)
    except ConfigFileError as e:
        if served is None:
            truth = ("a running proxy keeps serving the last good config it loaded from this file until it is "
                     "fixed (a proxy started now has no user models from it); the proxy did not answer, so doctor "
                     "cannot tell which it serves")
        elif served_models:
            truth = f"the running proxy keeps serving its last good config: {_served_summary(served)}"
        else:
            truth = "the running proxy has no user models until it is fixed"
        return Check("providers", "fail", str(e),
                     ["fix the line named above (docs/providers.md lists every key)", truth])
    if not config.models:
        return Check("providers", "warn", f"{path} defines no models", ["add [[providers.models]] (docs/providers.md)"])
    fixes, status = [], "ok"
    for m in config.models:
        if m.problems:
            status = "warn"
            fixes.append(f"{m.display_name}: {m.problems[0]}")
        elif m.resolve_api_key() is None:
            served_model = served_models.get(m.public_id)
            if served_model is not None and served_model.get("key_set"):
                continue  # unset in this shell only: mitmdump's environment has it
            fixes.append(_key_finding(m, served_model))
            # a warning only when the proxy itself says so; otherwise doctor cannot tell
            status = "warn" if served_model is not None else ("info" if status == "ok" else status)
    if served is not None:
        missing = [m for m in config.models if m.public_id not in served_models]
        proxy_path = proxy_config.get("path")
        if missing:
            status = "warn"
            where = f" (it reads {proxy_path})" if proxy_path and Path(proxy_path) != path else ""
            fixes.append(f"the running proxy does not serve {', '.join(f'{m.display_name} [{m.public_id}]' for m in missing)}"
                         f"{where}: start it with --set byok_config={path}, or wait a few seconds after an edit")
        if proxy_config.get("error"):
            fixes.append(f"the running proxy reports: {proxy_config['error']}")
    names = ", ".join(f"{m.display_name} [{m.public_id}]" for m in config.models)
    return Check("providers", status, f"{path}: {len(config.models)} model(s): {names}", fixes)


def _key_finding(m, served_model: dict | None) -> str:
    """An API key variable unset in this shell: only the proxy's environment matters."""
    if served_model is not None:
        return (f"{m.display_name}: environment variable {m.api_key_env} is not set in the running proxy's "
                "environment: set it in the shell that starts mitmdump, then restart mitmdump")
    return (f"{m.display_name}: environment variable {m.api_key_env} is unset in this shell; doctor cannot "
            "ask the running proxy whether its environment has it (it must be set where mitmdump runs)")


def check_db(path: Path | str, served: dict | None = None) -> tuple[Check, dict]:
    """The store as it is: opened without migrating (doctor writes nothing, an empty database stays
    empty), and compared with the one the running proxy says it writes."""
    from byok.extras import install_command, missing_message
    from byok.status import store_location
    from byok.store.sql import is_postgres_url, redact_url

    facts: dict = {}
    server = is_postgres_url(str(path))
    shown = redact_url(str(path)) if server else path
    if server and (lacking := missing_message("team", "a postgresql:// database")) is not None:
        return Check("database", "fail", lacking, [f"{install_command('team')} in your cursor-byok checkout"]), facts
    proxy_store = (served or {}).get("store")
    mine = store_location(path if server else Path(path))
    same = None if not isinstance(proxy_store, dict) else proxy_store.get("location") == mine["location"]
    elsewhere = ([] if same is not False else
                 [f"the running proxy writes {proxy_store.get('location')}: pass --db with that, or restart the "
                  f"proxy with --set byok_db={shown}"])
    if not server and not path.exists():
        return Check("database", "warn", f"{path} does not exist yet", elsewhere or [
            "the proxy creates it on start: start it, or pass --db with the path given to `--set byok_db=...`"]), facts
    try:
        from .common import open_db

        conn = open_db(path, migrate=False)
        if "runs" not in _tables(conn, server):
            conn.close()
            return Check("database", "warn", f"{shown}: no cursor-byok tables yet (doctor creates none)", elsewhere or [
                "the proxy creates them when it starts with --set byok_db=... pointing here"]), facts
        for table in ("runs", "llm_calls", "frames"):
            facts[table] = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        facts["last_frame_ms"] = conn.execute("SELECT max(ts_ms) FROM frames").fetchone()[0]
        facts["last_run_ms"] = conn.execute("SELECT max(started_at_ms) FROM runs").fetchone()[0]
        if server:
            facts["server"] = server_facts(conn)
        conn.close()
    except StoreUnavailable as e:
        return Check("database", "fail", str(e), [
            "is the server up and the URL right (user, password, database, ?sslmode)? docs/team.md"]), facts
    except Exception as e:
        if server:
            return Check("database", "fail", f"{shown}: {e}", [
                "is the server up and the URL right (user, password, database, ?sslmode)? docs/team.md"]), facts
        return Check("database", "fail", f"{path} cannot be read: {e}", [
            "is it a cursor-byok database? move it aside; the proxy creates a new one"]), facts
    facts["proxy_writes_it"] = same
    counts = f"{facts['runs']} runs, {facts['llm_calls']} provider calls, {facts['frames']} frames"
    if same is False:
        return Check("database", "warn", f"{shown}: {counts}; NOT the database the running proxy writes", elsewhere,
                     facts=facts), facts
    where = "; the running proxy writes this database" if same else ""
    return Check("database", "ok", f"{shown}: {counts}{where}", facts=facts), facts


def _tables(conn, server: bool) -> set[str]:
    if server:
        sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
    else:
        sql = "SELECT name FROM sqlite_master WHERE type = 'table'"
    return {r[0] for r in conn.execute(sql).fetchall()}


def check_team(path: Path | None, served: dict | None) -> Check | None:
    """The team file: the one given, else the one the running proxy reports; None when neither."""
    from byok.agent.team import parse_team
    from byok.providers.config import ConfigFileError

    team = (served or {}).get("team") or {}
    path = path or (Path(team["path"]) if team.get("path") else None)
    if path is None:
        return None
    fixes = [f"the running proxy reports: {team['error']} (it keeps its last good team rules)"] if team.get("error") else []
    try:
        config = parse_team(path.read_text(encoding="utf-8"), path)
    except FileNotFoundError:
        return Check("team file", "fail", f"{path} does not exist: nobody may start a local run", [
            "write it (docs/team.md)", *fixes])
    except (ConfigFileError, OSError, UnicodeDecodeError) as e:
        return Check("team file", "fail", str(e), ["fix the line named above (docs/team.md)", *fixes])
    if team.get("path") and Path(team["path"]) != path:
        fixes.append(f"the running proxy uses {team['path']}, not this file")
    return Check("team file", "warn" if fixes else "ok",
                 f"{path}: {len(config.groups)} group(s), {len(config.users)} user(s) named", fixes)


def server_facts(conn) -> dict:
    """What a team server's store says about its replicas and users (runs of the last 24 hours)."""
    import time

    since = int(time.time() * 1000) - 86_400_000
    replicas = [tuple(r) for r in conn.execute(
        "SELECT coalesce(replica, '-'), count(*), max(started_at_ms),"
        " sum(CASE WHEN status = 'running' THEN 1 ELSE 0 END) FROM runs WHERE started_at_ms >= ?"
        " GROUP BY 1 ORDER BY 1", [since]).fetchall()]
    users = conn.execute("SELECT count(DISTINCT user_id) FROM runs WHERE started_at_ms >= ?", [since]).fetchone()[0]
    migrations = [r[0] for r in conn.execute("SELECT name FROM _byok_migrations ORDER BY id").fetchall()]
    return {"replicas": replicas, "users_24h": users, "schema": migrations[-1] if migrations else None}


def check_server(facts: dict) -> Check | None:
    """Only for a PostgreSQL store: which replicas served runs lately, how many users, the schema."""
    server = facts.get("server")
    if server is None:
        return None
    if not server["replicas"]:
        return Check("team server", "info", f"no runs in the last 24 hours; schema at {server['schema']}")
    seen = "; ".join(f"{name} ({count} runs, {running} running, last {iso_ms(last)})"
                     for name, count, last, running in server["replicas"])
    return Check("team server", "ok", f"last 24 hours: {len(server['replicas'])} replica(s): {seen}; "
                 f"{server['users_24h']} user(s); schema at {server['schema']}")


def check_proxy(proxy: str, pem: bytes | None, timeout: float = 2.0, answer: ProxyAnswer | None = None) -> Check:
    parts = urlsplit(proxy if "://" in proxy else "http://" + proxy)
    host, port = parts.hostname or "127.0.0.1", parts.port or 8080
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as e:
        return Check("proxy", "fail", f"nothing listens on {host}:{port} ({e.strerror or e})", [
            "start it: `mitmdump -s addon/cursor_byok.py` (add `--listen-port N` for another port, then pass "
            "--proxy http://127.0.0.1:N here and in Cursor's http.proxy)"])
    answer = answer if answer is not None else ask_proxy(proxy, timeout)
    if answer.needs_credentials:
        given = " (the ones given were refused)" if parts.password is not None else ""
        return Check("proxy", "fail", f"{host}:{port} requires proxy authentication{given}: doctor could not ask "
                     "it what it serves", [CREDENTIALS_FIX, "Cursor's http.proxy needs the same USER:PASSWORD@"])
    served = _served_ca(proxy, timeout)
    if served is None or pem is None:
        return Check("proxy", "ok", f"{host}:{port} accepts connections")
    if _der_blocks(served)[:1] == _der_blocks(pem)[:1]:
        return Check("proxy", "ok", f"{host}:{port} is a mitmproxy signing with the CA in the confdir")
    return Check("proxy", "warn", f"{host}:{port} is a mitmproxy with a different CA than the confdir's", [
        "the proxy was started with another confdir (--set confdir=...): pass the same --confdir here, and make "
        "sure Cursor trusts THAT CA"])


def check_listener(proxy: str) -> Check:
    """Flags a proxy port other machines can reach (issue 10.1): they could run turns on your keys."""
    from byok.access import is_loopback

    from .listeners import listening_hosts

    port = urlsplit(proxy if "://" in proxy else "http://" + proxy).port or 8080
    hosts = listening_hosts(port)
    if hosts is None:
        return Check("listener", "info", f"cannot tell on this OS which addresses port {port} listens on")
    if not hosts:
        return Check("listener", "info", f"nothing listens on port {port} on this machine")
    exposed = sorted({h for h in hosts if not is_loopback(h)})
    if not exposed:
        return Check("listener", "ok", f"port {port} listens on {', '.join(sorted(set(hosts)))} only: "
                     "other machines cannot reach it")
    return Check("listener", "warn", f"port {port} listens on {', '.join(exposed)}: OTHER MACHINES CAN REACH "
                 "it; only clients that pass proxyauth get your models there", [
                     "restart without --listen-host (the default is 127.0.0.1), or set --proxyauth and put the "
                     "credentials in Cursor's http.proxy (docs/cursor-setup.md)"])


def _served_ca(proxy: str, timeout: float) -> bytes | None:
    """mitmproxy answers http://mitm.it/cert/pem itself (onboarding app); None if this one does not."""
    import httpx

    try:
        response = httpx.get("http://mitm.it/cert/pem", proxy=proxy, timeout=timeout, trust_env=False)
    except httpx.HTTPError:
        return None
    return response.content if response.status_code == 200 and b"BEGIN CERTIFICATE" in response.content else None


def check_traffic(facts: dict, recent_min: float) -> Check:
    last = max((v for v in (facts.get("last_frame_ms"), facts.get("last_run_ms")) if v), default=None)
    if last is None:
        return Check("traffic", "warn", "no agent run has reached the proxy (none recorded in this database)")
    age_min = (time.time() * 1000 - last) / 60000
    when = f"{age_min:.0f} min ago" if age_min < 120 else f"{age_min / 60:.1f} h ago"
    if age_min <= recent_min:
        return Check("traffic", "ok", f"last agent run or frame {when}")
    return Check("traffic", "warn", f"last agent run or frame {when} (nothing in the last {recent_min:g} min)")


def cursor_settings_path(os_name: str) -> Path:
    if os_name == "macos":
        return Path.home() / "Library" / "Application Support" / "Cursor" / "User" / "settings.json"
    if os_name == "windows":
        appdata = os.environ.get("APPDATA") or str(Path.home() / "AppData" / "Roaming")
        return Path(appdata) / "Cursor" / "User" / "settings.json"
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "Cursor" / "User" / "settings.json"


def parse_jsonc(text: str) -> dict:
    """settings.json is JSON with comments and trailing commas (VS Code's JSONC), maybe after a BOM."""
    from .jsonc import parse

    return parse(text)


def _same_proxy(a: str, b: str) -> bool:
    def norm(url: str) -> tuple:
        p = urlsplit(url if "://" in url else "http://" + url)
        host = "127.0.0.1" if p.hostname in ("localhost", "127.0.0.1", "::1") else p.hostname
        return host, p.port or 80

    return norm(a) == norm(b)


def check_cursor_settings(path: Path, proxy: str) -> list[Check]:
    if not path.exists():
        return [Check("Cursor settings", "warn", f"{path} not found (Cursor never started for this user, or "
                      "another OS/profile)", ["set the values in Cursor: docs/cursor-setup.md"])]
    try:
        settings = parse_jsonc(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:
        return [Check("Cursor settings", "fail", f"{path} cannot be read as JSON: {e}")]
    checks = []
    value = settings.get("http.proxy")
    shown, shown_value = shown_proxy(proxy), shown_proxy(str(value or ""))  # never print a password
    if not value:
        checks.append(Check("http.proxy", "fail", "not set: Cursor connects to its backend directly",
                            [f'"http.proxy": "{shown}" in {path}, then reload the window']))
    elif _same_proxy(value, proxy):
        checks.append(Check("http.proxy", "ok", shown_value))
    else:
        checks.append(Check("http.proxy", "warn", f"{shown_value}, not {shown}",
                            [f'set "http.proxy": "{shown}" (or pass --proxy {shown_value} if that is where it runs)']))
    support = settings.get("http.proxySupport")
    if support == "on":
        checks.append(Check("http.proxySupport", "ok", "on"))
    elif support == "off":
        checks.append(Check("http.proxySupport", "fail", "off: the proxy setting is ignored", ['"http.proxySupport": "on"']))
    else:
        checks.append(Check("http.proxySupport", "warn", f"{support or 'unset (override)'}: use on",
                            ['"http.proxySupport": "on"']))
    if settings.get("cursor.general.disableHttp2") is True:
        checks.append(Check("transport", "ok", "HTTP/1.1 (cursor.general.disableHttp2 = true): the agent runs as "
                            "RunSSE + BidiAppend, served; the switch is no longer needed and slows Tab"))
    else:
        checks.append(Check("transport", "ok", "HTTP/2: the agent runs as AgentService/Run, served through the "
                            "proxy (if runs never reach it, see byok_http2 and byok_agent_url in docs/cursor-setup.md)"))
    if settings.get("http.proxyStrictSSL") is False:
        checks.append(Check("http.proxyStrictSSL", "warn", "false: Cursor accepts any certificate on every host",
                            ["trust mitmproxy's CA instead and remove this setting"]))
    return checks


# ---- the report ------------------------------------------------------------------------------------


def all_checks(*, os_name: str, confdir: Path, config: Path, db: Path | str, proxy: str, settings_path: Path,
               recent_min: float, timeout: float, served: dict | None, bundle: Path | None = None,
               team: Path | None = None, answer: ProxyAnswer | None = None) -> list[Check]:
    """Every check, in the order doctor prints them (the dashboard shows the same list). `served`: the
    running proxy's /status, or None when it did not answer; `answer`: how the proxy answered it
    (a 407 means it wants credentials), asked again when not given; `team`: the team file to check
    (default: the one `served` names)."""
    ca, pem = check_ca(confdir)
    db_check, facts = check_db(db, served)
    return [
        ca, check_trust(pem, os_name, bundle, confdir),
        check_providers(config, served),
        *filter(None, [check_team(team, served)]),
        db_check, *filter(None, [check_server(facts)]),
        check_proxy(proxy, pem, timeout, answer), check_listener(proxy), check_traffic(facts, recent_min),
        *check_cursor_settings(settings_path, proxy),
    ]


def run(args: argparse.Namespace) -> int:
    os_name = args.os or platform_name()
    proxy = args.proxy or default_proxy()
    answer = ask_proxy(proxy, args.timeout)
    checks = all_checks(
        os_name=os_name, confdir=args.confdir or default_confdir(), config=args.config or default_config(),
        db=args.db or default_db(), proxy=proxy, settings_path=args.cursor_settings or cursor_settings_path(os_name),
        recent_min=args.recent, timeout=args.timeout, served=answer.data, bundle=args.system_ca_bundle,
        team=args.team, answer=answer)
    out = console()
    line(out, ("cursor-byok doctor", "bold"), f" ({os_name})")
    for c in checks:
        label, style = STYLE[c.status]
        text = Text()
        text.append(f"{label:>5}  ", style=style)
        text.append(f"{c.name:<18} ", style="bold")
        text.append(c.message)
        line(out, text)
        for fix in c.fix:
            line(out, Text(f"{'':7}{'':18} fix: {fix}", style="dim" if c.status == "info" else ""))
    by_name = {c.name: c for c in checks}
    if by_name["traffic"].status != "ok":
        print_no_request_story(out, by_name, shown_proxy(proxy), os_name, by_name["database"].facts.get("proxy_writes_it"))
    failed = [c for c in checks if c.status == "fail"]
    line(out, f"\n{len(failed)} failed, {sum(c.status == 'warn' for c in checks)} warnings")
    return 1 if failed else 0


def print_no_request_story(out, by_name: dict[str, Check], proxy: str, os_name: str,
                           same_store: bool | None = None) -> None:
    def mark(*names: str) -> tuple[str, str]:
        found = [by_name[n] for n in names if n in by_name]
        worst = next((s for s in ("fail", "warn", "info", "ok") if any(c.status == s for c in found)), "info")
        return STYLE[worst]

    steps = [
        (("proxy",), f"The proxy runs and listens where Cursor sends traffic ({proxy})."),
        (("Cursor settings", "http.proxy", "http.proxySupport"),
         f'Cursor\'s settings.json has "http.proxy": "{proxy}" and "http.proxySupport": "on"; after changing them, '
         "reload the window (Developer: Reload Window) or restart Cursor."),
        (("transport",), "Cursor's agent reaches the proxy: over HTTP/2 (AgentService/Run, the default) or HTTP/1.1 "
                         "(RunSSE + BidiAppend). If mitmdump shows Cursor's other calls but no agent call, its HTTP/2 "
                         "agent connection bypasses the proxy: use byok_agent_url (a reverse listener) or "
                         "--set byok_http2=bidi-off."),
        (("CA", "CA trust"), "Cursor trusts mitmproxy's CA. If not, mitmdump logs 'client TLS handshake failed' for "
                             "api2.cursor.sh and Cursor shows network errors: trust the CA "
                             f"({'Keychain' if os_name == 'macos' else 'certificate store' if os_name == 'windows' else 'system bundle or NODE_EXTRA_CA_CERTS'}), "
                             "restart Cursor."),
        (("providers",), "A model of yours is picked in Cursor's model picker (runs on Cursor's own models pass "
                         "upstream and are not answered here); if your models are missing from the picker, the "
                         "providers file did not load."),
        (("database",), "You are looking at the database the proxy writes (the running proxy says so)." if same_store
         else "You are looking at the database the proxy writes: it says it writes another one (see database "
              "above)." if same_store is False
         else "You are looking at the database the proxy writes: --db here = `--set byok_db=...` there (the "
              "proxy did not answer, so doctor cannot compare)."),
    ]
    line(out, "\n", ("No agent request reached the proxy? Check, in this order:", "bold"))
    for n, (names, text) in enumerate(steps, 1):
        line(out, f"  {n}. ", mark(*names), f" {text}")
    line(out, "  Then send one agent message in Cursor and run doctor again; `cursor-byok smoke` runs a turn "
              "without Cursor to tell proxy/provider problems from Cursor-side ones. docs/troubleshooting.md has more.")
