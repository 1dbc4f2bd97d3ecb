"""cursor-byok against a bare mitmdump, side by side in one run (not a test):

    python bench/vs_bare.py                    # every measurement
    python bench/vs_bare.py --only ttft,pace   # some of them: startup, ttft, pace, burst, memory

Both proxies relay the same Cursor-like client (new TLS connections for every turn: a new client
per turn). The bare mitmdump passes RunSSE to a local TLS "Cursor backend" that streams N
text_delta frames, each stamped with its send time; mitmdump with the addon answers the same run
itself from a local scripted provider that streams N stamped chunks. The difference of the two is
what the addon costs: work before the first text, per streamed event, at start-up, in memory.

Measured:
- startup:  process start until ready (bare: "proxy listening"; addon: "cursor-byok ready")
- ttft:     run start until the first text_delta (instant provider / instant upstream), p50
- pace:     per-event latency at 200 events/s (send stamp -> client), p50 / p99
- burst:    1,000 events as fast as the source can: events/s at the client, p50 latency
- memory:   RSS after 20 and after 100 turns (addon: one conversation of 100 turns)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from byok.agent import connect  # noqa: E402
from byok.agent.cursor import updates  # noqa: E402
from byok.cli.client import CursorClient, user_turn_request  # noqa: E402
from tests.e2e.conftest import start_proxy  # noqa: E402
from tests.e2e.harness import MITMDUMP, free_port, without_proxy_env  # noqa: E402
from tests.support.fake_cursor import FakeCursor  # noqa: E402
from tests.support.scripted_provider import CHAT, Ev, ScriptedProvider, Sse  # noqa: E402

from bench.proxy_overhead import StampEv, latencies  # noqa: E402


# ---- the two sources ------------------------------------------------------------------------------

def stamped_chat(tokens: int, interval_ms: float) -> Sse:
    chunk = CHAT._chunker()
    items: list = [chunk({"role": "assistant", "content": ""})]
    items += [StampEv("", delay_s=interval_ms / 1000, chunk=chunk) for _ in range(tokens)]
    return Sse(items + CHAT._tail(chunk, "stop", None))


class StampedCursor(FakeCursor):
    """The bare path's upstream: RunSSE streams `tokens` stamped text_delta frames, then `{}`."""

    tokens = 1
    interval_ms = 0.0

    async def _respond(self, path: str, writer: asyncio.StreamWriter) -> None:
        if path != "/agent.v1.AgentService/RunSSE":
            return await super()._respond(path, writer)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/connect+proto\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        await writer.drain()
        for _ in range(self.tokens):
            if self.interval_ms:
                await asyncio.sleep(self.interval_ms / 1000)
            frame = connect.encode_envelope(updates.text_delta(f"<{time.monotonic():.9f}>").SerializeToString())
            writer.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            await writer.drain()
        end = connect.encode_end_stream()
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(end), end))
        await writer.drain()


class BareProxy:
    """mitmdump with only the test redirect script (Cursor hosts -> the stamped upstream), streaming
    every body (stream_large_bodies=1) as the addon streams RunSSE."""

    def __init__(self, home: Path, upstream_port: int) -> None:
        self.home = home
        self.upstream_port = upstream_port
        self.process: subprocess.Popen | None = None
        self.port = 0
        self.ready_s = 0.0

    def start(self) -> "BareProxy":
        self.home.mkdir(parents=True, exist_ok=True)
        confdir = self.home / "mitm"
        log_path = self.home / "bare.log"
        args = [MITMDUMP, "-s", str(ROOT / "tests" / "support" / "redirect_upstream.py"),
                "--listen-host", "127.0.0.1", "--listen-port", "0", "--set", f"confdir={confdir}",
                "--set", f"test_upstream=127.0.0.1:{self.upstream_port}", "--set", "ssl_insecure=true",
                "--set", "connection_strategy=lazy", "--set", "stream_large_bodies=1"]
        env = without_proxy_env(os.environ)
        t0 = time.monotonic()
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)
        while time.monotonic() - t0 < 30:
            m = re.search(r"proxy listening at 127\.0\.0\.1:(\d+)", log_path.read_text(errors="replace"))
            if m:
                self.port, self.ready_s = int(m.group(1)), time.monotonic() - t0
                self.ca_file = str(confdir / "mitmproxy-ca-cert.pem")
                return self
            time.sleep(0.01)
        raise RuntimeError("bare mitmdump did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)

    @property
    def pid(self) -> int:
        return self.process.pid

    def client(self) -> CursorClient:
        return CursorClient(f"http://127.0.0.1:{self.port}", self.ca_file)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


# ---- one turn on either path ----------------------------------------------------------------------

async def one_turn(client: CursorClient, request) -> tuple[float, list[tuple[str, float]], object]:
    seen: list[tuple[str, float]] = []
    first: list[float] = []
    t0 = time.monotonic()

    def on_frame(frame) -> None:
        if frame.kind == "interaction_update.text_delta":
            if not first:
                first.append(frame.t)
            seen.append((frame.message.interaction_update.text_delta.text, frame.t))

    async with client:
        result = await client.run(request, on_frame=on_frame)
    if result.end_error is not None:
        raise RuntimeError(f"run failed: {result.end_error}")
    return (first[0] - t0) * 1000, seen, result


class Paths:
    def __init__(self, work: Path) -> None:
        self.provider = ScriptedProvider().start()
        self.upstream = StampedCursor(frame_delay_s=0).start()
        self.addon, ids = start_proxy(work / "addon", self.provider)
        self.model = ids["openai_chat"]
        self.bare = BareProxy(work / "bare", self.upstream.port).start()

    def close(self) -> None:
        for stop in (self.addon.stop, self.bare.stop, self.provider.stop, self.upstream.stop):
            try:
                stop()
            except Exception:
                pass

    def bare_turn(self, tokens: int, interval_ms: float):
        self.upstream.tokens, self.upstream.interval_ms = tokens, interval_ms
        request = user_turn_request("bench", model_id="cursor-official-model")
        return asyncio.run(one_turn(self.bare.client(), request))

    def addon_turn(self, tokens: int, interval_ms: float, request=None):
        self.provider.enqueue("openai_chat", stamped_chat(tokens, interval_ms))
        request = request or user_turn_request("bench", model_id=self.model)
        return asyncio.run(one_turn(self.addon.client(), request))


# ---- measurements ---------------------------------------------------------------------------------

def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


def row(*cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def measure_startup(runs: int) -> list[str]:
    bare, addon = [], []
    with tempfile.TemporaryDirectory() as d, ScriptedProvider() as provider:
        for i in range(runs):
            b = BareProxy(Path(d) / f"b{i}", free_port()).start()
            bare.append(b.ready_s)
            b.stop()
            a, _ = start_proxy(Path(d) / f"a{i}", provider)
            addon.append(a.ready_s)
            a.stop()
    b50, a50 = statistics.median(bare), statistics.median(addon)
    return [row("start-up until ready (p50 of %d, fresh confdir)" % runs, f"{b50 * 1000:.0f} ms",
                f"{a50 * 1000:.0f} ms", f"+{(a50 - b50) * 1000:.0f} ms", "≤ +300 ms")]


def measure_ttft(paths: Paths, turns: int) -> list[str]:
    bare, addon = [], []
    for _ in range(turns):  # interleaved, so drift in machine load hits both alike
        bare.append(paths.bare_turn(1, 0)[0])
        addon.append(paths.addon_turn(1, 0)[0])
    b50, a50 = statistics.median(bare), statistics.median(addon)
    return [row(f"time to first text_delta (p50 of {turns} turns, new connections)", f"{b50:.1f} ms",
                f"{a50:.1f} ms", f"+{a50 - b50:.1f} ms", "≤ +10 ms")]


def measure_pace(paths: Paths, tokens: int, turns: int) -> list[str]:
    bare, addon = [], []
    for _ in range(turns):
        bare += latencies(paths.bare_turn(tokens, 5.0)[1])
        addon += latencies(paths.addon_turn(tokens, 5.0)[1])
    return [
        row(f"per-event latency at 200 events/s, p50 ({len(addon)} events)", f"{pct(bare, .5):.2f} ms",
            f"{pct(addon, .5):.2f} ms", f"+{pct(addon, .5) - pct(bare, .5):.2f} ms", "≤ +0.25 ms"),
        row("per-event latency at 200 events/s, p99", f"{pct(bare, .99):.2f} ms",
            f"{pct(addon, .99):.2f} ms", f"+{pct(addon, .99) - pct(bare, .99):.2f} ms", "≤ +1.0 ms"),
    ]


def burst_stats(seen: list[tuple[str, float]]) -> tuple[float, float]:
    lat = latencies(seen)
    stamps = [float(s[1:]) for text, _ in seen for s in text.split(">") if s.startswith("<")]
    arrivals = [t for text, t in seen for s in text.split(">") if s.startswith("<")]
    span = max(arrivals) - min(min(stamps), min(arrivals))
    return len(lat) / span if span > 0 else float("inf"), statistics.median(lat)


def measure_burst(paths: Paths, tokens: int, turns: int) -> list[str]:
    bare_rate, bare_p50, addon_rate, addon_p50 = [], [], [], []
    for _ in range(turns):
        r, p = burst_stats(paths.bare_turn(tokens, 0)[1])
        bare_rate.append(r)
        bare_p50.append(p)
        r, p = burst_stats(paths.addon_turn(tokens, 0)[1])
        addon_rate.append(r)
        addon_p50.append(p)
    return [
        row(f"burst of {tokens} events: events/s at the client (p50 of {turns})",
            f"{statistics.median(bare_rate):,.0f}", f"{statistics.median(addon_rate):,.0f}", "",
            "≥ 30,000 /s"),
        row(f"burst of {tokens} events: latency p50", f"{statistics.median(bare_p50):.1f} ms",
            f"{statistics.median(addon_p50):.1f} ms", "", "≤ 20 ms"),
    ]


def measure_memory(paths: Paths, turns: int) -> list[str]:
    state = None
    conversation = str(uuid.uuid4())
    addon_rss, bare_rss = {}, {}
    for turn in range(1, turns + 1):
        request = user_turn_request(f"turn {turn}: say something", model_id=paths.model,
                                    conversation_id=conversation, state=state)
        _, _, result = paths.addon_turn(20, 0, request)
        state = result.checkpoints()[-1]
        paths.bare_turn(20, 0)
        if turn in (1, 20, turns):
            addon_rss[turn], bare_rss[turn] = rss_mib(paths.addon.process.pid), rss_mib(paths.bare.pid)
    growth = (addon_rss[turns] - addon_rss[20]) / addon_rss[20] * 100
    return [
        row(f"RSS after {turns} turns", f"{bare_rss[turns]:.1f} MiB", f"{addon_rss[turns]:.1f} MiB",
            f"+{addon_rss[turns] - bare_rss[turns]:.1f} MiB", "≤ +25 MiB"),
        row(f"RSS growth, turns 20 -> {turns}", f"{bare_rss[20]:.1f} -> {bare_rss[turns]:.1f} MiB",
            f"{addon_rss[20]:.1f} -> {addon_rss[turns]:.1f} MiB", f"{growth:+.1f} %", "± 10 %"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="startup,ttft,pace,burst,memory")
    parser.add_argument("--turns", type=int, default=30, help="turns per TTFT measurement")
    parser.add_argument("--startups", type=int, default=5)
    parser.add_argument("--memory-turns", type=int, default=100)
    args = parser.parse_args()
    only = set(args.only.split(","))
    rows = []
    if "startup" in only:
        rows += measure_startup(args.startups)
    if only & {"ttft", "pace", "burst", "memory"}:
        with tempfile.TemporaryDirectory() as d:
            paths = Paths(Path(d))
            try:
                for _ in range(3):  # warm both (certificates, connections, imports)
                    paths.bare_turn(1, 0)
                    paths.addon_turn(1, 0)
                if "ttft" in only:
                    rows += measure_ttft(paths, args.turns)
                if "pace" in only:
                    rows += measure_pace(paths, 200, 3)
                if "burst" in only:
                    rows += measure_burst(paths, 1000, 5)
                if "memory" in only:
                    rows += measure_memory(paths, args.memory_turns)
            finally:
                paths.close()
    load = os.getloadavg()[0]
    print(f"load average at the end: {load:.2f} (2 cores); {time.strftime('%Y-%m-%d %H:%M')}\n")
    print(row("measurement", "bare mitmdump", "cursor-byok", "added", "goal"))
    print(row("---", "---", "---", "---", "---"))
    for r in rows:
        print(r)


if __name__ == "__main__":
    threading.excepthook = lambda args: None  # a stopped test server's thread is not news
    main()
