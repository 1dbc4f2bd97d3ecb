"""The thin httpx shell around an adapter: POST the request, decode SSE, feed the fold, check the cycle.

    async with contextlib.aclosing(stream_model(client, adapter, req, on_raw=tee, metrics=m)) as events:
        async for event in events:      # Start, Text*/Thinking*/ToolCall*, Usage (at most once), Done
            ...

Every event yielded has passed `ModelCycle`; the generator returns normally only after Done, so a
stream that ends any other way raises ProviderError (HTTP error, EOF, broken stream, length...).
Cancellation is plain task cancellation: it closes the connection whether we are still waiting for
the response headers or already reading the body. `StreamLimits` bounds the two silences a provider
can leave us in: the wait for response headers, and the gap between two SSE lines of the body (any
line counts, so Anthropic `ping` events and `: keep-alive` comments keep a slow stream alive). Either
bound ends the call with a retryable ProviderError and closes the connection. No retries here, ever (a retry after partial
output would show the user the same text twice). SSE decoding is httpx-sse's line and event decoders,
fed from the decoded body bytes, which are also handed to `on_raw` for verbose logging.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import httpx
from httpx_sse._decoders import SSEDecoder, SSELineDecoder  # the library's own decoders (pinned <0.5)

from ..wire.errors import ProviderError
from . import failures
from .base import (
    SECRET_HEADERS, Adapter, HttpRequest, ModelCycle, ModelEvent, ModelRequest, ProviderProtocolError, SseEvent, StreamFold, TextDelta, ThinkingDelta, ToolCallStart,
)

MAX_ERROR_BODY_BYTES = 64 * 1024
_FIRST_TOKEN = (TextDelta, ThinkingDelta, ToolCallStart)


@dataclass
class CallMetrics:
    """Timings (seconds, monotonic, from the moment the request is sent) and byte counts of one call."""

    status: int | None = None
    ttfb_s: float | None = None
    """Until the response headers arrived."""
    ttft_s: float | None = None
    """Until the first text, thinking or tool-call event."""
    total_s: float | None = None
    request_bytes: int = 0
    response_bytes: int = 0
    """Bytes read off the wire (before content decoding)."""


@dataclass(frozen=True)
class StreamLimits:
    """How long a provider may keep us waiting (seconds): for its response headers, and between two
    lines of its event stream. Long by default: reasoning models may think silently for minutes."""

    headers_s: float = 300.0
    idle_s: float = 300.0


KEEPALIVE_S = 90.0


def make_client(*, connect_s: float = 15.0) -> httpx.AsyncClient:
    """The one shared client. trust_env=False: this process IS the proxy its env may point at.

    No read timeout: `StreamLimits` bounds the wait for headers and the silence inside a stream with
    messages that name the model (an httpx read timeout would fire first with a vaguer one).
    Idle provider connections are kept 90 s (httpx's default is 5 s): the next agent turn, or the next
    Tab keystroke, then reuses the TLS connection instead of paying a new handshake before its first token.
    """
    return httpx.AsyncClient(
        trust_env=False,
        timeout=httpx.Timeout(connect=connect_s, read=None, write=60.0, pool=connect_s),
        limits=httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=KEEPALIVE_S),
        follow_redirects=False,
    )


async def stream_model(
    client: httpx.AsyncClient,
    adapter: Adapter,
    req: ModelRequest,
    *,
    on_raw: Callable[[bytes], None] | None = None,
    metrics: CallMetrics | None = None,
    cycle: ModelCycle | None = None,
    limits: StreamLimits = StreamLimits(),
) -> AsyncIterator[ModelEvent]:
    """Build the request (ConfigError if the route cannot be served) and stream it."""
    http_req = adapter.build_request(req)
    async for event in stream_http(
        client, http_req, adapter.new_fold(req.route.provider), provider=req.route.provider,
        model=req.route.model_id, on_raw=on_raw, metrics=metrics, cycle=cycle, limits=limits,
    ):
        yield event


async def stream_http(
    client: httpx.AsyncClient,
    http_req: HttpRequest,
    fold: StreamFold,
    *,
    provider: str,
    model: str = "",
    on_raw: Callable[[bytes], None] | None = None,
    metrics: CallMetrics | None = None,
    cycle: ModelCycle | None = None,
    limits: StreamLimits = StreamLimits(),
) -> AsyncIterator[ModelEvent]:
    """Stream an already built request (for callers that log the request body first)."""
    stall = _Stall(provider, model, limits)
    m = metrics if metrics is not None else CallMetrics()
    cycle = cycle if cycle is not None else ModelCycle()
    secrets = [v.split(" ", 1)[-1] for k, v in http_req.headers.items() if k.lower() in SECRET_HEADERS]
    content = json.dumps(http_req.body, ensure_ascii=False, separators=(",", ":")).encode()
    m.request_bytes = len(content)
    request = client.build_request("POST", http_req.url, headers=http_req.headers, content=content)
    t0 = time.monotonic()
    response: httpx.Response | None = None
    try:
        try:
            async with asyncio.timeout(limits.headers_s):
                response = await client.send(request, stream=True)
        except TimeoutError as e:
            raise stall.no_headers() from e
        except httpx.TimeoutException as e:
            raise ProviderError(f"{provider}: no response from {http_req.url} ({type(e).__name__}).") from e
        except httpx.HTTPError as e:
            raise ProviderError(f"{provider}: could not reach {http_req.url}: {e or type(e).__name__}") from e
        m.ttfb_s = time.monotonic() - t0
        stall.activity()
        m.status = response.status_code
        if response.status_code >= 400:
            body = await _read_bounded(response, on_raw, stall)
            model = http_req.body.get("model") if isinstance(http_req.body, dict) else None
            raise failures.http_error(provider, response.status_code, body, secrets, url=str(http_req.url),
                                      model=model)
        content_type = response.headers.get("content-type", "")
        if "text/event-stream" not in content_type:
            body = await _read_bounded(response, on_raw, stall)
            excerpt = failures.scrub(body[:500].decode("utf-8", errors="replace"), secrets)
            raise ProviderError(f"{provider}: expected an event stream, got {content_type or 'no content type'}: {excerpt}")
        async for event in _events(response, fold, on_raw, provider, stall):
            cycle.feed(event)
            if m.ttft_s is None and isinstance(event, _FIRST_TOKEN):
                m.ttft_s = time.monotonic() - t0
            yield event
        for event in fold.finish():
            cycle.feed(event)
            yield event
        cycle.finish()
    except ProviderError as e:
        _scrub_error(e, secrets)
        raise
    finally:
        if response is not None:
            await response.aclose()
            m.response_bytes = response.num_bytes_downloaded
        m.total_s = time.monotonic() - t0


async def _events(
    response: httpx.Response, fold: StreamFold, on_raw: Callable[[bytes], None] | None, provider: str,
    stall: "_Stall",
) -> AsyncIterator[ModelEvent]:
    text = codecs.getincrementaldecoder("utf-8")()
    lines = SSELineDecoder()
    sse = SSEDecoder()
    chunks = response.aiter_bytes().__aiter__()
    try:
        while True:
            # The idle clock restarts at every complete line and whenever the consumer hands control
            # back (time it spent handling our events is not the provider's silence). No yield happens
            # inside the timeout: it must only ever cancel our own read.
            try:
                async with asyncio.timeout_at(stall.deadline()):
                    chunk = await anext(chunks)
            except StopAsyncIteration:
                break
            except TimeoutError as e:
                raise stall.silent() from e
            if on_raw is not None:
                on_raw(chunk)
            for line in lines.decode(text.decode(chunk)):
                stall.activity()
                for event in _feed(fold, sse, line):
                    yield event
                    stall.activity()
        for line in lines.decode(text.decode(b"", final=True)) + lines.flush():
            for event in _feed(fold, sse, line):
                yield event
        # An event not closed by a blank line before EOF is discarded, as the SSE spec says.
    except UnicodeDecodeError as e:
        raise ProviderProtocolError(f"{provider}: the stream is not valid UTF-8") from e
    except httpx.HTTPError as e:
        raise ProviderError(f"{provider}: the connection broke mid-stream: {e or type(e).__name__}") from e


class _Stall:
    """The idle clock of one call, and the errors that name the model and the silence."""

    def __init__(self, provider: str, model: str, limits: StreamLimits) -> None:
        self._provider = provider
        self._model = f"model {model!r}" if model else "the model"
        self._limits = limits
        self._loop = asyncio.get_running_loop()
        self._last = self._loop.time()

    def activity(self) -> None:
        self._last = self._loop.time()

    def deadline(self) -> float:
        """When the current silence becomes too long, on the event loop's clock."""
        return self._last + self._limits.idle_s

    def silent(self) -> ProviderError:
        return ProviderError(
            f"{self._provider}: {self._model} sent nothing for {self._limits.idle_s:g} s in the middle of its "
            f"response (byok_provider_idle_s); the connection was closed.",
            retryable=True, title="Provider stalled", kind="stalled",
        )

    def no_headers(self) -> ProviderError:
        return ProviderError(
            f"{self._provider}: {self._model} sent no response headers within {self._limits.headers_s:g} s "
            f"(byok_provider_headers_s); the connection was closed.",
            retryable=True, title="Provider stalled", kind="stalled",
        )


def _feed(fold: StreamFold, decoder: SSEDecoder, line: str) -> list[ModelEvent]:
    decoded = decoder.decode(line.rstrip("\n"))
    if decoded is None:
        return []
    try:
        return fold.feed(SseEvent(event=decoded.event, data=decoded.data))
    except ProviderError:
        raise
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as e:
        # valid JSON of the wrong shape (a string where an object belongs...): the provider broke its
        # dialect, which ends the call like any other protocol error (found by tests/fuzz)
        raise ProviderProtocolError(
            f"malformed {decoded.event or 'message'} event: {type(e).__name__}: {e}") from e


async def _read_bounded(
    response: httpx.Response, on_raw: Callable[[bytes], None] | None, stall: _Stall
) -> bytes:
    body = bytearray()
    try:
        async with asyncio.timeout_at(stall.deadline()):
            async for chunk in response.aiter_bytes():
                if on_raw is not None:
                    on_raw(chunk)
                body += chunk
                if len(body) >= MAX_ERROR_BODY_BYTES:
                    break
    except (httpx.HTTPError, TimeoutError):
        pass  # the status line already says it failed; a truncated body only shortens the message
    return bytes(body[:MAX_ERROR_BODY_BYTES])


def _scrub_error(error: ProviderError, secrets: list[str]) -> None:
    clean = failures.scrub(error.message, secrets)
    if clean != error.message:
        error.message = clean
        error.args = (clean,)
