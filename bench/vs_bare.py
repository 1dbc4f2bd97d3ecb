"""cursor-byok against a bare mitmdump, side by side in one run (not a test):

    python bench/vs_bare.py                    # every measurement
    python bench/vs_bare.py --only ttft,pace   # some of them: startup, ttft, pace, burst, memory,
                                               # conversation (not in the default set: a few minutes)
    python bench/vs_bare.py --no-h2            # RunSSE only (else RunSSE and HTTP/2 Run, each)

Both proxies relay the same Cursor-like client (new TLS connections for every turn: a new client
per turn). The bare mitmdump passes RunSSE to a local TLS "Cursor backend" that streams N
text_delta frames, each stamped with its send time; mitmdump with the addon answers the same run
itself from a local scripted provider that streams N stamped chunks. The difference of the two is
what the addon costs: work before the first text, per streamed event, at start-up, in memory.

Measured:
- startup:  process start until ready (bare: "proxy listening"; addon: "cursor-byok ready")
- ttft:     run start until the first text_delta (instant provider / instant upstream), p50, and
            the proxy CPU a one-token turn costs (CPU time: not inflated by load elsewhere)
- pace:     per-event latency at 200 events/s (send stamp -> client), p50 / p99
- burst:    1,000 events as fast as the source can: events/s at the client, p50 latency
- memory:   RSS after 20 and after 100 turns (addon: one conversation of 100 turns)
- conversation: one conversation of 600 turns: the curve of first text, proxy CPU per turn and RSS
            as the history grows (p50 of 20 turns at every 50th), and the goals' ratios
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

from byok.wire import connect  # noqa: E402
from byok.agent.cursor import updates  # noqa: E402
from byok.cli.client import CursorClient, user_turn_request  # noqa: E402
from tests.e2e.conftest import start_proxy  # noqa: E402
from tests.e2e.harness import MITMDUMP, Proxy, free_port, model_entry, providers_toml, public_id  # noqa: E402
from tests.support.fake_cursor import FakeCursor  # noqa: E402
from tests.support.fake_h2_cursor import H2AgentHost  # noqa: E402
from tests.support.scripted_provider import CHAT, ScriptedProvider, Sse  # noqa: E402

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


class StampedH2Cursor(H2AgentHost):
    """The bare path's HTTP/2 agent host: a Run streams `tokens` stamped text_delta frames after the
    client's first message, then `{}` and END_STREAM."""

    tokens = 1
    interval_ms = 0.0

    async def _connection(self, reader, writer) -> None:
        import h2.config
        import h2.connection
        import h2.events

        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        conn.initiate_connection()
        writer.write(conn.data_to_send())
        answering: set[int] = set()
        try:
            while data := await reader.read(65536):
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived):
                        conn.send_headers(event.stream_id, [(":status", "200"),
                                                            ("content-type", "application/connect+proto")])
                    elif isinstance(event, h2.events.DataReceived):
                        conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                        if event.stream_id not in answering:
                            answering.add(event.stream_id)
                            asyncio.ensure_future(self._answer(conn, writer, event.stream_id))
                writer.write(conn.data_to_send())
                await writer.drain()
        except (ConnectionError, OSError):
            pass

    async def _answer(self, conn, writer, stream_id: int) -> None:
        for _ in range(self.tokens):
            if self.interval_ms:
                await asyncio.sleep(self.interval_ms / 1000)
            frame = connect.encode_envelope(updates.text_delta(f"<{time.monotonic():.9f}>").SerializeToString())
            conn.send_data(stream_id, frame)
            writer.write(conn.data_to_send())
            await writer.drain()
        conn.send_data(stream_id, connect.encode_end_stream(), end_stream=True)
        writer.write(conn.data_to_send())
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


def without_proxy_env(environ) -> dict[str, str]:
    """No proxy variables (traffic stays on loopback); bytecode caching on, as on a user's machine."""
    return {k: v for k, v in environ.items() if not k.lower().endswith("_proxy") and k != "PYTHONDONTWRITEBYTECODE"}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


# ---- one turn on either path ----------------------------------------------------------------------

async def one_turn(client: CursorClient, request, *, end_request_early: bool = False
                   ) -> tuple[float, list[tuple[str, float]], object]:
    seen: list[tuple[str, float]] = []
    first: list[float] = []
    t0 = time.monotonic()

    def on_frame(frame) -> None:
        if frame.kind == "interaction_update.text_delta":
            if not first:
                first.append(frame.t)
                if end_request_early:  # bare mitmproxy 11 holds a Run's response end until the request ends
                    asyncio.ensure_future(client.end_request(result_id[0]))
            seen.append((frame.message.interaction_update.text_delta.text, frame.t))

    result_id = [str(uuid.uuid4())]

    async with client:
        result = await client.run(request, on_frame=on_frame, request_id=result_id[0])
    if result.end_error is not None:
        raise RuntimeError(f"run failed: {result.end_error}")
    return (first[0] - t0) * 1000, seen, result


def _serve_sources(conn) -> None:
    """The other process: the scripted provider and the stamped upstream, driven over a pipe, so the
    sources never share a GIL with the measuring client (they would slow each other's bursts)."""
    provider = ScriptedProvider().start()
    upstream = StampedCursor(frame_delay_s=0).start()
    h2_upstream = StampedH2Cursor().start()
    conn.send((provider.base_url, upstream.port, h2_upstream.port))
    while True:
        command, tokens, interval_ms = conn.recv()
        if command == "stop":
            break
        if command == "chat":
            provider.enqueue("openai_chat", stamped_chat(tokens, interval_ms))
        elif command == "upstream":
            upstream.tokens, upstream.interval_ms = tokens, interval_ms
        else:
            h2_upstream.tokens, h2_upstream.interval_ms = tokens, interval_ms
        conn.send("ok")
    provider.stop()
    upstream.stop()


class Sources:
    def __init__(self) -> None:
        import multiprocessing

        self._conn, child = multiprocessing.Pipe()
        self._process = multiprocessing.get_context("fork").Process(target=_serve_sources, args=(child,),
                                                                    daemon=True)
        self._process.start()
        self.base_url, self.upstream_port, self.h2_upstream_port = self._conn.recv()

    def set(self, command: str, tokens: int, interval_ms: float) -> None:
        self._conn.send((command, tokens, interval_ms))
        self._conn.recv()

    def stop(self) -> None:
        self._conn.send(("stop", 0, 0))
        self._process.join(10)


def start_addon(home: Path, provider_url: str) -> tuple[Proxy, str]:
    """mitmdump with the addon and one scripted Chat Completions model. The model states no context
    window, so a long conversation is never compacted ahead of time (its curve stays one history)."""
    entry = model_entry(provider_url, kind="openai_chat", model_id="bench-model", name="scripted",
                        context_tokens=None)
    home.mkdir(parents=True, exist_ok=True)
    (home / "providers.toml").write_text(providers_toml([entry]))
    return Proxy(home).start(), public_id(entry)


class Paths:
    def __init__(self, work: Path) -> None:
        self.sources = Sources()
        self.addon, self.model = start_addon(work / "addon", self.sources.base_url)
        self.bare = BareProxy(work / "bare", self.sources.upstream_port).start()
        self.bare_h2 = BareProxy(work / "bare-h2", self.sources.h2_upstream_port).start()

    def close(self) -> None:
        for stop in (self.addon.stop, self.bare.stop, self.bare_h2.stop, self.sources.stop):
            try:
                stop()
            except Exception:
                pass

    def bare_turn(self, tokens: int, interval_ms: float):
        self.sources.set("upstream", tokens, interval_ms)
        request = user_turn_request("bench", model_id="cursor-official-model")
        return asyncio.run(one_turn(self.bare.client(), request))

    def bare_h2_turn(self, tokens: int, interval_ms: float):
        from byok.cli.h2client import H2CursorClient

        self.sources.set("h2", tokens, interval_ms)
        client = H2CursorClient(f"http://127.0.0.1:{self.bare_h2.port}", self.bare_h2.ca_file)
        request = user_turn_request("bench", model_id="cursor-official-model")
        return asyncio.run(one_turn(client, request, end_request_early=True))

    def addon_h2_turn(self, tokens: int, interval_ms: float, request=None):
        from byok.cli.h2client import H2CursorClient

        self.sources.set("chat", tokens, interval_ms)
        client = H2CursorClient(self.addon.url, self.addon.ca_file)
        return asyncio.run(one_turn(client, request or user_turn_request("bench", model_id=self.model)))

    def addon_turn(self, tokens: int, interval_ms: float, request=None):
        self.sources.set("chat", tokens, interval_ms)
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


class Transport:
    """One way of carrying a run: the bare path and the addon path for it, and their processes."""

    def __init__(self, name: str, bare, addon, bare_pid: int, addon_pid: int) -> None:
        self.name, self.bare, self.addon, self.bare_pid, self.addon_pid = name, bare, addon, bare_pid, addon_pid

    @staticmethod
    def all(paths: Paths) -> list["Transport"]:
        return [Transport("RunSSE", paths.bare_turn, paths.addon_turn, paths.bare.pid, paths.addon.process.pid),
                Transport("HTTP/2 Run", paths.bare_h2_turn, paths.addon_h2_turn, paths.bare_h2.pid,
                          paths.addon.process.pid)]


def cpu_s(pid: int) -> float:
    """CPU seconds the process's threads have run (schedstat, ns): load elsewhere does not inflate it."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total / 1e9


def measure_ttft(t: Transport, turns: int) -> list[str]:
    bare, addon, bare_cpu, addon_cpu = [], [], [], []
    for _ in range(turns):  # interleaved, so drift in machine load hits both alike
        for fn, pid, times, cpu in ((t.bare, t.bare_pid, bare, bare_cpu), (t.addon, t.addon_pid, addon, addon_cpu)):
            before = cpu_s(pid)
            times.append(fn(1, 0)[0])
            cpu.append(cpu_s(pid) - before)
    b50, a50 = statistics.median(bare), statistics.median(addon)
    bc, ac = statistics.median(bare_cpu) * 1000, statistics.median(addon_cpu) * 1000
    return [row(f"{t.name}: time to first text_delta (p50 of {turns} turns, new connections)", f"{b50:.1f} ms",
                f"{a50:.1f} ms", f"+{a50 - b50:.1f} ms", "≤ +10 ms"),
            row(f"{t.name}: proxy CPU for a one-token turn (p50)", f"{bc:.1f} ms", f"{ac:.1f} ms",
                f"+{ac - bc:.1f} ms", "(load-independent)")]


def measure_pace(t: Transport, tokens: int, turns: int) -> list[str]:
    bare, addon = [], []
    for _ in range(turns):
        bare += latencies(t.bare(tokens, 5.0)[1])
        addon += latencies(t.addon(tokens, 5.0)[1])
    return [
        row(f"{t.name}: per-event latency at 200 events/s, p50 ({len(addon)} events)", f"{pct(bare, .5):.2f} ms",
            f"{pct(addon, .5):.2f} ms", f"+{pct(addon, .5) - pct(bare, .5):.2f} ms", "≤ +0.25 ms"),
        row(f"{t.name}: per-event latency at 200 events/s, p99", f"{pct(bare, .99):.2f} ms",
            f"{pct(addon, .99):.2f} ms", f"+{pct(addon, .99) - pct(bare, .99):.2f} ms", "≤ +1.0 ms"),
    ]


def burst_stats(seen: list[tuple[str, float]]) -> tuple[float, float]:
    lat = latencies(seen)
    stamps = [float(s[1:]) for text, _ in seen for s in text.split(">") if s.startswith("<")]
    arrivals = [t for text, t in seen for s in text.split(">") if s.startswith("<")]
    span = max(arrivals) - min(min(stamps), min(arrivals))
    return len(lat) / span if span > 0 else float("inf"), statistics.median(lat)


def measure_burst(t: Transport, tokens: int, turns: int) -> list[str]:
    rate = {"bare": [], "addon": []}
    p50 = {"bare": [], "addon": []}
    cpu = {"bare": [], "addon": []}
    for _ in range(turns):
        for name, turn, pid in (("bare", t.bare, t.bare_pid), ("addon", t.addon, t.addon_pid)):
            before = cpu_s(pid)
            r, p = burst_stats(turn(tokens, 0)[1])
            cpu[name].append(cpu_s(pid) - before)
            rate[name].append(r)
            p50[name].append(p)
    med = {k: {m: statistics.median(v[k]) for m, v in (("rate", rate), ("p50", p50), ("cpu", cpu))}
           for k in ("bare", "addon")}
    return [
        row(f"{t.name}: burst of {tokens} events, events/s at the client (p50 of {turns})",
            f"{med['bare']['rate']:,.0f}", f"{med['addon']['rate']:,.0f}", "", "≥ 30,000 /s"),
        row(f"{t.name}: burst of {tokens} events, latency p50", f"{med['bare']['p50']:.1f} ms",
            f"{med['addon']['p50']:.1f} ms", "", "≤ 20 ms"),
        row(f"{t.name}: burst of {tokens} events, proxy CPU per turn (p50)", f"{med['bare']['cpu'] * 1000:.0f} ms",
            f"{med['addon']['cpu'] * 1000:.0f} ms", f"+{(med['addon']['cpu'] - med['bare']['cpu']) * 1000:.0f} ms",
            "(load-independent)"),
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


CURVE_WINDOW = 20
"""Turns per point of the long conversation's curve (each point: the p50 of the last 20 turns)."""


def curve_marks(turns: int) -> list[int]:
    """The turns that end a window of the curve: 20, 60, then every 50th (and the last)."""
    marks = {m for m in (20, 60) if m <= turns} | set(range(100, turns + 1, 50)) | {turns}
    return sorted(m for m in marks if m >= CURVE_WINDOW)


def measure_long_conversation(paths: Paths, turns: int) -> list[str]:
    """One conversation of `turns` short turns: what a turn costs as the history grows. A point of
    the curve is the p50 of the 20 turns that end at its mark (RSS is read after every turn: one
    reading jumps by several MiB as the allocator takes and returns memory). The goals compare turns
    581-600 with turns 41-60 (CPU, first text) and the RSS of turns 181-200 with turns 581-600. No
    bare counterpart: a bare relay keeps no conversation."""
    state = None
    conversation = str(uuid.uuid4())
    pid = paths.addon.process.pid
    ttft: dict[int, float] = {}
    cpu: dict[int, float] = {}
    rss: dict[int, float] = {}
    marks = curve_marks(turns)
    started = time.monotonic()
    for turn in range(1, turns + 1):
        request = user_turn_request(f"turn {turn}: say something", model_id=paths.model,
                                    conversation_id=conversation, state=state)
        before = cpu_s(pid)
        ttft[turn], _, result = paths.addon_turn(20, 0, request)
        cpu[turn] = (cpu_s(pid) - before) * 1000
        rss[turn] = rss_mib(pid)
        state = result.checkpoints()[-1]
        if turn % 50 == 0:
            print(f"  conversation: turn {turn} of {turns} ({time.monotonic() - started:.0f} s)", file=sys.stderr)

    def window(values: dict[int, float], last: int) -> float:
        return statistics.median(values[t] for t in range(last - CURVE_WINDOW + 1, last + 1))

    rows = [row(f"one conversation, turns {m - CURVE_WINDOW + 1}-{m}: first text_delta / proxy CPU per turn / RSS (p50)",
                "", f"{window(ttft, m):.1f} ms / {window(cpu, m):.1f} ms / {window(rss, m):.1f} MiB", "", "")
            for m in marks]
    early, late = 60, turns
    if turns >= 200 and late > early:
        rows += [
            row(f"one conversation: proxy CPU per turn, turns {late - 19}-{late} vs {early - 19}-{early}",
                "", f"{window(cpu, late):.1f} / {window(cpu, early):.1f} ms", f"{window(cpu, late) / window(cpu, early):.2f}x",
                "≤ 1.3x"),
            row(f"one conversation: first text, turns {late - 19}-{late} vs {early - 19}-{early}", "",
                f"{window(ttft, late):.1f} / {window(ttft, early):.1f} ms", f"{window(ttft, late) - window(ttft, early):+.1f} ms",
                "≤ +10 ms"),
            row(f"one conversation: RSS growth, turns 181-200 -> {late - 19}-{late} (p50)", "",
                f"{window(rss, 200):.1f} -> {window(rss, late):.1f} MiB",
                f"{(window(rss, late) - window(rss, 200)) / window(rss, 200) * 100:+.1f} %", "≤ 5 %"),
        ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="startup,ttft,pace,burst,memory")
    parser.add_argument("--turns", type=int, default=30, help="turns per TTFT measurement")
    parser.add_argument("--startups", type=int, default=5)
    parser.add_argument("--memory-turns", type=int, default=100)
    parser.add_argument("--conversation-turns", type=int, default=600,
                        help="turns of the one long conversation (--only conversation)")
    parser.add_argument("--no-h2", dest="h2", action="store_false", help="RunSSE only")
    args = parser.parse_args()
    only = set(args.only.split(","))
    rows = []
    if "startup" in only:
        rows += measure_startup(args.startups)
    if only & {"ttft", "pace", "burst", "memory", "conversation"}:
        with tempfile.TemporaryDirectory() as d:
            paths = Paths(Path(d))
            try:
                transports = [t for t in Transport.all(paths) if args.h2 or t.name == "RunSSE"]
                for _ in range(3):  # warm every path (certificates, connections, imports)
                    for transport in transports:
                        transport.bare(1, 0)
                        transport.addon(1, 0)
                for transport in transports:
                    if "ttft" in only:
                        rows += measure_ttft(transport, args.turns)
                    if "pace" in only:
                        rows += measure_pace(transport, 200, 3)
                    if "burst" in only:
                        rows += measure_burst(transport, 1000, 5)
                if "memory" in only:
                    rows += measure_memory(paths, args.memory_turns)
                if "conversation" in only:
                    rows += measure_long_conversation(paths, args.conversation_turns)
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
