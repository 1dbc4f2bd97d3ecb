"""Every chat mode, end to end: a text turn in each mode offers exactly its manifest's tools with its
own system prompt and runtime reminder; one conversation switches between every ordered pair of
modes (SwitchMode approved, the next turn in the target mode); every mode the user docs name runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from byok.cli.client import user_turn_request
from byok.cli.executor import ScriptedQueries
from byok.proto import agent_pb2 as apb
from tests.e2e.conftest import run, start_proxy
from tests.e2e.harness import ROOT, mode_tools
from tests.support.scripted_provider import CHAT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120), pytest.mark.usefixtures("fresh_provider")]

CHAT_MODES = {"agent": apb.AGENT_MODE_AGENT, "ask": apb.AGENT_MODE_ASK, "plan": apb.AGENT_MODE_PLAN,
              "debug": apb.AGENT_MODE_DEBUG, "multitask": apb.AGENT_MODE_MULTITASK}
MARKERS = {
    "agent": "You are still in **Agent Mode**",
    "ask": "Ask mode is active.",
    "plan": "Plan mode is active.",
    "debug": "You are now in **DEBUG MODE**",
    "multitask": "The user has engaged **Multitask Mode**",
    "subagent": "You are working as a **subagent**",
}
PROMPT_WORDS = {"agent": "You pair-program with the user", "ask": "You are in Ask mode",
                "plan": "You are in Plan mode", "debug": "You are in Debug mode",
                "multitask": "You are in Multitask mode", "subagent": "You pair-program with the user"}


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider):
    proxy, models = start_proxy(tmp_path_factory.mktemp("modes"), provider)
    yield proxy, models["openai_chat"]
    proxy.stop()


def one_turn(proxy, provider, request, *scripts, queries=None):
    before = len(provider.requests)
    provider.enqueue("openai_chat", *scripts)

    async def scenario():
        async with proxy.client(on_query=(queries or ScriptedQueries()).on_query) as client:
            return await client.run(request)

    result = run(scenario())
    assert result.end_error is None, result.end_error
    assert provider.pending("openai_chat") == 0
    return result, provider.requests[before:]


def sent_tools(request) -> list[str]:
    return [t["function"]["name"] for t in request.json.get("tools", [])]


def runtime_text(request) -> str:
    content = request.json["messages"][-1]["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


@pytest.mark.parametrize("mode", [*CHAT_MODES, "subagent"])
def test_a_text_turn_in_each_mode(env, provider, mode):
    proxy, model = env
    request = user_turn_request(f"hello from {mode}", model_id=model, mode=CHAT_MODES.get(mode, apb.AGENT_MODE_AGENT))
    if mode == "subagent":
        request.subagent_type_name = "generalPurpose"
    if mode == "debug":
        debug = request.action.user_message_action.request_context.debug_mode_config
        debug.server_endpoint, debug.log_path, debug.session_id = "http://127.0.0.1:7777/ingest", "/ws/.cursor/debug.log", "s-42"
    result, [sent] = one_turn(proxy, provider, request, CHAT.text_reply(f"{mode} reply"))
    assert result.text() == f"{mode} reply"
    assert sent_tools(sent) == mode_tools(mode)
    system = sent.json["messages"][0]["content"]
    assert PROMPT_WORDS[mode] in system
    text = runtime_text(sent)
    assert MARKERS[mode] in text and text.endswith(f"<user_query>\nhello from {mode}\n</user_query>")
    if mode == "debug":
        assert "http://127.0.0.1:7777/ingest" in text and "/ws/.cursor/debug.log" in text and "s-42" in text
    # the checkpoint records the mode the run used (subagents keep the requested chat mode)
    assert result.checkpoints()[-1].mode == CHAT_MODES.get(mode, apb.AGENT_MODE_AGENT)


def _every_ordered_pair(modes: list[str]) -> list[str]:
    """A walk through the complete directed graph on `modes` that uses every edge once (Hierholzer)."""
    edges = {a: [b for b in modes if b != a] for a in modes}
    stack, walk = [modes[0]], []
    while stack:
        if edges[stack[-1]]:
            stack.append(edges[stack[-1]].pop())
        else:
            walk.append(stack.pop())
    return walk[::-1]


def test_switch_mode_between_any_two_modes(env, provider):
    """One conversation visits every ordered pair of chat modes: in each turn the model proposes the
    next mode with SwitchMode, the user approves, and the next user message is sent in that mode."""
    proxy, model = env
    walk = _every_ordered_pair(list(CHAT_MODES))
    assert len(walk) == len(CHAT_MODES) * (len(CHAT_MODES) - 1) + 1
    state, conversation = None, "conv-switch-every-pair"
    for current, target in zip(walk, walk[1:]):
        call = ("call_switch", "SwitchMode", json.dumps({"target_mode_id": target, "explanation": "fits better"}))
        request = user_turn_request(f"now {current}", model_id=model, mode=CHAT_MODES[current],
                                    conversation_id=conversation, state=state)
        queries = ScriptedQueries()
        result, sent = one_turn(proxy, provider, request, CHAT.tool_calls([call]), CHAT.text_reply("switched"),
                                queries=queries)
        assert [sent_tools(r) for r in sent] == [mode_tools(current)] * 2
        assert MARKERS[current] in runtime_text(sent[0])
        [query] = queries.log
        assert query.switch_mode_request_query.args.target_mode_id == target
        result_text = [m for m in sent[1].json["messages"] if m["role"] == "tool"][-1]["content"]
        assert result_text == f"The user approved: switched from {current} mode to {target} mode."
        completed = result.down("interaction_update.tool_call_completed")[-1].message.interaction_update
        success = completed.tool_call_completed.tool_call.switch_mode_tool_call.result.success
        assert (success.from_mode_id, success.to_mode_id) == (current, target)
        state = result.checkpoints()[-1]
        assert state.mode == CHAT_MODES[current]
    # the whole conversation was kept: the last request replays every earlier turn
    assert sum(1 for m in sent[1].json["messages"] if m["role"] == "user") == len(walk) - 1


def test_switching_to_the_current_or_an_unknown_mode_is_a_tool_error(env, provider):
    proxy, model = env
    calls = [("call_same", "SwitchMode", '{"target_mode_id": "debug"}'),
             ("call_bad", "SwitchMode", '{"target_mode_id": "triage"}')]
    request = user_turn_request("switch", model_id=model, mode=apb.AGENT_MODE_DEBUG)
    queries = ScriptedQueries()
    _, sent = one_turn(proxy, provider, request, CHAT.tool_calls(calls), CHAT.text_reply("ok"), queries=queries)
    assert queries.log == []  # nothing was asked of the user
    results = {m["tool_call_id"]: m["content"] for m in sent[1].json["messages"] if m["role"] == "tool"}
    assert "already in debug mode" in results["call_same"]
    assert "'triage' is not a mode" in results["call_bad"]


# ---- the docs name only modes that run (issue 10, point 9) ----------------------------------------

DOC_MODE = re.compile(r"\b(Agent|Ask|Plan|Debug|Multitask|Triage|Project|Custom)\b")


def documented_modes(path: Path) -> set[str]:
    """The chat modes a user doc promises: the names in its sentence that lists the supported modes."""
    text = path.read_text()
    match = re.search(r"<!-- modes -->(.*?)<!-- /modes -->", text, re.S)
    assert match, f"{path} has no <!-- modes --> sentence listing the supported modes"
    return {name.lower() for name in DOC_MODE.findall(match.group(1))}


@pytest.mark.parametrize("doc", ["cursor-setup.md", "providers.md"])
def test_every_mode_the_docs_name_runs(env, provider, doc):
    proxy, model = env
    named = documented_modes(ROOT / "docs" / doc)
    assert named == set(CHAT_MODES), f"docs/{doc} names {sorted(named)}; the shipped chat modes are {sorted(CHAT_MODES)}"
    for mode in sorted(named):
        request = user_turn_request(f"docs say {mode} works", model_id=model, mode=CHAT_MODES[mode])
        result, [sent] = one_turn(proxy, provider, request, CHAT.text_reply("it does"))
        assert result.text() == "it does" and MARKERS[mode] in runtime_text(sent)
