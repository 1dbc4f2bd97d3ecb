"""Prompt-cache friendliness of the provider requests, per dialect (not a test):

    python bench/prompt_cache.py [--rounds 20] [--file-bytes 3000]

One Agent-mode turn through a real mitmdump with the addon, driven by the Cursor-like client: the
scripted model reads a different workspace file in each of rounds 1 .. N-1 and answers in round N.
The scripted provider accounts for caching from the requests it receives (`PromptCacheSim`:
Anthropic's breakpoint rules; OpenAI's automatic prefix caching, here with prompt_cache_key = true).

Reported per dialect:
- prefix stability: of each request's predecessor, how many bytes the request starts with
  (the byte-wise common prefix / the predecessor's length), over rounds 2 .. N; also with
  Anthropic's cache_control markers taken out (they move forward each round by design);
- cache-read share: cache-read tokens / all input tokens (for Anthropic, input + cache read +
  cache write, since its input_tokens excludes both), over all N calls and over calls 2 .. N;
- cache writes (Anthropic) and whether turn_ended's totals equal the per-call sums.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from byok.cli.client import user_turn_request  # noqa: E402
from tests.e2e.harness import Proxy, model_entry, providers_toml, public_id, run_with_executor  # noqa: E402
from tests.support.scripted_provider import SCRIPTS, PromptCacheSim, ScriptedProvider, common_prefix  # noqa: E402

KINDS = ("anthropic", "openai_chat", "openai_responses")
MARKER = b',"cache_control":{"type":"ephemeral"}'


def conversation(proxy: Proxy, provider: ScriptedProvider, kind: str, model: str, rounds: int,
                 workspace: Path, file_bytes: int) -> dict:
    sim, usages = PromptCacheSim(), []
    files = [f"src/module_{i:02d}.py" for i in range(rounds - 1)]
    for i, name in enumerate(files):
        path = workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        line = f"def function_{i}(value):  # module {i}\n    return value * {i} + 1\n"
        path.write_text((line * (file_bytes // len(line) + 1))[:file_bytes])

    def respond(call: int):
        def make(rec):
            usage = sim.usage(kind, rec.json, output_tokens=40)
            usages.append(usage)
            if call < len(files):
                return SCRIPTS[kind].tool_calls([(f"call_{call:02d}", "Read", json.dumps({"path": files[call]}))],
                                                usage=usage)
            return SCRIPTS[kind].text_reply("I read every module.", usage=usage)
        return make

    first = len(provider.requests)
    provider.enqueue(kind, *(respond(i) for i in range(rounds)))

    request = user_turn_request("Read every module under src/, one by one.", model_id=model, workspace=str(workspace))
    result, _ = run_with_executor(proxy, request, workspace)
    if result.end_error is not None:
        raise SystemExit(f"{kind}: the run failed: {result.end_error.message}")
    bodies = [r.body for r in provider.requests[first:first + rounds]]
    ratios = [common_prefix(a, b) / len(a) for a, b in zip(bodies, bodies[1:])]
    plain = [b.replace(MARKER, b"") for b in bodies]  # the content alone, without Anthropic's markers
    content_ratios = [common_prefix(a, b) / len(a) for a, b in zip(plain, plain[1:])]
    read = [u.cache_read_tokens or 0 for u in usages]
    written = [u.cache_write_tokens or 0 for u in usages]
    total = [u.input_tokens + (r if kind == "anthropic" else 0) + w for u, r, w in zip(usages, read, written)]
    [ended] = [f.message.interaction_update.turn_ended for f in result.down("interaction_update.turn_ended")]
    return {
        "calls": len(bodies), "last_request_bytes": len(bodies[-1]),
        "prefix_mean": statistics.mean(ratios), "prefix_min": min(ratios),
        "content_prefix_mean": statistics.mean(content_ratios),
        "identical_bytes": sum(common_prefix(a, b) for a, b in zip(bodies, bodies[1:])),
        "previous_bytes": sum(len(a) for a in bodies[:-1]),
        "read_share": sum(read) / sum(total), "read_share_later": sum(read[1:]) / sum(total[1:]),
        "input_total": sum(total), "read": sum(read), "written": sum(written),
        "turn_ended_matches": ended.cache_read_tokens == sum(read)
        and (ended.cache_write_tokens == sum(written) if kind == "anthropic" else not ended.HasField("cache_write_tokens")),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20, help="provider calls in the conversation")
    parser.add_argument("--file-bytes", type=int, default=3000, help="size of each file the model reads")
    args = parser.parse_args()
    with ScriptedProvider() as provider, tempfile.TemporaryDirectory() as d:
        home = Path(d) / "home"
        home.mkdir()
        entries = {kind: model_entry(provider.base_url, kind=kind, model_id=f"{kind}-bench", name=f"bench-{kind}",
                                     **({"extra": {"max_output_tokens": 4096}} if kind == "anthropic"
                                        else {"provider_extra": {"prompt_cache_key": "true"}}))
                   for kind in KINDS}
        (home / "providers.toml").write_text(providers_toml(list(entries.values())))
        proxy = Proxy(home).start()
        try:
            results = {}
            for kind in KINDS:
                workspace = Path(d) / f"ws-{kind}"
                workspace.mkdir()
                results[kind] = conversation(proxy, provider, kind, public_id(entries[kind]), args.rounds,
                                             workspace, args.file_bytes)
        finally:
            proxy.stop()
    print(f"{args.rounds} provider calls per dialect ({args.rounds - 1} Read rounds of {args.file_bytes} bytes, "
          "then an answer), Agent mode, through mitmdump\n")
    print("| dialect | last request | prefix kept (mean / min) | without cache_control markers | identical prefix "
          "bytes | cache-read share (all calls / calls 2..N) | cache writes | turn_ended = sums |")
    print("|---|---|---|---|---|---|---|---|")
    for kind, r in results.items():
        print(f"| {kind} | {r['last_request_bytes']:,} B | {r['prefix_mean']:.2%} / {r['prefix_min']:.2%} | "
              f"{r['content_prefix_mean']:.2%} | "
              f"{r['identical_bytes']:,} of {r['previous_bytes']:,} B | "
              f"{r['read_share']:.1%} / {r['read_share_later']:.1%} ({r['read']:,} of {r['input_total']:,} tokens) | "
              f"{r['written']:,} | {'yes' if r['turn_ended_matches'] else 'NO'} |")


if __name__ == "__main__":
    main()
