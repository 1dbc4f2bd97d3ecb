"""Proxy overhead vs. reading the provider directly (not a test):

    python bench/proxy_overhead.py [--tokens 1000] [--runs 3]

A local scripted provider streams N Chat Completions chunks as fast as it can; each chunk's text
carries the provider's send time (time.monotonic(), same process), so every event's latency is
known exactly. The same script is read (a) directly with httpx + SSE parsing and (b) as
`text_delta` frames through a real mitmdump running the addon, driven by the Cursor-like client.
Reported: time to first token/text_delta and per-event latency p50/p99, and mitmdump start time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from byok.cli.client import user_turn_request  # noqa: E402
from tests.e2e.conftest import start_proxy  # noqa: E402
from tests.support.scripted_provider import CHAT, Ev, ScriptedProvider, Sse  # noqa: E402


@dataclass(frozen=True)
class StampEv(Ev):
    """A chunk whose text is its own send time, rendered when the provider writes it."""

    chunk: Callable | None = None

    def encode(self) -> bytes:
        return f"data: {json.dumps(self.chunk({'content': f'<{time.monotonic():.9f}>'}))}\n\n".encode()


def stamped_script(tokens: int, interval_ms: float = 0.0) -> Sse:
    chunk = CHAT._chunker()
    items = [chunk({"role": "assistant", "content": ""})]
    items += [StampEv("", delay_s=interval_ms / 1000, chunk=chunk) for _ in range(tokens)]
    items += CHAT._tail(chunk, "stop", None)
    return Sse(items)


def latencies(texts_and_arrivals: list[tuple[str, float]]) -> list[float]:
    out = []
    for text, arrived in texts_and_arrivals:
        for stamp in text.split(">"):
            if stamp.startswith("<"):
                out.append((arrived - float(stamp[1:])) * 1000)
    return out


async def direct(base_url: str) -> tuple[float, list[float]]:
    t0 = time.monotonic()
    seen: list[tuple[str, float]] = []
    first = None
    async with httpx.AsyncClient(timeout=60) as client:
        async with client.stream("POST", base_url + "/chat/completions", json={"model": "m", "stream": True}) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    content = ((json.loads(line[6:]).get("choices") or [{}])[0].get("delta") or {}).get("content")
                    if content:
                        now = time.monotonic()
                        first = first or now
                        seen.append((content, now))
    return (first - t0) * 1000, latencies(seen)


async def proxied(proxy, model: str) -> tuple[float, list[float]]:
    seen: list[tuple[str, float]] = []
    first = [None]
    t0 = time.monotonic()

    def on_frame(frame):
        if frame.kind == "interaction_update.text_delta":
            first[0] = first[0] or frame.t
            seen.append((frame.message.interaction_update.text_delta.text, frame.t))

    async with proxy.client() as client:
        result = await client.run(user_turn_request("bench", model_id=model), on_frame=on_frame)
        assert result.end_error is None, result.end_error
    return (first[0] - t0) * 1000, latencies(seen)


def summary(name: str, ttft: list[float], lat: list[float]) -> str:
    lat = sorted(lat)
    return (f"| {name} | {statistics.median(ttft):.1f} ms | {statistics.median(lat):.2f} ms | "
            f"{lat[int(len(lat) * 0.99)]:.2f} ms | {len(lat)} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--interval-ms", type=float, default=0.0,
                        help="pause between provider chunks (0 = as fast as it can)")
    args = parser.parse_args()
    with ScriptedProvider() as provider, tempfile.TemporaryDirectory() as d:
        proxy, ids = start_proxy(Path(d) / "home", provider)
        try:
            results = {"direct": ([], []), "through the proxy": ([], [])}
            for _ in range(args.runs):
                provider.enqueue("openai_chat", stamped_script(args.tokens, args.interval_ms))
                ttft, lat = asyncio.run(direct(provider.base_url))
                results["direct"][0].append(ttft)
                results["direct"][1].extend(lat)
                provider.enqueue("openai_chat", stamped_script(args.tokens, args.interval_ms))
                ttft, lat = asyncio.run(proxied(proxy, ids["openai_chat"]))
                results["through the proxy"][0].append(ttft)
                results["through the proxy"][1].extend(lat)
        finally:
            proxy.stop()
        pace = f"every {args.interval_ms:g} ms" if args.interval_ms else "as fast as the provider can"
        print(f"mitmdump + addon ready in {proxy.ready_s:.2f} s; {args.tokens} tokens ({pace}) x {args.runs} runs\n")
        print("| path | time to first token / text_delta (p50) | per-event latency p50 | p99 | events |")
        print("|---|---|---|---|---|")
        for name, (ttft, lat) in results.items():
            print(summary(name, ttft, lat))


if __name__ == "__main__":
    main()
