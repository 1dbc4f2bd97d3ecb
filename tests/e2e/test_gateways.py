"""Issue 10 point 3 through a real mitmdump: the recorded gateway streams of captures/providers/
(LiteLLM, OpenRouter, vLLM, Ollama, one-api) served byte for byte by the scripted provider, one
turn per notable quirk, with what the next request sends back checked where the quirk is replay."""

from __future__ import annotations

import json

import pytest

from byok.wire import connect
from byok.cli.client import user_turn_request
from byok.cli.executor import LocalExecutor
from tests.e2e.conftest import run, start_proxy
from tests.support.provider_replay import load
from tests.support.scripted_provider import CHAT, KINDS, Sse, Usage

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider):
    proxy, ids = start_proxy(tmp_path_factory.mktemp("gateways"), provider, kinds=KINDS)
    yield proxy, ids
    proxy.stop()


def recorded(kind: str, name: str) -> Sse:
    return Sse([load(f"{kind}/{name}")])


def turn(proxy, model, workspace=None, text="go"):
    async def scenario():
        executor = LocalExecutor(workspace) if workspace is not None else None
        kwargs = {"on_exec": executor.on_exec} if executor else {}
        async with proxy.client(**kwargs) as client:
            request = user_turn_request(text, model_id=model, **({"workspace": str(workspace)} if workspace else {}))
            result = await client.run(request, **({"on_frame": executor.on_frame} if executor else {}))
            if executor:
                await executor.aclose()
            return result

    return run(scenario())


def thinking(result) -> str:
    return "".join(f.message.interaction_update.thinking_delta.text
                   for f in result.down("interaction_update.thinking_delta"))


def tool_turn_with(env, provider, tmp_path, name: str):
    """A recorded tool-call stream, then a plain answer: returns the result and the second request."""
    proxy, ids = env
    for file in ("notes.txt", "a.txt", "b.txt"):
        (tmp_path / file).write_text(f"contents of {file}\n")
    provider.enqueue("openai_chat", recorded("openai_chat", name), CHAT.text_reply("All read.", usage=Usage(50, 3)))
    first = len(provider.requests)
    result = turn(proxy, ids["openai_chat"], tmp_path)
    assert result.end_error is None, result.end_error
    assert result.text().endswith("All read.")
    return result, provider.requests[first + 1].json


def assistant_after_first_call(second: dict) -> dict:
    [assistant] = [m for m in second["messages"] if m["role"] == "assistant"]
    return assistant


def test_openrouter_reasoning_details_show_as_thinking_and_go_back_unmodified(env, provider, tmp_path):
    result, second = tool_turn_with(env, provider, tmp_path, "openrouter_reasoning_details.sse")
    assert thinking(result) == "The user wants the notes file. I will read it first."
    assistant = assistant_after_first_call(second)
    assert assistant["reasoning_details"] == [{
        "type": "reasoning.text", "text": "The user wants the notes file. I will read it first.",
        "format": "anthropic-claude-v1", "index": 0, "signature": "ErUBCkYIBhgCIkD3scripted-openrouter-signature=="}]
    assert "reasoning" not in assistant and "reasoning_content" not in assistant
    assert assistant["tool_calls"][0]["id"] == "toolu_01OpenRouterRead"
    [tool] = [m for m in second["messages"] if m["role"] == "tool"]
    assert "contents of notes.txt" in tool["content"]
    [ended] = [f.message.interaction_update.turn_ended for f in result.down("interaction_update.turn_ended")]
    assert ended.input_tokens == 1843 + 50 and ended.cache_read_tokens == 1536


def test_litellm_thinking_blocks_go_back_with_their_signature(env, provider, tmp_path):
    result, second = tool_turn_with(env, provider, tmp_path, "litellm_thinking_blocks.sse")
    assert thinking(result) == "Read the file before answering."  # once, not once per field
    assistant = assistant_after_first_call(second)
    assert assistant["thinking_blocks"] == [{"type": "thinking", "thinking": "Read the file before answering.",
                                             "signature": "EqoBCkgIBxgCIkBscripted-litellm-signature=="}]
    assert assistant["reasoning_content"] == "Read the file before answering."


def test_ollama_call_without_index_finished_as_stop_still_runs_the_tool(env, provider, tmp_path):
    result, second = tool_turn_with(env, provider, tmp_path, "ollama_tool_call_without_index.sse")
    assistant = assistant_after_first_call(second)
    assert assistant["reasoning"] == "I should look at the file. Read it."  # Ollama's own field name
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_k1x9w2qz"]
    assert len(result.down("interaction_update.tool_call_completed")) == 1


def test_litellm_parallel_calls_at_one_index_run_both(env, provider, tmp_path):
    result, second = tool_turn_with(env, provider, tmp_path, "litellm_parallel_calls_same_index.sse")
    assistant = assistant_after_first_call(second)
    assert [json.loads(c["function"]["arguments"])["path"] for c in assistant["tool_calls"]] == ["a.txt", "b.txt"]
    tools = {m["tool_call_id"]: m["content"] for m in second["messages"] if m["role"] == "tool"}
    assert "contents of a.txt" in tools["call_5c0b7a1e"] and "contents of b.txt" in tools["call_9f3d2e4a"]


def test_vllm_tool_call_finished_on_its_last_argument_fragment(env, provider, tmp_path):
    _, second = tool_turn_with(env, provider, tmp_path, "vllm_tool_call_finish_with_arguments.sse")
    assistant = assistant_after_first_call(second)
    assert assistant["tool_calls"][0]["function"]["arguments"] == '{"path": "notes.txt"}'
    assert assistant["reasoning"] == "Need the file contents."


@pytest.mark.parametrize("kind,name,text", [
    ("openai_responses", "litellm_done_after_completed.sse", "Hello from LiteLLM."),
    ("anthropic", "done_after_message_stop.sse", "Hi from the gateway."),
    ("openai_chat", "oneapi_repeated_done.sse", "Hi!"),
    ("openai_chat", "vllm_reasoning_finish_with_content.sse", "9.8 is larger."),
    ("openai_chat", "openrouter_reasoning_encrypted.sse", "9.8 is larger."),
    ("openai_chat", "litellm_end_turn_finish_reason.sse", "Hello there."),
])
def test_text_turn_through_each_gateway_quirk(env, provider, kind, name, text):
    proxy, ids = env
    provider.enqueue(kind, recorded(kind, name))
    result = turn(proxy, ids[kind])
    assert result.end_error is None, result.end_error
    assert result.text() == text
    assert len(result.down("interaction_update.turn_ended")) == 1


@pytest.mark.parametrize("kind,name,words", [
    ("openai_responses", "done_before_completed.sse", ("[DONE]", "response.completed")),
    ("anthropic", "done_before_message_stop.sse", ("[DONE]", "message_stop")),
    ("openai_chat", "openrouter_error_midstream.sse", ("upstream connection reset",)),
])
def test_early_done_and_midstream_gateway_errors_end_the_run_with_a_provider_error(env, provider, kind, name, words):
    proxy, ids = env
    provider.enqueue(kind, recorded(kind, name))
    result = turn(proxy, ids[kind])
    assert result.end_error is not None and result.end_error.code is connect.Code.UNAVAILABLE
    for word in words:
        assert word in result.end_error.message
    assert "interaction_update.turn_ended" not in result.kinds()
