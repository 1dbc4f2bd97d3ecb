"""Store benchmarks (not tests): python bench/store_bench.py [--turns 100]

1. durability cost: one small transaction with synchronous=FULL vs NORMAL (WAL);
2. a tool round commit with 150 new blobs (200 B - 50 KB, one 2.2 MB) through AsyncStore, end to end,
   and the largest event-loop stall while it runs (a 1 ms ticker measures how late it wakes up);
3. a 100-turn conversation (a tool round every third turn) written and projected like the agent does:
   projection time of the last turn, DB size, process RSS.
Results go to stdout as Markdown; docs/benchmarks.md keeps the numbers of a reference run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from byok.agent import history
from byok.agent.cursor import projection as proj
from byok.providers.transcript import AssistantItem, TextPart, ToolCall, ToolResultItem, ToolSpec
from byok.proto import agent_pb2 as apb
from byok.store import AsyncStore, BlobRef, NewMessage, Store, blob_id


def durability(tmp: Path, n: int = 300) -> dict:
    out = {}
    for mode in ("FULL", "NORMAL"):
        store = Store.open(tmp / f"dur-{mode}.db", synchronous=mode)
        store.claim_run("r", "c")
        revision = None
        times = []
        for i in range(n):
            t0 = time.perf_counter()
            revision = store.append("c", revision, [NewMessage("user", "runtime", {"kind": "x", "i": i})],
                                    fence_request_id="r")
            times.append(time.perf_counter() - t0)
        store.close()
        out[mode] = (statistics.median(times) * 1000, sorted(times)[int(n * 0.99)] * 1000)
    return out


async def _stall_probe(stop: asyncio.Event, lags: list[float]) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(0.001)
        lags.append(time.perf_counter() - t0 - 0.001)


async def round_commit(tmp: Path) -> dict:
    rng = random.Random(7)
    blobs = [rng.randbytes(rng.randint(200, 50_000)) for _ in range(149)] + [rng.randbytes(2_200_000)]
    store = await AsyncStore.open(tmp / "round.db")
    await store.claim_run("r", "c")
    base = await store.append("c", None, [NewMessage("user", "runtime", {"kind": "x"})], fence_request_id="r")
    await store.stage_round("round", "c", "r", base, {"a": 1}, [(0, "call", "Read")])
    # the agent hashes in its projection thread; here the ids are ready before the clock starts
    batch = [(blob_id(b), b, [BlobRef("steps", i, blob_id(b"x"))]) for i, b in enumerate(blobs)]
    stop, lags = asyncio.Event(), []
    probe = asyncio.create_task(_stall_probe(stop, lags))
    await asyncio.sleep(0.05)
    lags.clear()
    t0 = time.perf_counter()
    await store.put_blobs(batch)
    await store.complete_call("round", 0, "c", base, [
        NewMessage("assistant", "assistant", {"kind": "assistant"}),
        NewMessage("tool", "tool", {"kind": "tool", "content": "y" * 50_000}),
    ], fence_request_id="r", is_error=False)
    elapsed = time.perf_counter() - t0
    stop.set()
    await probe
    await store.close()
    return {"commit_ms": elapsed * 1000, "bytes": sum(map(len, blobs)), "max_loop_lag_ms": max(lags) * 1000,
            "p99_loop_lag_ms": sorted(lags)[int(len(lags) * 0.99)] * 1000}


def conversation(tmp: Path, turns: int) -> dict:
    store = Store.open(tmp / "conv.db")
    ctx = proj.ProjectionContext("system prompt " * 200, (ToolSpec("Read", "read", {"type": "object"}),),
                                 apb.ConversationStateStructure().SerializeToString(), apb.AGENT_MODE_AGENT, 200_000)
    revision, messages = None, []
    rng = random.Random(3)
    last_projection_ms = 0.0
    for n in range(turns):
        request_id = f"r{n}"
        store.claim_run(request_id, "c")
        um = apb.UserMessage(text=f"question {n}", message_id=f"m{n}").SerializeToString()
        new = [NewMessage("user", "runtime", history.runtime_user_payload(
            [TextPart(f"<user_query>\nquestion {n} " + "ctx " * 300 + "\n</user_query>")],
            wire_id=f"runtime:run-request:{request_id}",
            turn={"request_id": request_id, "user_message_blob": history.b64(um)}),
            runtime_event_id=f"run-request:{request_id}")]
        if n % 3 == 0:
            for i in range(2):
                call = ToolCall(f"call-{n}-{i}", "Read", json.dumps({"path": f"f{i}.py"}), i)
                item = AssistantItem(text="looking" if i == 0 else "", tool_calls=(call,))
                new.append(NewMessage("assistant", "assistant", history.assistant_payload(
                    item, thinking_ms=None, usage=None, model_call_id="mc", tool_round_id=f"R{n}", round_size=2)))
                tc = apb.ToolCall(read_tool_call=apb.ReadToolCall(args=apb.ReadToolArgs(path=f"f{i}.py")))
                new.append(NewMessage("tool", "tool", history.tool_payload(
                    ToolResultItem(call.call_id, "Read", rng.randbytes(3000).hex()), tool_round_id=f"R{n}",
                    call_index=i, tool_call_pb=tc.SerializeToString())))
        new.append(NewMessage("assistant", "assistant", history.assistant_payload(
            AssistantItem(text="answer " * 80), thinking_ms=None,
            usage={"input_tokens": 1000 * n, "output_tokens": 80}, model_call_id="mc")))
        revision = store.append("c", revision, new, fence_request_id=request_id)
        messages = store.messages(revision)
        t0 = time.perf_counter()
        p = proj.project(messages, ctx)
        last_projection_ms = (time.perf_counter() - t0) * 1000
        store.put_blobs([(bid, data, ()) for bid, data in p.blobs.items()])
        store.finish_run(request_id, "completed")
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = sum(f.stat().st_size for f in tmp.glob("conv.db*"))
    store.close()
    return {"turns": turns, "messages": len(messages), "db_mb": size / 1e6,
            "last_projection_ms": last_projection_ms,
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        dur = durability(tmp)
        rnd = asyncio.run(round_commit(tmp))
        conv = conversation(tmp, args.turns)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus\n")
    print("| measurement | value |\n|---|---|")
    for mode, (p50, p99) in dur.items():
        print(f"| append 1 message, synchronous={mode} | p50 {p50:.2f} ms, p99 {p99:.2f} ms |")
    print(f"| tool round commit: 150 blobs, {rnd['bytes'] / 1e6:.1f} MB | {rnd['commit_ms']:.0f} ms |")
    print(f"| event-loop stall during that commit | max {rnd['max_loop_lag_ms']:.2f} ms, "
          f"p99 {rnd['p99_loop_lag_ms']:.2f} ms |")
    print(f"| {conv['turns']}-turn conversation ({conv['messages']} messages) | DB {conv['db_mb']:.1f} MB, "
          f"RSS {conv['rss_mb']:.0f} MB |")
    print(f"| projection of the last turn | {conv['last_projection_ms']:.1f} ms |")


if __name__ == "__main__":
    main()
