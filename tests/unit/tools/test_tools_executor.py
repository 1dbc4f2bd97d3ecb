"""LocalExecutor / ScriptedQueries (the test client's side of tools), alone and wired to the real tool
codecs through a loopback CallIO (no network: the codec's exec goes straight to the executor)."""

from __future__ import annotations

import asyncio
import contextvars
import json
import sys
from dataclasses import dataclass, field

import pytest

from byok.agent.cursor.tools.base import RunToolContext
from byok.agent.cursor.tools.common import decode_args
from byok.agent.cursor.tools.registry import REGISTRY
from tests.support.fake_call_io import exec_reply
from byok.cli import client as client_mod
from byok.cli.executor import FetchPage, LocalExecutor, Misbehave, ScriptedQueries, glob_matches
from byok.proto import agent_pb2 as apb


@dataclass
class LoopbackIO:
    """A CallIO whose execs run on a LocalExecutor and whose queries a ScriptedQueries answers."""

    executor: LocalExecutor
    queries: ScriptedQueries
    context: RunToolContext
    call_id: str = "call-7\nfc_7"
    model_call_id: str = "m-7"
    next_id: int = 1
    deltas: list = field(default_factory=list)
    background: set = field(default_factory=set)
    sent: list = field(default_factory=list)
    _current: int | None = None

    async def exec(self, field, args, *, results, stream=None, abortable=True, envelope=None):
        message = apb.ExecServerMessage(id=self.next_id, exec_id=self.call_id, **(envelope or {}))
        getattr(message, field).CopyFrom(args)
        self.next_id += 1
        self.sent.append(message)
        self._current = message.id
        async for reply in self.executor.execute(message):
            name = reply.WhichOneof("message")
            terminal = exec_reply(name, getattr(reply, name), results=results, stream=stream, exec_id=message.id)
            if terminal is not None:
                return terminal
        raise AssertionError("no terminal reply")

    async def query(self, field, query, *, results):
        message = apb.InteractionQuery(id=self.next_id)
        getattr(message, field).CopyFrom(query)
        self.next_id += 1
        self.sent.append(message)
        response = self.queries.respond(message)
        name = response.WhichOneof("result")
        assert name in results
        return name, getattr(response, name)

    def delta(self, delta):
        self.deltas.append(delta)

    def set_background(self):
        self.background.add(self._current)


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "mod.py").write_text("import os\n\ndef hello():\n    return 'Hello'\n")
    (root / "src" / "pkg" / "mod_test.py").write_text("from mod import hello\n\nassert hello()\n")
    (root / "README.md").write_text("# Demo\nhello world\n")
    (root / "empty.txt").write_text("")
    (root / ".hidden").write_text("hello\n")
    return root


def run(ws, name, args, *, queries=None, executor=None, extra=None):
    from byok.agent.web import WebTools
    from tests.support.web_walk import walk_client

    executor = executor or LocalExecutor(ws)
    ctx = RunToolContext(conversation_id="conv", workspace_paths=(str(ws),),
                         terminals_folder=str(executor.terminals_folder), extra=extra or {},
                         web=WebTools(http=walk_client()[0]))  # WebFetch's redirect walk, offline
    io = LoopbackIO(executor, queries or ScriptedQueries(), ctx)
    tool = REGISTRY[name]
    raw = decode_args(json.dumps(args))
    card = tool.parse(raw, io.call_id, ctx)

    async def go():
        try:
            return await tool.run(io, raw, card)
        finally:
            await executor.aclose()

    return asyncio.run(go()), io


# ---- files through the codecs -------------------------------------------------------------------

def test_read_write_strreplace_roundtrip(ws):
    out, io = run(ws, "Read", {"path": "src/pkg/mod.py", "offset": 3, "limit": 2})
    assert out.content == "     3|def hello():\n     4|    return 'Hello'"
    out, _ = run(ws, "Write", {"path": "new/dir/f.txt", "contents": "a\r\nb\n"})
    assert (ws / "new/dir/f.txt").read_bytes() == b"a\nb\n" and out.content == "Created " + str(ws / "new/dir/f.txt") + " (2 lines)"
    (ws / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    out, io = run(ws, "StrReplace", {"path": "crlf.txt", "old_string": "two\r\n", "new_string": "TWO\n"})
    assert (ws / "crlf.txt").read_bytes() == b"one\nTWO\n"
    assert [m.WhichOneof("message") for m in io.sent] == ["read_args", "write_args"]
    assert out.result.success.lines_added == 1
    out, io = run(ws, "StrReplace", {"path": "crlf.txt", "old_string": "zzz", "new_string": "y"})
    assert out.is_error and len(io.sent) == 1
    out, _ = run(ws, "Read", {"path": "missing.txt"})
    assert out.is_error and out.content == f"File not found: {ws}/missing.txt"


def test_ls_grep_glob_delete_lints(ws):
    out, _ = run(ws, "Ls", {"path": ".", "ignore": ["*.md"]})
    assert out.content.splitlines()[:4] == [f"{ws}/", "  - src/", "    - pkg/", "      - mod.py"]
    assert "README.md" not in out.content and ".hidden" in out.content
    out, _ = run(ws, "Grep", {"pattern": "hello", "-i": True})
    assert out.content == ("README.md\n2:hello world\n\nsrc/pkg/mod.py\n3:def hello():\n4:    return 'Hello'\n\n"
                           "src/pkg/mod_test.py\n1:from mod import hello\n3:assert hello()")
    out, _ = run(ws, "Grep", {"pattern": "hello", "output_mode": "files_with_matches", "glob": "*.py"})
    assert out.content == "src/pkg/mod.py\nsrc/pkg/mod_test.py"
    out, _ = run(ws, "Grep", {"pattern": "hello", "output_mode": "count", "path": "src"})
    assert out.content == f"{ws}/src/pkg/mod.py:1\n{ws}/src/pkg/mod_test.py:2"
    out, _ = run(ws, "Grep", {"pattern": "return", "-B": 1, "path": "src/pkg/mod.py"})
    assert out.content == f"{ws}/src/pkg/mod.py\n3-def hello():\n4:    return 'Hello'"
    out, _ = run(ws, "Grep", {"pattern": "(", "path": "src"})
    assert out.is_error and out.content.startswith("Grep failed: regex parse error")
    out, _ = run(ws, "Glob", {"glob_pattern": "**/*_test.py"})
    assert out.result.success.files == ["src/pkg/mod_test.py"]
    out, _ = run(ws, "Glob", {"glob_pattern": "*.txt"})
    assert list(out.result.success.files) == ["empty.txt"]
    out, _ = run(ws, "Delete", {"path": "README.md"})
    assert not (ws / "README.md").exists() and not out.is_error
    out, _ = run(ws, "Delete", {"path": "src"})
    assert out.is_error and "is not a file" in out.content
    d = apb.Diagnostic(severity=apb.DIAGNOSTIC_SEVERITY_ERROR, message="undefined name")
    out, _ = run(ws, "ReadLints", {"paths": ["src/pkg/mod.py"]},
                 executor=LocalExecutor(ws, diagnostics={str(ws / "src/pkg/mod.py"): [d]}))
    assert "error: undefined name" in out.content and out.result.success.total_diagnostics == 1


def test_glob_matching():
    assert glob_matches("**/*.py", "a.py") and glob_matches("**/*.py", "x/y/a.py")
    assert glob_matches("*.py", "x/y/a.py") and not glob_matches("src/*.py", "x/src/a.py")
    assert glob_matches("src/**/models.py", "src/a/b/models.py") and glob_matches("*.{js,ts}", "a/b.ts")


# ---- shell --------------------------------------------------------------------------------------

PY = sys.executable


def test_shell_foreground_streams_and_exits(ws):
    cmd = f"{PY} -c \"import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)\""
    out, io = run(ws, "Shell", {"command": cmd, "block_until_ms": 10000})
    assert out.is_error and out.result.failure.exit_code == 3
    # chunking is the OS's business: compare what each stream carried in total
    assert "".join(d.shell_tool_call_delta.stdout.content for d in io.deltas) == "out\n"
    assert "".join(d.shell_tool_call_delta.stderr.content for d in io.deltas) == "err\n"
    assert out.content.startswith("Exit code: 3\n") and "out\n" in out.content and "err\n" in out.content
    assert io.sent[0].accept_hook_additional_contexts


def test_shell_backgrounds_then_await_reads_the_file(ws):
    executor = LocalExecutor(ws)
    cmd = f"{PY} -u -c \"import time; print('server ready', flush=True); time.sleep(0.6); print('bye')\""

    async def scenario():
        ctx = RunToolContext(conversation_id="conv", workspace_paths=(str(ws),),
                             terminals_folder=str(executor.terminals_folder))
        io = LoopbackIO(executor, ScriptedQueries(), ctx)
        shell = REGISTRY["Shell"]
        card = shell.parse({"command": cmd, "block_until_ms": 300}, io.call_id, ctx)
        bg = await shell.run(io, {}, card)
        aw = REGISTRY["AwaitShell"]
        raw = {"shell_id": bg.result.success.shell_id, "block_until_ms": 10000}
        done = await aw.run(io, raw, aw.parse(raw, io.call_id, ctx))
        await executor.aclose()
        return bg, done, io

    bg, done, io = asyncio.run(scenario())
    assert not bg.is_error and bg.result.is_background and io.background == {1}
    assert bg.content.startswith(f"shell running in background shell_id=1 pid={bg.result.pid} "
                                 f"terminals_folder={ws}/.terminals\nserver ready\n")
    c = done.result.success.complete
    assert (c.task_id, c.exit_code, c.wake_reason) == ("1", 0, "exit")
    assert (executor.terminals_folder / "1.txt").read_text() == "server ready\nbye\nexit_code: 0\n"
    assert done.content == f"shell_id=1 exited exit_code=0 output_file={ws}/.terminals/1.txt\nserver ready\nbye\n"
    assert [m.WhichOneof("message") for m in io.sent][:2] == ["shell_stream_args", "read_args"]


def test_shell_zero_block_backgrounds_at_once_and_writes_exit_code(ws):
    executor = LocalExecutor(ws)

    async def scenario():
        msg = apb.ExecServerMessage(id=5, shell_stream_args=apb.ShellArgs(
            command="echo hi; exit 4", timeout=0, timeout_behavior=apb.TIMEOUT_BEHAVIOR_BACKGROUND))
        replies = [r async for r in executor.execute(msg)]
        await executor.wait_background(1)
        return replies

    replies = asyncio.run(scenario())
    kinds = [r.shell_stream.WhichOneof("event") for r in replies]
    assert kinds == ["start", "backgrounded"] and all(r.id == 5 for r in replies)
    assert (executor.terminals_folder / "1.txt").read_text() == "hi\nexit_code: 4\n"


def test_shell_cancel_timeout_and_denylist(ws):
    executor = LocalExecutor(ws)

    async def scenario():
        msg = apb.ExecServerMessage(id=1, shell_stream_args=apb.ShellArgs(
            command="sleep 5", timeout=100, timeout_behavior=apb.TIMEOUT_BEHAVIOR_CANCEL))
        first = [r async for r in executor.execute(msg)]
        msg2 = apb.ExecServerMessage(id=2, shell_stream_args=apb.ShellArgs(command="rm -rf /tmp/x",
                                                                          admin_command_denylist=["rm -rf"]))
        second = [r async for r in executor.execute(msg2)]
        return first, second

    first, second = asyncio.run(scenario())
    e = first[-1].shell_stream.exit
    assert e.aborted and e.abort_reason == apb.SHELL_ABORT_REASON_TIMEOUT and e.code == 137
    assert second[0].shell_stream.WhichOneof("event") == "rejected"


# ---- interactions -------------------------------------------------------------------------------

def test_scripted_queries_through_codecs(ws):
    q = {"questions": [{"id": "db", "prompt": "DB?", "options": [{"id": "pg", "label": "Postgres"}, {"id": "sq", "label": "SQLite"}]}]}
    out, _ = run(ws, "AskQuestion", q)
    assert json.loads(out.content)["answers"][0]["selected"] == ["Postgres"]
    out, _ = run(ws, "AskQuestion", q, queries=ScriptedQueries(answers={"db": ["sq"]}))
    assert json.loads(out.content)["answers"][0]["selected"] == ["SQLite"]
    out, _ = run(ws, "SwitchMode", {"target_mode_id": "plan"})
    assert out.result.success.to_mode_id == "plan"
    out, _ = run(ws, "SwitchMode", {"target_mode_id": "plan"},
                 queries=ScriptedQueries(approvals={"switch_mode_request_query": False}))
    assert out.is_error and out.result.rejected.reason == "declined by the test user"
    out, _ = run(ws, "CreatePlan", {"name": "n", "overview": "o", "plan": "p"})
    assert not out.is_error
    executor = LocalExecutor(ws, pages={"https://93.184.215.14/": FetchPage("# Docs", content_type="text/markdown")})
    out, io = run(ws, "WebFetch", {"url": "https://93.184.215.14/"}, executor=executor)
    assert out.result.success.markdown == "# Docs"
    assert [m.DESCRIPTOR.name for m in io.sent] == ["InteractionQuery", "ExecServerMessage"]
    assert io.sent[1].fetch_args == apb.FetchArgs(url="https://93.184.215.14/", tool_call_id=io.call_id)
    out, _ = run(ws, "WebFetch", {"url": "https://93.184.215.15/"})
    assert out.is_error and "no scripted page" in out.content
    out, _ = run(ws, "WebSearch", {"search_term": "x"})
    assert out.is_error and "not configured" in out.content
    out, _ = run(ws, "GenerateImage", {"description": "x"}, queries=ScriptedQueries(approve=False))
    assert out.is_error and out.content.startswith("The user declined")


# ---- the client plumbing: stream_close, request id, misbehaviour ----------------------------------

class FakeClient:
    def __init__(self):
        self.appended: list[tuple[str, apb.AgentClientMessage]] = []

    def append_soon(self, request_id, message, delay=0.0):
        self.appended.append((request_id, message))


def serve(handler, message) -> list[apb.AgentClientMessage]:
    client = FakeClient()

    async def go():
        ctx = contextvars.copy_context()
        ctx.run(client_mod._HANDLER_REQUEST_ID.set, "req-1")
        await asyncio.get_running_loop().create_task(handler(client, message), context=ctx)

    asyncio.run(go())
    assert {rid for rid, _ in client.appended} == {"req-1"}
    return [m for _, m in client.appended]


def describe(m: apb.AgentClientMessage) -> str:
    kind = m.WhichOneof("message")
    sub = getattr(m, kind)
    inner = sub.WhichOneof("message") if kind != "interaction_response" else sub.WhichOneof("result")
    return f"{kind}.{inner}:{sub.id if hasattr(sub, 'id') else getattr(sub, inner).id}"


READ = apb.ExecServerMessage(id=3, exec_id="c", read_args=apb.ReadArgs(path="README.md"))


def test_on_exec_replies_then_stream_close(ws):
    sent = serve(LocalExecutor(ws).on_exec, READ)
    assert [describe(m) for m in sent] == ["exec_client_message.read_result:3", "exec_client_control_message.stream_close:3"]


@pytest.mark.parametrize("rule,expected", [
    (Misbehave("wrong_result"), ["exec_client_message.write_result:3", "exec_client_control_message.stream_close:3"]),
    (Misbehave("close_before_result"), ["exec_client_control_message.stream_close:3"]),
    (Misbehave("throw", field="read_args"), ["exec_client_control_message.throw:3"]),
    (Misbehave("empty_first"), ["exec_client_message.None:3", "exec_client_message.read_result:3",
                                "exec_client_control_message.stream_close:3"]),
    (Misbehave("unknown_id"), ["exec_client_message.read_result:3", "exec_client_control_message.stream_close:3",
                               "exec_client_message.read_result:1003"]),
    (Misbehave("duplicate_late", delay_s=0.01), ["exec_client_message.read_result:3",
                                                 "exec_client_control_message.stream_close:3",
                                                 "exec_client_message.read_result:3"]),
])
def test_misbehaviours(ws, rule, expected):
    executor = LocalExecutor(ws, misbehave=[rule])
    assert [describe(m) for m in serve(executor.on_exec, READ)] == expected
    # a rule is used up: the next request is served normally
    assert [describe(m) for m in serve(executor.on_exec, READ)][0] == "exec_client_message.read_result:3"


def test_misbehave_other_field_is_ignored(ws):
    executor = LocalExecutor(ws, misbehave=[Misbehave("throw", field="write_args")])
    assert describe(serve(executor.on_exec, READ)[0]) == "exec_client_message.read_result:3"


def test_unsupported_exec_throws(ws):
    msg = apb.ExecServerMessage(id=9, request_context_args=apb.RequestContextArgs())
    assert [describe(m) for m in serve(LocalExecutor(ws).on_exec, msg)] == ["exec_client_control_message.throw:9"]


def test_on_query_and_misbehaviour():
    q = apb.InteractionQuery(id=4, web_search_request_query=apb.WebSearchRequestQuery())
    (r,) = serve(ScriptedQueries().on_query, q)
    assert describe(r) == "interaction_response.web_search_request_response:4"
    assert r.interaction_response.web_search_request_response.HasField("approved")
    (r,) = serve(ScriptedQueries(misbehave=[Misbehave("wrong_response")]).on_query, q)
    assert describe(r) == "interaction_response.switch_mode_request_response:4"
    (r,) = serve(ScriptedQueries(misbehave=[Misbehave("unknown_id")]).on_query, q)
    assert r.interaction_response.id == 1004


def test_abort_kills_a_foreground_shell(ws):
    executor = LocalExecutor(ws)

    async def scenario():
        msg = apb.ExecServerMessage(id=2, shell_stream_args=apb.ShellArgs(
            command="sleep 10", timeout=20000, timeout_behavior=apb.TIMEOUT_BEHAVIOR_BACKGROUND))
        replies = []
        async for r in executor.execute(msg):
            replies.append(r)
            if r.shell_stream.HasField("start"):
                abort = apb.AgentServerMessage(exec_server_control_message=apb.ExecServerControlMessage(
                    abort=apb.ExecServerAbort(id=2)))
                executor.on_frame(client_mod.Frame("down", 0.0, abort))
        return replies

    replies = asyncio.run(scenario())
    e = replies[-1].shell_stream.exit
    assert e.aborted and e.abort_reason == apb.SHELL_ABORT_REASON_USER_ABORT
