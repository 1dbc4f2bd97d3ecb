"""Issue 11 point 3 through a real mitmdump: Anthropic cache_control breakpoints that move forward
each round over a byte-stable prefix, the opt-in prompt_cache_key on the OpenAI kinds, and cache
tokens (as a provider that accounts for caching reports them) in turn_ended, llm_calls and trace."""

from __future__ import annotations

import json
import sqlite3

import pytest

from byok.cli import main
from byok.cli.client import user_turn_request
from tests.e2e.harness import Proxy, model_entry, providers_toml, public_id, run_with_executor
from tests.support.scripted_provider import KINDS, SCRIPTS, PromptCacheSim, common_prefix

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

FILES = ("alpha.txt", "beta.txt")


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider):
    home = tmp_path_factory.mktemp("prompt-cache")
    entries = {kind: model_entry(provider.base_url, kind=kind, model_id=f"{kind}-cached", name=f"cached-{kind}",
                                 **({"provider_extra": {"prompt_cache_key": "true"}} if kind != "anthropic"
                                    else {"extra": {"max_output_tokens": 4096}}))
               for kind in KINDS}
    entries["plain"] = model_entry(provider.base_url, kind="openai_chat", model_id="chat-plain", name="plain-chat")
    (home / "providers.toml").write_text(providers_toml(list(entries.values())))
    proxy = Proxy(home).start()
    yield proxy, {name: public_id(entry) for name, entry in entries.items()}
    proxy.stop()


def tool_conversation(proxy, provider, kind: str, model: str, workspace, sim: PromptCacheSim | None):
    """Two Read rounds, then an answer; usage from `sim` when given. Returns (result, requests)."""
    for i, name in enumerate(FILES):
        (workspace / name).write_text(f"{name}: " + "lorem ipsum dolor sit amet " * 120 + "\n")
    script = SCRIPTS[kind]
    first = len(provider.requests)

    def respond(call: int):
        def make(rec):
            usage = sim.usage(kind, rec.json, output_tokens=7) if sim else None
            if call < len(FILES):
                args = json.dumps({"path": FILES[call]})
                return script.tool_calls([(f"call_{kind}_{call}", "Read", args)], usage=usage)
            return script.text_reply("Both files read.", usage=usage)
        return make

    provider.enqueue(kind, *(respond(i) for i in range(len(FILES) + 1)))

    request = user_turn_request("read the files", model_id=model, workspace=str(workspace))
    result, _ = run_with_executor(proxy, request, workspace)
    assert result.end_error is None, result.end_error
    assert result.text() == "Both files read."
    return result, provider.requests[first:first + len(FILES) + 1]


def turn_ended(result):
    [ended] = [f.message.interaction_update.turn_ended for f in result.down("interaction_update.turn_ended")]
    return ended


def test_anthropic_breakpoints_move_forward_over_a_stable_prefix_and_every_later_call_reads(env, provider, tmp_path):
    proxy, ids = env
    sim = PromptCacheSim()
    result, requests = tool_conversation(proxy, provider, "anthropic", ids["anthropic"], tmp_path, sim)
    usages = [r.script.items[0].data["message"]["usage"] for r in requests]  # what message_start reported

    for i, rec in enumerate(requests):
        body = rec.json
        marked_tools = [t["name"] for t in body["tools"] if "cache_control" in t]
        assert marked_tools == [body["tools"][-1]["name"]]
        assert [b.get("cache_control") for b in body["system"]] == [{"type": "ephemeral"}]
        users = [j for j, m in enumerate(body["messages"]) if m["role"] == "user"]
        marked = [j for j, m in enumerate(body["messages"]) for b in m["content"] if "cache_control" in b]
        assert marked == users[-2:]  # the newest two user messages, on their last block
        assert rec.body.count(b'"cache_control"') == 2 + len(marked) <= 4
        if i:
            previous = requests[i - 1]
            # byte for byte, the request starts with the previous one up to the one marker that moved
            # (the previous request's older message breakpoint); with one user message, up to its end
            moved = previous.body.find(b',"cache_control"', previous.body.find(b'"messages"'))
            removed = previous.body.count(b'"cache_control"') == 4
            expect = moved if removed else len(previous.body) - 2
            assert common_prefix(previous.body, rec.body) == expect
            assert usages[i]["cache_read_input_tokens"] > 0  # every call after the first reads the cache
    assert usages[0]["cache_read_input_tokens"] == 0 and usages[0]["cache_creation_input_tokens"] > 1024

    ended = turn_ended(result)
    assert ended.cache_read_tokens == sum(u["cache_read_input_tokens"] for u in usages)
    assert ended.cache_write_tokens == sum(u["cache_creation_input_tokens"] for u in usages)
    assert ended.input_tokens == sum(u["input_tokens"] for u in usages)  # Anthropic's: without the cache

    db = sqlite3.connect(proxy.db)
    rows = db.execute("SELECT cache_read_tokens, cache_write_tokens FROM llm_calls WHERE request_id = ? "
                      "ORDER BY call_index", [result.request_id]).fetchall()
    assert rows == [(u["cache_read_input_tokens"], u["cache_creation_input_tokens"]) for u in usages]


@pytest.mark.parametrize("kind", ["openai_chat", "openai_responses"])
def test_openai_kinds_send_the_conversation_as_prompt_cache_key_and_report_cached_tokens(
        env, provider, tmp_path, kind, capsys):
    proxy, ids = env
    sim = PromptCacheSim()
    result, requests = tool_conversation(proxy, provider, kind, ids[kind], tmp_path, sim)
    conversation = {r.json["prompt_cache_key"] for r in requests}
    assert len(conversation) == 1 and conversation.pop()  # one stable key: the conversation id
    history = "messages" if kind == "openai_chat" else "input"
    for previous, rec in zip(requests, requests[1:]):
        assert list(rec.json)[-1] == history
        assert common_prefix(previous.body, rec.body) == len(previous.body) - 2  # all but the closing `]}`

    ended = turn_ended(result)
    reads = [u.cache_read_tokens for u in (_usage_of(kind, r) for r in requests)]
    assert reads[0] == 0 and all(n > 0 for n in reads[1:])
    assert ended.cache_read_tokens == sum(reads)
    assert not ended.HasField("cache_write_tokens")  # OpenAI reports no cache writes: absent, not 0

    assert main(["trace", result.request_id, "--db", str(proxy.db), "--json"]) == 0
    story = json.loads(capsys.readouterr().out)
    [traced] = story["runs"]
    assert [c["cache_read_tokens"] for c in traced["provider_calls"]] == reads
    assert {c["cache_write_tokens"] for c in traced["provider_calls"]} == {None}


def test_prompt_cache_key_is_off_by_default_and_cache_tokens_absent_when_never_reported(env, provider, tmp_path):
    proxy, ids = env
    result, requests = tool_conversation(proxy, provider, "openai_chat", ids["plain"], tmp_path, None)
    assert all("prompt_cache_key" not in r.json for r in requests)
    ended = turn_ended(result)
    assert not ended.HasField("cache_read_tokens") and not ended.HasField("cache_write_tokens")


def _usage_of(kind: str, rec):
    """The usage the scripted response carried (what the provider reported)."""
    from byok.providers.base import Usage

    last = rec.script.items[-2] if kind == "openai_chat" else rec.script.items[-1]
    data = last if isinstance(last, dict) else last.data
    if kind == "openai_chat":
        u = data["usage"]
        return Usage(u["prompt_tokens"], u["completion_tokens"], (u.get("prompt_tokens_details") or {}).get("cached_tokens"))
    u = data["response"]["usage"]
    return Usage(u["input_tokens"], u["output_tokens"], (u.get("input_tokens_details") or {}).get("cached_tokens"))
