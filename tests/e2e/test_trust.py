"""Issue 24 ("Trust, round two") end to end, through a real mitmdump.

- `proxyauth=any` never identifies a user: on a listener other machines can reach, or with a team
  file, mitmdump refuses to start with a message naming the problem and
  the fix (mitmproxy may have bound its port by then: it exits before serving anything); on loopback it starts with a warning, and a client's made-up user name is nobody's.
"""

from __future__ import annotations

import sqlite3

import pytest

from byok.cli.client import CursorClient, user_turn_request
from tests.e2e.conftest import run, start_proxy
from tests.support.scripted_provider import CHAT

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
