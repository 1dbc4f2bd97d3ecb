"""Dashboard page timings on a large store (not a test): python bench/dashboard_pages.py [--frames 100000]

Generates a SQLite store through the store API: `--conversations` conversations of `--runs` runs each,
two provider calls per run, a Read tool round in every third run, and `--frames` recorded frames in
all, real protobuf frames (the run_request with the user's words, text deltas, heartbeats, the
end-stream); one conversation is long (`--long-runs` runs, its last run holding `--big-run-frames`
frames). Then renders each page with `views.Dashboard` (the queries, the templates, the dashboard's
own read connection and thread; no proxy in between) and prints the median and worst time of
`--repeat` renders per page as Markdown. docs/benchmarks.md keeps the numbers of a reference run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from byok.agent.cursor import updates  # noqa: E402
from byok.dashboard.views import Dashboard, Request, Sources, Viewer  # noqa: E402
from byok.proto import agent_pb2 as apb  # noqa: E402
from byok.store import NewMessage, Store  # noqa: E402
from byok.wire import connect  # noqa: E402
from tests.e2e.harness import model_entry, providers_toml, public_id  # noqa: E402

DAY_MS = 86_400_000
ENTRY = model_entry("https://api.deepseek.example/v1", model_id="deepseek-chat", name="deepseek", api_key="sk-x",
                    extra={"prices": "{ input = 0.27, output = 1.10, cache_read = 0.07 }"})
MODEL = public_id(ENTRY)


def run_frames(request_id: str, conversation_id: str, text: str, n: int, t0: int) -> list[dict]:
    request = apb.AgentRunRequest(conversation_id=conversation_id)
    request.action.user_message_action.user_message.text = text
    up = apb.AgentClientMessage(run_request=request).SerializeToString()
    rows = [{"request_id": request_id, "conversation_id": conversation_id, "seq": 0, "direction": "up",
             "ts_ms": t0, "kind": "run_request", "flags": 0, "data": up}]
    delta = updates.text_delta("some streamed words ").SerializeToString()
    beat = updates.heartbeat().SerializeToString()
    for i in range(1, n - 1):
        payload, kind = (beat, "interaction_update.heartbeat") if i % 10 == 0 else (delta, "interaction_update.text_delta")
        rows.append({"request_id": request_id, "conversation_id": conversation_id, "seq": i - 1, "direction": "down",
                     "ts_ms": t0 + i * 5, "kind": kind, "flags": 0, "data": payload})
    rows.append({"request_id": request_id, "conversation_id": conversation_id, "seq": n - 2, "direction": "down",
                 "ts_ms": t0 + n * 5, "kind": "end_stream", "flags": connect.FLAG_END_STREAM, "data": b"{}"})
    return rows


def generate(db: Path, args) -> dict:
    store = Store.open(db, synchronous="OFF")
    now = int(time.time() * 1000)
    start = now - args.days * DAY_MS
    total_runs = args.conversations * args.runs + args.long_runs - args.runs
    small_frames = max(3, (args.frames - args.big_run_frames) // max(total_runs - 1, 1))
    facts = {"runs": 0, "frames": 0, "calls": 0}
    ticks = iter(range(start, now, max(1, (now - start) // (total_runs * 8 + 10))))
    store.clock_ms = lambda: next(ticks)
    for c in range(args.conversations):
        cid = f"conv-{c:06d}"
        runs = args.long_runs if c == 0 else args.runs
        user = f"user{c % args.users}" if args.users else None
        for r in range(runs):
            rid = f"req-{c:06d}-{r:04d}"
            store.claim_run(rid, cid, model_public_id=MODEL, mode="agent", action="user_message_action",
                            user_id=user)
            t0 = store.clock_ms()
            if r % 3 == 2:
                staged = {"role": "assistant", "content": [{"type": "tool-call", "toolCallId": f"call-{rid}",
                                                             "toolName": "Read", "input": {"path": "src/app.py"}}]}
                store.stage_round(f"round-{rid}", cid, rid, None, staged, [(0, f"call-{rid}", "Read")])
                head = store.head_revision(cid)
                store.complete_call(f"round-{rid}", 0, cid, head, [NewMessage("tool", "tool", {
                    "kind": "tool", "call_id": f"call-{rid}", "name": "Read", "content": "print('hello')\n",
                    "tool_round_id": f"round-{rid}", "call_index": 0})], fence_request_id=rid, is_error=False)
                store.settle_round(f"round-{rid}")
            day = datetime.fromtimestamp(t0 / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000+00:00")
            for i in range(2):
                call = store.begin_llm_call({
                    "request_id": rid, "conversation_id": cid, "call_index": i, "model_call_id": f"mc-{rid}-{i}",
                    "provider": "deepseek", "provider_kind": "openai_chat", "model_public_id": MODEL,
                    "model": "deepseek-chat", "started_at": day})
                store.finish_llm_call(call, {"status": "ok", "input_tokens": 20000 + r * 300, "output_tokens": 200,
                                             "cache_read_tokens": 18000 + r * 250, "ttfb_ms": 300.0, "total_ms": 2400.0})
                facts["calls"] += 1
            n = args.big_run_frames if (c == 0 and r == runs - 1) else small_frames
            store.record_frames(run_frames(rid, cid, f"question {r} of conversation {c}: why does the build fail?",
                                           n, t0))
            facts["frames"] += n
            store.finish_run(rid, "completed", usage={"input_tokens": 40000, "output_tokens": 400})
            facts["runs"] += 1
    store.close()
    facts["db_mb"] = round(os.path.getsize(db) / 1e6, 1)
    return facts


def time_pages(db: Path, config: Path, repeat: int, long_runs: int, conversations: int) -> list[tuple[str, float, float, int]]:
    board = Dashboard(db, Sources(config=lambda: config, live_request_ids=lambda: [
        f"req-000000-{i:04d}" for i in range(5)]))
    viewer = Viewer(None, admin=True)

    async def get(target: str):
        return await board.handle(Request.parse("GET", target, {}), viewer)

    async def main():
        first = await get("/conversations")
        older = first.body.decode().split('/conversations?before=')[1:]  # none when one page holds them all
        pages = ["/", "/live", "/conversations", *[f"/conversations?before={o.split(chr(34))[0]}" for o in older],
                 "/trace/conv-000000",
                 "/trace/conv-000000?page=3", f"/trace/conv-{conversations // 2:06d}", "/trace/req-000000-0000",
                 f"/frames/req-000000-{long_runs - 1:04d}", f"/frames/req-000000-{long_runs - 1:04d}?page=40",
                 "/usage", "/usage?by=user", "/drift", "/maintenance"]
        out = []
        for page in pages:
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                response = await get(page)
                times.append((time.perf_counter() - t0) * 1000)
                assert response.status == 200, (page, response.status, response.body[:400])
            out.append((page, statistics.median(times), max(times), len(response.body)))
        return out

    try:
        return asyncio.run(main())
    finally:
        board.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5, help="runs per conversation")
    parser.add_argument("--long-runs", type=int, default=200, help="runs of the one long conversation")
    parser.add_argument("--big-run-frames", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=20, help="proxyauth users the runs belong to (0: none)")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="byok-dash-bench-") as tmp:
        db, config = Path(tmp) / "byok.db", Path(tmp) / "providers.toml"
        config.write_text(providers_toml([ENTRY]))
        t0 = time.perf_counter()
        facts = generate(db, args)
        print(f"store: {facts['runs']:,} runs, {facts['calls']:,} provider calls, {facts['frames']:,} frames, "
              f"{facts['db_mb']} MB (generated in {time.perf_counter() - t0:.0f} s)\n")
        print(f"| page | median ms | worst ms (of {args.repeat}) | HTML KB |")
        print("|---|---:|---:|---:|")
        for page, median, worst, size in time_pages(db, config, args.repeat, args.long_runs, args.conversations):
            print(f"| `{page}` | {median:.1f} | {worst:.1f} | {size / 1024:.0f} |")
        print(json.dumps({"python": sys.version.split()[0]}))
