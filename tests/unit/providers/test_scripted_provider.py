"""The scripted provider server itself: lifecycle, queues, recording, the script kinds, and that each
dialect's builders produce streams our own adapters accept (and the raw bytes a plain HTTP client sees)."""

from __future__ import annotations

import asyncio
import http.client
import json
import time

import pytest

from byok.wire.errors import ProviderError
from byok.providers import adapter_for
from byok.providers.base import ModelCycle, Usage
from byok.providers.io import make_client, stream_model
from tests.support.provider_replay import request
from tests.support.scripted_provider import (
    ANTHROPIC, CHAT, PATHS, RESPONSES, SCRIPTS, Ev, Hang, HttpError, ScriptedProvider, Sse,
)

KINDS = sorted(SCRIPTS)


def _post(provider: ScriptedProvider, path: str, body: dict | None = None, timeout: float = 5) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", provider.port, timeout=timeout)
    try:
        conn.request("POST", path, body=json.dumps(body or {}), headers={"content-type": "application/json",
                                                                          "authorization": "Bearer k"})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def _cycle(provider: ScriptedProvider, kind: str) -> ModelCycle:
    async def run() -> ModelCycle:
        cycle = ModelCycle()
        async with make_client() as client:
            async for _ in stream_model(client, adapter_for(kind), request(kind, base_url=provider.base_url),
                                        cycle=cycle):
                pass
        return cycle

    return asyncio.run(run())


@pytest.mark.timeout(10)
def test_start_stop_and_base_url():
    provider = ScriptedProvider().start()
    try:
        assert provider.port > 0 and provider.base_url == f"http://127.0.0.1:{provider.port}/v1"
    finally:
        provider.stop()
    with ScriptedProvider() as a, ScriptedProvider() as b:
        assert a.port != b.port


@pytest.mark.timeout(10)
def test_records_requests_and_answers_500_when_nothing_is_queued():
    with ScriptedProvider() as provider:
        status, headers, body = _post(provider, "/v1/chat/completions?x=1", {"model": "m", "messages": []})
        assert status == 500 and headers["content-type"] == "application/json"
        assert "nothing queued for /v1/chat/completions" in json.loads(body)["error"]["message"]
        rec = provider.wait_closed(1)
        assert rec.method == "POST" and rec.path == "/v1/chat/completions"
        assert rec.json == {"model": "m", "messages": []} and rec.headers["authorization"] == "Bearer k"
        assert rec.received_at <= time.time() and not rec.closed_early


@pytest.mark.timeout(10)
def test_queues_are_per_dialect_path_and_fifo():
    with ScriptedProvider() as provider:
        provider.enqueue("anthropic", HttpError(429, {"n": 1}), HttpError(418, "teapot"))
        provider.enqueue("/custom/path", HttpError(503, {"n": 3}))
        assert provider.pending("anthropic") == 2
        assert _post(provider, "/anything/messages")[0] == 429
        assert _post(provider, "/custom/path")[0] == 503
        status, _, body = _post(provider, "/v1/messages")
        assert (status, body) == (418, b"teapot")
        assert _post(provider, "/v1/messages")[0] == 500
        assert [r.path for r in provider.requests] == ["/anything/messages", "/custom/path", "/v1/messages", "/v1/messages"]


@pytest.mark.timeout(10)
def test_sse_bytes_on_the_wire():
    with ScriptedProvider() as provider:
        provider.enqueue("openai_responses", Sse([Ev({"type": "a"}, event="a"), {"x": 1}, "[DONE]", b": raw comment\n\n",
                                                  Ev("line1\nline2")]))
        status, headers, body = _post(provider, PATHS["openai_responses"])
        assert status == 200 and headers["content-type"].startswith("text/event-stream")
        assert body == (b'event: a\ndata: {"type": "a"}\n\n' b'data: {"x": 1}\n\n' b"data: [DONE]\n\n"
                        b": raw comment\n\n" b"data: line1\ndata: line2\n\n")


@pytest.mark.timeout(10)
def test_hang_then_answer_and_per_event_delay():
    with ScriptedProvider() as provider:
        provider.enqueue("openai_chat", Hang(0.2, then=HttpError(503, {"error": {"message": "later"}})))
        started = time.monotonic()
        assert _post(provider, "/v1/chat/completions")[0] == 503
        assert time.monotonic() - started >= 0.2
        provider.enqueue("openai_chat", Sse([Ev("a"), Ev("b", delay_s=0.2)]))
        started = time.monotonic()
        assert _post(provider, "/v1/chat/completions")[2] == b"data: a\n\ndata: b\n\n"
        assert time.monotonic() - started >= 0.2


@pytest.mark.timeout(10)
def test_hang_without_answer_drops_the_connection():
    with ScriptedProvider() as provider:
        provider.enqueue("openai_chat", Hang(0.05))
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            _post(provider, "/v1/chat/completions")
        assert not provider.wait_closed(1).closed_early


@pytest.mark.timeout(10)
def test_client_closing_during_a_hang_is_recorded():
    with ScriptedProvider() as provider:
        provider.enqueue("anthropic", Hang(30))
        with pytest.raises(TimeoutError):
            _post(provider, "/v1/messages", timeout=0.2)
        rec = provider.wait_closed(1, timeout=5)
        assert rec.closed_early and rec.closed_at is not None


@pytest.mark.timeout(10)
def test_abort_after_leaves_the_chunked_body_unfinished():
    with ScriptedProvider() as provider:
        provider.enqueue("openai_chat", Sse(["a", "b", "c"], abort_after=2))
        with pytest.raises(http.client.IncompleteRead):
            _post(provider, "/v1/chat/completions")


@pytest.mark.timeout(10)
def test_stop_does_not_wait_for_hanging_requests():
    provider = ScriptedProvider().start()
    provider.enqueue("anthropic", Hang(60))
    conn = http.client.HTTPConnection("127.0.0.1", provider.port, timeout=5)
    conn.request("POST", "/v1/messages", body="{}")
    provider.wait_for_request(1)
    started = time.monotonic()
    provider.stop()
    conn.close()
    assert time.monotonic() - started < 3


@pytest.mark.timeout(10)
@pytest.mark.parametrize("kind", KINDS)
def test_builders_produce_streams_our_adapters_accept(kind: str):
    s = SCRIPTS[kind]
    usage = Usage(input_tokens=321, output_tokens=12, cache_read_tokens=300)
    calls = [("call_1", "Read", '{"path": "a.py"}'), ("call_2", "Shell", '{"command": "ls -la"}')]
    with ScriptedProvider() as provider:
        provider.enqueue(kind, s.text_reply("Hello there, world", usage=usage),
                         s.thinking_then_text("Let me think", "The answer"),
                         s.tool_calls(calls, reasoning="Need files", text="Reading"),
                         s.tool_calls(calls[:1], split_args=False))
        text = _cycle(provider, kind)
        assert "".join(text.text) == "Hello there, world" and text.done is not None and text.done.reason == "stop"
        assert text.usage == usage
        thought = _cycle(provider, kind)
        assert "".join(thought.thinking) == "Let me think" and "".join(thought.text) == "The answer"
        tools = _cycle(provider, kind)
        assert tools.done is not None and tools.done.reason == "tool_use"
        assert [(c["call_id"], c["name"], c["arguments"]) for c in tools.calls.values()] == calls
        assert "".join(tools.thinking) == "Need files" and "".join(tools.text) == "Reading"
        assert tools.done.replay is not None and tools.done.replay["kind"] == kind
        single = _cycle(provider, kind)
        assert [c["arguments"] for c in single.calls.values()] == ['{"path": "a.py"}']
        assert [r.json["model"] for r in provider.requests] == ["test-model"] * 4


@pytest.mark.timeout(10)
@pytest.mark.parametrize("kind", KINDS)
def test_failure_builders(kind: str):
    s = SCRIPTS[kind]
    with ScriptedProvider() as provider:
        provider.enqueue(kind, s.length_cutoff("A long story"), s.error_event("It broke"))
        with pytest.raises(ProviderError) as length:
            _cycle(provider, kind)
        assert length.value.kind == "length"
        with pytest.raises(ProviderError, match="It broke"):
            _cycle(provider, kind)


@pytest.mark.timeout(10)
def test_anthropic_refusal_builder():
    with ScriptedProvider() as provider:
        provider.enqueue("anthropic", ANTHROPIC.refusal())
        with pytest.raises(ProviderError) as info:
            _cycle(provider, "anthropic")
        assert info.value.kind == "refusal" and not info.value.retryable


def test_builder_namespaces():
    assert (CHAT.path, RESPONSES.path, ANTHROPIC.path) == ("/chat/completions", "/responses", "/messages")
    assert {k: v.kind for k, v in SCRIPTS.items()} == {k: k for k in SCRIPTS}


# ---- prompt cache accounting (PromptCacheSim) and responders ----------------------------------------


def _anthropic_body(messages: list[dict], marked: list[int]) -> dict:
    big = "x" * 8000  # ~2,000 tokens: above the 1,024-token minimum
    out = []
    for i, m in enumerate(messages):
        blocks = [dict(b) for b in m["content"]]
        if i in marked:
            blocks[-1]["cache_control"] = {"type": "ephemeral"}
        out.append({**m, "content": blocks})
    return {"tools": [{"name": "T", "input_schema": {}, "cache_control": {"type": "ephemeral"}}],
            "system": [{"type": "text", "text": big, "cache_control": {"type": "ephemeral"}}], "messages": out}


def test_cache_sim_anthropic_writes_then_reads_at_the_previous_breakpoint():
    from tests.support.scripted_provider import PromptCacheSim

    sim = PromptCacheSim()
    u1 = {"role": "user", "content": [{"type": "text", "text": "q" * 400}]}
    a1 = {"role": "assistant", "content": [{"type": "text", "text": "a" * 400}]}
    u2 = {"role": "user", "content": [{"type": "text", "text": "r" * 400}]}
    first = sim.usage("anthropic", _anthropic_body([u1], [0]))
    assert first.cache_read_tokens == 0 and first.cache_write_tokens > 2000 and first.input_tokens == 0
    second = sim.usage("anthropic", _anthropic_body([u1, a1, u2], [0, 2]))
    assert second.cache_read_tokens == first.cache_write_tokens  # everything the first call wrote
    block = lambda role, text: sim.tokens(json.dumps({"role": role, "type": "text", "text": text}, separators=(",", ":")).encode())
    assert second.cache_write_tokens == block("assistant", "a" * 400) + block("user", "r" * 400)  # what is new
    assert second.input_tokens == 0
    # no breakpoint at all: nothing is read or written, all input is full price
    plain = sim.usage("anthropic", {"messages": [{"role": "user", "content": "hello " * 2000}]})
    assert (plain.cache_read_tokens, plain.cache_write_tokens) == (0, 0) and plain.input_tokens > 2000


def test_cache_sim_openai_reads_the_shared_prefix_in_128_token_steps_per_cache_key():
    from tests.support.scripted_provider import PromptCacheSim

    sim = PromptCacheSim()
    system = {"role": "system", "content": "s" * 6000}
    body = {"prompt_cache_key": "c1", "messages": [system, {"role": "user", "content": "one"}]}
    assert sim.usage("openai_chat", body).cache_read_tokens == 0
    again = sim.usage("openai_chat", {**body, "messages": [system, {"role": "user", "content": "two"}]})
    assert again.cache_read_tokens > 1024 and again.cache_read_tokens % 128 == 0
    assert again.input_tokens >= again.cache_read_tokens  # OpenAI's input includes the cached part
    other_key = sim.usage("openai_chat", {**body, "prompt_cache_key": "c2"})
    assert other_key.cache_read_tokens == 0


def test_a_responder_decides_the_script_when_the_request_arrives():
    with ScriptedProvider() as provider:
        provider.enqueue("openai_chat", lambda rec: CHAT.text_reply(f"you sent {rec.json['model']}", pieces=1))
        status, _, raw = _post(provider, PATHS["openai_chat"], {"model": "m-42"})
        assert status == 200 and b"you sent m-42" in raw
        assert isinstance(provider.requests[0].script, Sse)
