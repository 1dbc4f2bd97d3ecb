"""Issue 24 ("Trust, round two") end to end, through a real mitmdump.

- `proxyauth=any` never identifies a user: on a listener other machines can reach, or with a team
  file, mitmdump refuses to start with a message naming the problem and
  the fix (mitmproxy may have bound its port by then: it exits before serving anything); on loopback it starts with a warning, and a client's made-up user name is nobody's.
"""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from byok.cli.client import CursorClient, user_turn_request
from tests.e2e.conftest import run, start_proxy
from tests.support.scripted_provider import CHAT
from tests.support.waiting import log_has, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


# ---- proxyauth=any -----------------------------------------------------------------------------------


@pytest.mark.parametrize("how, extra, words", [
    ("exposed", {"listen_host": "0.0.0.0"}, ("OTHER MACHINES CAN REACH", "0.0.0.0:", "--proxyauth user:")),
    ("team", {"byok_team": "TEAM"}, ("a team file is set (byok_team)", "anyone could claim to be any user", "htpasswd")),
])
def test_proxyauth_any_refuses_to_start_where_a_name_would_matter(tmp_path, provider, how, extra, words):
    from tests.e2e.harness import Proxy

    (tmp_path / "team.toml").write_text('[defaults]\nmodels = ["*"]\n')
    options = {"proxyauth": "any", **{k: str(tmp_path / "team.toml") if v == "TEAM" else v
                                      for k, v in extra.items() if k != "listen_host"}}
    proxy = Proxy(tmp_path / how, options=options, listen_host=extra.get("listen_host", "127.0.0.1"))
    with pytest.raises(RuntimeError, match="exited with 1"):
        proxy.start()
    log = proxy.log()
    assert "proxyauth=any accepts every user name and password" in log and all(w in log for w in words)
    assert "Error logged during startup, exiting" in log
    assert "cursor-byok ready" not in log  # refused before it served anything


def test_proxyauth_any_on_loopback_is_no_authentication(tmp_path, provider):
    proxy, ids = start_proxy(tmp_path, provider, proxyauth="any")
    try:
        log = proxy.log()
        assert "proxyauth=any accepts every user name and password" in log and "no authentication" in log
        assert "only this machine can reach it" in log
        provider.enqueue("openai_chat", CHAT.text_reply("hello, nobody"))

        async def turn():
            async with CursorClient(f"http://mallory:whatever@127.0.0.1:{proxy.port}", proxy.ca_file) as client:
                return await client.run(user_turn_request("hi", model_id=ids["openai_chat"]))

        result = run(turn())
        assert result.end_error is None and result.text() == "hello, nobody"
        with sqlite3.connect(proxy.db) as db:
            users = db.execute("SELECT user_id FROM runs WHERE request_id = ?", [result.request_id]).fetchall()
        assert users == [(None,)]  # the name mallory identified nobody
    finally:
        proxy.stop()


# ---- the files the proxy follows -------------------------------------------------------------------


def test_a_broken_providers_file_at_start_leaves_the_proxy_running(tmp_path):
    """docs/providers.md: a broken file means no user models until it is fixed, and the proxy runs on."""
    from byok.cli.common import proxy_status
    from tests.e2e.harness import Proxy

    home = tmp_path / "proxy"
    home.mkdir()
    (home / "providers.toml").write_text("[[providers]]\nname = 2\n")
    proxy = Proxy(home, options={"byok_config_poll_ms": "100"}).start()
    try:
        assert "providers file error" in proxy.log() and "no user models until it is fixed" in proxy.log()
        status = proxy_status(proxy.url, timeout=5)
        assert status["config"]["error"] and status["config"]["models"] == []
        (home / "providers.toml").write_text(providers_text())
        wait_until(lambda: proxy_status(proxy.url, timeout=5)["config"]["models"], "the fixed file served")
    finally:
        assert proxy.stop() == 0


def providers_text() -> str:
    from tests.e2e.harness import model_entry, providers_toml

    return providers_toml([model_entry("http://127.0.0.1:9/v1")])


def test_a_broken_team_file_is_noticed_within_the_poll_interval(tmp_path, provider):
    team = tmp_path / "team.toml"
    team.write_text('[defaults]\nmodels = ["*"]\n')
    proxy, _ = start_proxy(tmp_path / "proxy", provider, byok_team=str(team), proxyauth="alice:s3cret",
                           byok_config_poll_ms="200")
    try:
        offset = len(proxy.log())
        team.write_text("[defaults]\nmodels = 3\n")
        # no run, no model list: only the poll can notice it
        wait_until(lambda: log_has(proxy, "team file error", offset), "the team file error in the log", timeout=5)
        assert "keeping the last good team config" in proxy.log()[offset:]
    finally:
        proxy.stop()


# ---- WebFetch: redirects checked before they are followed ---------------------------------------------


@pytest.fixture
def public_site(tmp_path):
    """A web server at a public address (93.184.215.14:8000) inside a network namespace: this machine
    routes that /30 into the namespace while the test runs, so nothing leaves it. Yields its base URL,
    a function returning the request lines it logged so far, and a loopback server that must stay unseen."""
    import subprocess
    import sys

    from tests.e2e.harness import ROOT
    from tests.support.fake_web import FakeWeb
    from tests.support.netns import VethNamespace, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(f"no network namespace for the public site: {reason}")
    log = tmp_path / "site.log"
    with FakeWeb() as private, VethNamespace(tag="w", network="93.184.215.12") as ns, open(log, "w") as out:
        server = subprocess.Popen(
            ns.exec_args([sys.executable, "-m", "tests.support.redirect_server", ns.ns_ip, "8000",
                          f"{private.base_url}/secret"]),
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True)
        try:
            wait_until(lambda: "listening" in log.read_text(), "the site to listen")
            yield f"http://{ns.ns_ip}:8000", lambda: log.read_text().splitlines(), private
        finally:
            server.kill()
            server.wait(5)


def test_web_fetch_walks_redirects_before_cursor_fetches(tmp_path, provider, public_site):
    from byok.cli.executor import FetchPage, LocalExecutor, ScriptedQueries
    from byok.proto import agent_pb2 as apb
    import json

    site, seen, private = public_site
    proxy, ids = start_proxy(tmp_path / "proxy", provider)  # the guard and the walk on, as by default
    try:
        executor = LocalExecutor(tmp_path / "ws", pages={f"{site}/long": FetchPage("a page", 200, "text/plain")})
        calls = [("call_a", "WebFetch", json.dumps({"url": f"{site}/short"})),
                 ("call_b", "WebFetch", json.dumps({"url": f"{site}/to-private"}))]
        provider.enqueue("openai_chat", CHAT.tool_calls(calls), CHAT.text_reply("done"))
        before = len(provider.requests)

        async def turn():
            async with proxy.client(on_exec=executor.on_exec, on_query=ScriptedQueries().on_query) as client:
                try:
                    return await client.run(user_turn_request("fetch", model_id=ids["openai_chat"],
                                                              mode=apb.AGENT_MODE_AGENT, workspace=str(tmp_path / "ws")))
                finally:
                    await executor.aclose()

        result = run(turn())
        assert result.end_error is None
        # Cursor was sent the checked end of the first chain, and nothing for the second
        assert [m.fetch_args.url for m in executor.log] == [f"{site}/long"]
        assert {"GET /short", "GET /long", "GET /to-private"} <= set(seen()), seen()  # the proxy's walk
        assert private.requests == []  # the private hop was never requested
        results = {m["tool_call_id"]: m["content"] for m in provider.requests[before + 1].json["messages"]
                   if m["role"] == "tool"}
        assert results["call_a"].startswith(f"URL: {site}/long\nStatus: 200")
        assert f"{site}/to-private redirects to {private.base_url}/secret points to a loopback address" \
            in results["call_b"]
    finally:
        proxy.stop()


# ---- start-up with a reverse listener ----------------------------------------------------------------


def test_a_reverse_listener_without_listen_host_starts_on_loopback_and_is_listed_once(tmp_path):
    """The docs' byok_agent_url command has no --listen-host: the loopback default rebinds both
    listeners (the reverse one listens on TCP and UDP, whose port frees a moment after it stops), and
    the start-up line names each address once."""
    from tests.e2e.harness import Proxy, free_port

    reverse = free_port()
    proxy = Proxy(tmp_path, listen_host=None, extra_args=[
        "--mode", "regular", "--mode", f"reverse:https://agentn.api5.cursor.sh@{reverse}"]).start()
    try:
        line = next(ln for ln in proxy.log().splitlines() if "cursor-byok: the proxy listens on" in ln)
        assert line.count(f"127.0.0.1:{reverse}") == 1 and line.count(f"127.0.0.1:{proxy.port}") == 1
        assert "only this machine can reach it" in line and "Errno" not in proxy.log()
    finally:
        assert proxy.stop() == 0


# ---- the loopback stream server serves only the proxy -------------------------------------------------------


def raw_request(port: int, request_id: str, auth: str | None) -> bytes:
    """A local process's raw HTTP request to the stream server for a live request id."""
    import socket

    extra = f"x-byok-auth: {auth}\r\n" if auth is not None else ""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"POST /agent.v1.AgentService/RunSSE HTTP/1.1\r\nhost: 127.0.0.1\r\n"
                     f"x-byok-request-id: {request_id}\r\n{extra}content-length: 0\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_a_local_process_with_a_live_request_id_gets_nothing_and_the_run_goes_on(tmp_path, provider):
    """The run exists (its run_request arrived as a BidiAppend) and waits for its RunSSE: the moment a
    process that learnt the request id could take the stream. Without the proxy's proof, and with a
    wrong one, the stream server refuses it; then the real client's RunSSE gets the whole run."""
    from byok.proto import agent_pb2 as apb

    proxy, ids = start_proxy(tmp_path, provider)
    request_id = "live-run-attacked"
    provider.enqueue("openai_chat", CHAT.text_reply("the real answer"))
    try:
        async def scenario():
            async with proxy.client() as client:
                request = user_turn_request("hi", model_id=ids["openai_chat"])
                appended = await client.append(request_id, apb.AgentClientMessage(run_request=request))
                assert appended.status_code == 200  # the run is live now, waiting for its stream
                offset = len(proxy.log())
                attacks = [await asyncio.to_thread(raw_request, proxy.stream_port, request_id, auth)
                           for auth in (None, "f" * 64)]
                result = await client.run(request, request_id=request_id, send_run_request=False)
                return attacks, result, proxy.log()[offset:]

        attacks, result, log = run(scenario())
        for answer in attacks:
            assert answer.startswith(b"HTTP/1.1 403 ") and answer.split(b"\r\n\r\n", 1)[1] == b""
        assert log.count("stream server: refused a request without the proxy's proof") == 2
        assert result.end_error is None and result.text() == "the real answer"  # undisturbed
        assert "x-byok-auth" not in proxy.log() and "Traceback" not in proxy.log()
    finally:
        proxy.stop()
