"""Per-event latency of the same run over HTTP/2 `Run` and over RunSSE + BidiAppend (not a test):

    python bench/h2_vs_runsse.py [--tokens 1000] [--runs 3] [--interval-ms 5]

One mitmdump with the addon, one scripted provider; each chunk's text is its send time (as in
bench/proxy_overhead.py), so every text_delta's latency from the provider to the client is exact.
The same script is run through the proxy by the RunSSE client (`CursorClient`, HTTP/1.1 RunSSE +
BidiAppend appends) and by the HTTP/2 client (`H2CursorClient`, one bidi Run stream through CONNECT
+ TLS + ALPN h2), alternating, so both see the same machine load. Reported per transport: time to
the first text_delta, per-event latency p50/p99, and the whole run (request to end-stream, which
includes the client's blob ACKs travelling up: appends on RunSSE, the request stream on HTTP/2).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from proxy_overhead import latencies, stamped_script  # noqa: E402

from byok.cli.client import user_turn_request  # noqa: E402
from tests.e2e.conftest import start_proxy  # noqa: E402
from tests.support.scripted_provider import ScriptedProvider  # noqa: E402


async def one_run(proxy, model: str, http2: bool) -> tuple[float, list[float], float]:
    seen: list[tuple[str, float]] = []
    first = [None]

    def on_frame(frame):
        if frame.kind == "interaction_update.text_delta":
            first[0] = first[0] or frame.t
            seen.append((frame.message.interaction_update.text_delta.text, frame.t))

    client = proxy.h2_client() if http2 else proxy.client()
    async with client:
        if http2:
            await client.connection()  # the same footing as httpx's pooled connection: connect first
        t0 = time.monotonic()
        result = await client.run(user_turn_request("bench", model_id=model), on_frame=on_frame)
        total = time.monotonic() - t0
        assert result.end_error is None, result.end_error
    return (first[0] - t0) * 1000, latencies(seen), total * 1000


def row(pace: str, name: str, ttft: list[float], lat: list[float], total: list[float]) -> str:
    lat = sorted(lat)
    return (f"| {pace} | {name} | {statistics.median(ttft):.1f} ms | {statistics.median(lat):.2f} ms | "
            f"{lat[int(len(lat) * 0.99)]:.2f} ms | {statistics.median(total):.0f} ms | {len(lat)} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--interval-ms", type=float, default=5.0,
                        help="pause between provider chunks (0 = as fast as it can)")
    args = parser.parse_args()
    with ScriptedProvider() as provider, tempfile.TemporaryDirectory() as d:
        proxy, ids = start_proxy(Path(d) / "home", provider)
        results = {"RunSSE + BidiAppend (HTTP/1.1)": ([], [], []), "Run (HTTP/2)": ([], [], [])}
        try:
            for _ in range(args.runs):
                for name, http2 in (("RunSSE + BidiAppend (HTTP/1.1)", False), ("Run (HTTP/2)", True)):
                    provider.enqueue("openai_chat", stamped_script(args.tokens, args.interval_ms))
                    ttft, lat, total = asyncio.run(one_run(proxy, ids["openai_chat"], http2))
                    results[name][0].append(ttft)
                    results[name][1].extend(lat)
                    results[name][2].append(total)
        finally:
            proxy.stop()
    pace = f"{1000 / args.interval_ms:g} tokens/s" if args.interval_ms else "as fast as possible"
    print(f"{args.tokens} tokens ({pace}) x {args.runs} runs per transport\n")
    print("| pace | transport | first text_delta (p50) | per-event latency p50 | p99 | whole run (p50) | events |")
    print("|---|---|---|---|---|---|---|")
    for name, (ttft, lat, total) in results.items():
        print(row(pace, name, ttft, lat, total))


if __name__ == "__main__":
    main()
