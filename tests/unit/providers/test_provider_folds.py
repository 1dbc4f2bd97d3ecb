"""Each dialect's stream fold against the recorded transcripts in captures/providers/, through the
real IO shell (httpx-sse decoding), whole and in random chunk splits; plus protocol violations fed
to the pure folds."""

from __future__ import annotations

import pytest

from byok.wire.errors import ProviderError
from byok.providers import anthropic, openai_chat, openai_responses
from byok.providers.base import (
    Done, ModelCycle, ProviderProtocolError, SseEvent, Start, TextDelta, TextEnd, TextStart, ThinkingDelta, ThinkingEnd, ThinkingStart, ToolCallDelta, ToolCallEnd, ToolCallStart, Usage,
)
from tests.support.provider_replay import CAPTURES, load, random_sizes, replay, sse_events

SSE_FIXTURES = sorted(
    (kind, path.name) for kind in ("openai_chat", "openai_responses", "anthropic")
    for path in (CAPTURES / kind).glob("*.sse")
)

# fixture -> (error kind or None for success, done reason on success)
VERDICTS = {
    ("openai_chat", "text.sse"): (None, "stop"),
    ("openai_chat", "reasoning_text.sse"): (None, "stop"),
    ("openai_chat", "parallel_tool_calls.sse"): (None, "tool_use"),
    ("openai_chat", "length.sse"): ("length", None),
    ("openai_chat", "error_event.sse"): ("provider_error", None),
    ("openai_chat", "eof.sse"): ("provider_error", None),
    ("openai_chat", "content_filter.sse"): ("refusal", None),
    ("openai_responses", "text.sse"): (None, "stop"),
    ("openai_responses", "reasoning_text.sse"): (None, "stop"),
    ("openai_responses", "parallel_tool_calls.sse"): (None, "tool_use"),
    ("openai_responses", "incomplete.sse"): ("length", None),
    ("openai_responses", "error_event.sse"): ("provider_error", None),
    ("openai_responses", "failed.sse"): ("provider_error", None),
    ("openai_responses", "eof.sse"): ("provider_error", None),
    ("anthropic", "text.sse"): (None, "stop"),
    ("anthropic", "thinking_text.sse"): (None, "stop"),
    ("anthropic", "parallel_tool_use.sse"): (None, "tool_use"),
    ("anthropic", "max_tokens.sse"): ("length", None),
    ("anthropic", "error_event.sse"): ("provider_error", None),
    ("anthropic", "refusal.sse"): ("refusal", None),
    ("anthropic", "context_window_exceeded.sse"): ("context_length", None),
    ("anthropic", "eof.sse"): ("provider_error", None),
    # gateway dialects (issue 10 point 3)
    ("openai_chat", "openrouter_reasoning_details.sse"): (None, "tool_use"),
    ("openai_chat", "openrouter_reasoning_encrypted.sse"): (None, "stop"),
    ("openai_chat", "openrouter_error_midstream.sse"): ("provider_error", None),
    ("openai_chat", "vllm_reasoning_finish_with_content.sse"): (None, "stop"),
    ("openai_chat", "vllm_tool_call_finish_with_arguments.sse"): (None, "tool_use"),
    ("openai_chat", "ollama_tool_call_without_index.sse"): (None, "tool_use"),
    ("openai_chat", "litellm_thinking_blocks.sse"): (None, "tool_use"),
    ("openai_chat", "litellm_parallel_calls_same_index.sse"): (None, "tool_use"),
    ("openai_chat", "litellm_end_turn_finish_reason.sse"): (None, "stop"),
    ("openai_chat", "oneapi_repeated_done.sse"): (None, "stop"),
    ("openai_responses", "litellm_done_after_completed.sse"): (None, "stop"),
    ("openai_responses", "done_before_completed.sse"): ("provider_error", None),
    ("anthropic", "done_after_message_stop.sse"): (None, "stop"),
    ("anthropic", "done_before_message_stop.sse"): ("provider_error", None),
}


def test_every_fixture_has_a_verdict():
    assert set(SSE_FIXTURES) == set(VERDICTS)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("kind,name", SSE_FIXTURES)
def test_verdict_whole_and_in_random_chunks(kind: str, name: str):
    body = load(f"{kind}/{name}")
    events, error = replay(kind, body)
    want_error, want_reason = VERDICTS[(kind, name)]
    if want_error is None:
        assert error is None
        assert isinstance(events[0], Start)
        assert isinstance(events[-1], Done) and events[-1].reason == want_reason
        assert sum(isinstance(e, Usage) for e in events) == int(name != "litellm_end_turn_finish_reason.sse")
    else:
        assert isinstance(error, ProviderError) and error.kind == want_error
        assert not any(isinstance(e, Done) for e in events)
    for seed in range(4):
        again, again_error = replay(kind, body, chunk_sizes=random_sizes(seed))
        assert again == events
        assert repr(again_error) == repr(error) and getattr(again_error, "message", None) == getattr(error, "message", None)


@pytest.mark.timeout(10)
def test_byte_at_a_time_keeps_multibyte_characters_whole():
    body = load("openai_chat/text.sse")
    assert replay("openai_chat", body, chunk_sizes=[1]) == replay("openai_chat", body)


# ---- exact sequences -----------------------------------------------------------------------------


def test_chat_text_with_usage():
    events, error = replay("openai_chat", load("openai_chat/text.sse"))
    assert error is None
    assert events == [
        Start("chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT"), TextStart(), TextDelta("Hello"), TextDelta("! How can"),
        TextDelta(" I help — ünïcödé ✓?"), TextEnd(),
        Usage(input_tokens=1117, output_tokens=12, cache_read_tokens=1024, cache_write_tokens=None, reasoning_tokens=0),
        Done("stop", replay=None),
    ]


def test_chat_reasoning_content_then_text_and_usage_in_the_finish_chunk():
    events, _ = replay("openai_chat", load("openai_chat/reasoning_text.sse"))
    assert events == [
        Start("0f3c1d6e-8a2b-4c55-9d1e-7b6a5f4e3d2c"), ThinkingStart(), ThinkingDelta("The user asks"),
        ThinkingDelta(" which is larger: 9.11 or 9.8."), ThinkingEnd(), TextStart(), TextDelta("9.8"),
        TextDelta(" is larger."), TextEnd(),
        Usage(input_tokens=20, output_tokens=61, cache_read_tokens=0, reasoning_tokens=49),
        Done("stop", replay={"kind": "openai_chat",
                             "reasoning_content": "The user asks which is larger: 9.11 or 9.8."}),
    ]


def test_chat_parallel_tool_calls_split_across_chunks():
    events, _ = replay("openai_chat", load("openai_chat/parallel_tool_calls.sse"))
    assert events == [
        Start("a1b2c3d4-0000-4000-8000-000000000001"),
        ThinkingStart(), ThinkingDelta("I need to read both files"), ThinkingDelta(" before answering."), ThinkingEnd(),
        TextStart(), TextDelta("Reading both files."), TextEnd(),
        ToolCallStart(0, "call_0_7f3a9b2c", "Read"),
        ToolCallDelta(0, '{"path": "src/'), ToolCallDelta(0, 'main.py"}'),
        ToolCallStart(1, "call_1_e4d5c6b7", "Grep"),
        ToolCallDelta(1, '{"pattern": "def \\\\w+",'), ToolCallDelta(1, ' "path": "src"}'),
        ToolCallEnd(0, '{"path": "src/main.py"}'),
        ToolCallEnd(1, '{"pattern": "def \\\\w+", "path": "src"}'),
        Usage(input_tokens=2311, output_tokens=88, cache_read_tokens=2304),
        Done("tool_use", replay={"kind": "openai_chat",
                                 "reasoning_content": "I need to read both files before answering."}),
    ]


def test_responses_reasoning_summary_parts_then_text():
    events, _ = replay("openai_responses", load("openai_responses/reasoning_text.sse"))
    reasoning_item = {
        "id": "rs_r1_0", "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "**Comparing decimals** 9.8 vs 9.11."},
                    {"type": "summary_text", "text": "0.80 > 0.11."}],
        "encrypted_content": "gAAAAABoENC-ENCRYPTED-REASONING-BLOB-1==",
    }
    message_item = {"id": "msg_r1_1", "type": "message", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": "9.8 is larger.", "annotations": []}]}
    assert events == [
        Start("resp_r1"), ThinkingStart(), ThinkingDelta("**Comparing decimals**"), ThinkingDelta(" 9.8 vs 9.11."),
        ThinkingDelta("\n\n"), ThinkingDelta("0.80 > 0.11."), ThinkingEnd(),
        TextStart(), TextDelta("9.8 is larger."), TextEnd(),
        Usage(input_tokens=40, output_tokens=210, cache_read_tokens=0, reasoning_tokens=192),
        Done("stop", replay={"kind": "openai_responses", "output": [reasoning_item, message_item]}),
    ]


def test_responses_parallel_function_calls_keep_all_output_items_for_replay():
    events, _ = replay("openai_responses", load("openai_responses/parallel_tool_calls.sse"))
    assert events[:-1] == [
        Start("resp_t1"),
        ToolCallStart(0, "call_Xk8Fh2mQ1", "Read"), ToolCallDelta(0, '{"path":'), ToolCallDelta(0, '"README.md"}'),
        ToolCallEnd(0, '{"path":"README.md"}'),
        ToolCallStart(1, "call_Pq7Lm3nZ2", "Shell"), ToolCallDelta(1, '{"command":"ls -la",'),
        ToolCallDelta(1, '"block_until_ms":30000}'), ToolCallEnd(1, '{"command":"ls -la","block_until_ms":30000}'),
        Usage(input_tokens=5120, output_tokens=96, cache_read_tokens=4096, reasoning_tokens=64),
    ]
    done = events[-1]
    assert isinstance(done, Done) and done.reason == "tool_use"
    assert done.replay is not None and done.replay["kind"] == "openai_responses"
    assert [(i["type"], i["id"]) for i in done.replay["output"]] == [
        ("reasoning", "rs_t1_0"), ("function_call", "fc_t1_1"), ("function_call", "fc_t1_2")]
    assert done.replay["output"][0]["encrypted_content"] == "gAAAAABoENC-TOOLS-BLOB-2=="


def test_anthropic_text_usage_keeps_cache_fields_apart():
    events, _ = replay("anthropic", load("anthropic/text.sse"))
    assert events == [
        Start("msg_01XFDUDYJgAACzvnptvVoYEL"), TextStart(), TextDelta("Hello"), TextDelta("! Naïve café ✓"), TextEnd(),
        Usage(input_tokens=25, output_tokens=15, cache_read_tokens=3000, cache_write_tokens=1500),
        Done("stop", replay={"kind": "anthropic", "content": [{"type": "text", "text": "Hello! Naïve café ✓"}]}),
    ]


def test_anthropic_thinking_with_signature_and_redacted_thinking_replayed_verbatim():
    events, _ = replay("anthropic", load("anthropic/thinking_text.sse"))
    thinking = "Let me solve this step by step:\n\n1. First break down 27 * 453\n2. 453 = 400 + 50 + 3"
    assert events == [
        Start("msg_01Think"), ThinkingStart(),
        ThinkingDelta("Let me solve this step by step:\n\n1. First break down 27 * 453"),
        ThinkingDelta("\n2. 453 = 400 + 50 + 3"), ThinkingEnd(),
        TextStart(), TextDelta("27 * 453 = 12,231"), TextEnd(),
        Usage(input_tokens=12, output_tokens=280, cache_read_tokens=0, cache_write_tokens=0),
        Done("stop", replay={"kind": "anthropic", "content": [
            {"type": "thinking", "thinking": thinking,
             "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"},
            {"type": "redacted_thinking",
             "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB5URj2pkfRYwE4Nm0Z="},
            {"type": "text", "text": "27 * 453 = 12,231"},
        ]}),
    ]


def test_anthropic_parallel_tool_use_with_thinking():
    events, _ = replay("anthropic", load("anthropic/parallel_tool_use.sse"))
    assert events == [
        Start("msg_014p7gG3wDgGV9EUtLvnow3U"),
        ThinkingStart(), ThinkingDelta("Both files are needed."), ThinkingEnd(),
        TextStart(), TextDelta("Okay, let me read both."), TextEnd(),
        ToolCallStart(0, "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "Read"),
        ToolCallDelta(0, '{"path": "a'), ToolCallDelta(0, '.txt"}'), ToolCallEnd(0, '{"path": "a.txt"}'),
        ToolCallStart(1, "toolu_02Ab9cD8eF7gH6iJ5kL4mN3o", "Read"),
        ToolCallDelta(1, '{"path": '), ToolCallDelta(1, '"b.txt", "limit": 20}'),
        ToolCallEnd(1, '{"path": "b.txt", "limit": 20}'),
        ToolCallStart(2, "toolu_03NoArgs", "ReadLints"), ToolCallEnd(2, "{}"),
        Usage(input_tokens=472, output_tokens=89, cache_read_tokens=2048, cache_write_tokens=0),
        Done("tool_use", replay={"kind": "anthropic", "content": [
            {"type": "thinking", "thinking": "Both files are needed.", "signature": "ErUBCkYIBxgCIkB0sig-PART1"},
            {"type": "text", "text": "Okay, let me read both."},
            {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "Read", "input": {"path": "a.txt"}},
            {"type": "tool_use", "id": "toolu_02Ab9cD8eF7gH6iJ5kL4mN3o", "name": "Read",
             "input": {"path": "b.txt", "limit": 20}},
            {"type": "tool_use", "id": "toolu_03NoArgs", "name": "ReadLints", "input": {}},
        ]}),
    ]


@pytest.mark.parametrize("kind,name", [
    ("openai_chat", "length.sse"), ("openai_responses", "incomplete.sse"), ("anthropic", "max_tokens.sse"),
])
def test_length_cut_off_is_a_retryable_failure_with_usage_seen(kind: str, name: str):
    events, error = replay(kind, load(f"{kind}/{name}"))
    assert isinstance(error, ProviderError) and error.kind == "length" and error.retryable
    assert isinstance(events[-1], Usage)


def test_refusal_is_immediate_and_not_retryable():
    _, error = replay("anthropic", load("anthropic/refusal.sse"))
    assert isinstance(error, ProviderError)
    assert (error.kind, error.retryable, error.immediate, error.title) == ("refusal", False, True, "Model refused")


def test_mid_stream_errors_carry_the_provider_message():
    for kind, needle in [("openai_chat", "The server had an error"), ("openai_responses", "You can retry"),
                         ("anthropic", "Overloaded")]:
        events, error = replay(kind, load(f"{kind}/error_event.sse"))
        assert isinstance(error, ProviderError) and needle in error.message and error.retryable
        assert any(isinstance(e, TextDelta) for e in events)


def test_eof_without_terminal_event_is_a_failure_not_a_done():
    for kind in ("openai_chat", "openai_responses", "anthropic"):
        events, error = replay(kind, load(f"{kind}/eof.sse"))
        assert isinstance(error, ProviderError) and "EOF" in error.message
        assert not any(isinstance(e, Done) for e in events)


# ---- protocol violations on the pure folds -------------------------------------------------------


def _feed(fold, events: list[SseEvent]) -> list:
    out = []
    for e in events:
        out += fold.feed(e)
    return out


def _data(payload: str, event: str = "message") -> SseEvent:
    return SseEvent(event=event, data=payload)


def test_any_event_after_the_terminal_one_is_a_protocol_error():
    for kind, module, extra in [
        ("openai_chat", openai_chat, _data('{"choices":[]}')),
        ("openai_responses", openai_responses, _data('{"type":"response.in_progress"}')),
        ("anthropic", anthropic, _data('{"type":"ping"}')),
    ]:
        fold = module.Fold()
        _feed(fold, sse_events(load(f"{kind}/text.sse")))
        with pytest.raises(ProviderProtocolError):
            fold.feed(extra)


def test_chat_second_usage_report_is_a_protocol_error():
    fold = openai_chat.Fold()
    fold.feed(_data('{"id":"x","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}'))
    with pytest.raises(ProviderProtocolError, match="usage reported twice"):
        fold.feed(_data('{"id":"x","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}'))


def test_chat_done_without_finish_reason_and_content_after_finish():
    fold = openai_chat.Fold()
    fold.feed(_data('{"id":"x","choices":[{"index":0,"delta":{"content":"a"}}]}'))
    with pytest.raises(ProviderError, match="without a finish_reason"):
        fold.feed(_data("[DONE]"))
    fold = openai_chat.Fold()
    fold.feed(_data('{"id":"x","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}'))
    # a repeated identical finish_reason (on the usage chunk) is tolerated; new content is not
    assert fold.feed(_data('{"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}')) == []
    with pytest.raises(ProviderProtocolError):
        fold.feed(_data('{"id":"x","choices":[{"index":0,"delta":{"content":"b"}}]}'))


def test_chat_tool_call_without_id_and_fragments_without_index():
    fold = openai_chat.Fold()
    with pytest.raises(ProviderProtocolError, match="without an id"):
        fold.feed(_data('{"id":"x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}'))
    fold = openai_chat.Fold()
    events = _feed(fold, [
        _data('{"id":"x","choices":[{"index":0,"delta":{"tool_calls":[{"id":"a","function":{"name":"Ls","arguments":"{\\"p"}}]}}]}'),
        _data('{"id":"x","choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"\\":1}"}}]}}]}'),
        _data('{"id":"x","choices":[{"index":0,"delta":{"tool_calls":[{"id":"b","function":{"name":"Ls","arguments":"{}"}}]}}]}'),
        _data('{"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'),
        _data("[DONE]"),
    ])
    assert [e for e in events if isinstance(e, ToolCallEnd)] == [ToolCallEnd(0, '{"p":1}'), ToolCallEnd(1, "{}")]
    assert events[-1] == Done("tool_use")  # finish_reason "stop" with calls: they are still tool calls


def test_chat_usage_missing_means_no_usage_event():
    fold = openai_chat.Fold()
    events = _feed(fold, [_data('{"id":"x","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}'),
                          _data("[DONE]")])
    assert not any(isinstance(e, Usage) for e in events) and events[-1] == Done("stop")


def test_responses_requires_created_first_and_single_item_done():
    fold = openai_responses.Fold()
    with pytest.raises(ProviderProtocolError, match="before response.created"):
        fold.feed(_data('{"type":"response.output_text.delta","output_index":0,"delta":"x"}'))
    fold = openai_responses.Fold()
    fold.feed(_data('{"type":"response.created","response":{"id":"r"}}'))
    done = '{"type":"response.output_item.done","output_index":0,"item":{"type":"message","content":[]}}'
    fold.feed(_data(done))
    with pytest.raises(ProviderProtocolError, match="finished twice"):
        fold.feed(_data(done))


def test_responses_content_filter_incomplete_is_a_refusal():
    fold = openai_responses.Fold()
    fold.feed(_data('{"type":"response.created","response":{"id":"r"}}'))
    with pytest.raises(ProviderError) as info:
        fold.feed(_data('{"type":"response.incomplete","response":{"incomplete_details":{"reason":"content_filter"}}}'))
    assert info.value.kind == "refusal"


def test_anthropic_delta_for_a_block_that_is_not_open():
    fold = anthropic.Fold()
    fold.feed(_data('{"type":"message_start","message":{"id":"m","usage":{"input_tokens":1}}}'))
    with pytest.raises(ProviderProtocolError, match="not open"):
        fold.feed(_data('{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}'))


def test_anthropic_done_with_an_open_block_fails_the_cycle():
    fold, cycle = anthropic.Fold(), ModelCycle()
    for e in _feed(fold, [
        _data('{"type":"message_start","message":{"id":"m","usage":{"input_tokens":1}}}'),
        _data('{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}'),
        _data('{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}'),
    ]):
        cycle.feed(e)
    with pytest.raises(ProviderProtocolError, match="open blocks"):
        for e in fold.feed(_data('{"type":"message_stop"}')):
            cycle.feed(e)


def test_anthropic_message_stop_without_stop_reason_and_unknown_events_ignored():
    fold = anthropic.Fold()
    fold.feed(_data('{"type":"message_start","message":{"id":"m","usage":{"input_tokens":1}}}'))
    assert fold.feed(_data('{"type":"some_future_event","x":1}')) == []
    with pytest.raises(ProviderProtocolError, match="without a stop_reason"):
        fold.feed(_data('{"type":"message_stop"}'))


def test_non_json_data_is_a_protocol_error():
    for module in (openai_chat, openai_responses, anthropic):
        with pytest.raises(ProviderProtocolError):
            module.Fold().feed(_data("{not json"))


# ---- gateway dialects (captures/providers/*/<gateway>_*.sse) -------------------------------------


def _thinking(events: list) -> str:
    return "".join(e.text for e in events if isinstance(e, ThinkingDelta))


def _text(events: list) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def _ok(kind: str, name: str) -> list:
    events, error = replay(kind, load(f"{kind}/{name}"))
    assert error is None, error
    return events


def test_openrouter_reasoning_details_fold_into_thinking_and_replay_merged_and_unmodified():
    events = _ok("openai_chat", "openrouter_reasoning_details.sse")
    assert _thinking(events) == "The user wants the notes file. I will read it first."
    assert _text(events) == "Reading it now."
    assert [e for e in events if isinstance(e, ToolCallEnd)] == [ToolCallEnd(0, '{"path": "notes.txt"}')]
    assert events[-1].replay == {
        "kind": "openai_chat",
        "reasoning": "The user wants the notes file. I will read it first.",
        # the streamed fragments of index 0, joined as the non-streaming message holds them
        "reasoning_details": [{"type": "reasoning.text", "text": "The user wants the notes file. I will read it first.",
                               "format": "anthropic-claude-v1", "index": 0,
                               "signature": "ErUBCkYIBhgCIkD3scripted-openrouter-signature=="}],
    }
    [usage] = [e for e in events if isinstance(e, Usage)]
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.reasoning_tokens) == (1843, 61, 1536, 23)


def test_openrouter_summary_and_encrypted_details_keep_their_own_entries():
    events = _ok("openai_chat", "openrouter_reasoning_encrypted.sse")
    assert _thinking(events) == "**Comparing decimals**\n\n9.8 is 9.80, larger than 9.11."
    assert _text(events) == "9.8 is larger."
    details = events[-1].replay["reasoning_details"]
    assert [d["type"] for d in details] == ["reasoning.summary", "reasoning.encrypted"]
    assert details[0]["summary"] == "**Comparing decimals**\n\n9.8 is 9.80, larger than 9.11."
    assert details[1] == {"type": "reasoning.encrypted", "data": "gAAAAABoScripted-openrouter-encrypted-reasoning==",
                          "id": "rs_0a1b2c3d4e5f", "format": "openai-responses-v1", "index": 1}


def test_openrouter_midstream_error_names_the_gateway_message():
    _, error = replay("openai_chat", load("openai_chat/openrouter_error_midstream.sse"))
    assert isinstance(error, ProviderError) and error.retryable
    assert "upstream connection reset" in error.message


def test_finish_reason_error_without_an_error_object_is_a_provider_error():
    fold = openai_chat.Fold()
    fold.feed(_data('{"id":"x","choices":[{"index":0,"delta":{"content":"a"}}]}'))
    with pytest.raises(ProviderError) as info:
        fold.feed(_data('{"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"error"}]}'))
    assert not isinstance(info.value, ProviderProtocolError) and info.value.retryable


def test_vllm_reasoning_field_and_finish_reason_on_the_last_content_chunk():
    events = _ok("openai_chat", "vllm_reasoning_finish_with_content.sse")
    assert _thinking(events) == "Okay, 9.11 versus 9.8. Compare tenths: 1 < 8."
    assert _text(events) == "9.8 is larger."  # the piece on the finish chunk is kept
    assert events[-1].replay == {"kind": "openai_chat", "reasoning": "Okay, 9.11 versus 9.8. Compare tenths: 1 < 8."}
    [usage] = [e for e in events if isinstance(e, Usage)]
    assert usage.cache_read_tokens is None  # prompt_tokens_details: null


def test_vllm_finish_reason_on_the_last_argument_fragment():
    events = _ok("openai_chat", "vllm_tool_call_finish_with_arguments.sse")
    assert [e for e in events if isinstance(e, ToolCallEnd)] == [ToolCallEnd(0, '{"path": "notes.txt"}')]
    assert [e.cache_read_tokens for e in events if isinstance(e, Usage)] == [896]


def test_ollama_complete_call_without_index_and_stop_reason():
    events = _ok("openai_chat", "ollama_tool_call_without_index.sse")
    assert [e for e in events if isinstance(e, ToolCallStart)] == [ToolCallStart(0, "call_k1x9w2qz", "Read")]
    assert [e for e in events if isinstance(e, ToolCallEnd)] == [ToolCallEnd(0, '{"path":"notes.txt"}')]
    assert events[-1].reason == "tool_use" and events[-1].replay["reasoning"] == "I should look at the file. Read it."


def test_litellm_thinking_blocks_rebuilt_with_their_signature():
    events = _ok("openai_chat", "litellm_thinking_blocks.sse")
    assert _thinking(events) == "Read the file before answering."  # once, from reasoning_content
    assert events[-1].replay == {
        "kind": "openai_chat", "reasoning_content": "Read the file before answering.",
        "thinking_blocks": [{"type": "thinking", "thinking": "Read the file before answering.",
                             "signature": "EqoBCkgIBxgCIkBscripted-litellm-signature=="}],
    }


def test_litellm_parallel_calls_sharing_index_zero_are_two_calls():
    events = _ok("openai_chat", "litellm_parallel_calls_same_index.sse")
    assert [(e.index, e.call_id) for e in events if isinstance(e, ToolCallStart)] == [(0, "call_5c0b7a1e"), (1, "call_9f3d2e4a")]
    assert [e.arguments for e in events if isinstance(e, ToolCallEnd)] == ['{"path": "a.txt"}', '{"path": "b.txt"}']


def test_anthropic_stop_reason_names_and_empty_finish_reasons():
    events = _ok("openai_chat", "litellm_end_turn_finish_reason.sse")
    assert _text(events) == "Hello there." and events[-1] == Done("stop")
    fold = openai_chat.Fold()
    events = _feed(fold, [
        _data('{"id":"x","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":""}]}'),
        _data('{"id":"x","choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"max_tokens"}]}'),
    ])
    assert _text(events) == "ab" and fold._finish == "length"


def test_repeated_done_is_ignored_but_nothing_else_after_it():
    events = _ok("openai_chat", "oneapi_repeated_done.sse")
    assert _text(events) == "Hi!"
    fold = openai_chat.Fold()
    _feed(fold, sse_events(load("openai_chat/oneapi_repeated_done.sse")))
    assert fold.feed(_data("[DONE]")) == []
    with pytest.raises(ProviderProtocolError):
        fold.feed(_data('{"id":"x","choices":[]}'))


@pytest.mark.parametrize("kind,after,before,terminal", [
    ("openai_responses", "litellm_done_after_completed.sse", "done_before_completed.sse", "response.completed"),
    ("anthropic", "done_after_message_stop.sse", "done_before_message_stop.sse", "message_stop"),
])
def test_done_after_the_terminal_event_is_accepted_on_every_dialect(kind: str, after: str, before: str, terminal: str):
    events = _ok(kind, after)
    assert isinstance(events[-1], Done) and events[-1].reason == "stop"
    early, error = replay(kind, load(f"{kind}/{before}"))
    assert isinstance(error, ProviderError) and not isinstance(error, ProviderProtocolError)
    assert "[DONE]" in error.message and terminal in error.message and "EOF" in error.message
    assert not any(isinstance(e, Done) for e in early)
