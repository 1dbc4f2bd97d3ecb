"""The team server (issue 16): proxyauth users on one mitmdump with a PostgreSQL store and a team file.

Each user is a proxyauth name from an htpasswd file. Isolation attempts: resuming another user's
conversation, importing another user's checkpoint (its blob ids) into a new conversation, tracing
another user's conversation; a budget refusal; a user's own API key; a model the team file does not
give a user; proxyauth refusals. Everything on loopback, against a real PostgreSQL.
"""

from __future__ import annotations

import json

import httpx
import pytest

from byok.wire import connect
from byok.cli import main as cli
from byok.cli.client import CursorClient, user_turn_request
from tests.e2e.conftest import run, start_proxy
from tests.e2e.test_listen_access import official_models
from tests.support import remote_client
from tests.support.postgres import sql
from tests.support.scripted_provider import CHAT, ScriptedProvider

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw", "dave": "dave-pw", "erin": "erin-pw"}
TEAM = """
[defaults]
models = ["*"]

[groups.outsiders]
members = ["dave"]
models = ["some-other-model"]

[users.carol]
monthly_tokens = 100

[users.bob]
keys.scripted-openai_chat = { api_key = "sk-bob-own-key" }

[users.erin]
monthly_tokens = 100
"""


@pytest.fixture(scope="module")
def provider():
    with ScriptedProvider() as p:
        yield p


@pytest.fixture(scope="module")
def team(tmp_path_factory, pg_server, provider, upstream):
    import bcrypt  # what mitmproxy's own htpasswd reader checks (as `htpasswd -B` writes)

    home = tmp_path_factory.mktemp("team")
    (home / "htpasswd").write_text("".join(
        f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}\n"
        for user, password in PASSWORDS.items()))
    (home / "team.toml").write_text(TEAM)
    upstream.model_list_payloads["/aiserver.v1.AiService/AvailableModels"] = ("application/proto", official_models())
    db = pg_server.create_database()
    proxy, ids = start_proxy(home / "proxy", provider, upstream, byok_db=db, byok_team=str(home / "team.toml"),
                             proxyauth=f"@{home / 'htpasswd'}", byok_upstream_probe_ms="0")
    try:
        yield proxy, ids["openai_chat"], db
    finally:
        proxy.stop()


def as_user(proxy, user: str | None, password: str | None = None, **kwargs) -> CursorClient:
    creds = "" if user is None else f"{user}:{password or PASSWORDS[user]}@"
    return CursorClient(f"http://{creds}127.0.0.1:{proxy.port}", proxy.ca_file, **kwargs)


def turn(proxy, user, request, **kwargs):
    async def go():
        async with as_user(proxy, user, **kwargs) as client:
            result = await client.run(request)
            return result, dict(client.blobs), list(client.get_log)

    return run(go())


def models_seen(proxy, user: str | None, password: str | None = None) -> dict:
    """AvailableModels and one RunSSE turn (on a model nobody has) as this user: {"models", "turn"},
    each {"status", ...} or {"error": "..."} for a connection-level failure such as a 407."""
    import httpx

    creds = "" if user is None else f"{user}:{password or PASSWORDS[user]}@"
    proxy_url = f"http://{creds}127.0.0.1:{proxy.port}"

    async def fetch() -> dict:
        out: dict = {"models": await remote_client.available_models(proxy_url, proxy.ca_file)}
        try:
            async with CursorClient(proxy_url, proxy.ca_file, timeout_s=30) as client:
                result = await client.run(user_turn_request("hello", model_id="nobodys-model"))
                out["turn"] = {"status": result.status}
        except httpx.HTTPError as e:
            out["turn"] = {"error": f"{type(e).__name__}: {e}"}
        return out

    return run(fetch())


def test_proxyauth_refuses_clients_without_valid_credentials(team, provider):
    proxy, model, _ = team
    before = len(provider.requests)
    for user, password in ((None, None), ("alice", "wrong"), ("mallory", "anything")):
        seen = models_seen(proxy, user, password)
        assert "407" in seen["models"]["error"] and "407" in seen["turn"]["error"], (user, seen)
    assert len(provider.requests) == before


def test_a_user_cannot_resume_import_or_trace_another_users_conversation(team, provider, capsys):
    proxy, model, db = team
    provider.enqueue("openai_chat", CHAT.text_reply("alice's private answer"))
    alice_request = user_turn_request("alice's secret question", model_id=model)
    alice, alice_blobs, _ = turn(proxy, "alice", alice_request)
    assert alice.end_error is None and alice.text() == "alice's private answer"
    checkpoint = alice.checkpoints()[-1]
    calls_before = len(provider.requests)

    # resume: bob names alice's conversation, with her checkpoint and even her blobs
    resume = user_turn_request("and what did alice ask?", model_id=model,
                               conversation_id=alice_request.conversation_id, state=checkpoint)
    bob, _, _ = turn(proxy, "bob", resume, blobs=dict(alice_blobs))
    assert bob.end_error.code is connect.Code.PERMISSION_DENIED
    assert "belongs to another user" in bob.end_error.message

    # import: bob's own new conversation, carrying alice's checkpoint (her blob ids) but not her blobs.
    # The server must ask bob's client for them (KV GET), never serve them from its shared store.
    smuggle = user_turn_request("continue", model_id=model, state=checkpoint)
    bob, _, gets = turn(proxy, "bob", smuggle)
    assert bob.end_error is not None
    assert set(checkpoint.root_prompt_messages_json) & set(gets)  # asked bob's client, who has none of them
    assert len(provider.requests) == calls_before  # nothing reached the provider, alice's words least of all

    # the store records whose everything is
    owners = dict(sql(db, "SELECT id, user_id FROM conversations"))
    assert owners[alice_request.conversation_id] == "alice" and owners[smuggle.conversation_id] == "bob"
    assert dict(sql(db, "SELECT request_id, user_id FROM runs"))[alice.request_id] == "alice"

    # trace: the operator's view per user
    assert cli(["trace", alice_request.conversation_id, "--db", db, "--user", "bob"]) == 1
    assert "alice's secret" not in capsys.readouterr().out
    assert cli(["trace", alice_request.conversation_id, "--db", db, "--user", "alice", "--json"]) == 0
    assert alice.request_id in capsys.readouterr().out


def test_a_users_own_key_and_usage_by_user(team, provider, capsys):
    proxy, model, db = team
    provider.enqueue("openai_chat", CHAT.text_reply("for bob"), CHAT.text_reply("for alice"))
    bob, _, _ = turn(proxy, "bob", user_turn_request("hi", model_id=model))
    assert bob.end_error is None
    assert provider.requests[-1].headers["authorization"] == "Bearer sk-bob-own-key"
    alice, _, _ = turn(proxy, "alice", user_turn_request("hi", model_id=model))
    assert alice.end_error is None
    assert provider.requests[-1].headers["authorization"] != "Bearer sk-bob-own-key"  # the team key
    assert cli(["usage", "--db", db, "--by", "user", "--json"]) == 0
    users = {row["user"] for row in json.loads(capsys.readouterr().out)["rows"]}
    assert {"alice", "bob"} <= users


def test_a_user_over_budget_is_refused_before_any_provider_call(team, provider):
    proxy, model, db = team
    provider.enqueue("openai_chat", CHAT.text_reply("carol's only answer"))  # 100 input + 20 output tokens
    first, _, _ = turn(proxy, "carol", user_turn_request("one", model_id=model))
    assert first.end_error is None
    before = len(provider.requests)
    second, _, _ = turn(proxy, "carol", user_turn_request("two", model_id=model))
    assert second.end_error.code is connect.Code.RESOURCE_EXHAUSTED
    assert "carol has used 120 of 100 tokens this month" in second.end_error.message
    assert "interaction_update.text_delta" not in second.kinds()
    assert len(provider.requests) == before
    assert sql(db, "SELECT count(*) FROM runs WHERE user_id = 'carol'") == [(1,)]  # refused before the claim


def test_a_model_the_team_file_does_not_give_a_user_is_neither_listed_nor_served(team, provider):
    proxy, model, _ = team
    assert model in models_seen(proxy, "alice")["models"]["names"]
    before = len(provider.requests)
    seen = models_seen(proxy, "dave")
    assert model not in seen["models"]["names"]
    dave, _, _ = turn(proxy, "dave", user_turn_request("let me in", model_id=model))
    assert dave.end_error.code is connect.Code.PERMISSION_DENIED
    assert "dave may not use model" in dave.end_error.message
    assert len(provider.requests) == before


def commit_message(proxy, user: str) -> httpx.Response:
    """A one-shot call (WriteGitCommitMessage, application/proto) through the proxy as `user`."""
    import ssl

    from byok.proto import features_pb2 as fpb

    body = fpb.WriteGitCommitMessageRequest(diffs=["+retry()"]).SerializeToString()
    with httpx.Client(proxy=f"http://{user}:{PASSWORDS[user]}@127.0.0.1:{proxy.port}", trust_env=False,
                      verify=ssl.create_default_context(cafile=proxy.ca_file), timeout=30) as client:
        return client.post("https://api2.cursor.sh/aiserver.v1.AiService/WriteGitCommitMessage", content=body,
                           headers={"content-type": "application/proto"})


def test_one_shot_calls_use_the_users_key_count_in_their_budget_and_usage(team, provider, capsys):
    """Tab, commit messages and the rest are the user's calls too: their team key, their budget (refused
    before any provider call once spent), their rows in usage --by user."""
    proxy, model, db = team
    with open(proxy.config, "a") as f:
        f.write('\n[features]\ncommit_message = "scripted-openai_chat/openai_chat-model"\n')
    provider.enqueue("openai_chat", CHAT.text_reply("Add retry"), CHAT.text_reply("Add retry for erin"))
    answer = commit_message(proxy, "bob")
    assert answer.status_code == 200, answer.text
    assert provider.requests[-1].headers["authorization"] == "Bearer sk-bob-own-key"
    answer = commit_message(proxy, "erin")  # 100 input + 20 output tokens: erin's whole budget
    assert answer.status_code == 200, answer.text
    assert sql(db, "SELECT purpose, user_id FROM llm_calls WHERE user_id = 'erin'") == [("commit_message", "erin")]
    before = len(provider.requests)
    refused = commit_message(proxy, "erin")
    assert refused.status_code == 429 and refused.json()["code"] == "resource_exhausted"
    assert "erin has used 120 of 100 tokens this month" in refused.json()["message"]
    assert len(provider.requests) == before
    assert cli(["usage", "--db", db, "--by", "user", "--json"]) == 0
    rows = {row["user"]: row for row in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["erin"]["input_tokens"] == 100
