"""The fill-in-the-middle kinds (openai_completions, mistral_fim): request bodies, and the stream fold
against the transcripts in captures/providers/openai_completions/ through the real IO shell, whole
and in random chunk splits."""

from __future__ import annotations

import asyncio

import pytest

from byok.providers import adapter_for, openai_completions as oc
from byok.providers.base import Done, ModelCycle, ProviderProtocolError, SseEvent, TextDelta, Usage
from byok.providers.io import CallMetrics, stream_http
from byok.wire.errors import ConfigError, ProviderError
from tests.support.provider_replay import CAPTURES, TEST_KEY, load, mock_client, random_sizes, route

FIXTURES = sorted(p.name for p in (CAPTURES / "openai_completions").glob("*.sse"))
# file -> (text, done reason or error kind, usage)
VERDICTS = {
    "text.sse": ("    return a + b\n", "stop", Usage(input_tokens=42, output_tokens=6)),
    "ollama.sse": ("if n < 2:\n", "stop", Usage(input_tokens=57, output_tokens=4)),
    "litellm_quirks.sse": ("name = '名前' # 😀", "stop", Usage(input_tokens=31, output_tokens=9)),
    "llamacpp_no_done.sse": ("x)", "stop", Usage(input_tokens=80, output_tokens=2)),
    "length.sse": ("for i in range(10)", "length", None),
    "eof.sse": ("partial answer", "provider_error", None),
    "error_event.sse": ("par", "provider_error", None),
    "mistral_fim.sse": ("return fib(n - 1) + fib(n - 2)", "stop", Usage(input_tokens=24, output_tokens=9)),
}


def completion(kind: str = oc.KIND, **overrides) -> oc.CompletionRequest:
    fields = dict(route=route(kind), prompt="def f(a, b):\n", suffix="\n", max_tokens=64)
    fields.update(overrides)
    return oc.CompletionRequest(**fields)


async def areplay(name: str, sizes=None) -> tuple[str, list, Exception | None, ModelCycle]:
    kind = oc.MISTRAL_KIND if name.startswith("mistral") else oc.KIND
    req = completion(kind)
    cycle = ModelCycle()
    text, events, error = [], [], None
    async with mock_client(load(f"openai_completions/{name}"), chunk_sizes=sizes) as client:
        try:
            async for event in stream_http(client, oc.build_request(req), oc.Fold("testprov"), provider="testprov",
                                           metrics=CallMetrics(), cycle=cycle):
                events.append(event)
                if isinstance(event, TextDelta):
                    text.append(event.text)
        except ProviderError as e:
            error = e
    return "".join(text), events, error, cycle


def test_every_fixture_has_a_verdict():
    assert set(FIXTURES) == set(VERDICTS)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("seed", [None, 1, 2, 3])
def test_fixtures_fold_to_their_verdict(name: str, seed: int | None):
    text, events, error, cycle = asyncio.run(areplay(name, random_sizes(seed, top=17) if seed else None))
    want_text, verdict, usage = VERDICTS[name]
    assert text == want_text
    if verdict == "stop":
        assert error is None and isinstance(events[-1], Done) and events[-1].reason == "stop"
        assert cycle.usage == usage
    elif verdict == "length":
        assert isinstance(error, ProviderError) and error.kind == "length"  # ModelCycle's verdict on a cut-off
    else:
        assert isinstance(error, ProviderError) and error.kind == verdict


def test_request_with_suffix_and_usage_option():
    http = oc.build_request(completion(stop=("<|endoftext|>",), max_tokens=48))
    assert http.url == "https://llm.example.test/v1/completions"
    assert http.headers["authorization"] == f"Bearer {TEST_KEY}"
    assert http.body == {"model": "test-model", "prompt": "def f(a, b):\n", "suffix": "\n", "max_tokens": 48,
                         "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True},
                         "stop": ["<|endoftext|>"]}


def test_template_request_sends_no_suffix_and_extra_body_wins():
    req = completion(suffix=None, route=route(oc.KIND, extra_body={"temperature": 0.2, "top_k": 20}))
    body = oc.build_request(req).body
    assert "suffix" not in body and "stop" not in body  # no stop strings given
    assert body["temperature"] == 0.2 and body["top_k"] == 20


def test_mistral_fim_path_and_no_stream_options():
    http = oc.build_request(completion(oc.MISTRAL_KIND))
    assert http.url == "https://llm.example.test/v1/fim/completions"
    assert "stream_options" not in http.body and http.body["suffix"] == "\n"


def test_a_fim_kind_cannot_run_the_agent():
    with pytest.raises(ConfigError, match="fill-in-the-middle"):
        adapter_for(oc.KIND)


@pytest.mark.parametrize("data,match", [
    ('{"choices": [{"index": 1, "text": "x"}]}', "choice index"),
    ('{"choices": [{"text": 5}]}', "not a string"),
    ('{"choices": [{"text": "x", "finish_reason": "tool_calls"}]}', "unknown finish_reason"),
    ('{"choices": "x"}', "not a list"),
])
def test_protocol_violations(data: str, match: str):
    with pytest.raises(ProviderProtocolError, match=match):
        oc.Fold("p").feed(SseEvent("", data))


def test_text_after_finish_and_done_without_finish_fail():
    fold = oc.Fold("p")
    fold.feed(SseEvent("", '{"choices": [{"text": "a", "finish_reason": "stop"}]}'))
    with pytest.raises(ProviderProtocolError, match="after finish_reason"):
        fold.feed(SseEvent("", '{"choices": [{"text": "b"}]}'))
    with pytest.raises(ProviderError, match="without a finish_reason"):
        oc.Fold("p").feed(SseEvent("", "[DONE]"))


def test_content_filter_is_a_refusal():
    with pytest.raises(ProviderError) as e:
        oc.Fold("p").feed(SseEvent("", '{"choices": [{"text": "", "finish_reason": "content_filter"}]}'))
    assert e.value.kind == "refusal"
