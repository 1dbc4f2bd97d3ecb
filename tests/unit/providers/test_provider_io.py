"""The httpx shell: HTTP error mapping from the recorded JSON bodies, broken streams, cancellation
while waiting for headers and while reading, metrics, no retries, secrets kept out of errors."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time

import httpx
import pytest

from byok.wire.errors import ProviderError
from byok.providers import adapter_for
from byok.providers.base import ProviderProtocolError, TextDelta
from byok.providers.io import CallMetrics, StreamLimits, make_client, stream_model
from tests.support.provider_replay import CAPTURES, TEST_KEY, load, mock_client, replay, request
from tests.support.waiting import until
from tests.support.scripted_provider import ANTHROPIC, CHAT, Ev, Hang, HttpError, ScriptedProvider, Sse

# (dialect, file) -> (title, retryable, kind)
HTTP_ERRORS = {
    ("openai_chat", "http_400_context_length.json"): ("Conversation too long", False, "context_length"),
    ("openai_chat", "http_401.json"): ("API key rejected", False, "provider_error"),
    ("openai_chat", "http_429.json"): ("Rate limited", True, "provider_error"),
    ("openai_chat", "http_503.json"): ("Provider Error", True, "provider_error"),
    ("openai_responses", "http_400_context_length.json"): ("Conversation too long", False, "context_length"),
    ("openai_responses", "http_401.json"): ("API key rejected", False, "provider_error"),
    ("openai_responses", "http_500.json"): ("Provider Error", True, "provider_error"),
    ("anthropic", "http_400_context_length.json"): ("Conversation too long", False, "context_length"),
    ("anthropic", "http_400_max_tokens.json"): ("Provider Error", False, "provider_error"),
    ("anthropic", "http_401.json"): ("API key rejected", False, "provider_error"),
    ("anthropic", "http_529.json"): ("Provider Error", True, "provider_error"),
}


def test_every_error_body_has_an_expectation():
    files = {(k, p.name) for k in ("openai_chat", "openai_responses", "anthropic") for p in (CAPTURES / k).glob("*.json")}
    assert files == set(HTTP_ERRORS)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("kind,name", sorted(HTTP_ERRORS))
def test_http_error_bodies_map_to_provider_errors(kind: str, name: str):
    status = int(name.split("_")[1].split(".")[0])
    body = load(f"{kind}/{name}")
    events, error = replay(kind, body, status=status, content_type="application/json")
    title, retryable, err_kind = HTTP_ERRORS[(kind, name)]
    assert events == []
    assert isinstance(error, ProviderError)
    assert (error.status, error.title, error.retryable, error.kind) == (status, title, retryable, err_kind)
    assert error.message.startswith("testprov")
    connect = error.to_connect()
    assert connect.code.value == "unavailable" and f"(HTTP {status})" in connect.message


@pytest.mark.timeout(10)
def test_provider_echoing_the_key_is_scrubbed_from_the_error():
    body = b'{"error": {"message": "Incorrect API key provided: ' + TEST_KEY.encode() + b'"}}'
    _, error = replay("openai_chat", body, status=401, content_type="application/json")
    assert isinstance(error, ProviderError)
    assert TEST_KEY not in error.message and TEST_KEY not in str(error) and "<redacted>" in error.message


@pytest.mark.timeout(10)
def test_non_json_error_body_and_non_sse_success_are_explicit():
    _, error = replay("anthropic", b"<html>Bad Gateway</html>", status=502, content_type="text/html")
    assert isinstance(error, ProviderError) and error.retryable and "Bad Gateway" in error.message
    _, error = replay("anthropic", b'{"id": "msg"}', status=200, content_type="application/json")
    assert isinstance(error, ProviderError) and "expected an event stream" in error.message


@pytest.mark.timeout(10)
def test_events_after_done_are_a_protocol_error():
    body = load("anthropic/text.sse") + b'event: ping\ndata: {"type": "ping"}\n\n'
    events, error = replay("anthropic", body)
    assert isinstance(error, ProviderProtocolError)
    assert events[-1].__class__.__name__ == "Done"  # the loop must still treat the call as failed


@pytest.mark.timeout(10)
def test_invalid_utf8_is_a_protocol_error():
    _, error = replay("openai_chat", b'data: {"id": "\xff\xfe"}\n\n')
    assert isinstance(error, ProviderProtocolError)


@pytest.mark.timeout(10)
def test_connection_refused_is_a_retryable_provider_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the request: nothing listens there

    async def run() -> None:
        async with make_client(connect_s=2) as client:
            async for _ in stream_model(client, adapter_for("openai_chat"),
                                        request("openai_chat", base_url=f"http://127.0.0.1:{port}/v1")):
                pass

    with pytest.raises(ProviderError, match="could not reach") as info:
        asyncio.run(run())
    assert info.value.retryable


def test_make_client_ignores_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    client = make_client()
    try:
        assert client.trust_env is False
        # no read timeout: StreamLimits bounds headers and silence with errors that name the model
        assert client.timeout.connect == 15.0 and client.timeout.read is None
    finally:
        asyncio.run(client.aclose())


# ---- against the scripted provider (real sockets) ------------------------------------------------


async def _consume(provider: ScriptedProvider, kind: str, metrics: CallMetrics | None = None,
                   events: list | None = None, limits: StreamLimits = StreamLimits()) -> None:
    async with make_client() as client:
        async for event in stream_model(client, adapter_for(kind), request(kind, base_url=provider.base_url),
                                        metrics=metrics, limits=limits):
            if events is not None:
                events.append(event)


async def _cancel_when(predicate, what: str, coro) -> None:
    """Run `coro`, cancel it once `predicate()` holds (the state the test cancels in)."""
    task = asyncio.ensure_future(coro)
    await until(predicate, what)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.timeout(10)
def test_cancel_while_waiting_for_headers_closes_the_connection():
    with ScriptedProvider() as provider:
        provider.enqueue("anthropic", Hang(30))
        started = time.time()
        asyncio.run(_cancel_when(lambda: provider.requests, "the request to reach the provider",
                                 _consume(provider, "anthropic")))
        rec = provider.wait_closed(1, timeout=5)
        assert rec.closed_early and rec.closed_at is not None and rec.closed_at - started < 2


@pytest.mark.timeout(10)
def test_cancel_while_reading_the_stream_closes_the_connection():
    items = CHAT.text_reply("hello world").items
    slow = items[:2] + [Ev(items[2], delay_s=30)] + items[3:]
    with ScriptedProvider() as provider:
        provider.enqueue("openai_chat", Sse(slow))
        events: list = []
        asyncio.run(_cancel_when(lambda: any(isinstance(e, TextDelta) for e in events), "a first text delta",
                                 _consume(provider, "openai_chat", events=events)))
        rec = provider.wait_closed(1, timeout=5)
        assert rec.closed_early
        assert any(isinstance(e, TextDelta) for e in events)


@pytest.mark.timeout(10)
def test_leaving_the_stream_early_closes_the_connection():
    items = CHAT.text_reply("hello world").items
    slow = items[:3] + [Ev(items[3], delay_s=30)] + items[4:]

    async def first_delta(provider: ScriptedProvider) -> None:
        async with make_client() as client:
            gen = stream_model(client, adapter_for("openai_chat"), request("openai_chat", base_url=provider.base_url))
            async with contextlib.aclosing(gen) as events:
                async for event in events:
                    if isinstance(event, TextDelta):
                        break

    with ScriptedProvider() as provider:
        provider.enqueue("openai_chat", Sse(slow))
        asyncio.run(first_delta(provider))
        assert provider.wait_closed(1, timeout=5).closed_early


@pytest.mark.timeout(10)
def test_metrics_and_a_dropped_connection_mid_stream():
    items = ANTHROPIC.text_reply("hello world").items
    delayed = items[:3] + [Ev(items[3].data, items[3].event, delay_s=0.15)] + items[4:]  # first text delta
    with ScriptedProvider() as provider:
        provider.enqueue("anthropic", Sse(delayed), Sse(items, abort_after=5))
        m = CallMetrics()
        asyncio.run(_consume(provider, "anthropic", metrics=m))
        assert m.status == 200 and m.ttfb_s is not None and m.ttft_s is not None and m.total_s is not None
        assert m.ttfb_s <= m.ttft_s <= m.total_s and m.ttft_s >= 0.15
        assert m.request_bytes == len(provider.requests[0].body) and m.response_bytes > 0
        with pytest.raises(ProviderError, match="broke mid-stream") as info:
            asyncio.run(_consume(provider, "anthropic"))
        assert info.value.retryable


@pytest.mark.timeout(10)
def test_no_automatic_retry():
    with ScriptedProvider() as provider:
        provider.enqueue("openai_chat", HttpError(500, {"error": {"message": "boom"}}), CHAT.text_reply("never"))
        with pytest.raises(ProviderError, match="boom"):
            asyncio.run(_consume(provider, "openai_chat"))
        # a retry would have been sent before the error was raised: nothing to wait for
        assert len(provider.requests) == 1 and provider.pending("openai_chat") == 1


@pytest.mark.timeout(10)
def test_request_goes_out_as_built():
    seen: list[httpx.Request] = []

    async def run() -> None:
        async with mock_client(load("openai_chat/text.sse"), seen=seen) as client:
            async for _ in stream_model(client, adapter_for("openai_chat"), request("openai_chat")):
                pass

    asyncio.run(run())
    (req,) = seen
    assert req.method == "POST" and str(req.url) == "https://llm.example.test/v1/chat/completions"
    assert req.headers["authorization"] == f"Bearer {TEST_KEY}"
    assert req.headers["content-type"] == "application/json"
    body = req.content.decode()
    assert '"stream":true' in body and '"messages":[{"role":"system","content":"sys"}' in body


# ---- stall bounds (byok_provider_idle_s, byok_provider_headers_s) --------------------------------

SHORT = StreamLimits(headers_s=0.4, idle_s=0.4)


@pytest.mark.timeout(10)
def test_a_silent_stream_ends_with_a_stall_error_that_names_the_model_and_closes_the_connection():
    items = ANTHROPIC.text_reply("hello world").items
    quiet = items[:4] + [Ev(items[4].data, items[4].event, delay_s=30)] + items[5:]
    with ScriptedProvider() as provider:
        provider.enqueue("anthropic", Sse(quiet))
        events: list = []
        with pytest.raises(ProviderError) as info:
            asyncio.run(_consume(provider, "anthropic", events=events, limits=SHORT))
        assert provider.wait_closed(1, timeout=5).closed_early
    error = info.value
    assert error.retryable and error.kind == "stalled" and error.title == "Provider stalled"
    assert "'test-model'" in error.message and "0.4 s" in error.message and "byok_provider_idle_s" in error.message
    assert any(isinstance(e, TextDelta) for e in events)  # it stalled mid-answer, after real output


@pytest.mark.timeout(10)
def test_no_response_headers_within_the_bound_is_a_stall_error():
    with ScriptedProvider() as provider:
        provider.enqueue("openai_chat", Hang(30))
        with pytest.raises(ProviderError) as info:
            asyncio.run(_consume(provider, "openai_chat", limits=StreamLimits(headers_s=0.3, idle_s=60)))
        assert provider.wait_closed(1, timeout=5).closed_early
    assert info.value.retryable and info.value.kind == "stalled"
    assert "no response headers within 0.3 s" in info.value.message and "'test-model'" in info.value.message


@pytest.mark.timeout(10)
@pytest.mark.parametrize("kind,keepalive", [
    ("openai_chat", b": keep-alive\n\n"),
    ("openai_chat", b": OPENROUTER PROCESSING\n\n"),
    ("anthropic", b'event: ping\ndata: {"type": "ping"}\n\n'),
])
def test_keep_alives_count_as_activity(kind: str, keepalive: bytes):
    """Keep-alives every 0.1 s for 0.8 s in total, twice the idle bound: the call succeeds."""
    script = CHAT.text_reply("patience") if kind == "openai_chat" else ANTHROPIC.text_reply("patience")
    items = script.items[:1] + [Ev(keepalive, delay_s=0.1) for _ in range(8)] + script.items[1:]
    with ScriptedProvider() as provider:
        provider.enqueue(kind, Sse(items))
        events: list = []
        asyncio.run(_consume(provider, kind, events=events, limits=SHORT))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "patience"


@pytest.mark.timeout(10)
def test_time_the_consumer_spends_is_not_provider_silence():
    """A consumer slower than the idle bound (e.g. waiting on Cursor's blob ACKs) does not make a
    stream that arrived in time look silent."""
    async def slow_consumer(provider: ScriptedProvider) -> str:
        text = []
        async with make_client() as client:
            async for event in stream_model(client, adapter_for("openai_chat"),
                                            request("openai_chat", base_url=provider.base_url), limits=SHORT):
                if isinstance(event, TextDelta):
                    text.append(event.text)
                    await asyncio.sleep(0.6)  # the scenario: a consumer slower than the idle bound
        return "".join(text)

    with ScriptedProvider() as provider:
        provider.enqueue("openai_chat", CHAT.text_reply("slow reader"))
        assert asyncio.run(slow_consumer(provider)) == "slow reader"


@pytest.mark.timeout(10)
def test_http_404_points_at_base_url_and_the_model_id_and_keeps_its_status():
    _, error = replay("openai_chat", b'{"error": {"message": "No fixture matched"}}', status=404,
                      content_type="application/json")
    assert isinstance(error, ProviderError) and error.status == 404 and not error.retryable
    assert "No fixture matched" in error.message and "check base_url and the model id" in error.message
    assert "/chat/completions" in error.message and "usually /v1" in error.message
    assert error.detail.endswith("(HTTP 404)") and error.to_connect().message == error.detail


def test_consecutive_calls_reuse_one_provider_connection():
    """The next turn (or Tab keystroke) goes out on the connection the last one used: no new handshake.
    make_client keeps idle connections KEEPALIVE_S (90 s, where httpx's default is 5 s)."""
    from byok.providers import io

    connections: list[int] = []
    body = b'data: {"choices":[{"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer.get_extra_info("peername")[1])
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n%s"
                             % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def run() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with make_client() as client:
                for _ in range(3):
                    events = [e async for e in stream_model(client, adapter_for("openai_chat"),
                                                            request("openai_chat", base_url=f"http://127.0.0.1:{port}/v1"))]
                    assert any(isinstance(e, TextDelta) for e in events)
        finally:
            server.close()

    asyncio.run(run())
    assert len(connections) == 1
    assert io.KEEPALIVE_S >= 60
