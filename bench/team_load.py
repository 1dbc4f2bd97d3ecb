"""Load on one proxy process: N concurrent users running tool-round conversations (not a test).

    python bench/team_load.py                         # N = 10, 50, 100 on SQLite and PostgreSQL
    python bench/team_load.py --users 10,50,100,150,200 --stores postgresql --turns 2

Each user is its own Cursor-like client (own TLS connections) with its own conversation (users are
spread over `--workers` load-generating processes; the scripted provider runs in this one), running
`--turns` turns back to back. A turn is: user message -> the provider asks for one Read (the client
runs it in a temp workspace) -> the tool round settles -> the provider streams `--events` text chunks
`--interval-ms` apart, each stamped with its send time -> turn_ended. Stamps and arrivals use the
system-wide monotonic clock. PostgreSQL is a throwaway local server (fsync
on); SQLite is a file in a temp dir (synchronous=FULL, the default).

Reported per (store, N):
- event p50/p99: provider send stamp -> arrival at the client, of every streamed text chunk
- TTFT p50/p99: the turn's start -> its first model event (tool call or text) at the client
- errors: runs that did not end cleanly (must be 0)
- proxy CPU: the mitmdump process's user+system CPU over the run, per streamed event, per turn (a
  tool round and an answer: every fixed cost of a turn included), and as a share of one core (one
  process = one event loop; near 100 % it is saturated)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from byok.cli.client import CursorClient, user_turn_request  # noqa: E402
from byok.cli.executor import LocalExecutor  # noqa: E402
from tests.e2e.conftest import start_proxy  # noqa: E402
from tests.support.scripted_provider import CHAT, ScriptedProvider, Sse  # noqa: E402

from bench.proxy_overhead import StampEv, latencies  # noqa: E402

MODEL_EVENTS = ("interaction_update.text_delta", "interaction_update.partial_tool_call",
                "interaction_update.tool_call_started", "interaction_update.thinking_delta")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def responder(workspace: Path, events: int, interval_ms: float):
    """A tool call on a fresh user message; stamped text once the tool result is in."""
    read_args = json.dumps({"path": str(workspace / "notes.txt")})

    def answer(request) -> Sse:
        messages = (request.json or {}).get("messages") or []
        if messages and messages[-1].get("role") == "tool":
            chunk = CHAT._chunker()
            items = [chunk({"role": "assistant", "content": ""})]
            items += [StampEv("", delay_s=interval_ms / 1000, chunk=chunk) for _ in range(events)]
            return Sse(items + CHAT._tail(chunk, "stop", None))
        return CHAT.tool_calls([(f"call_{time.monotonic_ns()}", "Read", read_args)])

    return answer


async def user(proxy, model: str, workspace: Path, turns: int, stats: dict) -> None:
    conversation, state = None, None
    executor = LocalExecutor(workspace)
    blobs: dict = {}
    try:
        for _ in range(turns):
            seen: list[tuple[str, float]] = []
            first: list[float] = []

            async def on_frame(frame) -> None:
                if frame.kind in MODEL_EVENTS and not first:
                    first.append(frame.t)
                if frame.kind == "interaction_update.text_delta":
                    seen.append((frame.message.interaction_update.text_delta.text, frame.t))
                executor.on_frame(frame)

            request = user_turn_request("read my notes and summarise them", model_id=model,
                                        conversation_id=conversation, state=state, workspace=str(workspace))
            t0 = time.monotonic()
            try:
                async with CursorClient(proxy.url, proxy.ca_file, blobs=blobs, on_exec=executor.on_exec,
                                        timeout_s=120) as client:
                    result = await client.run(request, on_frame=on_frame)
                    blobs = dict(client.blobs)
            except Exception as e:  # a transport failure is an error too
                stats["errors"].append(f"{type(e).__name__}: {e}")
                return
            if result.end_error is not None:
                stats["errors"].append(str(result.end_error))
                return
            stats["turns"] += 1
            stats["events"] += len(seen)
            stats["event_ms"] += latencies(seen)
            if first:
                stats["ttft_ms"].append((first[0] - t0) * 1000)
            conversation, state = request.conversation_id, result.checkpoints()[-1]
    finally:
        await executor.aclose()


def worker(url: str, ca_file: str, model: str, workspace: str, turns: int, users: int, out) -> None:
    """One load-generating process: `users` users on its own event loop; stats back through `out`."""
    from types import SimpleNamespace

    stats = {"turns": 0, "events": 0, "event_ms": [], "ttft_ms": [], "errors": []}
    proxy = SimpleNamespace(url=url, ca_file=ca_file)

    async def everyone():
        await asyncio.gather(*(user(proxy, model, Path(workspace), turns, stats) for _ in range(users)))

    asyncio.run(everyone())
    out.put(stats)


def run_level(store: str, db: str, users: int, args, work: Path) -> dict:
    home = work / f"{store}-{users}"
    workspace = home / "ws"
    workspace.mkdir(parents=True)
    (workspace / "notes.txt").write_text("buy milk\ncall the plumber\n" * 20)
    with ScriptedProvider() as provider:
        answer = responder(workspace, args.events, args.interval_ms)
        provider.enqueue("openai_chat", *([answer] * (users * args.turns * 2 + 10)))
        proxy, ids = start_proxy(home, provider, byok_db=db, byok_record="true")
        try:
            import multiprocessing

            ctx = multiprocessing.get_context("spawn")
            out = ctx.Queue()
            shares = [users // args.workers + (i < users % args.workers) for i in range(args.workers)]
            procs = [ctx.Process(target=worker, args=(proxy.url, proxy.ca_file, ids["openai_chat"], str(workspace),
                                                      args.turns, share, out)) for share in shares if share]
            cpu0, t0 = cpu_seconds(proxy.process.pid), time.monotonic()
            for proc in procs:
                proc.start()
            parts = [out.get(timeout=1200) for _ in procs]
            wall = time.monotonic() - t0
            cpu = cpu_seconds(proxy.process.pid) - cpu0
            for proc in procs:
                proc.join(30)
            stats = {"turns": sum(p["turns"] for p in parts), "events": sum(p["events"] for p in parts),
                     "event_ms": [v for p in parts for v in p["event_ms"]],
                     "ttft_ms": [v for p in parts for v in p["ttft_ms"]],
                     "errors": [e for p in parts for e in p["errors"]]}
        finally:
            proxy.stop()
    return {
        "store": store, "users": users, "turns": stats["turns"], "events": stats["events"], "wall_s": wall,
        "event_p50": pct(stats["event_ms"], 50), "event_p99": pct(stats["event_ms"], 99),
        "ttft_p50": pct(stats["ttft_ms"], 50), "ttft_p99": pct(stats["ttft_ms"], 99),
        "errors": len(stats["errors"]), "first_error": stats["errors"][0] if stats["errors"] else "",
        "cpu_s": cpu, "cpu_ms_per_event": cpu * 1000 / max(stats["events"], 1), "cpu_share": cpu / wall,
        "cpu_ms_per_turn": cpu * 1000 / max(stats["turns"], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", default="10,50,100")
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--turns", type=int, default=2, help="turns per user (default 2)")
    parser.add_argument("--events", type=int, default=30, help="streamed text chunks per turn (default 30)")
    parser.add_argument("--interval-ms", type=float, default=20, help="between chunks (default 20: 50/s per user)")
    parser.add_argument("--workers", type=int, default=2,
                        help="load-generating processes the users are spread over (default 2)")
    args = parser.parse_args()
    levels = [int(n) for n in args.users.split(",")]
    with tempfile.TemporaryDirectory(prefix="byok-load-") as tmp:
        work = Path(tmp)
        server = None
        print(f"{'store':<11}{'N':>5}{'turns':>7}{'events':>8}{'wall s':>8}{'ev p50':>8}{'ev p99':>8}"
              f"{'ttft p50':>10}{'ttft p99':>10}{'errors':>8}{'cpu ms/ev':>11}{'cpu ms/turn':>13}{'cpu %':>7}", flush=True)
        try:
            for store in args.stores.split(","):
                for n in levels:
                    if store == "postgresql":
                        if server is None:
                            from tests.support.postgres import PostgresServer

                            server = PostgresServer(fsync=True, max_connections=300).start()
                        db = server.create_database()
                    else:
                        db = str(work / f"sqlite-{n}.db")
                    r = run_level(store, db, n, args, work)
                    print(f"{r['store']:<11}{r['users']:>5}{r['turns']:>7}{r['events']:>8}{r['wall_s']:>8.1f}"
                          f"{r['event_p50']:>8.1f}{r['event_p99']:>8.1f}{r['ttft_p50']:>10.0f}{r['ttft_p99']:>10.0f}"
                          f"{r['errors']:>8}{r['cpu_ms_per_event']:>11.2f}{r['cpu_ms_per_turn']:>13.1f}{r['cpu_share'] * 100:>7.0f}",
                          flush=True)
                    if r["errors"]:
                        print(f"    first error: {r['first_error']}", flush=True)
        finally:
            if server is not None:
                server.stop()


if __name__ == "__main__":
    main()
