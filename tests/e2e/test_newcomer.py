"""Issue 24.4: what a newcomer met, each tried again as they did it: `cursor-byok doctor` and `smoke`
(subprocesses, as a user runs them) against real mitmdumps.

- doctor writes nothing (an empty PostgreSQL database keeps its zero tables) and says whether the
  database it reads is the one the running proxy writes (the proxy's /status names it, password hidden);
- a proxy that wants a login: smoke and doctor say credentials are needed and never print a password;
- a smoke that times out names its request id and the `trace` command;
- a team proxy: smoke picks a model the team file gives that user, doctor checks the team file;
- a broken providers file's error is printed once by smoke.
"""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import start_proxy
from tests.e2e.harness import model_entry, providers_toml, public_id
from tests.e2e.test_cli_smoke import cli
from tests.support.scripted_provider import CHAT, Hang, Usage
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def doctor(home, proxy, proxy_url: str, *extra: str):
    return cli(home, "doctor", "--proxy", proxy_url, "--config", str(proxy.config), "--confdir", str(proxy.confdir),
               "--cursor-settings", str(home / "none.json"), "--os", "linux", *extra)


def smoke(home, proxy, proxy_url: str, *extra: str):
    return cli(home, "smoke", "--proxy", proxy_url, "--confdir", str(proxy.confdir), "--config", str(proxy.config),
               "--text-only", *extra)


def module_proxy(tmp_path_factory, provider, name: str, **options):
    home = tmp_path_factory.mktemp(name)
    proxy, _ = start_proxy(home, provider, **options)
    yield proxy, home
    proxy.stop()


@pytest.fixture(scope="module")
def plain(tmp_path_factory, provider):
    yield from module_proxy(tmp_path_factory, provider, "newcomer", byok_config_poll_ms="100")


def test_doctor_says_whether_its_database_is_the_one_the_proxy_writes(plain, tmp_path):
    import sqlite3

    proxy, home = plain
    done = doctor(home, proxy, proxy.url, "--db", str(proxy.db))
    assert "ok  database" in done.stdout and "the running proxy writes this database" in done.stdout
    other = tmp_path / "other.db"
    sqlite3.connect(other).close()  # an empty file, as a mistyped --db path would be once created
    before = other.read_bytes()
    done = doctor(home, proxy, proxy.url, "--db", str(other))
    assert "warn  database" in done.stdout and f"the running proxy writes {proxy.db.resolve()}" in done.stdout
    assert other.read_bytes() == before  # doctor wrote nothing into it


def test_a_smoke_timeout_names_its_request_and_the_trace_command(plain, provider):
    proxy, home = plain
    provider.enqueue("openai_chat", Hang(30))
    done = smoke(home, proxy, proxy.url, "--timeout", "3")
    assert done.returncode == 1
    request_id = re.search(r"request ([0-9a-f-]{36})", done.stdout).group(1)  # printed before the turn
    assert f"no end of the turn after 3 s (request {request_id})" in done.stderr
    assert f"cursor-byok trace {request_id}" in done.stderr
    provider.clear()


def test_smoke_prints_a_broken_files_error_once(plain, provider):
    proxy, home = plain
    good = proxy.config.read_text()
    try:
        proxy.config.write_text(good + "\n[[providers]]\nname = 1\n")
        wait_until(lambda: "providers file error" in proxy.log(), "the proxy to see the broken file")
        provider.enqueue("openai_chat", CHAT.text_reply("still served", usage=Usage(10, 5)))
        done = smoke(home, proxy, proxy.url)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stderr.count("[[providers]] #2") == 1, done.stderr
    finally:
        proxy.config.write_text(good)


# ---- doctor writes nothing ---------------------------------------------------------------------------


def test_doctor_on_an_empty_postgresql_database_creates_no_table(tmp_path, pg_server):
    from tests.support.postgres import sql

    url = pg_server.create_database()
    home = tmp_path / "home"
    home.mkdir()
    done = cli(home, "doctor", "--db", url, "--proxy", "http://127.0.0.1:9", "--confdir", str(tmp_path),
               "--config", str(tmp_path / "none.toml"), "--cursor-settings", str(tmp_path / "none.json"),
               "--os", "linux", "--timeout", "0.5")
    assert "no cursor-byok tables yet (doctor creates none)" in done.stdout, done.stdout
    tables = sql(url, "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'")
    assert tables == [(0,)]


# ---- a proxy that wants a login ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def login(tmp_path_factory, provider):
    yield from module_proxy(tmp_path_factory, provider, "login", proxyauth="alice:s3cret-pw")


def test_smoke_and_doctor_say_a_login_is_needed_and_never_print_the_password(login, provider):
    proxy, home = login
    port = proxy.port
    for url, refused in ((proxy.url, False), (f"http://alice:nope-nope@127.0.0.1:{port}", True)):
        done = smoke(home, proxy, url)
        text = done.stdout + done.stderr
        assert done.returncode == 1 and "requires proxy authentication" in text and "USER:PASSWORD@" in text
        assert "a mitmproxy?" not in text and "nope-nope" not in text
        assert ("the ones given were refused" in text) is refused
        done = doctor(home, proxy, url, "--db", str(proxy.db))
        assert "FAIL  proxy" in done.stdout and "requires proxy authentication" in done.stdout
        assert "accepts connections" not in done.stdout and "nope-nope" not in done.stdout
    good = f"http://alice:s3cret-pw@127.0.0.1:{port}"
    done = doctor(home, proxy, good, "--db", str(proxy.db))
    assert "FAIL  proxy" not in done.stdout and "s3cret-pw" not in done.stdout + done.stderr
    assert "the running proxy writes this database" in done.stdout  # the login let doctor ask
    provider.enqueue("openai_chat", CHAT.text_reply("hello alice", usage=Usage(10, 5)))
    done = smoke(home, proxy, good)
    assert done.returncode == 0 and "hello alice" in done.stdout
    assert "s3cret-pw" not in done.stdout + done.stderr and "alice:***@" in done.stdout


# ---- a team proxy ----------------------------------------------------------------------------------------


def test_team_smoke_picks_an_allowed_model_and_doctor_checks_the_team_file(tmp_path, provider):
    home = tmp_path / "team"
    home.mkdir()
    first = model_entry(provider.base_url, model_id="denied-model", name="first")
    second = model_entry(provider.base_url, model_id="allowed-model", name="second")
    team = home / "team.toml"
    team.write_text('[defaults]\nmodels = ["allowed-model"]\n')
    proxy_home = home / "proxy"
    proxy_home.mkdir()
    (proxy_home / "providers.toml").write_text(providers_toml([first, second]))
    from tests.e2e.harness import Proxy

    proxy = Proxy(proxy_home, options={"proxyauth": "alice:s3cret-pw", "byok_team": str(team),
                                       "byok_config_poll_ms": "100"}).start()
    url = f"http://alice:s3cret-pw@127.0.0.1:{proxy.port}"
    try:
        provider.enqueue("openai_chat", CHAT.text_reply("allowed answer", usage=Usage(10, 5)))
        done = smoke(home, proxy, url)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"[{public_id(second)}]" in done.stdout.splitlines()[0] and "allowed answer" in done.stdout
        done = smoke(home, proxy, url, "--model", "denied-model")
        assert done.returncode == 1 and "does not give user alice the model 'denied-model'" in done.stderr
        done = doctor(home, proxy, url, "--db", str(proxy.db))
        team_line = next(ln for ln in done.stdout.splitlines() if "team file" in ln)
        assert team_line.split() == ["ok", "team", "file", f"{team}:", "0", "group(s),", "0", "user(s)", "named"]
        team.write_text("[defaults]\nmodels = 3\n")
        wait_until(lambda: "team file error" in proxy.log(), "the proxy to see the broken team file")
        done = doctor(home, proxy, url, "--db", str(proxy.db))
        assert "FAIL  team file" in done.stdout and "the running proxy reports" in done.stdout
        assert done.returncode == 1
    finally:
        proxy.stop()
