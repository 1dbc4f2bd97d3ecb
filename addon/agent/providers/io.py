"""The thin httpx shell around an adapter: POST the request, decode SSE, feed the fold, check the cycle.

    async with contextlib.aclosing(stream_model(client, adapter, req, on_raw=tee, metrics=m)) as events:
        async for event in events:      # Start, Text*/Thinking*/ToolCall*, Usage (at most once), Done
            ...

Every event yielded has passed `ModelCycle`; the generator returns normally only after Done, so a
stream that ends any other way raises ProviderError (HTTP error, EOF, broken stream, length...).
Cancellation is plain task cancellation: it closes the connection whether we are still waiting for
the response headers or already reading the body. No retries here, ever (a retry after partial
output would show the user the same text twice). SSE decoding is httpx-sse's line and event decoders,
fed from the decoded body bytes, which are also handed to `on_raw` for verbose logging.
"""

from __future__ import annotations

import codecs
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import httpx
from httpx_sse._decoders import SSEDecoder, SSELineDecoder  # the library's own decoders (pinned <0.5)

from ..errors import ProviderError
from . import failures
from .base import (
    SECRET_HEADERS, Adapter, HttpRequest, ModelCycle, ModelEvent, ModelRequest, ProviderProtocolError, SseEvent,
    StreamFold, TextDelta, ThinkingDelta, ToolCallStart,
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


def make_client(*, connect_s: float = 15.0, read_s: float = 600.0) -> httpx.AsyncClient:
    """The one shared client. trust_env=False: this process IS the proxy its env may point at.

    The read timeout bounds the silence between two chunks (and the wait for headers): long, because
    reasoning models may think for minutes before their first byte; cancellation ends it sooner.
    """
    return httpx.AsyncClient(
        trust_env=False,
        timeout=httpx.Timeout(connect=connect_s, read=read_s, write=60.0, pool=connect_s),
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
) -> AsyncIterator[ModelEvent]:
    """Build the request (ConfigError if the route cannot be served) and stream it."""
    http_req = adapter.build_request(req)
    async for event in stream_http(
        client, http_req, adapter.new_fold(req.route.provider), provider=req.route.provider,
        on_raw=on_raw, metrics=metrics, cycle=cycle,
    ):
        yield event


async def stream_http(
    client: httpx.AsyncClient,
    http_req: HttpRequest,
    fold: StreamFold,
    *,
    provider: str,
    on_raw: Callable[[bytes], None] | None = None,
    metrics: CallMetrics | None = None,
    cycle: ModelCycle | None = None,
) -> AsyncIterator[ModelEvent]:
    """Stream an already built request (for callers that log the request body first)."""
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
            response = await client.send(request, stream=True)
        except httpx.TimeoutException as e:
            raise ProviderError(f"{provider}: no response from {http_req.url} ({type(e).__name__}).") from e
        except httpx.HTTPError as e:
            raise ProviderError(f"{provider}: could not reach {http_req.url}: {e or type(e).__name__}") from e
        m.ttfb_s = time.monotonic() - t0
        m.status = response.status_code
        if response.status_code >= 400:
            body = await _read_bounded(response, on_raw)
            raise failures.http_error(provider, response.status_code, body, secrets)
        content_type = response.headers.get("content-type", "")
        if "text/event-stream" not in content_type:
            body = await _read_bounded(response, on_raw)
            excerpt = failures.scrub(body[:500].decode("utf-8", errors="replace"), secrets)
            raise ProviderError(f"{provider}: expected an event stream, got {content_type or 'no content type'}: {excerpt}")
        async for event in _events(response, fold, on_raw, provider):
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
    response: httpx.Response, fold: StreamFold, on_raw: Callable[[bytes], None] | None, provider: str
) -> AsyncIterator[ModelEvent]:
    text = codecs.getincrementaldecoder("utf-8")()
    lines = SSELineDecoder()
    sse = SSEDecoder()
    try:
        async for chunk in response.aiter_bytes():
            if on_raw is not None:
                on_raw(chunk)
            for line in lines.decode(text.decode(chunk)):
                for event in _feed(fold, sse, line):
                    yield event
        for line in lines.decode(text.decode(b"", final=True)) + lines.flush():
            for event in _feed(fold, sse, line):
                yield event
        # An event not closed by a blank line before EOF is discarded, as the SSE spec says.
    except UnicodeDecodeError as e:
        raise ProviderProtocolError(f"{provider}: the stream is not valid UTF-8") from e
    except httpx.HTTPError as e:
        raise ProviderError(f"{provider}: the connection broke mid-stream: {e or type(e).__name__}") from e


def _feed(fold: StreamFold, decoder: SSEDecoder, line: str) -> list[ModelEvent]:
    decoded = decoder.decode(line.rstrip("\n"))
    if decoded is None:
        return []
    return fold.feed(SseEvent(event=decoded.event, data=decoded.data))


async def _read_bounded(response: httpx.Response, on_raw: Callable[[bytes], None] | None) -> bytes:
    body = bytearray()
    try:
        async for chunk in response.aiter_bytes():
            if on_raw is not None:
                on_raw(chunk)
            body += chunk
            if len(body) >= MAX_ERROR_BODY_BYTES:
                break
    except httpx.HTTPError:
        pass  # the status line already says it failed; a truncated body only shortens the message
    return bytes(body[:MAX_ERROR_BODY_BYTES])


def _scrub_error(error: ProviderError, secrets: list[str]) -> None:
    clean = failures.scrub(error.message, secrets)
    if clean != error.message:
        error.message = clean
        error.args = (clean,)
