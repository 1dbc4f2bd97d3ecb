"""The dashboard at http://cursor-byok.invalid/ in a real headless Chromium, through a real mitmdump,
after real turns (the Cursor-like client against the scripted provider).

- the overview loads with no console errors; a conversation opens into its trace with the right tool
  call, arguments and tokens; the cost equals `cursor-byok usage --json`;
- a live run appears while it streams, and turns completed, without a reload (server-sent events);
- a client on another machine (a network namespace) without proxyauth gets nothing;
- on a team server (PostgreSQL, proxyauth users, a team file with admins) a user sees only their own
  conversations, and an admin sees everyone's and the budgets.
Chromium's only way out is the proxy, which loads tests/support/loopback_only.py after the addon.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading

import pytest

from byok.cli import main as cli
from byok.cli.client import CursorClient, user_turn_request
from tests.e2e.conftest import run
from tests.e2e.harness import ROOT, Proxy, model_entry, providers_toml, public_id, run_with_executor
from tests.support import browser as br
from tests.support.netns import VethNamespace
from tests.support.netns import unavailable_reason as netns_unavailable
from tests.support.scripted_provider import CHAT, Gate, Sse, Usage

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180),
              pytest.mark.skipif(br.unavailable_reason() is not None, reason=str(br.unavailable_reason()))]

LOOPBACK_ONLY = str(ROOT / "tests" / "support" / "loopback_only.py")
DASHBOARD = "http://cursor-byok.invalid"
PRICES = "{ input = 2.5, output = 10, cache_read = 0.25 }"


def by_css(css: str):
    from selenium.webdriver.common.by import By

    return lambda driver: driver.find_elements(By.CSS_SELECTOR, css)


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider):
    home = tmp_path_factory.mktemp("dashboard")
    entry = model_entry(provider.base_url, model_id="dash-model", name="scripted", extra={"prices": PRICES})
    (home / "providers.toml").write_text(providers_toml([entry]))
    proxy = Proxy(home, extra_scripts=[LOOPBACK_ONLY]).start()
    try:
        yield proxy, public_id(entry)
    finally:
        proxy.stop()
    assert "Traceback" not in proxy.log()


@pytest.fixture(scope="module")
def chromium(env, tmp_path_factory):
    proxy, _ = env
    with br.Browser(proxy.url, tmp_path_factory.mktemp("chromium")) as browser:
        yield browser


@pytest.fixture(scope="module")
def tool_turn(env, provider, tmp_path_factory):
    """One real turn with a Read tool round: (result, workspace)."""
    proxy, model = env
    workspace = tmp_path_factory.mktemp("workspace")
    (workspace / "notes.md").write_text("# Notes\n\nThe build runs with `make test`.\n")
    provider.enqueue("openai_chat",
                     CHAT.tool_calls([("call_read_dash_1", "Read", '{"path": "notes.md"}')], text="Let me look.",
                                     usage=Usage(2400, 18, cache_read_tokens=1200)),
                     CHAT.text_reply("Run `make test`.", usage=Usage(2480, 12, cache_read_tokens=2300)))
    request = user_turn_request("How do I run the tests? Check notes.md.", model_id=model, workspace=str(workspace))
    result, _ = run_with_executor(proxy, request, workspace)
    assert result.end_error is None, result.end_error
    return result, request


def stored_calls(proxy: Proxy, request_id: str) -> list[tuple]:
    with sqlite3.connect(proxy.db) as conn:
        return conn.execute("SELECT call_index, input_tokens, output_tokens FROM llm_calls WHERE request_id = ?"
                            " ORDER BY call_index", [request_id]).fetchall()


def test_a_conversation_opens_into_its_trace_with_tool_calls_and_tokens(env, chromium, tool_turn):
    proxy, _ = env
    result, request = tool_turn
    chromium.open(DASHBOARD + "/")
    link = chromium.wait_for(by_css(f'a[href="/trace/{request.conversation_id}"]'),
                             message="the conversation on the overview")[0]
    assert chromium.console_errors() == []
    link.click()
    tools = chromium.wait_for(by_css('tr.tool[data-tool="Read"]'), message="the Read tool call")
    assert "call_read_dash_1" in tools[0].text and "notes.md" in tools[0].text
    calls = stored_calls(proxy, result.request_id)
    assert [c[1:] for c in calls] == [(2400, 18), (2480, 12)]
    shown_in = [e.text for e in chromium.driver.find_elements("css selector", "tr.call td.tokens-in")]
    shown_out = [e.text for e in chromium.driver.find_elements("css selector", "tr.call td.tokens-out")]
    assert shown_in == ["2,400", "2,480"] and shown_out == ["18", "12"]
    assert "How do I run the tests?" in chromium.text("blockquote.user-text")
    assert chromium.console_errors() == []


def test_the_cost_matches_usage_json(env, chromium, tool_turn, capsys):
    proxy, _ = env
    assert cli(["usage", "--db", str(proxy.db), "--config", str(proxy.config), "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)["totals"]["cost_usd"]
    chromium.open(DASHBOARD + "/usage")
    cost = chromium.wait_for(by_css("#total-cost"))[0]
    assert float(cost.get_attribute("data-cost-usd")) == expected > 0
    assert chromium.driver.find_elements("css selector", "svg.chart rect")  # the charts drew bars
    assert chromium.text("#cache-hit-rate").endswith("%")
    assert chromium.console_errors() == []


def test_a_live_run_appears_while_it_streams_and_updates_without_a_reload(env, chromium, provider, tmp_path):
    proxy, model = env
    chromium.open(DASHBOARD + "/")
    chromium.wait_for(by_css("#live-state.on"), message="the live stream connected")
    chromium.driver.execute_script("window.__same_page = true")
    gate = Gate()
    reply = CHAT.text_reply("streamed slowly, piece by piece", pieces=4, usage=Usage(900, 9))
    provider.enqueue("openai_chat", Sse([*reply.items[:2], gate, *reply.items[2:]]))
    request = user_turn_request("stream something", model_id=model)
    done: dict = {}
    turn = threading.Thread(target=lambda: done.update(result=run_with_executor(proxy, request, tmp_path)[0]))
    turn.start()
    try:
        row = chromium.wait_for(by_css('tr.run[data-status="running"]'), message="the running run")[0]
        request_id = row.get_attribute("data-request-id")
        assert request_id and "result" not in done  # shown while the provider still holds the stream
    finally:
        gate.event.set()
        turn.join(60)
    assert done["result"].end_error is None and done["result"].request_id == request_id
    chromium.wait_for(by_css(f'tr.run[data-request-id="{request_id}"][data-status="completed"]'),
                      message="the run completed on the same page")
    assert chromium.driver.execute_script("return window.__same_page") is True
    assert chromium.console_errors() == []


@pytest.mark.skipif(netns_unavailable() is not None, reason=str(netns_unavailable()))
def test_a_client_on_another_machine_without_proxyauth_gets_nothing(tmp_path, provider):
    entry = model_entry(provider.base_url, model_id="dash-model", name="scripted")
    (tmp_path / "providers.toml").write_text(providers_toml([entry]))
    probe = ("import httpx, json, sys\n"
             "out = {}\n"
             "for path in ('/', '/conversations', '/usage', '/events', '/static/dashboard.js', '/trace/x'):\n"
             "    r = httpx.get('http://cursor-byok.invalid' + path, proxy=sys.argv[1], trust_env=False, timeout=10)\n"
             "    out[path] = [r.status_code, 'cursor-byok</a>' in r.text or 'EventSource' in r.text]\n"
             "print(json.dumps(out))\n")
    with VethNamespace() as ns:
        proxy = Proxy(tmp_path, extra_scripts=[LOOPBACK_ONLY], listen_host=ns.host_ip).start()
        try:
            answer = subprocess.run(ns.exec_args([sys.executable, "-c", probe, proxy.url]), capture_output=True,
                                    text=True, timeout=60, cwd=ROOT)
        finally:
            proxy.stop()
    assert answer.returncode == 0, answer.stderr
    seen = json.loads(answer.stdout)
    assert set(seen) == {"/", "/conversations", "/usage", "/events", "/static/dashboard.js", "/trace/x"}
    assert all(status == 403 and not content for status, content in seen.values()), seen


# ---- the team server --------------------------------------------------------------------------------------

PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}
TEAM = """
admins = ["carol"]

[defaults]
models = ["*"]

[users.bob]
monthly_tokens = 100000
"""


@pytest.fixture(scope="module")
def team(tmp_path_factory, pg_server, provider):
    import bcrypt

    home = tmp_path_factory.mktemp("team-dashboard")
    (home / "htpasswd").write_text("".join(
        f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}\n"
        for user, password in PASSWORDS.items()))
    (home / "team.toml").write_text(TEAM)
    entry = model_entry(provider.base_url, model_id="team-model", name="scripted")
    (home / "providers.toml").write_text(providers_toml([entry]))
    proxy = Proxy(home, extra_scripts=[LOOPBACK_ONLY], options={
        "byok_db": pg_server.create_database(), "byok_team": str(home / "team.toml"),
        "proxyauth": f"@{home / 'htpasswd'}"}).start()
    try:
        model = public_id(entry)
        conversations = {}
        for user in ("alice", "bob"):
            provider.enqueue("openai_chat", CHAT.text_reply(f"hello {user}"))
            request = user_turn_request(f"{user}'s own question", model_id=model)

            async def turn(user=user, request=request):
                creds = f"{user}:{PASSWORDS[user]}@"
                async with CursorClient(f"http://{creds}127.0.0.1:{proxy.port}", proxy.ca_file) as client:
                    return await client.run(request)

            assert run(turn()).end_error is None
            conversations[user] = request.conversation_id
        yield proxy, conversations, home
    finally:
        proxy.stop()


def test_a_team_user_sees_only_their_own_conversations(team):
    proxy, conversations, home = team
    with br.ProxyAuthForwarder(proxy.host, proxy.port, "alice", PASSWORDS["alice"]) as alice, \
            br.Browser(alice.url, home / "alice") as chromium:
        chromium.open(DASHBOARD + "/conversations")
        chromium.wait_for(by_css(f'a[href="/trace/{conversations["alice"]}"]'), message="alice's conversation")
        assert chromium.console_errors() == []
        page = chromium.text()
        assert conversations["bob"] not in page and "bob's own question" not in page
        assert "Users" not in chromium.text("header nav")  # no operator pages for her
        chromium.open(f"{DASHBOARD}/trace/{conversations['bob']}")
        assert "Not found" in chromium.text("h1") and "bob's own question" not in chromium.text()
    with br.ProxyAuthForwarder(proxy.host, proxy.port, "carol", PASSWORDS["carol"]) as carol, \
            br.Browser(carol.url, home / "carol") as chromium:
        chromium.open(DASHBOARD + "/conversations")
        for user in ("alice", "bob"):
            chromium.wait_for(by_css(f'a[href="/trace/{conversations[user]}"]'), message=f"{user}'s conversation")
        chromium.open(DASHBOARD + "/users")
        rows = chromium.wait_for(by_css("table.budgets tr[data-user]"), message="the budgets table")
        assert {r.get_attribute("data-user") for r in rows} >= {"alice", "bob"}
        assert "of 100,000" in chromium.text('tr[data-user="bob"]')
        assert chromium.console_errors() == []


def test_the_gc_form_posts_with_the_sessions_token(env, chromium):
    chromium.open(DASHBOARD + "/maintenance")
    chromium.wait_for(by_css("form.gc button"))[0].click()
    result = chromium.wait_for(by_css("#gc-result"), message="the GC result")[0]
    assert "blobs reachable" in result.text and "deleted" in result.text
    assert chromium.console_errors() == []
    # the same form from a page without the session's cookie and token is refused
    import httpx

    proxy, _ = env
    forged = httpx.post(DASHBOARD + "/gc", data={"csrf": "0" * 64, "days": "0"}, proxy=proxy.url, trust_env=False)
    assert forged.status_code == 403 and "blobs reachable" not in forged.text
