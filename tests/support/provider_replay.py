"""Replay a recorded provider response through the real IO shell (httpx + httpx-sse decoding).

    events, error = replay("anthropic", load("anthropic/text.sse"), chunk_sizes=[1, 7, 3])

The bytes are served by an `httpx.MockTransport`, optionally cut into chunks of the given sizes
(cycled), so the SSE line/event decoders see every split a network could produce.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import httpx

from byok.providers.config import ModelRoute
from byok.wire.errors import RunError
from byok.providers import adapter_for
from byok.providers.base import ModelCycle, ModelEvent, ModelRequest, SseEvent
from byok.providers.io import CallMetrics, stream_model
from byok.providers.transcript import TextPart, UserItem

CAPTURES = Path(__file__).resolve().parents[2] / "captures" / "providers"
TEST_KEY = "sk-test-SECRET-0123456789"


def load(name: str) -> bytes:
    return (CAPTURES / name).read_bytes()


def route(kind: str, **overrides: object) -> ModelRoute:
    fields: dict = dict(
        public_id="0badc0de", provider="testprov", kind=kind, base_url="https://llm.example.test/v1",
        model_id="test-model", display_name="Test Model", api_key=TEST_KEY,
        max_output_tokens=1024 if kind == "anthropic" else None,
    )
    fields.update(overrides)
    return ModelRoute(**fields)


def request(kind: str, **route_overrides: object) -> ModelRequest:
    return ModelRequest(route=route(kind, **route_overrides), system="sys",
                        items=(UserItem(parts=(TextPart("hi"),)),))


def sse_events(body: bytes) -> list[SseEvent]:
    """The body decoded by httpx-sse's decoders, for feeding a Fold directly (no IO)."""
    from httpx_sse._decoders import SSEDecoder, SSELineDecoder

    lines, decoder, out = SSELineDecoder(), SSEDecoder(), []
    for line in lines.decode(body.decode()) + lines.flush():
        sse = decoder.decode(line)
        if sse is not None:
            out.append(SseEvent(event=sse.event, data=sse.data))
    return out


class _Chunks(httpx.AsyncByteStream):
    def __init__(self, data: bytes, sizes: list[int] | None) -> None:
        self._data, self._sizes = data, sizes

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if not self._sizes:
            yield self._data
            return
        pos, i = 0, 0
        while pos < len(self._data):
            size = self._sizes[i % len(self._sizes)]
            yield self._data[pos:pos + size]
            pos, i = pos + size, i + 1


def random_sizes(seed: int, n: int = 64, top: int = 40) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(1, top) for _ in range(n)]


def mock_client(body: bytes, *, status: int = 200, chunk_sizes: Iterable[int] | None = None,
                content_type: str = "text/event-stream; charset=utf-8", seen: list | None = None) -> httpx.AsyncClient:
    sizes = list(chunk_sizes) if chunk_sizes is not None else None

    async def handler(req: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(req)
        return httpx.Response(status, headers={"content-type": content_type}, stream=_Chunks(body, sizes))

    return httpx.AsyncClient(transport=httpx.MockTransport(handler), trust_env=False)


async def areplay(kind: str, body: bytes, **kw: object) -> tuple[list[ModelEvent], RunError | None, ModelCycle, CallMetrics]:
    raw: list[bytes] = []
    metrics, cycle = CallMetrics(), ModelCycle()
    events: list[ModelEvent] = []
    error: RunError | None = None
    async with mock_client(body, **kw) as client:  # type: ignore[arg-type]
        try:
            async for event in stream_model(client, adapter_for(kind), request(kind), on_raw=raw.append,
                                            metrics=metrics, cycle=cycle):
                events.append(event)
        except RunError as e:
            error = e
    seen = b"".join(raw)
    assert body.startswith(seen) and (error is not None or seen == body), "on_raw sees the body bytes as read"
    return events, error, cycle, metrics


def replay(kind: str, body: bytes, **kw: object) -> tuple[list[ModelEvent], RunError | None]:
    events, error, _, _ = asyncio.run(areplay(kind, body, **kw))
    return events, error
