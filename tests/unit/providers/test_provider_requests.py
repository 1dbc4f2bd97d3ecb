"""Golden request bodies per dialect: transcript mapping, replay state (only our own kind), tool result
grouping, images, the config knobs and nothing else, config errors, key redaction."""

from __future__ import annotations

import copy

import pytest

from byok.wire.errors import ConfigError, InternalError
from byok.providers import ADAPTERS, adapter_for
from byok.providers.base import HttpRequest, ModelRequest, redact_headers
from byok.providers.transcript import (
    AssistantItem, ImagePart, TextPart, ToolCall, ToolResultItem, ToolSpec, UserItem,
)
from tests.support.provider_replay import TEST_KEY, route

READ_SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
TOOLS = (ToolSpec("Read", "Read a file", READ_SCHEMA), ToolSpec("ReadLints", "Lints"))
CALL_A = ToolCall("call_a", "Read", '{"path": "a.py"}', index=0)
CALL_B = ToolCall("call_b", "Grep", '{"pattern":"x"}', index=1)

REPLAY = {
    "openai_chat": {"kind": "openai_chat", "reasoning_content": "I should read"},
    "openai_responses": {"kind": "openai_responses", "output": [
        {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "I should read"}],
         "encrypted_content": "ENC=="},
        {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
         "content": [{"type": "output_text", "text": "Reading.", "annotations": []}]},
        {"id": "fc_a", "type": "function_call", "status": "completed", "call_id": "call_a", "name": "Read",
         "arguments": '{"path": "a.py"}'},
        {"id": "fc_b", "type": "function_call", "status": "completed", "call_id": "call_b", "name": "Grep",
         "arguments": '{"pattern":"x"}'},
    ]},
    "anthropic": {"kind": "anthropic", "content": [
        {"type": "thinking", "thinking": "I should read", "signature": "SIG=="},
        {"type": "text", "text": "Reading."},
        {"type": "tool_use", "id": "call_a", "name": "Read", "input": {"path": "a.py"}},
        {"type": "tool_use", "id": "call_b", "name": "Grep", "input": {"pattern": "x"}},
    ]},
}


def transcript(replay: dict | None) -> tuple:
    return (
        UserItem(parts=(TextPart("Look at this"), ImagePart("image/png", "iVBORw0KGgo="))),
        # calls deliberately out of index order: builders replay them by provider index
        AssistantItem(text="Reading.", thinking="I should read", tool_calls=(CALL_B, CALL_A), replay=replay),
        ToolResultItem("call_b", "Grep", "no matches"),  # completion order: b finished first
        ToolResultItem("call_a", "Read", "error: not found", is_error=True),
        UserItem(parts=(TextPart("Now answer"), TextPart("briefly"))),
        AssistantItem(text="Done."),
        UserItem(parts=(TextPart("thanks"),)),
    )


def build(kind: str, items: tuple | None = None, tools: tuple = TOOLS, **route_overrides: object) -> HttpRequest:
    req = ModelRequest(route=route(kind, **route_overrides), system="You are a test.",
                       items=items if items is not None else transcript(REPLAY[kind]), tools=tools)
    return adapter_for(kind).build_request(req)


# ---- OpenAI Chat ---------------------------------------------------------------------------------

CHAT_TOOL_CALLS = [
    {"id": "call_a", "type": "function", "function": {"name": "Read", "arguments": '{"path": "a.py"}'}},
    {"id": "call_b", "type": "function", "function": {"name": "Grep", "arguments": '{"pattern":"x"}'}},
]


def test_chat_golden_body():
    r = build("openai_chat")
    assert r.url == "https://llm.example.test/v1/chat/completions"
    assert r.headers == {"content-type": "application/json", "accept": "text/event-stream",
                         "authorization": f"Bearer {TEST_KEY}"}
    assert r.body == {
        "model": "test-model",
        "messages": [
            {"role": "system", "content": "You are a test."},
            {"role": "user", "content": [
                {"type": "text", "text": "Look at this"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]},
            {"role": "assistant", "content": "Reading.", "tool_calls": CHAT_TOOL_CALLS,
             "reasoning_content": "I should read"},
            {"role": "tool", "tool_call_id": "call_b", "content": "no matches"},
            {"role": "tool", "tool_call_id": "call_a", "content": "error: not found"},
            {"role": "user", "content": "Now answer\n\nbriefly"},
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "thanks"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [
            {"type": "function", "function": {"name": "Read", "description": "Read a file", "parameters": READ_SCHEMA}},
            {"type": "function", "function": {"name": "ReadLints", "description": "Lints",
                                              "parameters": {"type": "object", "properties": {}}}},
        ],
    }


def test_chat_reasoning_content_only_from_own_replay_and_never_empty():
    for replay in (REPLAY["anthropic"], REPLAY["openai_responses"], {"kind": "openai_chat", "reasoning_content": ""},
                   None):
        assistant = build("openai_chat", items=transcript(replay)).body["messages"][2]
        assert "reasoning_content" not in assistant
        assert assistant["tool_calls"] == CHAT_TOOL_CALLS
    # a plain answer never carries it, even with replay state (DeepSeek rejects it there)
    items = (UserItem(parts=(TextPart("q"),)), AssistantItem(text="a", replay=REPLAY["openai_chat"]))
    assert build("openai_chat", items=items).body["messages"][-1] == {"role": "assistant", "content": "a"}


OPENROUTER_DETAILS = [{"type": "reasoning.text", "text": "I should read", "signature": "SIG==", "format": "anthropic-claude-v1",
                       "index": 0}]
LITELLM_BLOCKS = [{"type": "thinking", "thinking": "I should read", "signature": "SIG=="}]


def test_chat_reasoning_string_goes_back_under_the_field_it_arrived_in():
    replay = {"kind": "openai_chat", "reasoning": "I should read"}  # vLLM >= 0.10, Ollama
    assistant = build("openai_chat", items=transcript(replay)).body["messages"][2]
    assert assistant["reasoning"] == "I should read" and "reasoning_content" not in assistant


def test_chat_openrouter_reasoning_details_go_back_unmodified_on_every_assistant_message():
    replay = {"kind": "openai_chat", "reasoning": "I should read", "reasoning_details": OPENROUTER_DETAILS}
    messages = build("openai_chat", items=transcript(replay)).body["messages"]
    assistant = messages[2]
    assert assistant["reasoning_details"] == OPENROUTER_DETAILS  # every field as received, in order
    assert "reasoning" not in assistant  # the details hold that text already
    items = (UserItem(parts=(TextPart("q"),)), AssistantItem(text="a", replay=replay))
    assert build("openai_chat", items=items).body["messages"][-1] == {
        "role": "assistant", "content": "a", "reasoning_details": OPENROUTER_DETAILS}


def test_chat_litellm_thinking_blocks_go_back_with_reasoning_content():
    replay = {"kind": "openai_chat", "reasoning_content": "I should read", "thinking_blocks": LITELLM_BLOCKS}
    assistant = build("openai_chat", items=transcript(replay)).body["messages"][2]
    assert assistant["thinking_blocks"] == LITELLM_BLOCKS and assistant["reasoning_content"] == "I should read"
    assert assistant["tool_calls"] == CHAT_TOOL_CALLS


def test_chat_foreign_structured_reasoning_is_never_sent():
    for replay in (REPLAY["anthropic"], {"kind": "anthropic", "reasoning_details": OPENROUTER_DETAILS}):
        assistant = build("openai_chat", items=transcript(replay)).body["messages"][2]
        assert not {"reasoning_details", "thinking_blocks", "reasoning", "reasoning_content"} & set(assistant)


def test_chat_tool_calls_without_text_send_null_content():
    items = (UserItem(parts=(TextPart("q"),)), AssistantItem(tool_calls=(CALL_A,)),
             ToolResultItem("call_a", "Read", "ok"))
    assistant = build("openai_chat", items=items).body["messages"][2]
    assert assistant["content"] is None and assistant["tool_calls"] == CHAT_TOOL_CALLS[:1]


def test_chat_knobs_only_when_configured_and_extra_body_last():
    plain = build("openai_chat", tools=()).body
    assert set(plain) == {"model", "messages", "stream", "stream_options"}
    r = build("openai_chat", tools=(), reasoning_effort="high", max_output_tokens=8192,
              extra_body={"max_tokens": 512, "stream_options": {"continuous_usage_stats": False},
                          "thinking": {"type": "enabled"}})
    assert r.body["reasoning_effort"] == "high"
    assert r.body["max_tokens"] == 512  # only because extra_body says so; max_output_tokens is not sent
    assert "max_completion_tokens" not in r.body and "temperature" not in r.body
    assert r.body["stream_options"] == {"include_usage": True, "continuous_usage_stats": False}
    assert r.body["thinking"] == {"type": "enabled"}


# ---- OpenAI Responses ----------------------------------------------------------------------------


def test_responses_golden_body_replays_output_items_verbatim():
    r = build("openai_responses")
    assert r.url == "https://llm.example.test/v1/responses"
    assert r.headers["authorization"] == f"Bearer {TEST_KEY}"
    assert r.body == {
        "model": "test-model",
        "instructions": "You are a test.",
        "input": [
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "Look at this"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}]},
            *REPLAY["openai_responses"]["output"],
            {"type": "function_call_output", "call_id": "call_b", "output": "no matches"},
            {"type": "function_call_output", "call_id": "call_a", "output": "error: not found"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Now answer"},
                                                             {"type": "input_text", "text": "briefly"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "thanks"}]},
        ],
        "stream": True,
        "tools": [
            {"type": "function", "name": "Read", "description": "Read a file", "parameters": READ_SCHEMA,
             "strict": False},
            {"type": "function", "name": "ReadLints", "description": "Lints",
             "parameters": {"type": "object", "properties": {}}, "strict": False},
        ],
    }
    assert "previous_response_id" not in r.body


def test_responses_reasoning_effort_sets_stateless_reasoning_and_drops_server_ids():
    replay = copy.deepcopy(REPLAY["openai_responses"])
    replay["output"].insert(0, {"id": "rs_0", "type": "reasoning", "summary": []})  # no encrypted content
    r = build("openai_responses", items=transcript(replay), reasoning_effort="medium")
    assert r.body["reasoning"] == {"effort": "medium", "summary": "auto"}
    assert r.body["include"] == ["reasoning.encrypted_content"]
    assert r.body["store"] is False
    replayed = r.body["input"][1:5]
    assert replayed == [{k: v for k, v in item.items() if k != "id"} for item in REPLAY["openai_responses"]["output"]]
    assert replayed[0]["encrypted_content"] == "ENC=="


def test_responses_extra_body_merges_into_reasoning():
    r = build("openai_responses", tools=(), reasoning_effort="high", extra_body={"reasoning": {"summary": "detailed"}})
    assert r.body["reasoning"] == {"effort": "high", "summary": "detailed"}
    plain = build("openai_responses", tools=()).body
    assert set(plain) == {"model", "instructions", "input", "stream"}


def test_responses_foreign_replay_is_rebuilt_from_the_transcript():
    r = build("openai_responses", items=transcript(REPLAY["anthropic"]))
    assert r.body["input"][1:4] == [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Reading."}]},
        {"type": "function_call", "call_id": "call_a", "name": "Read", "arguments": '{"path": "a.py"}'},
        {"type": "function_call", "call_id": "call_b", "name": "Grep", "arguments": '{"pattern":"x"}'},
    ]
    assert all(i.get("type") != "reasoning" for i in r.body["input"])


def test_responses_replay_that_does_not_match_the_calls_is_an_internal_error():
    replay = copy.deepcopy(REPLAY["openai_responses"])
    replay["output"].pop()
    with pytest.raises(InternalError):
        build("openai_responses", items=transcript(replay))


# ---- Anthropic -----------------------------------------------------------------------------------


def test_anthropic_golden_body_groups_tool_results_into_one_user_turn():
    r = build("anthropic")
    assert r.url == "https://llm.example.test/v1/messages"
    assert r.headers == {"content-type": "application/json", "accept": "text/event-stream",
                         "x-api-key": TEST_KEY, "anthropic-version": "2023-06-01"}
    cache = {"type": "ephemeral"}
    assert r.body == {
        "model": "test-model",
        "max_tokens": 1024,
        "stream": True,
        "tools": [
            {"name": "Read", "description": "Read a file", "input_schema": READ_SCHEMA},
            {"name": "ReadLints", "description": "Lints", "input_schema": {"type": "object", "properties": {}},
             "cache_control": cache},
        ],
        "system": [{"type": "text", "text": "You are a test.", "cache_control": cache}],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "Look at this"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]},
            {"role": "assistant", "content": REPLAY["anthropic"]["content"]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_b", "content": "no matches"},
                {"type": "tool_result", "tool_use_id": "call_a", "content": "error: not found", "is_error": True},
                {"type": "text", "text": "Now answer"},
                {"type": "text", "text": "briefly", "cache_control": cache}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
            {"role": "user", "content": [{"type": "text", "text": "thanks", "cache_control": cache}]},
        ],
    }
    # stable parts first, the history last: each request's bytes start with the previous one's
    assert list(r.body) == ["model", "max_tokens", "stream", "tools", "system", "messages"]


def test_anthropic_never_sends_foreign_thinking():
    r = build("anthropic", items=transcript(REPLAY["openai_chat"]))
    assert r.body["messages"][1] == {"role": "assistant", "content": [
        {"type": "text", "text": "Reading."},
        {"type": "tool_use", "id": "call_a", "name": "Read", "input": {"path": "a.py"}},
        {"type": "tool_use", "id": "call_b", "name": "Grep", "input": {"pattern": "x"}},
    ]}


def test_anthropic_thinking_budget_and_nothing_invented():
    plain = build("anthropic", tools=()).body
    assert set(plain) == {"model", "max_tokens", "system", "messages", "stream"}
    r = build("anthropic", tools=(), thinking_budget_tokens=2048, extra_body={"top_k": 5})
    assert r.body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert r.body["top_k"] == 5


def test_anthropic_empty_assistant_is_left_out():
    items = (UserItem(parts=(TextPart("q"),)), AssistantItem(text=""), UserItem(parts=(TextPart("again"),)))
    assert build("anthropic", items=items, tools=()).body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "q"},
                                     {"type": "text", "text": "again", "cache_control": {"type": "ephemeral"}}]}]


# ---- prompt caching ------------------------------------------------------------------------------


def _markers(body: dict) -> list[str]:
    """Where the cache_control breakpoints are, as readable paths."""
    out = [f"tools[{i}]" for i, t in enumerate(body.get("tools", [])) if "cache_control" in t]
    system = body.get("system")
    if isinstance(system, list):
        out += [f"system[{i}]" for i, b in enumerate(system) if "cache_control" in b]
    for m, message in enumerate(body["messages"]):
        for b, block in enumerate(message["content"]):
            if "cache_control" in block:
                out.append(f"messages[{m}][{b}]")
    return out


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def tool_rounds(n: int) -> tuple:
    """A user message, then n rounds of (assistant with thinking + two calls, their two results)."""
    items: list = [UserItem(parts=(TextPart("fix the bug"),))]
    for r in range(n):
        a, b = ToolCall(f"c{r}a", "Read", '{"path": "a.py"}', 0), ToolCall(f"c{r}b", "Read", '{"path": "b.py"}', 1)
        replay = {"kind": "anthropic", "content": [
            {"type": "thinking", "thinking": f"round {r}", "signature": "SIG"},
            {"type": "tool_use", "id": a.call_id, "name": "Read", "input": {"path": "a.py"}},
            {"type": "tool_use", "id": b.call_id, "name": "Read", "input": {"path": "b.py"}}]}
        items += [AssistantItem(tool_calls=(a, b), replay=replay),
                  ToolResultItem(a.call_id, "Read", f"a{r}"), ToolResultItem(b.call_id, "Read", f"b{r}")]
    return tuple(items)


def test_anthropic_breakpoints_at_most_four_and_moving_forward_each_round():
    previous = None
    for n in range(0, 6):
        body = build("anthropic", items=tool_rounds(n)).body
        markers = _markers(body)
        users = [i for i, m in enumerate(body["messages"]) if m["role"] == "user"][-2:]
        assert markers == ["tools[1]", "system[0]"] + [
            f"messages[{i}][{len(body['messages'][i]['content']) - 1}]" for i in users]
        assert len(markers) <= 4
        if previous is not None:
            # the history only grows, and where the previous request ended is still a breakpoint
            assert _strip(body["messages"][: len(previous["messages"])]) == _strip(previous["messages"])
            last = len(previous["messages"]) - 1
            assert f"messages[{last}][{len(previous['messages'][last]['content']) - 1}]" in markers
        previous = body


def test_anthropic_breakpoint_placement_is_a_pure_function_of_the_messages():
    from byok.providers.anthropic import cache_breakpoints

    messages = [
        {"role": "user", "content": [{"type": "text", "text": "summary of earlier work"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
        {"role": "user", "content": [{"type": "text", "text": "go on"}, {"type": "text", "text": ""}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "S"}]},
    ]
    before = copy.deepcopy(messages)
    out = cache_breakpoints(messages)
    assert messages == before  # the input is not touched
    assert out == cache_breakpoints(copy.deepcopy(messages))
    assert "cache_control" in out[0]["content"][0]  # the user message before the newest one
    assert "cache_control" in out[2]["content"][0] and "cache_control" not in out[2]["content"][1]  # never empty text
    assert "cache_control" not in out[3]["content"][0]  # never a thinking block
    assert cache_breakpoints([]) == []


@pytest.mark.parametrize("kind", ["openai_chat", "openai_responses"])
def test_prompt_cache_key_only_when_the_provider_opts_in(kind: str):
    items = (UserItem(parts=(TextPart("q"),)),)
    req = ModelRequest(route=route(kind), system="s", items=items, cache_key="conv-123")
    assert "prompt_cache_key" not in adapter_for(kind).build_request(req).body
    req = ModelRequest(route=route(kind, prompt_cache_key=True), system="s", items=items, cache_key="conv-123")
    body = adapter_for(kind).build_request(req).body
    assert body["prompt_cache_key"] == "conv-123"
    assert list(body)[-1] == ("messages" if kind == "openai_chat" else "input")


@pytest.mark.parametrize("kind", ["openai_chat", "openai_responses"])
def test_history_stays_last_after_extra_body(kind: str):
    body = build(kind, extra_body={"provider": {"sort": "throughput"}, "top_k": 4}).body
    assert list(body)[-1] == ("messages" if kind == "openai_chat" else "input") and body["top_k"] == 4


# ---- config errors and secrets -------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(ADAPTERS))
def test_unset_key_env_var_is_a_bad_key_config_error_naming_it(kind: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("BYOK_TEST_UNSET_KEY", raising=False)
    with pytest.raises(ConfigError) as info:
        build(kind, api_key=None, api_key_env="BYOK_TEST_UNSET_KEY")
    assert info.value.bad_key and "BYOK_TEST_UNSET_KEY" in info.value.message
    assert info.value.to_connect().code.value == "failed_precondition"


@pytest.mark.parametrize("kind", sorted(ADAPTERS))
def test_key_from_env_and_no_auth_header_without_any_key(kind: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("BYOK_TEST_KEY", "env-key-123456")
    headers = build(kind, api_key=None, api_key_env="BYOK_TEST_KEY").headers
    assert "env-key-123456" in " ".join(headers.values())
    local = build(kind, api_key=None, api_key_env=None).headers  # a local server without auth
    assert not {"authorization", "x-api-key"} & set(local)


def test_anthropic_without_max_output_tokens_is_a_config_error():
    with pytest.raises(ConfigError, match="max_output_tokens"):
        build("anthropic", max_output_tokens=None)


@pytest.mark.parametrize("kind,knob", [("openai_chat", {"thinking_budget_tokens": 1000}),
                                       ("openai_responses", {"thinking_budget_tokens": 1000}),
                                       ("anthropic", {"reasoning_effort": "high"})])
def test_a_knob_the_dialect_cannot_express_is_a_config_error(kind: str, knob: dict):
    with pytest.raises(ConfigError):
        build(kind, **knob)


def test_unknown_kind_is_a_config_error():
    with pytest.raises(ConfigError, match="Unknown provider kind"):
        adapter_for("gemini")


@pytest.mark.parametrize("kind", sorted(ADAPTERS))
def test_keys_never_show_in_repr(kind: str):
    r = build(kind, extra_headers={"x-custom": "visible"})
    assert TEST_KEY not in repr(r) and TEST_KEY not in repr(route(kind))
    assert TEST_KEY not in str(redact_headers(r.headers))
    assert redact_headers(r.headers)["x-custom"] == "visible"
