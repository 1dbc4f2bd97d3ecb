"""Issue 3/5, tool rounds, end to end: every tool through a real mitmdump, the Cursor-like client
executing it for real in a temp workspace (LocalExecutor / ScriptedQueries), a scripted provider.

One mitmdump and one ScriptedProvider for the module; every test is its own conversation with its own
workspace and executor. Each per-tool test runs the tool in a mode whose manifest offers it and checks:
  - the live cards of the call: `partial_tool_call` first with the typed empty variant, the raw
    argument text as deltas, one `tool_call_started` (parsed args, started_at_ms), execution output as
    `tool_call_delta`, one `tool_call_completed` last (args + typed result, started <= completed), all
    with the same call_id and model_call_id;
  - the exec / interaction messages the client received (exact protobuf equality) and the workspace;
  - the round's checkpoints: staged (stable roots unchanged, the pending assistant inline), settled
    (roots += the assistant root + one tool root per result, pending empty, the ToolCall steps in the
    turn), and that the settled checkpoint was emitted before the next provider request arrived;
  - the provider's next request: the round folded into ONE assistant message (calls in index order,
    exact argument text) followed by the results in completion order, each content an exact string.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from byok.wire import connect
from byok.cli.client import RunResult, user_turn_request
from byok.cli.executor import FetchPage, LocalExecutor, Misbehave, ScriptedQueries
from byok.proto import agent_pb2 as apb
from tests.e2e.conftest import run, start_proxy
from tests.e2e.harness import Proxy, ProxyEnv, mode_tools
from tests.support.fake_web import FakeWeb, tiny_png
from tests.support.waiting import until
from tests.support.scripted_provider import CHAT, KINDS, SCRIPTS, Ev, RecordedRequest, Sse

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(30), pytest.mark.usefixtures("fresh_provider")]

MANIFESTS: dict[str, list[str]] = {
    name: mode_tools(name, web_configured=True)
    for name in ("agent", "ask", "plan", "subagent")
}
USER_MODES = {"agent": apb.AGENT_MODE_AGENT, "ask": apb.AGENT_MODE_ASK, "plan": apb.AGENT_MODE_PLAN,
              "subagent": apb.AGENT_MODE_AGENT}
CARD_KINDS = ("partial_tool_call", "tool_call_started", "tool_call_delta", "tool_call_completed")
REPLY = "All done."


# ---- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def web():
    with FakeWeb() as fake:
        yield fake


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider, web):
    home = tmp_path_factory.mktemp("tools")
    # WebFetch's pages are scripted in the Cursor-like client; the proxy's own redirect walk would reach
    # out to their public addresses, so it is off here (test_trust.py walks a server in a namespace)
    proxy, models = start_proxy(home, provider, kinds=KINDS, byok_web_fetch_check_redirects="false")
    # every tool of every manifest is offered: the web backends are configured (fakes on loopback)
    with open(home / "providers.toml", "a") as f:
        f.write(f'\n[web_search]\nkind = "searxng"\nbase_url = "{web.base_url}"\n'
                f'\n[image_generation]\nbase_url = "{web.base_url}"\nmodel = "gpt-image-1"\napi_key = "sk-img-test"\n')
    yield ProxyEnv(proxy, provider, models)
    proxy.stop()


# ---- one turn -------------------------------------------------------------------------------------

Call = tuple[str, str, str]
"""(call_id, tool name, raw argument JSON text) as the model streams it."""


@dataclass
class Turn:
    result: RunResult
    requests: list[RecordedRequest]
    """This run's provider requests, in order."""
    executor: LocalExecutor
    queries: ScriptedQueries
    workspace: Path
    blobs: dict[bytes, bytes]
    request: apb.AgentRunRequest
    server_ts: list[int] = field(default_factory=list)
    """Wall-clock ms at which the server emitted each down frame (aligned with result.down())."""

    @property
    def down(self):
        return self.result.down()

    def cards(self, call_id: str) -> list[tuple[int, str, Any]]:
        """(index in down frames, card kind, update) of one call's cards, in stream order."""
        out = []
        for i, frame in enumerate(self.down):
            if not frame.kind.startswith("interaction_update."):
                continue
            kind = frame.kind.split(".", 1)[1]
            if kind in CARD_KINDS:
                update = getattr(frame.message.interaction_update, kind)
                if update.call_id == call_id:
                    out.append((i, kind, update))
        return out

    def indices(self, kind: str) -> list[int]:
        return [i for i, f in enumerate(self.down) if f.kind == kind]

    def completed_order(self) -> list[str]:
        return [f.message.interaction_update.tool_call_completed.call_id
                for f in self.result.down("interaction_update.tool_call_completed")]


def run_turn(env: ProxyEnv, workspace: Path, scripts, *, files: dict[str, str | bytes] | None = None,
             kind: str = "openai_chat", mode: str = "agent", executor: LocalExecutor | None = None,
             queries: ScriptedQueries | None = None, ack_delay_s: float = 0.05, settle: bool = False) -> Turn:
    """Queue `scripts`, run one user turn in `mode` over the proxy, execute its tools for real.

    Blob ACKs go out `ack_delay_s` late, so a checkpoint that does not wait for its ACK barrier, or a
    provider call that does not wait for the settled checkpoint, shows up in the frame times."""
    workspace.mkdir(parents=True, exist_ok=True)
    for name, content in (files or {}).items():
        path = workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    executor = executor or LocalExecutor(workspace)
    queries = queries or ScriptedQueries()
    request = user_turn_request("use the tools", model_id=env.models[kind], mode=USER_MODES[mode],
                                workspace=str(workspace))
    if mode == "subagent":
        request.subagent_type_name = "generalPurpose"
    provider = env.provider
    before = len(provider.requests)
    log_offset = len(env.proxy.log())
    provider.enqueue(kind, *scripts)

    async def scenario():
        async with env.proxy.client(on_exec=executor.on_exec, on_query=queries.on_query,
                                    ack_delay_s=ack_delay_s) as client:
            try:
                result = await client.run(request, on_frame=executor.on_frame)
                if settle:  # late client messages (after the end-stream) go out before the client closes
                    await client.appends_sent()
            finally:
                await executor.aclose()
            return result, dict(client.blobs)

    result, blobs = run(scenario())
    requests = provider.requests[before:]
    turn = Turn(result, requests, executor, queries, workspace, blobs, request)
    assert provider.pending(kind) == 0, "the run did not make every scripted provider call"
    assert len(requests) == len(scripts)
    log = env.proxy.log()[log_offset:]
    assert "Traceback" not in log and "Addon error" not in log, log  # nothing failed on the side
    return turn


def one_round(env: ProxyEnv, workspace: Path, calls: list[Call], *, kind: str = "openai_chat", text: str | None = None,
              reasoning: str | None = None, **kwargs) -> Turn:
    """Round 1 = the model calls `calls` (after `reasoning` and `text`, if given), round 2 = a text
    reply. Checks the run completed."""
    mode = kwargs.get("mode", "agent")
    for _, name, _ in calls:
        assert name in MANIFESTS[mode], f"{name} is not offered in {mode} mode"
    s = SCRIPTS[kind]
    scripts = [s.tool_calls(calls, text=text, reasoning=reasoning), s.text_reply(REPLY)]
    turn = run_turn(env, workspace, scripts, kind=kind, **kwargs)
    assert_completed(turn)
    # exactly one staged and one settled checkpoint for the round (none per result), then the final three
    assert [len(c.pending_tool_calls) for c in turn.result.checkpoints()] == [0, 1, 0, 1, 0, 0]
    if kind == "openai_chat":  # the run really was in `mode`: its tool list is that manifest
        assert [t["function"]["name"] for t in turn.requests[0].json["tools"]] == MANIFESTS[mode]
    return turn


def assert_completed(turn: Turn) -> None:
    result = turn.result
    assert result.status == 200
    assert result.end_error is None, result.end_error
    assert result.text().endswith(REPLY)
    kinds = result.kinds()
    tail = kinds[kinds.index("interaction_update.turn_ended"):]
    assert tail == ["interaction_update.turn_ended"] + ["conversation_checkpoint_update"] * 3 + ["end_stream"]


# ---- cards ----------------------------------------------------------------------------------------


@dataclass
class Cards:
    started: apb.ToolCall
    completed: apb.ToolCall
    deltas: list[apb.ToolCallDelta]
    partials: list[apb.PartialToolCallUpdate]
    model_call_id: str


def check_cards(turn: Turn, call: Call, variant: str, args=None, result=None) -> Cards:
    """The card sequence of one call. `args` / `result`: the exact typed args and result expected on
    the started and completed cards (None = not checked here; `args` is then checked equal on both)."""
    call_id, _, raw_args = call
    cards = turn.cards(call_id)
    kinds = [k for _, k, _ in cards]
    assert kinds[0] == "partial_tool_call" and kinds[-1] == "tool_call_completed", kinds
    assert kinds.count("tool_call_started") == 1 and kinds.count("tool_call_completed") == 1, kinds
    started_at = kinds.index("tool_call_started")
    partials = [u for _, k, u in cards if k == "partial_tool_call"]
    assert all(k != "partial_tool_call" for k in kinds[started_at:]), "a partial card after tool_call_started"
    # the placeholder: the typed variant, empty, no start time
    empty = apb.ToolCall()
    getattr(empty, variant).SetInParent()
    assert partials[0].tool_call == empty and partials[0].args_text_delta == ""
    assert all(p.tool_call.WhichOneof("tool") == variant and not p.tool_call.HasField("started_at_ms")
               for p in partials)
    assert "".join(p.args_text_delta for p in partials) == raw_args  # the raw argument text, as streamed
    assert len([p for p in partials if p.args_text_delta]) >= 2  # really streamed in pieces
    model_call_ids = {u.model_call_id for _, _, u in cards}
    assert len(model_call_ids) == 1 and "" not in model_call_ids
    started = cards[started_at][2].tool_call
    completed = cards[-1][2].tool_call
    assert started.WhichOneof("tool") == completed.WhichOneof("tool") == variant
    s, c = getattr(started, variant), getattr(completed, variant)
    assert not s.HasField("result") and c.HasField("result")
    assert started.started_at_ms > 1_600_000_000_000 and not started.HasField("completed_at_ms")
    assert completed.started_at_ms == started.started_at_ms <= completed.completed_at_ms
    assert c.args == s.args
    if args is not None:
        assert s.args == args
    if result is not None:
        assert c.result == result
    deltas = [u.tool_call_delta for _, k, u in cards if k == "tool_call_delta"]
    return Cards(started, completed, deltas, partials, model_call_ids.pop())


# ---- checkpoints ----------------------------------------------------------------------------------


def server_frame_times(proxy: Proxy, request_id: str, count: int, timeout: float = 5.0) -> list[int]:
    """ts_ms of the run's down frames as the server recorded them when it emitted them."""
    deadline = time.monotonic() + timeout
    while True:
        db = sqlite3.connect(proxy.db)
        try:
            rows = db.execute("SELECT ts_ms, kind FROM frames WHERE request_id = ? AND direction = 'down' "
                              "ORDER BY seq", [request_id]).fetchall()
        finally:
            db.close()
        if len(rows) >= count or time.monotonic() > deadline:
            assert len(rows) == count, f"{len(rows)} recorded down frames, the client got {count}"
            return [ts for ts, _ in rows]
        time.sleep(0.05)


def check_round(env: ProxyEnv, turn: Turn, calls: list[Call], results: list[tuple[str, str]], *,
                round_no: int = 0, text: str | None = None, reasoning: str | None = None,
                is_error: dict[str, bool] | None = None, kind: str = "openai_chat") -> None:
    """Round `round_no` of the turn: checkpoints, blobs, ToolCall steps and the provider's next request.
    `results` = (call_id, exact content) in completion order."""
    result = turn.result
    is_error = is_error or {}
    ids_by_index = [c[0] for c in calls]
    cps = result.checkpoints()
    previous, staged, settled = cps[2 * round_no], cps[2 * round_no + 1], cps[2 * round_no + 2]
    assert len(previous.pending_tool_calls) == 0
    # staged: the stable roots unchanged, the pending assistant inline with every call in index order
    assert list(staged.root_prompt_messages_json) == list(previous.root_prompt_messages_json)
    assert len(staged.pending_tool_calls) == 1
    pending = json.loads(staged.pending_tool_calls[0])
    assert pending["role"] == "assistant"
    assert [p["toolCallId"] for p in pending["content"] if p["type"] == "tool-call"] == ids_by_index
    assert pending["providerOptions"]["cursor"]["pendingToolCallStartedAtMs"] > 0
    # settled: roots += assistant root + one tool root per result (completion order), nothing pending
    assert len(settled.pending_tool_calls) == 0
    old = list(previous.root_prompt_messages_json)
    roots = list(settled.root_prompt_messages_json)
    assert roots[: len(old)] == old and len(roots) == len(old) + 1 + len(results)
    assistant_root = json.loads(turn.blobs[roots[len(old)]])
    assert assistant_root["role"] == "assistant"
    assert [(p["toolCallId"], p["toolName"]) for p in assistant_root["content"] if p["type"] == "tool-call"] == \
        [(c[0], c[1]) for c in calls]
    assert [p["text"] for p in assistant_root["content"] if p["type"] == "text"] == ([text] if text else [])
    assert [p["text"] for p in assistant_root["content"] if p["type"] == "reasoning"] == (
        [reasoning] if reasoning else [])
    tool_roots = [json.loads(turn.blobs[r]) for r in roots[len(old) + 1:]]
    assert [(t["role"], [(p["toolCallId"], p["output"]) for p in t["content"]]) for t in tool_roots] == [
        ("tool", [(cid, {"type": "error-text" if is_error.get(cid) else "text", "value": content})])
        for cid, content in results]
    # the turn holds one ToolCall step per call (index order), each the completed card's ToolCall
    completed = {u.call_id: u.tool_call for u in (f.message.interaction_update.tool_call_completed
                                                  for f in result.down("interaction_update.tool_call_completed"))}
    steps = turn_steps(turn, settled)
    assert [s.tool_call for s in steps if s.HasField("tool_call")][-len(calls):] == [completed[c] for c in ids_by_index]
    # frame order: staged before any execution of the round, settled after its last result
    down = turn.down
    cp_frames = turn.indices("conversation_checkpoint_update")
    staged_at, settled_at = cp_frames[2 * round_no + 1], cp_frames[2 * round_no + 2]
    round_frames = [i for i, f in enumerate(down) if f.kind in ("exec_server_message", "interaction_query")
                    and i > cp_frames[2 * round_no]]
    completions = [i for i, f in enumerate(down) if f.kind == "interaction_update.tool_call_completed"
                   and f.message.interaction_update.tool_call_completed.call_id in ids_by_index]
    assert [down[i].message.interaction_update.tool_call_completed.call_id for i in completions] == \
        [cid for cid, _ in results]
    assert all(staged_at < i for i in round_frames[:1] + completions)
    assert settled_at > max(completions)
    assert not any(f.kind == "interaction_update.text_delta" for f in down[staged_at:settled_at])
    # the next provider call started only after the settled checkpoint went out
    times = turn.server_ts or server_frame_times(env.proxy, result.request_id, len(down))
    turn.server_ts = times
    next_request = turn.requests[round_no + 1]
    assert times[settled_at] <= next_request.received_at * 1000
    REPLAY_CHECKS[kind](turn, calls, results, round_no=round_no, text=text, reasoning=reasoning, is_error=is_error)


def turn_steps(turn: Turn, state: apb.ConversationStateStructure) -> list[apb.ConversationStep]:
    structure = apb.ConversationTurnStructure.FromString(turn.blobs[state.turns[-1]]).agent_conversation_turn
    return [apb.ConversationStep.FromString(turn.blobs[s]) for s in structure.steps]


def check_chat_replay(turn: Turn, calls: list[Call], results: list[tuple[str, str]], *, round_no: int = 0,
                      text: str | None = None, reasoning: str | None = None,
                      is_error: dict[str, bool] | None = None) -> None:
    """OpenAI Chat: the provider's next request = the previous one + ONE assistant message with the
    round's text, its reasoning (`reasoning_content`) and every call (index order, the exact argument
    text) + one `role: tool` message per result (completion order), each content a string."""
    before = turn.requests[round_no].json["messages"]
    after = turn.requests[round_no + 1].json["messages"]
    assert after[: len(before)] == before
    assistant = {"role": "assistant", "content": text,
                 "tool_calls": [{"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                                for cid, name, args in calls]}
    if reasoning is not None:
        assistant["reasoning_content"] = reasoning
    assert after[len(before):] == [
        assistant,
        *({"role": "tool", "tool_call_id": cid, "content": content} for cid, content in results),
    ]
    assert all(isinstance(m["content"], str) for m in after[len(before) + 1:])


def check_responses_replay(turn: Turn, calls: list[Call], results: list[tuple[str, str]], *, round_no: int = 0,
                           text: str | None = None, reasoning: str | None = None,
                           is_error: dict[str, bool] | None = None) -> None:
    """OpenAI Responses: the next input = the previous one + the `function_call` items (index order, exact
    argument text) + one `function_call_output` per result (completion order), each output a string."""
    assert text is None and reasoning is None
    before = turn.requests[round_no].json["input"]
    after = turn.requests[round_no + 1].json["input"]
    assert after[: len(before)] == before
    added = after[len(before):]
    assert [{k: item.get(k) for k in ("type", "call_id", "name", "arguments")} for item in added[: len(calls)]] == [
        {"type": "function_call", "call_id": cid, "name": name, "arguments": args} for cid, name, args in calls]
    assert all(item["id"].startswith("fc_") for item in added[: len(calls)])  # the provider's own item ids
    assert added[len(calls):] == [{"type": "function_call_output", "call_id": cid, "output": content}
                                  for cid, content in results]


def check_anthropic_replay(turn: Turn, calls: list[Call], results: list[tuple[str, str]], *, round_no: int = 0,
                           text: str | None = None, reasoning: str | None = None,
                           is_error: dict[str, bool] | None = None) -> None:
    """Anthropic: the next messages = the previous ones + ONE assistant message of `tool_use` blocks (index
    order; input = the parsed arguments, {} when they were not JSON) + ONE user message of `tool_result`
    blocks (completion order, string content, is_error kept)."""
    assert text is None and reasoning is None
    is_error = is_error or {}
    # cache_control breakpoints move forward each round (tests/e2e/test_prompt_cache.py checks them)
    before = without_cache_control(turn.requests[round_no].json["messages"])
    after = without_cache_control(turn.requests[round_no + 1].json["messages"])
    assert after[: len(before)] == before

    def parsed(args: str):
        try:
            return json.loads(args)
        except ValueError:
            return {}

    def tool_result(cid: str, content: str) -> dict:
        block = {"type": "tool_result", "tool_use_id": cid, "content": content}
        if is_error.get(cid):
            block["is_error"] = True
        return block

    assert after[len(before):] == [
        {"role": "assistant", "content": [{"type": "tool_use", "id": cid, "name": name, "input": parsed(args)}
                                          for cid, name, args in calls]},
        {"role": "user", "content": [tool_result(cid, content) for cid, content in results]},
    ]


def without_cache_control(value):
    if isinstance(value, dict):
        return {k: without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache_control(v) for v in value]
    return value


REPLAY_CHECKS = {"openai_chat": check_chat_replay, "openai_responses": check_responses_replay,
                 "anthropic": check_anthropic_replay}


def exec_message(exec_id: int, call_id: str, **payload) -> apb.ExecServerMessage:
    return apb.ExecServerMessage(id=exec_id, exec_id=call_id, **payload)


# ---- file tools -----------------------------------------------------------------------------------


def test_read(env, tmp_path):
    call = ("call_read", "Read", '{"path": "notes/a.txt", "offset": 2, "limit": 2}')
    turn = one_round(env, tmp_path / "ws", [call], files={"notes/a.txt": "one\ntwo\nthree\nfour\n"})
    path = str(tmp_path / "ws" / "notes" / "a.txt")
    args = apb.ReadToolArgs(path=path, offset=2, limit=2)
    result = apb.ReadToolResult(success=apb.ReadToolSuccess(
        path=path, content="two\nthree\n", total_lines=4, file_size=19,
        read_range=apb.ReadRange(start_line=2, end_line=3)))
    check_cards(turn, call, "read_tool_call", args, result)
    assert turn.executor.log == [exec_message(1, "call_read", read_args=apb.ReadArgs(
        path=path, tool_call_id="call_read", offset=2, limit=2))]
    check_round(env, turn, [call], [("call_read", "     2|two\n     3|three")])
    assert list(turn.result.checkpoints()[-1].read_paths) == [path]


def test_ls(env, tmp_path):
    call = ("call_ls", "Ls", '{"path": ".", "ignore": ["*.log"]}')
    ws = tmp_path / "ws"
    turn = one_round(env, ws, [call], files={"a.txt": "x\n", "debug.log": "noise\n", "src/b.py": "y\n"})
    args = apb.LsArgs(path=str(ws), ignore=["*.log"], tool_call_id="call_ls")
    cards = check_cards(turn, call, "ls_tool_call", args)
    tree = cards.completed.ls_tool_call.result.success.directory_tree_root
    assert [f.name for f in tree.children_files] == ["a.txt"]
    assert [d.abs_path for d in tree.children_dirs] == [str(ws / "src")]
    assert turn.executor.log == [exec_message(1, "call_ls", ls_args=args)]
    check_round(env, turn, [call], [("call_ls", f"{ws}/\n  - src/\n    - b.py\n  - a.txt")])


def test_grep(env, tmp_path):
    call = ("call_grep", "Grep", '{"pattern": "be.a", "glob": "*.py", "-i": true}')
    ws = tmp_path / "ws"
    turn = one_round(env, ws, [call], files={"a.txt": "beta\n", "src/b.py": "x = 1\nBETA = 2\n"})
    args = apb.GrepArgs(pattern="be.a", glob="*.py", case_insensitive=True, output_mode="content",
                        tool_call_id="call_grep")
    cards = check_cards(turn, call, "grep_tool_call", args)
    assert cards.completed.grep_tool_call.result.success.workspace_results[str(ws)].content.total_matched_lines == 1
    assert turn.executor.log == [exec_message(1, "call_grep", grep_args=args)]
    check_round(env, turn, [call], [("call_grep", "src/b.py\n2:BETA = 2")])


def test_glob(env, tmp_path):
    call = ("call_glob", "Glob", '{"glob_pattern": "*.py", "target_directory": "src"}')
    ws = tmp_path / "ws"
    turn = one_round(env, ws, [call], files={"top.py": "", "src/b.py": "", "src/deep/c.py": "", "src/d.txt": ""})
    src = str(ws / "src")
    files = [f"{src}/b.py", f"{src}/deep/c.py"]
    result = apb.GlobToolResult(success=apb.GlobToolSuccess(pattern="*.py", path=src, files=files, total_files=2))
    check_cards(turn, call, "glob_tool_call", apb.GlobToolArgs(glob_pattern="*.py", target_directory=src), result)
    # Glob runs as a files-with-matches grep of the empty pattern (PROTOCOL 5.5)
    assert turn.executor.log == [exec_message(1, "call_glob", grep_args=apb.GrepArgs(
        pattern="", path=src, glob="*.py", output_mode="files_with_matches", tool_call_id="call_glob"))]
    check_round(env, turn, [call], [("call_glob", "2 file(s) matching *.py:\n" + "\n".join(files))])


def test_delete(env, tmp_path):
    call = ("call_del", "Delete", '{"path": "old.txt"}')
    ws = tmp_path / "ws"
    turn = one_round(env, ws, [call], files={"old.txt": "bye\n", "keep.txt": "stay\n"})
    path = str(ws / "old.txt")
    args = apb.DeleteArgs(path=path, tool_call_id="call_del")
    result = apb.DeleteResult(success=apb.DeleteSuccess(path=path, deleted_file=path, file_size=4, prev_content="bye\n"))
    check_cards(turn, call, "delete_tool_call", args, result)
    assert turn.executor.log == [exec_message(1, "call_del", delete_args=args)]
    assert not (ws / "old.txt").exists() and (ws / "keep.txt").read_text() == "stay\n"
    check_round(env, turn, [call], [("call_del", f"Deleted {path}")])


def test_read_lints(env, tmp_path):
    call = ("call_lints", "ReadLints", '{"paths": ["app.py", "clean.py"]}')
    ws = tmp_path / "ws"
    app, clean = str(ws / "app.py"), str(ws / "clean.py")
    diagnostic = apb.Diagnostic(severity=apb.DIAGNOSTIC_SEVERITY_ERROR, message="undefined name 'y'",
                                source="pyflakes", code="F821",
                                range=apb.Range(start=apb.Position(line=2, column=5), end=apb.Position(line=2, column=6)))
    executor = LocalExecutor(ws, diagnostics={app: [diagnostic]})
    turn = one_round(env, ws, [call], files={"app.py": "x = 1\nz = y\n", "clean.py": "ok = 1\n"}, executor=executor)
    cards = check_cards(turn, call, "read_lints_tool_call", apb.ReadLintsToolArgs(paths=[app, clean]))
    success = cards.completed.read_lints_tool_call.result.success
    assert (success.total_files, success.total_diagnostics) == (2, 1)
    assert [(f.path, f.diagnostics_count) for f in success.file_diagnostics] == [(app, 1), (clean, 0)]
    # one diagnostics exec per path, each its own id
    assert turn.executor.log == [
        exec_message(1, "call_lints", diagnostics_args=apb.DiagnosticsArgs(path=app, tool_call_id="call_lints")),
        exec_message(2, "call_lints", diagnostics_args=apb.DiagnosticsArgs(path=clean, tool_call_id="call_lints")),
    ]
    check_round(env, turn, [call], [("call_lints", f"{app}:\n  L2:5 error: undefined name 'y' [pyflakes F821]")])


# ---- edits ----------------------------------------------------------------------------------------


def test_write_crlf_contents(env, tmp_path):
    # the content comes before the path: the card must stream it at once, not wait for the path
    call = ("call_write", "Write", '{"contents": "one\\r\\ntwo\\r\\nthree\\n", "path": "pkg/new.txt"}')
    ws = tmp_path / "ws"
    turn = one_round(env, ws, [call])
    path = str(ws / "pkg" / "new.txt")
    after = "one\ntwo\nthree\n"
    cards = check_cards(turn, call, "edit_tool_call", apb.EditArgs(path=path, stream_content=after))
    # the live edit card: the LF-normalised content as tool_call_delta while the arguments stream, then
    # the path once it is complete
    assert "".join(d.edit_tool_call_delta.stream_content_delta for d in cards.deltas) == after
    sequence = [(k, u) for _, k, u in turn.cards("call_write")]
    first_delta = next(i for i, (k, _) in enumerate(sequence) if k == "tool_call_delta")
    last_args = max(i for i, (k, u) in enumerate(sequence) if k == "partial_tool_call" and u.args_text_delta)
    path_at = [i for i, (k, u) in enumerate(sequence)
               if k == "partial_tool_call" and u.tool_call.edit_tool_call.HasField("args")]
    assert first_delta < last_args and len(path_at) == 1 and first_delta < path_at[0]
    path_card = sequence[path_at[0]][1]
    # the path card shows the path the tool will write: resolved against the workspace
    assert path_card.tool_call.edit_tool_call.args.path == path and not path_card.args_text_delta
    success = cards.completed.edit_tool_call.result.success
    assert (success.path, success.lines_added, success.lines_removed) == (path, 3, 0)
    assert (success.before_full_file_content, success.after_full_file_content) == ("", after)
    # hidden read (file_not_found = a new file), then the write of the whole LF text; own ids, one tool_call_id
    assert turn.executor.log == [
        exec_message(1, "call_write", read_args=apb.ReadArgs(path=path, tool_call_id="call_write")),
        exec_message(2, "call_write", write_args=apb.WriteArgs(path=path, file_text=after, tool_call_id="call_write")),
    ]
    assert (ws / "pkg" / "new.txt").read_bytes() == b"one\ntwo\nthree\n"
    check_round(env, turn, [call], [("call_write", f"Created {path} (3 lines)")])


def test_str_replace_crlf(env, tmp_path):
    call = ("call_edit", "StrReplace",
            '{"path": "win.txt", "old_string": "alpha\\r\\nbeta", "new_string": "ALPHA\\r\\nBETA\\r\\nextra"}')
    ws = tmp_path / "ws"
    turn = one_round(env, ws, [call], files={"win.txt": b"alpha\r\nbeta\r\ngamma\r\n"})
    path = str(ws / "win.txt")
    before, after = "alpha\nbeta\ngamma\n", "ALPHA\nBETA\nextra\ngamma\n"
    cards = check_cards(turn, call, "edit_tool_call", apb.EditArgs(path=path, stream_content="ALPHA\nBETA\nextra"))
    assert "".join(d.edit_tool_call_delta.stream_content_delta for d in cards.deltas) == "ALPHA\nBETA\nextra"
    success = cards.completed.edit_tool_call.result.success
    assert (success.lines_added, success.lines_removed) == (3, 2)  # the real change, not a line-ending rewrite
    assert (success.before_full_file_content, success.after_full_file_content) == (before, after)
    assert success.diff_string == (f"--- {path}\n+++ {path}\n@@ -1,3 +1,4 @@\n-alpha\n-beta\n+ALPHA\n+BETA\n+extra\n"
                                   " gamma\n")
    assert turn.executor.log == [
        exec_message(1, "call_edit", read_args=apb.ReadArgs(path=path, tool_call_id="call_edit")),
        exec_message(2, "call_edit", write_args=apb.WriteArgs(path=path, file_text=after, tool_call_id="call_edit")),
    ]
    # the edit domain is LF: a CRLF file matches a CRLF old_string and is written back with LF
    assert (ws / "win.txt").read_bytes() == after.encode()
    check_round(env, turn, [call], [("call_edit", f"Updated {path}: +3 -2 lines")])


# ---- shell ----------------------------------------------------------------------------------------


def test_shell_foreground_streams_output(env, tmp_path):
    command = "echo out1; sleep 0.15; echo err1 >&2; sleep 0.15; echo out2; exit 3"
    call = ("call_sh", "Shell", json.dumps({"command": command, "description": "three lines then exit 3"}))
    ws = tmp_path / "ws"
    turn = one_round(env, ws, [call])
    request = turn.request
    [message] = turn.executor.log
    assert (message.id, message.exec_id, message.WhichOneof("message")) == (1, "call_sh", "shell_stream_args")
    assert message.accept_hook_additional_contexts is True
    a = message.shell_stream_args
    assert (a.command, a.working_directory, a.timeout, a.tool_call_id, a.description) == (
        command, str(ws), 30000, "call_sh", "three lines then exit 3")
    assert (a.timeout_behavior, a.hard_timeout, a.file_output_threshold_bytes, a.close_stdin) == (
        apb.TIMEOUT_BEHAVIOR_BACKGROUND, 86_400_000, 40_000, True)
    assert a.conversation_id == request.conversation_id
    assert list(a.simple_commands) == ["echo out1", "sleep 0.15", "echo err1", "sleep 0.15", "echo out2", "exit 3"]
    cards = check_cards(turn, call, "shell_tool_call", a)
    assert cards.started.shell_tool_call.description == "three lines then exit 3"
    # stdout/stderr stream to the card as tool_call_delta, in order, while the command runs
    assert [(d.shell_tool_call_delta.WhichOneof("delta"), d.shell_tool_call_delta.stdout.content
             or d.shell_tool_call_delta.stderr.content) for d in cards.deltas] == [
        ("stdout", "out1\n"), ("stderr", "err1\n"), ("stdout", "out2\n")]
    failure = cards.completed.shell_tool_call.result.failure  # exit 3: the typed failure branch
    assert (failure.exit_code, failure.stdout, failure.stderr, failure.interleaved_output, failure.aborted) == (
        3, "out1\nout2\n", "err1\n", "out1\nerr1\nout2\n", False)
    assert failure.command == command and failure.working_directory == str(ws)
    check_round(env, turn, [call], [("call_sh", "Exit code: 3\nout1\nerr1\nout2\n")], is_error={"call_sh": True})


def test_shell_backgrounded(env, tmp_path):
    command = "echo started; sleep 1; echo finished"
    call = ("call_bg", "Shell", json.dumps({"command": command, "block_until_ms": 300}))
    ws = tmp_path / "ws"
    executor = _KeepBackground(ws)
    turn = one_round(env, ws, [call], executor=executor)
    [message] = turn.executor.log
    assert message.shell_stream_args.timeout == 300
    assert message.shell_stream_args.timeout_behavior == apb.TIMEOUT_BEHAVIOR_BACKGROUND
    cards = check_cards(turn, call, "shell_tool_call", message.shell_stream_args)
    assert [d.shell_tool_call_delta.stdout.content for d in cards.deltas] == ["started\n"]
    shell = cards.completed.shell_tool_call.result
    terminals = str(ws / ".terminals")
    assert (shell.is_background, shell.terminals_folder, shell.success.shell_id) == (True, terminals, 1)
    assert shell.pid == shell.success.pid == executor.pids[1] > 0
    assert shell.success.interleaved_output == "started\n"
    content = f"shell running in background shell_id=1 pid={shell.pid} terminals_folder={terminals}\nstarted\n"
    check_round(env, turn, [call], [("call_bg", content)])
    # the backgrounded shell was never aborted: it ran to its end after the turn
    assert not turn.result.down("exec_server_control_message")
    assert executor.final_output[1] == "started\nfinished\nexit_code: 0\n"


class _KeepBackground(LocalExecutor):
    """A LocalExecutor whose close waits for background shells instead of killing them."""

    final_output: dict[int, str]
    pids: dict[int, int]

    async def aclose(self) -> None:
        self.final_output, self.pids = {}, {}
        for shell_id, (job, _) in list(self._background.items()):
            self.pids[shell_id] = job.proc.pid
            await self.wait_background(shell_id, timeout=10)
            self.final_output[shell_id] = (self.terminals_folder / f"{shell_id}.txt").read_text()
        await super().aclose()


def test_await_shell(env, tmp_path):
    ws = tmp_path / "ws"
    shell = ("call_bg", "Shell", json.dumps({"command": "echo started; sleep 0.8; echo finished",
                                             "block_until_ms": 200}))
    wait = ("call_wait", "AwaitShell", '{"shell_id": 1, "block_until_ms": 10000}')
    turn = run_turn(env, ws, [CHAT.tool_calls([shell]), CHAT.tool_calls([wait]), CHAT.text_reply(REPLY)])
    assert_completed(turn)
    out_file = str(ws / ".terminals" / "1.txt")
    cards = check_cards(turn, wait, "await_tool_call", apb.AwaitArgs(task_id="1", block_until_ms=10000))
    complete = cards.completed.await_tool_call.result.success.complete
    assert (complete.task_id, complete.exit_code, complete.output_file_path, complete.wake_reason) == (
        "1", 0, out_file, "exit")
    # AwaitShell re-reads the background shell's output file until its exit_code line appears
    reads = [m for m in turn.executor.log if m.WhichOneof("message") == "read_args"]
    assert reads and reads == [exec_message(m.id, "call_wait", read_args=apb.ReadArgs(
        path=out_file, tool_call_id="call_wait")) for m in reads]
    assert [m.id for m in turn.executor.log] == list(range(1, len(turn.executor.log) + 1))  # one id space
    check_round(env, turn, [wait], [("call_wait", f"shell_id=1 exited exit_code=0 output_file={out_file}\n"
                                                  "started\nfinished\n")], round_no=1)
    assert cards.model_call_id != check_cards(turn, shell, "shell_tool_call").model_call_id


# ---- local tools ----------------------------------------------------------------------------------


def test_todo_write(env, tmp_path):
    call = ("call_todo", "TodoWrite", json.dumps({"merge": False, "todos": [
        {"id": "t1", "content": "Read the code", "status": "completed"},
        {"id": "t2", "content": "Fix the bug", "status": "in_progress"}]}))
    turn = one_round(env, tmp_path / "ws", [call])
    todos = [apb.TodoItem(id="t1", content="Read the code", status=apb.TODO_STATUS_COMPLETED),
             apb.TodoItem(id="t2", content="Fix the bug", status=apb.TODO_STATUS_IN_PROGRESS)]
    args = apb.UpdateTodosArgs(merge=False, todos=todos)
    result = apb.UpdateTodosResult(success=apb.UpdateTodosSuccess(todos=todos, total_count=2, was_merge=False))
    check_cards(turn, call, "update_todos_tool_call", args, result)
    # local: started and completed adjacent, nothing executed by the client
    assert [k for _, k, _ in turn.cards("call_todo")][-2:] == ["tool_call_started", "tool_call_completed"]
    assert turn.executor.log == [] and turn.queries.log == []
    content = ('{"merge":false,"todos":[{"content":"Read the code","id":"t1","status":"completed"},'
               '{"content":"Fix the bug","id":"t2","status":"in_progress"}]}')
    check_round(env, turn, [call], [("call_todo", content)])
    state = turn.result.checkpoints()[-1]
    assert [apb.TodoItem.FromString(turn.blobs[t]) for t in state.todos] == todos  # the todo state, folded


def test_update_current_step_in_subagent(env, tmp_path):
    call = ("call_step", "UpdateCurrentStep", '{"current_step": "Reading the parser", "completed_subtitle": "read"}')
    turn = one_round(env, tmp_path / "ws", [call], mode="subagent")
    args = apb.CommunicateUpdateArgs(current_step="Reading the parser", completed_subtitle="read")
    # message_index: the 1-based position of this call's step in the turn (no thinking/text before it)
    result = apb.CommunicateUpdateResult(success=apb.CommunicateUpdateSuccess(current_step="Reading the parser",
                                                                             message_index=1))
    check_cards(turn, call, "communicate_update_tool_call", args, result)
    assert turn.executor.log == [] and turn.queries.log == []
    check_round(env, turn, [call], [("call_step", '{"completed_subtitle":"read","current_step":"Reading the parser",'
                                                  '"message_index":1}')])


# ---- interactions ---------------------------------------------------------------------------------


def test_ask_question(env, tmp_path):
    call = ("call_ask", "AskQuestion", json.dumps({"title": "Setup", "questions": [
        {"id": "db", "prompt": "Which database?", "options": [{"id": "pg", "label": "Postgres"},
                                                               {"id": "lite", "label": "SQLite"}]}]}))
    queries = ScriptedQueries(answers={"db": ["lite"]})
    turn = one_round(env, tmp_path / "ws", [call], queries=queries)
    args = apb.AskQuestionArgs(title="Setup", questions=[apb.AskQuestionArgs.Question(
        id="db", prompt="Which database?", options=[apb.AskQuestionArgs.Option(id="pg", label="Postgres"),
                                                    apb.AskQuestionArgs.Option(id="lite", label="SQLite")])])
    result = apb.AskQuestionResult(success=apb.AskQuestionSuccess(answers=[
        apb.AskQuestionSuccess.Answer(question_id="db", selected_option_ids=["lite"])]))
    check_cards(turn, call, "ask_question_tool_call", args, result)
    assert queries.log == [apb.InteractionQuery(id=1, ask_question_interaction_query=apb.AskQuestionInteractionQuery(
        args=args, tool_call_id="call_ask"))]
    assert turn.executor.log == []
    check_round(env, turn, [call], [("call_ask", '{"answers":[{"question":"Which database?","question_id":"db",'
                                                 '"selected":["SQLite"]}]}')])


def test_create_plan_in_plan_mode(env, tmp_path):
    call = ("call_plan", "CreatePlan", json.dumps({
        "name": "Cache layer", "overview": "Add a read-through cache", "plan": "# Plan\n1. cache\n2. tests",
        "todos": [{"id": "a", "content": "write the cache"},
                  {"id": "b", "content": "test it", "dependencies": ["a"]}]}))
    queries = ScriptedQueries(plan_result=apb.CreatePlanResult(success=apb.CreatePlanSuccess(),
                                                               plan_uri="file:///plans/cache.plan.md"))
    turn = one_round(env, tmp_path / "ws", [call], mode="plan", queries=queries)
    args = apb.CreatePlanArgs(name="Cache layer", overview="Add a read-through cache", plan="# Plan\n1. cache\n2. tests",
                              todos=[apb.TodoItem(id="a", content="write the cache", status=apb.TODO_STATUS_PENDING),
                                     apb.TodoItem(id="b", content="test it", status=apb.TODO_STATUS_PENDING,
                                                  dependencies=["a"])])
    check_cards(turn, call, "create_plan_tool_call", args, queries.plan_result)
    assert queries.log == [apb.InteractionQuery(id=1, create_plan_request_query=apb.CreatePlanRequestQuery(
        args=args, tool_call_id="call_plan"))]
    check_round(env, turn, [call], [("call_plan", 'The plan "Cache layer" was created (file:///plans/cache.plan.md); '
                                                  'the user can review, edit and build it.')])


def test_switch_mode(env, tmp_path):
    call = ("call_switch", "SwitchMode", '{"target_mode_id": "plan", "explanation": "This needs a plan first."}')
    queries = ScriptedQueries()
    turn = one_round(env, tmp_path / "ws", [call], queries=queries)
    args = apb.SwitchModeArgs(target_mode_id="plan", explanation="This needs a plan first.", tool_call_id="call_switch")
    result = apb.SwitchModeResult(success=apb.SwitchModeSuccess(from_mode_id="agent", to_mode_id="plan"))
    check_cards(turn, call, "switch_mode_tool_call", args, result)
    assert queries.log == [apb.InteractionQuery(id=1, switch_mode_request_query=apb.SwitchModeRequestQuery(args=args))]
    check_round(env, turn, [call], [("call_switch", "The user approved: switched from agent mode to plan mode.")])


PUBLIC = "https://93.184.215.14"  # a public address literal: the private-address guard resolves no name


def test_web_fetch_approved(env, tmp_path):
    url = f"{PUBLIC}/guide"
    call = ("call_fetch", "WebFetch", json.dumps({"url": url}))
    ws = tmp_path / "ws"
    executor = LocalExecutor(ws, pages={url: FetchPage("# Guide\nStep one.", 200, "text/markdown")})
    queries = ScriptedQueries()
    turn = one_round(env, ws, [call], executor=executor, queries=queries)
    args = apb.WebFetchArgs(url=url, tool_call_id="call_fetch")
    result = apb.WebFetchResult(success=apb.WebFetchSuccess(url=url, markdown="# Guide\nStep one."))
    check_cards(turn, call, "web_fetch_tool_call", args, result)
    # the approval is not a result: the same call continues as a fetch exec, with the next id
    assert queries.log == [apb.InteractionQuery(id=1, web_fetch_request_query=apb.WebFetchRequestQuery(args=args))]
    assert executor.log == [exec_message(2, "call_fetch", fetch_args=apb.FetchArgs(url=url, tool_call_id="call_fetch"))]
    check_round(env, turn, [call], [("call_fetch", f"URL: {url}\nStatus: 200 (text/markdown)\n\n# Guide\nStep one.")])


def test_web_fetch_rejected(env, tmp_path):
    url = f"{PUBLIC}/guide"
    call = ("call_fetch", "WebFetch", json.dumps({"url": url}))
    queries = ScriptedQueries(approvals={"web_fetch_request_query": False}, reject_reason="not that site")
    turn = one_round(env, tmp_path / "ws", [call], queries=queries)
    args = apb.WebFetchArgs(url=url, tool_call_id="call_fetch")
    result = apb.WebFetchResult(rejected=apb.WebFetchRejected(reason="not that site"))
    check_cards(turn, call, "web_fetch_tool_call", args, result)
    assert queries.log == [apb.InteractionQuery(id=1, web_fetch_request_query=apb.WebFetchRequestQuery(args=args))]
    assert turn.executor.log == []  # rejected: nothing fetched
    check_round(env, turn, [call], [("call_fetch", f"The user declined fetching {url}: not that site")],
                is_error={"call_fetch": True})


def test_web_fetch_refuses_a_loopback_url(env, tmp_path):
    """Before anything is asked: a URL on this machine is refused, the user is never asked, nothing
    is fetched, and the model learns why and how the user could allow it."""
    url = "http://127.0.0.1:8080/admin"
    call = ("call_fetch", "WebFetch", json.dumps({"url": url}))
    queries = ScriptedQueries()
    turn = one_round(env, tmp_path / "ws", [call], queries=queries)
    message = (f"{url} points to a loopback address (127.0.0.1); WebFetch only reaches public addresses. "
               "The user can allow private ones with --set byok_web_fetch_private=true.")
    result = apb.WebFetchResult(error=apb.WebFetchError(url=url, error=message))
    check_cards(turn, call, "web_fetch_tool_call", apb.WebFetchArgs(url=url, tool_call_id="call_fetch"), result)
    assert queries.log == [] and turn.executor.log == []
    check_round(env, turn, [call], [("call_fetch", message)], is_error={"call_fetch": True})


ARTICLE_HTML = """<!doctype html><html><head><title>Envelopes</title></head><body>
<nav><a href="/">Home</a> | <a href="/blog">Blog</a> | <a href="/about">About us</a></nav>
<div class="cookie-banner">We use cookies. Accept all cookies?</div>
<article><h1>Connect envelopes</h1>
<p>Every Connect message is framed by a five-byte prefix: one flags byte and a four-byte big-endian length.
The end-of-stream frame sets flag two and carries a JSON trailer with the error, if any.</p>
<p>Readers must handle a frame split across reads, and several frames in one read. See
<a href="https://connectrpc.com/docs/protocol">the protocol reference</a>.</p>
<ul><li>flags: compressed (1), end of stream (2)</li><li>length: uint32, big endian</li></ul>
</article>
<footer>Copyright 2026 Example Corp. All rights reserved. Privacy | Terms | Imprint</footer>
</body></html>"""


def test_web_fetch_extracts_readable_text_from_html(env, tmp_path):
    url = f"{PUBLIC}/blog/envelopes"
    call = ("call_fetch", "WebFetch", json.dumps({"url": url}))
    ws = tmp_path / "ws"
    executor = LocalExecutor(ws, pages={url: FetchPage(ARTICLE_HTML, 200, "text/html; charset=utf-8")})
    turn = one_round(env, ws, [call], executor=executor)
    completed = turn.cards("call_fetch")[-1][2].tool_call.web_fetch_tool_call.result.success
    text = completed.markdown
    assert "# Connect envelopes" in text and "five-byte prefix" in text and "several frames in one read" in text
    assert "[the protocol reference](https://connectrpc.com/docs/protocol)" in text
    assert "- flags: compressed (1), end of stream (2)" in text
    for boilerplate in ("<", "About us", "cookies", "All rights reserved"):
        assert boilerplate not in text, boilerplate
    check_round(env, turn, [call], [("call_fetch", f"URL: {url}\nStatus: 200 (text/html; charset=utf-8)\n\n{text}")])


def test_web_search_through_searxng(env, web, tmp_path):
    web.results = [("Connect protocol", "https://connectrpc.com/docs/protocol", "Envelopes are five bytes..."),
                   ("gRPC over HTTP2", "https://grpc.io/docs/http2", "Length-prefixed <b>messages</b>\nper frame")]
    before = len(web.requests)
    call = ("call_search", "WebSearch", '{"search_term": "connect protocol envelope", "explanation": "spec"}')
    queries = ScriptedQueries()
    turn = one_round(env, tmp_path / "ws", [call], queries=queries)
    [seen] = web.requests[before:]
    assert (seen.method, seen.path, seen.query) == ("GET", "/search", {"q": ["connect protocol envelope"],
                                                                        "format": ["json"]})
    args = apb.WebSearchArgs(search_term="connect protocol envelope", tool_call_id="call_search")
    result = apb.WebSearchResult(success=apb.WebSearchSuccess(references=[
        apb.WebSearchReference(title="Connect protocol", url="https://connectrpc.com/docs/protocol",
                               chunk="Envelopes are five bytes..."),
        apb.WebSearchReference(title="gRPC over HTTP2", url="https://grpc.io/docs/http2",
                               chunk="Length-prefixed messages per frame")]))
    check_cards(turn, call, "web_search_tool_call", args, result)  # the client's WebSearch card shows them
    assert queries.log == [apb.InteractionQuery(id=1, web_search_request_query=apb.WebSearchRequestQuery(args=args))]
    assert turn.executor.log == []
    check_round(env, turn, [call], [("call_search", (
        "Web results for 'connect protocol envelope':\n\n"
        "1. Connect protocol\n   https://connectrpc.com/docs/protocol\n   Envelopes are five bytes...\n\n"
        "2. gRPC over HTTP2\n   https://grpc.io/docs/http2\n   Length-prefixed messages per frame"))])


def test_web_search_declined_asks_no_backend(env, web, tmp_path):
    before = len(web.requests)
    call = ("call_search", "WebSearch", '{"search_term": "anything"}')
    queries = ScriptedQueries(approvals={"web_search_request_query": False}, reject_reason="not now")
    turn = one_round(env, tmp_path / "ws", [call], queries=queries)
    assert web.requests[before:] == []
    check_round(env, turn, [call], [("call_search", "The user declined the web search for 'anything': not now")],
                is_error={"call_search": True})


def test_generate_image_through_an_images_endpoint(env, web, tmp_path):
    web.image = tiny_png(3, 2, (10, 200, 90))
    before = len(web.requests)
    call = ("call_img", "GenerateImage", '{"description": "a green square", "file_path": "img/square.png"}')
    ws = tmp_path / "ws"
    queries = ScriptedQueries()
    turn = one_round(env, ws, [call], queries=queries)
    [seen] = web.requests[before:]
    assert (seen.method, seen.path) == ("POST", "/images/generations")
    assert seen.json == {"model": "gpt-image-1", "prompt": "a green square", "n": 1}
    assert seen.headers["authorization"] == "Bearer sk-img-test"
    path = str(ws / "img" / "square.png")
    args = apb.GenerateImageArgs(description="a green square", file_path=path)
    assert queries.log == [apb.InteractionQuery(id=1, generate_image_request_query=apb.GenerateImageRequestQuery(
        args=args, tool_call_id="call_img"))]
    # the image is written into the workspace by the client (a write exec with the bytes)
    assert turn.executor.log == [exec_message(2, "call_img", write_args=apb.WriteArgs(
        path=path, file_bytes=web.image, tool_call_id="call_img"))]
    assert (ws / "img" / "square.png").read_bytes() == web.image
    result = apb.GenerateImageResult(success=apb.GenerateImageSuccess(
        file_path=path, image_data=base64.b64encode(web.image).decode()))
    check_cards(turn, call, "generate_image_tool_call", args, result)
    check_round(env, turn, [call], [("call_img", f"Generated the image and saved it to {path} (image/png, "
                                                 f"{len(web.image)} bytes).\nThe image model used this prompt: "
                                                 "a green square")])


# ---- a parallel round -----------------------------------------------------------------------------


class _SlowReads(LocalExecutor):
    """Answers each Read after a per-file delay, so results complete out of call order."""

    def __init__(self, workspace: Path, delays: dict[str, float]) -> None:
        super().__init__(workspace)
        self.delays = delays

    async def on_exec(self, client, message) -> None:
        if message.WhichOneof("message") == "read_args":
            await asyncio.sleep(self.delays.get(Path(message.read_args.path).name, 0.0))
        await super().on_exec(client, message)


@pytest.mark.timeout(40)
def test_parallel_round_completes_out_of_order(env, tmp_path):
    ws = tmp_path / "ws"
    calls = [
        ("call_0", "Shell", '{"command": "sleep 0.7; echo slow"}'),
        ("call_1", "Read", '{"path": "a.txt"}'),
        ("call_2", "Read", '{"path": "b.txt"}'),
        ("call_3", "Read", '{"path": "c.txt"}'),
    ]
    executor = _SlowReads(ws, {"a.txt": 0.4, "b.txt": 0.0, "c.txt": 0.2})
    turn = one_round(env, ws, calls, files={"a.txt": "A\n", "b.txt": "B\n", "c.txt": "C\n"}, executor=executor,
                     ack_delay_s=0.1, reasoning="Check the shell and the three files.", text="Looking.")
    assert turn.result.text() == "Looking." + REPLY
    # all four dispatched at once (before any result), each on its own exec id, in call order
    down = turn.down
    execs = [i for i, f in enumerate(down) if f.kind == "exec_server_message"]
    first_done = min(turn.indices("interaction_update.tool_call_completed"))
    assert len(execs) == 4 and max(execs) < first_done
    assert [(down[i].message.exec_server_message.id, down[i].message.exec_server_message.exec_id) for i in execs] == [
        (1, "call_0"), (2, "call_1"), (3, "call_2"), (4, "call_3")]
    # results complete in real completion order, not call order
    assert turn.completed_order() == ["call_2", "call_3", "call_1", "call_0"]
    model_call_ids = set()
    for call, name in zip(calls[1:], "ABC"):
        path = str(ws / f"{name.lower()}.txt")
        cards = check_cards(turn, call, "read_tool_call", apb.ReadToolArgs(path=path), apb.ReadToolResult(
            success=apb.ReadToolSuccess(path=path, content=f"{name}\n", total_lines=1, file_size=2)))
        model_call_ids.add(cards.model_call_id)
    shell = check_cards(turn, calls[0], "shell_tool_call")
    assert [d.shell_tool_call_delta.stdout.content for d in shell.deltas] == ["slow\n"]
    model_call_ids.add(shell.model_call_id)
    assert len(model_call_ids) == 1  # one model call, one round
    # one staged + one settled checkpoint for the round; the provider's 2nd request (after settled) folds
    # the round into ONE assistant with the 4 calls in index order, then the results in completion order
    check_round(env, turn, calls, [("call_2", "     1|B"), ("call_3", "     1|C"), ("call_1", "     1|A"),
                                   ("call_0", "Exit code: 0\nslow\n")],
                text="Looking.", reasoning="Check the shell and the three files.")
    # the round's text and thinking are in the staged assistant and the settled assistant root, once
    pending = json.loads(turn.result.checkpoints()[1].pending_tool_calls[0])
    assert pending["content"][:2] == [{"type": "reasoning", "text": "Check the shell and the three files."},
                                      {"type": "text", "text": "Looking."}]
    steps = turn_steps(turn, turn.result.checkpoints()[2])
    assert [s.WhichOneof("message") for s in steps] == ["thinking_message", "assistant_message"] + ["tool_call"] * 4
    assert len(turn.requests[1].json["messages"]) == len(turn.requests[0].json["messages"]) + 5


# ---- the model's mistakes -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_model_mistakes_become_tool_errors(env, tmp_path, kind):
    """Arguments that are not JSON, arguments that break the schema, a tool that does not exist: each
    card is shown and closed with an error, nothing is executed, the run goes on and the model's next
    request carries the error strings in its dialect."""
    calls = [
        ("bad_json", "Read", '{"path": "a.txt"'),
        ("bad_args", "Shell", '{"block_until_ms": 5, "description": "no command"}'),
        ("no_tool", "Frobnicate", '{"x": 1}'),
    ]
    s = SCRIPTS[kind]
    turn = run_turn(env, tmp_path / "ws", [s.tool_calls(calls), s.text_reply(REPLY)], kind=kind,
                    files={"a.txt": "A\n"})
    assert_completed(turn)  # never a crash, never a protocol error
    assert turn.executor.log == [] and turn.queries.log == []  # never a silent fallback to some execution
    contents = {
        "bad_json": "Invalid arguments for Read: arguments are not valid JSON (Expecting ',' delimiter at "
                    "position 16). Fix the arguments and call Read again.",
        "bad_args": "Invalid arguments for Shell: missing command: `command` is required (a string). "
                    "Fix the arguments and call Shell again.",
        "no_tool": "Tool 'Frobnicate' is not available: it is not in the current advertised tool set. "
                   f"Available tools: {', '.join(MANIFESTS['agent'])}.",
    }
    # the card of a known tool: its typed variant, no args, closed with the typed error result
    check_cards(turn, calls[0], "read_tool_call", apb.ReadToolArgs(),
                apb.ReadToolResult(error=apb.ReadToolError(error_message=contents["bad_json"])))
    check_cards(turn, calls[1], "shell_tool_call", apb.ShellArgs(),
                apb.ShellResult(spawn_error=apb.ShellSpawnError(error=contents["bad_args"])))
    # an unknown tool has no ToolCall variant: the card carries only its id, and still opens and closes
    cards = turn.cards("no_tool")
    assert [k for _, k, _ in cards][0] == "partial_tool_call" and [k for _, k, _ in cards][-2:] == [
        "tool_call_started", "tool_call_completed"]
    started, completed = cards[-2][2].tool_call, cards[-1][2].tool_call
    assert all(u.tool_call.WhichOneof("tool") is None and u.tool_call.tool_call_id == "no_tool" for _, _, u in cards)
    assert completed.started_at_ms == started.started_at_ms <= completed.completed_at_ms
    order = turn.completed_order()
    assert sorted(order) == sorted(contents)
    check_round(env, turn, calls, [(cid, contents[cid]) for cid in order], kind=kind,
                is_error={cid: True for cid in contents})


# ---- the client's protocol violations -------------------------------------------------------------

VIOLATIONS = {
    "wrong_result": "protocol error: unexpected exec result write_result for tool Read (id 1)",
    "unknown_id": "protocol error: unknown ExecClientMessage id: 1001",
    "close_before_result": "protocol error: Exec stream closed before result (tool Read, id 1)",
    "throw": "protocol error: client exec threw (tool Read, id 1): scripted client failure",
    "query_wrong_response": "protocol error: unexpected interaction response switch_mode_request_response "
                            "for tool AskQuestion (id 1)",
    "query_unknown_id": "protocol error: unknown InteractionResponse id: 1001",
}


@pytest.mark.parametrize("violation", list(VIOLATIONS))
def test_client_protocol_violation_ends_the_run(env, tmp_path, violation):
    ws = tmp_path / "ws"
    if violation.startswith("query_"):
        call = ("call_q", "AskQuestion", '{"questions": [{"id": "q", "prompt": "Go?", "options": '
                                         '[{"id": "y", "label": "Yes"}, {"id": "n", "label": "No"}]}]}')
        executor = LocalExecutor(ws)
        queries = ScriptedQueries(misbehave=[Misbehave(violation.removeprefix("query_"))])
    else:
        call = ("call_r", "Read", '{"path": "a.txt"}')
        executor = LocalExecutor(ws, misbehave=[Misbehave(violation)])
        queries = ScriptedQueries()
    turn = run_turn(env, ws, [CHAT.tool_calls([call])], files={"a.txt": "A\n"}, executor=executor, queries=queries,
                    settle=True)
    result = turn.result
    assert result.status == 200
    assert result.end_error is not None and result.end_error.code is connect.Code.INVALID_ARGUMENT
    assert result.end_error.message == VIOLATIONS[violation]
    kinds = result.kinds()
    assert kinds[-1] == "end_stream" and "interaction_update.turn_ended" not in kinds
    assert len(turn.requests) == 1  # the model is never called again
    # the round stays staged (resumable); it never settled
    assert [len(c.pending_tool_calls) for c in result.checkpoints()] == [0, 1]
    if violation != "unknown_id":  # a result never arrived, so the card was never completed
        assert "interaction_update.tool_call_completed" not in kinds
    db = sqlite3.connect(env.proxy.db)
    try:
        row = db.execute("SELECT status, error_code FROM runs WHERE request_id = ?", [result.request_id]).fetchone()
    finally:
        db.close()
    assert row == ("failed", "invalid_argument")


def test_late_duplicate_result_is_ignored(env, tmp_path):
    """A second result for a Read that already completed arrives while the round still runs (its
    tombstone lives): ignored, the run completes, the model sees the result once."""
    ws = tmp_path / "ws"
    calls = [("call_r", "Read", '{"path": "a.txt"}'), ("call_s", "Shell", '{"command": "sleep 0.8; echo ok"}')]
    executor = LocalExecutor(ws, misbehave=[Misbehave("duplicate_late", field="read_args", delay_s=0.2)])
    turn = one_round(env, ws, calls, files={"a.txt": "A\n"}, executor=executor)
    up = [f for f in turn.result.frames if f.direction == "up" and f.message.HasField("exec_client_message")]
    reads = [f for f in up if f.message.exec_client_message.WhichOneof("message") == "read_result"]
    assert len(reads) == 2 and reads[0].message == reads[1].message  # the duplicate really went out ...
    shell_exit = next(f for f in up if f.message.exec_client_message.shell_stream.HasField("exit"))
    assert reads[1].seqno < shell_exit.seqno  # ... and was handled before the round could settle
    assert turn.completed_order() == ["call_r", "call_s"]
    check_cards(turn, calls[0], "read_tool_call")
    check_round(env, turn, calls, [("call_r", "     1|A"), ("call_s", "Exit code: 0\nok\n")])


def test_late_duplicate_after_the_round_settled_is_ignored(env, tmp_path):
    """The duplicate arrives after the round settled, while the model streams its next answer: the
    id was issued and completed (ids are never reused), so it is ignored, not "unknown"."""
    ws = tmp_path / "ws"
    call = ("call_r", "Read", '{"path": "a.txt"}')
    executor = LocalExecutor(ws, misbehave=[Misbehave("duplicate_late", field="read_args", delay_s=0.4)])
    slow_reply = Sse([Ev(item, delay_s=0.2) for item in CHAT.text_reply(REPLY).items])
    turn = run_turn(env, ws, [CHAT.tool_calls([call]), slow_reply], files={"a.txt": "A\n"}, executor=executor)
    assert_completed(turn)
    frames = turn.result.frames
    reads = [f for f in frames if f.direction == "up" and f.message.HasField("exec_client_message")]
    assert len(reads) == 2 and reads[0].message == reads[1].message
    settled = [f for f in frames if f.kind == "conversation_checkpoint_update"][2]
    assert len(settled.message.conversation_checkpoint_update.pending_tool_calls) == 0
    end = frames[-1]
    assert settled.t < reads[1].t < end.t - 0.3  # sent after the round settled, well before the run ended
    check_round(env, turn, [call], [("call_r", "     1|A")])


def test_empty_exec_client_message_keeps_the_exec_pending(env, tmp_path):
    ws = tmp_path / "ws"
    call = ("call_r", "Read", '{"path": "a.txt"}')
    executor = LocalExecutor(ws, misbehave=[Misbehave("empty_first")])
    turn = one_round(env, ws, [call], files={"a.txt": "A\n"}, executor=executor)
    up = [f.message.exec_client_message for f in turn.result.frames
          if f.direction == "up" and f.message.HasField("exec_client_message")]
    assert [m.WhichOneof("message") for m in up] == [None, "read_result"]
    path = str(ws / "a.txt")
    check_cards(turn, call, "read_tool_call", apb.ReadToolArgs(path=path), apb.ReadToolResult(
        success=apb.ReadToolSuccess(path=path, content="A\n", total_lines=1, file_size=2)))
    check_round(env, turn, [call], [("call_r", "     1|A")])


def test_cancel_aborts_the_running_shell_and_its_late_result_is_ignored(env, tmp_path):
    """Cancel while a Shell runs: the server sends `abort` for its exec id and ends the run canceled;
    the client's aborted exit and stream_close for that id arrive afterwards and are ignored."""
    ws = tmp_path / "ws"
    ws.mkdir()
    call = ("call_sh", "Shell", '{"command": "echo started; sleep 20; echo never"}')
    executor = LocalExecutor(ws)
    env.provider.enqueue("openai_chat", CHAT.tool_calls([call]))
    before = len(env.provider.requests)
    log_offset = len(env.proxy.log())
    request = user_turn_request("run it", model_id=env.models["openai_chat"], workspace=str(ws))

    async def scenario():
        async with env.proxy.client(on_exec=executor.on_exec) as client:
            request_id = "req-tools-cancel-shell"

            async def on_frame(frame):
                executor.on_frame(frame)  # an abort kills the running shell
                if frame.kind == "interaction_update.tool_call_delta":  # the command is running
                    client.append_soon(request_id, apb.AgentClientMessage(conversation_action=apb.ConversationAction(
                        cancel_action=apb.CancelAction(reason="stop"))))

            t0 = time.monotonic()
            result = await client.run(request, request_id=request_id, on_frame=on_frame)
            took = time.monotonic() - t0
            # the aborted exit + stream_close go out after the end-stream
            await until(lambda: any(f.kind == "exec_client_control_message" for f in client.frames(request_id)
                                    if f.direction == "up"), "the killed shell's stream_close")
            await client.appends_sent()
            late = await client.append(request_id, apb.AgentClientMessage(
                exec_client_message=apb.ExecClientMessage(id=1, shell_stream=apb.ShellStream(
                    exit=apb.ShellStreamExit(code=1)))))
            await executor.aclose()
            return result, took, late, client.frames(request_id)

    result, took, late, frames = run(scenario())
    assert result.end_error is not None and result.end_error.code is connect.Code.CANCELED
    assert took < 10  # the 20 s command did not hold the run
    kinds = result.kinds()
    assert "interaction_update.turn_ended" not in kinds and "interaction_update.tool_call_completed" not in kinds
    [abort] = result.down("exec_server_control_message")
    assert abort.message.exec_server_control_message.abort.id == 1
    assert kinds.index("exec_server_control_message") < kinds.index("end_stream")
    # the killed shell reported an aborted exit, then closed its stream: both after the run ended
    exits = [f for f in frames if f.direction == "up" and f.message.exec_client_message.shell_stream.HasField("exit")]
    assert exits and exits[0].message.exec_client_message.shell_stream.exit.aborted
    assert exits[0].message.exec_client_message.shell_stream.exit.abort_reason == apb.SHELL_ABORT_REASON_USER_ABORT
    assert late.status_code == 200  # a late result for the aborted id: accepted and ignored
    assert len(env.provider.requests) == before + 1
    log = env.proxy.log()[log_offset:]
    assert "Traceback" not in log and "Addon error" not in log, log
    db = sqlite3.connect(env.proxy.db)
    try:
        row = db.execute("SELECT status FROM runs WHERE request_id = ?", [result.request_id]).fetchone()
    finally:
        db.close()
    assert row == ("canceled",)
