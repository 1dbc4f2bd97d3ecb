"""The capture scenarios, defined once for the tests and for `cursor-byok captures regen|check`.

A scenario = provider scripts (what the scripted LLM answers) + a client script (what the Cursor-like
client does). `run_scenario` runs it through a real `mitmdump -s addon/cursor_byok.py` with
`byok_deterministic=true` (fixed clock, counting ids) and `byok_verbose_llm=true` (raw SSE kept), stops
the proxy, and exports the conversation from the proxy's own database as a capture. Client-chosen ids
(conversation, request, message) are fixed per scenario, the workspace is the virtual `/workspace`,
and the provider's random port and the model's public id are replaced by stable values, so a scenario
regenerates to the same bytes.
"""

from __future__ import annotations

import asyncio
import itertools
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from byok.providers.config import public_model_id
from byok.cli.capture import Capture, Redactor, export, merge_provider_requests, provider_request_record
from byok.cli.client import CursorClient, RunResult, user_turn_request
from byok.cli.common import open_db
from byok.cli.executor import LocalExecutor
from tests.e2e.harness import API_KEY, ROOT, Proxy, model_entry, providers_toml
from tests.support import scripted_provider as sp
from tests.support.scripted_provider import ANTHROPIC, CHAT, HttpError, ScriptedProvider, Usage

CAPTURES = ROOT / "captures" / "scenarios"
WORKSPACE = "/workspace"
STABLE_BASE_URL = "http://scripted-provider.invalid/v1"
"""What the provider's base URL (random loopback port) becomes in a capture."""
PROXY_OPTIONS = {
    "byok_deterministic": "true", "byok_verbose_llm": "true",
    "byok_heartbeat_s": "120",  # no heartbeats: they would appear or not depending on timing
    "byok_route_wait_s": "10",
}


@dataclass
class Ctx:
    """What a client script gets."""

    client: CursorClient
    model: str
    name: str
    results: list[RunResult] = field(default_factory=list)

    @property
    def conversation_id(self) -> str:
        return f"conv-{self.name}"

    async def turn(self, text: str, *, state=None) -> RunResult:
        n = len(self.results) + 1
        request = user_turn_request(text, model_id=self.model, conversation_id=self.conversation_id, state=state,
                                    message_id=f"msg-{self.name}-{n}", workspace=WORKSPACE)
        result = await self.client.run(request, request_id=f"req-{self.name}-{n}")
        self.results.append(result)
        return result


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    kind: str
    """Provider dialect of the scenario's model."""
    scripts: Callable[[], Sequence[sp.Script]]
    """Built right before the run, with the scripted provider's id counter restarted."""
    client: Callable[[Ctx], Awaitable[None]]
    files: dict[str, str] = field(default_factory=dict)
    """Workspace files (relative to /workspace) the client's executor serves."""
    model_extra: dict = field(default_factory=dict)


async def _one_turn(ctx: Ctx) -> None:
    await ctx.turn("hello")


async def _two_turns(ctx: Ctx) -> None:
    first = await ctx.turn("What is 2 + 2?")
    await ctx.turn("And times 3?", state=first.checkpoints()[-1])


async def _read_file(ctx: Ctx) -> None:
    await ctx.turn("What does hello.txt say?")


SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario("text_turn", "One user message, a streamed text answer (OpenAI Chat dialect).", "openai_chat",
             lambda: [CHAT.text_reply("Hello! How can I help you today?", usage=Usage(1200, 9))], _one_turn),
    Scenario("provider_error", "The provider answers HTTP 500: error end-stream, nothing appended (Responses).",
             "openai_responses",
             lambda: [HttpError(500, {"error": {"message": "upstream exploded", "type": "server_error"}})], _one_turn),
    Scenario("thinking_text", "Extended thinking, then text (Anthropic dialect).", "anthropic",
             lambda: [ANTHROPIC.thinking_then_text("The user greets me; answer briefly.", "Hi! What shall we build?",
                                                   usage=Usage(1500, 12, cache_read_tokens=1000))],
             _one_turn, model_extra={"max_output_tokens": 4096, "thinking_budget_tokens": 2048}),
    Scenario("read_tool", "One Read tool round executed by the client, then the answer (OpenAI Chat).",
             "openai_chat",
             lambda: [CHAT.tool_calls([("call_read_1", "Read", '{"path": "/workspace/hello.txt"}')],
                                      text="Let me read it.", usage=Usage(1300, 20)),
                      CHAT.text_reply("It says: hello from the workspace.", usage=Usage(1400, 10))],
             _read_file, files={"hello.txt": "hello from the workspace\n"}),
    Scenario("two_turns", "Two runs of one conversation; the second resumes from the first's checkpoint.",
             "openai_chat",
             lambda: [CHAT.text_reply("4", usage=Usage(1100, 1)), CHAT.text_reply("12", usage=Usage(1120, 1))],
             _two_turns),
]}


class _VirtualWorkspace(LocalExecutor):
    """Serves `/workspace/...` from a temporary folder, so paths in frames never depend on the machine."""

    def _path(self, path: str) -> Path:
        if path == WORKSPACE or path.startswith(WORKSPACE + "/"):
            path = str(self.workspace) + path[len(WORKSPACE):]
        return super()._path(path)


def build_scripts(scenario: Scenario) -> list[sp.Script]:
    # Restart the scripted provider's response ids (chatcmpl-scripted-N, msg_scripted_N...): they end up
    # in replay state and so in blobs; per-scenario numbering keeps them independent of run order.
    sp._ids = itertools.count(1)
    return list(scenario.scripts())


def run_scenario(scenario: Scenario, home: Path, scripts: Sequence[sp.Script] | None = None) -> Capture:
    """Run one scenario through a fresh mitmdump in `home` and export its capture."""
    scripts = list(scripts) if scripts is not None else build_scripts(scenario)
    with ScriptedProvider() as provider:
        entry = model_entry(provider.base_url, kind=scenario.kind, model_id=f"{scenario.kind}-model",
                            name=f"scripted-{scenario.kind}",
                            **({"extra": scenario.model_extra} if scenario.model_extra else {}))
        home.mkdir(parents=True, exist_ok=True)
        (home / "providers.toml").write_text(providers_toml([entry]))
        proxy = Proxy(home, options=dict(PROXY_OPTIONS)).start()
        try:
            provider.enqueue(scenario.kind, *scripts)
            model = public_model_id(entry["base_url"], entry["kind"], entry["model_id"])
            results = asyncio.run(_drive(scenario, proxy, model, home / "workspace"))
            _wait_recorded(proxy.db, results)
        finally:
            proxy.stop()
        stable = public_model_id(STABLE_BASE_URL, entry["kind"], entry["model_id"])
        redactor = Redactor(secrets=[API_KEY], substitutions={
            provider.base_url: STABLE_BASE_URL, f"127.0.0.1:{provider.port}": "scripted-provider.invalid",
            model: stable, str(home): "<scenario-home>"})
        conn = open_db(proxy.db)
        try:
            capture = export(conn, f"conv-{scenario.name}", redactor=redactor, name=scenario.name,
                             source=f"scenario {scenario.name} (tests/scenarios.py)")
        finally:
            conn.close()
        capture.header["description"] = scenario.description
        capture.header["client"] = "byok.cli.client.CursorClient (the Cursor-like test client)"
        _attach_provider_requests(capture, provider.requests, redactor)
        capture.header["redactions"] = redactor.describe()
    return capture


def _attach_provider_requests(capture: Capture, requests: Sequence[sp.RecordedRequest], redactor: Redactor) -> None:
    """Method, path and headers of each provider request as the scripted provider received them (the
    store keeps only the body), in call order: runs are sequential, so arrival order is call order."""
    calls = [(r["run"], r["call"]) for r in capture.of("llm_call")]
    extra = {key: provider_request_record(key[0], key[1], req.method, req.path, req.headers, req.json, redactor)
             for key, req in zip(calls, requests)}
    merge_provider_requests(capture, extra)


async def _drive(scenario: Scenario, proxy: Proxy, model: str, workspace: Path) -> list[RunResult]:
    workspace.mkdir(parents=True, exist_ok=True)
    for rel, text in scenario.files.items():
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text(text)
    executor = _VirtualWorkspace(workspace)
    ctx = None
    async with proxy.client(on_exec=executor.on_exec) as client:
        ctx = Ctx(client, model, scenario.name)
        await scenario.client(ctx)
    await executor.aclose()
    return ctx.results


def _wait_recorded(db: Path, results: Sequence[RunResult], timeout_s: float = 5.0) -> None:
    """Wait until the proxy's store holds every frame the client sent and received, so the capture
    never depends on the batch written while the proxy shuts down."""
    import sqlite3
    import time

    want = {(r.request_id, d): sum(f.direction == d for f in r.frames) for r in results for d in ("up", "down")}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            have = dict(((rid, d), n) for rid, d, n in conn.execute(
                "SELECT request_id, direction, count(*) FROM frames GROUP BY 1, 2"))
        finally:
            conn.close()
        if all(have.get(key, 0) >= n for key, n in want.items()):
            return
        time.sleep(0.05)


def run_scenarios(names: Sequence[str] | None = None, *, workers: int = 4) -> dict[str, Capture]:
    """Run scenarios (all by default) concurrently, each in its own temporary home and mitmdump."""
    chosen = [SCENARIOS[n] for n in (names or SCENARIOS)]
    scripts = {s.name: build_scripts(s) for s in chosen}  # sequentially: the id counter is global
    with tempfile.TemporaryDirectory(prefix="byok-scenarios-") as tmp:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {s.name: pool.submit(run_scenario, s, Path(tmp) / s.name, scripts[s.name]) for s in chosen}
            return {name: f.result() for name, f in futures.items()}
