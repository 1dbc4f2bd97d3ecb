"""Shell (streamed exec) and AwaitShell (background output file) codecs."""

from __future__ import annotations

import pytest

from byok.agent.cursor.tools import shell
from byok.agent.cursor.tools.base import RunToolContext, ToolArgsError
from byok.agent.cursor.tools.shell_parse import parse_command
from byok.wire.errors import ProtocolError
from byok.proto import agent_pb2 as apb
from tests.support.fake_call_io import CLOSE, FakeCallIO, run_tool

CTX = RunToolContext(conversation_id="conv-9", workspace_paths=("/ws",), terminals_folder="/tmp/terminals",
                     admin_command_denylist=("rm -rf /", "shutdown"))


def ev(**kw) -> tuple[str, apb.ShellStream]:
    return "shell_stream", apb.ShellStream(**kw)


def out(data):
    return ev(stdout=apb.ShellStreamStdout(data=data))


def err(data):
    return ev(stderr=apb.ShellStreamStderr(data=data))


def fake(*events) -> FakeCallIO:
    return FakeCallIO(context=CTX).reply(*events)


# ---- ShellArgs ----------------------------------------------------------------------------------

def test_shell_args_exact():
    card = shell.SHELL.parse({"command": "python3 -m http.server 8000", "block_until_ms": 3000,
                              "description": "Serve", "timeout": 0, "is_background": True}, "call-1", CTX)
    expected = apb.ShellArgs(
        command="python3 -m http.server 8000", working_directory="/ws", timeout=3000, tool_call_id="call-1",
        simple_commands=["python3 -m http.server 8000"], file_output_threshold_bytes=40000,
        timeout_behavior=apb.TIMEOUT_BEHAVIOR_BACKGROUND, hard_timeout=86400000, description="Serve",
        close_stdin=True, conversation_id="conv-9", admin_command_denylist=["rm -rf /", "shutdown"])
    expected.parsing_result.executable_commands.add(
        name="python3", full_text="python3 -m http.server 8000",
        args=[apb.ShellCommandParsingResult.ExecutableCommandArg(type="word", value=v) for v in ("-m", "http.server", "8000")])
    assert card == expected
    assert not card.is_background  # the model's is_background / timeout never leak in


def test_shell_defaults_and_working_directory():
    card = shell.SHELL.parse({"command": "ls", "working_directory": "sub"}, "c", CTX)
    assert (card.timeout, card.working_directory, card.HasField("description")) == (30000, "/ws/sub", False)
    assert shell.SHELL.parse({"command": "ls", "block_until_ms": 0}, "c", CTX).timeout == 0


@pytest.mark.parametrize("raw,message", [
    ({}, "missing command"),
    ({"command": 5}, "missing command"),
    ({"command": "  "}, "missing command"),
    ({"command": "ls", "block_until_ms": -1}, "out of range"),
    ({"command": "ls", "block_until_ms": "1000"}, "invalid block_until_ms"),
])
def test_shell_args_errors(raw, message):
    with pytest.raises(ToolArgsError, match=message):
        shell.SHELL.parse(raw, "c", CTX)


def test_card_carries_description_at_top_level():
    card = shell.SHELL.parse({"command": "ls", "description": "List"}, "c", CTX)
    call = shell.SHELL.tool_call(card)
    assert call.shell_tool_call.description == "List" and call.shell_tool_call.args.description == "List"
    assert not shell.SHELL.tool_call(shell.SHELL.parse({"command": "ls"}, "c", CTX)).shell_tool_call.HasField("description")


def test_parse_command_conservative():
    p = parse_command("cd a && make test 2>&1 | tee log.txt")
    assert p.simple_commands == ["cd a", "make test", "tee log.txt"]
    assert [c.name for c in p.result.executable_commands] == ["cd", "make", "tee"]
    assert p.result.has_redirects and p.has_output_redirect and list(p.result.redirects[0].destination_fds) == [2]
    for risky in ("echo $(rm -rf x)", "echo `id`", "(cd a; ls)", "a\nb", "echo 'open"):
        q = parse_command(risky)
        assert q.result.parsing_failed and q.simple_commands == [risky]


# ---- streaming ----------------------------------------------------------------------------------

def test_shell_exit_success_streams_deltas():
    io = fake(ev(start=apb.ShellStreamStart()), out("hello\n"), err("warn\n"), out("bye\n"),
              ev(exit=apb.ShellStreamExit(code=0, cwd="/ws", local_execution_time_ms=12)))
    card, o = run_tool(shell.SHELL, {"command": "./run.sh"}, io)
    (sent,) = io.execs
    assert sent.field == "shell_stream_args" and sent.streamed
    assert sent.message.accept_hook_additional_contexts is True
    assert sent.message.shell_stream_args == card
    assert [d.shell_tool_call_delta.WhichOneof("delta") for d in io.deltas] == ["stdout", "stderr", "stdout"]
    assert io.deltas[1].shell_tool_call_delta.stderr.content == "warn\n"
    s = o.result.success
    assert (s.exit_code, s.stdout, s.stderr, s.interleaved_output, s.local_execution_time_ms) == (
        0, "hello\nbye\n", "warn\n", "hello\nwarn\nbye\n", 12)
    assert o.content == "Exit code: 0\nhello\nwarn\nbye\n" and not o.is_error
    assert not io.background


def test_shell_nonzero_exit_and_abort():
    _, o = run_tool(shell.SHELL, {"command": "false"}, fake(ev(exit=apb.ShellStreamExit(code=1))))
    assert o.is_error and o.result.failure.exit_code == 1 and o.content == "Exit code: 1\n(no output)"
    loc = apb.OutputLocation(file_path="/tmp/out.txt", size_bytes=99999, line_count=10)
    _, o = run_tool(shell.SHELL, {"command": "x"}, fake(out("a"), ev(exit=apb.ShellStreamExit(
        code=2**32 - 15, aborted=True, abort_reason=apb.SHELL_ABORT_REASON_USER_ABORT, output_location=loc))))
    f = o.result.failure
    assert (f.exit_code, f.aborted, f.abort_reason, f.output_location) == (-15, True, apb.SHELL_ABORT_REASON_USER_ABORT, loc)
    assert o.content == ("Command aborted (user_abort). Exit code: -15\na\n"
                         "[Full output: /tmp/out.txt (99999 bytes, 10 lines)]")


def test_shell_backgrounded_is_success_and_leaves_abortable_set():
    io = fake(out("Serving HTTP on port 8000\n"), ev(backgrounded=apb.ShellStreamBackgrounded(
        shell_id=42, pid=1234, command="python3 -m http.server 8000", reason=apb.SHELL_BACKGROUND_REASON_TIMEOUT)))
    _, o = run_tool(shell.SHELL, {"command": "python3 -m http.server 8000", "block_until_ms": 3000}, io)
    assert o.content == "shell running in background shell_id=42 pid=1234 terminals_folder=/tmp/terminals\nServing HTTP on port 8000\n"
    assert not o.is_error
    r = o.result
    assert (r.is_background, r.terminals_folder, r.pid) == (True, "/tmp/terminals", 1234)
    assert (r.success.shell_id, r.success.pid, r.success.background_reason) == (42, 1234, apb.SHELL_BACKGROUND_REASON_TIMEOUT)
    assert io.background == {1} and io.execs[0].abortable is False


@pytest.mark.parametrize("event,branch,content", [
    (apb.ShellStream(rejected=apb.ShellRejected(command="rm", reason="denylisted")), "rejected",
     "The command was rejected: denylisted"),
    (apb.ShellStream(permission_denied=apb.ShellPermissionDenied(error="EPERM")), "permission_denied",
     "Permission denied running the command: EPERM"),
    (apb.ShellStream(sandbox_unsupported=apb.ShellSandboxUnsupported(sandbox_policy_type="workspace", reason="no landlock")),
     "rejected", "The command could not run: sandbox not supported (workspace): no landlock"),
])
def test_shell_refusals(event, branch, content):
    _, o = run_tool(shell.SHELL, {"command": "rm"}, fake(("shell_stream", event)))
    assert o.is_error and o.result.WhichOneof("result") == branch and o.content == content


def test_shell_stream_protocol_errors():
    with pytest.raises(ProtocolError, match="closed before result"):
        run_tool(shell.SHELL, {"command": "ls"}, fake(out("x"), CLOSE))
    with pytest.raises(ProtocolError):
        run_tool(shell.SHELL, {"command": "ls"}, fake(("read_result", apb.ReadResult())))
    with pytest.raises(ProtocolError, match="no event set"):
        run_tool(shell.SHELL, {"command": "ls"}, fake(("shell_stream", apb.ShellStream())))


def test_shell_error_result():
    assert shell.SHELL.error_result("bad") == apb.ShellResult(spawn_error=apb.ShellSpawnError(error="bad"))


# ---- AwaitShell ---------------------------------------------------------------------------------

def file(content):
    return "read_result", apb.ReadResult(success=apb.ReadSuccess(path="/tmp/terminals/42.txt", content=content))


def test_await_complete_with_pattern():
    io = FakeCallIO(context=CTX).reply(file("server ready\nexit_code: 0\n"))
    card, o = run_tool(shell.AWAIT_SHELL, {"shell_id": 42, "block_until_ms": 5000, "pattern": "ready"}, io)
    assert card == apb.AwaitArgs(task_id="42", block_until_ms=5000, regex="ready")
    assert io.execs[0].args == apb.ReadArgs(path="/tmp/terminals/42.txt", tool_call_id=io.call_id)
    c = o.result.success.complete
    assert (c.task_id, c.exit_code, c.regex_match, c.regex_requested, c.output_file_path, c.wake_reason) == (
        "42", 0, "ready", True, "/tmp/terminals/42.txt", "exit")
    assert o.content == 'shell_id=42 exited exit_code=0 pattern_match="ready" output_file=/tmp/terminals/42.txt\nserver ready\n'
    assert not o.is_error


def test_await_polls_until_exit(monkeypatch):
    monkeypatch.setattr(shell, "POLL_FIRST_S", 0.01)
    io = FakeCallIO(context=CTX).reply(file("building\n")).reply(file("building\n")).reply(file("building\ndone\nexit_code: 3\n"))
    _, o = run_tool(shell.AWAIT_SHELL, {"shell_id": "42", "block_until_ms": 10000}, io)
    assert [s.id for s in io.execs] == [1, 2, 3]
    assert o.result.success.complete.exit_code == 3 and not o.result.success.complete.regex_requested
    assert o.content.startswith("shell_id=42 exited exit_code=3 output_file=")


def test_await_still_running_after_budget(monkeypatch):
    monkeypatch.setattr(shell, "POLL_FIRST_S", 0.01)
    io = FakeCallIO(context=CTX)
    io.script = [[file("tick\n")]] * 200
    _, o = run_tool(shell.AWAIT_SHELL, {"shell_id": 42, "block_until_ms": 50, "pattern": "never"}, io)
    r = o.result.success.still_running
    assert r.wake_reason == "timeout" and r.runtime_ms >= 50 and not r.HasField("regex_match")
    assert o.content.startswith("shell_id=42 still running after ") and "pattern not matched" in o.content
    assert 2 <= len(io.execs) < 20


def test_await_zero_block_reads_once():
    io = FakeCallIO(context=CTX).reply(file("listening on 3000\n"))
    _, o = run_tool(shell.AWAIT_SHELL, {"shell_id": 42, "block_until_ms": 0}, io)
    assert len(io.execs) == 1 and o.result.success.WhichOneof("await_result") == "still_running"


def test_await_pattern_match_while_running():
    io = FakeCallIO(context=CTX).reply(file("compiling\nlistening on 3000\n"))
    _, o = run_tool(shell.AWAIT_SHELL, {"shell_id": 42, "pattern": "listening on \\d+"}, io)
    r = o.result.success.still_running
    assert (r.regex_match, r.wake_reason) == ("listening on 3000", "pattern")


def test_await_errors():
    io = FakeCallIO(context=CTX).reply(("read_result", apb.ReadResult(file_not_found=apb.ReadFileNotFound(path="x"))))
    _, o = run_tool(shell.AWAIT_SHELL, {"shell_id": 7}, io)
    assert o.is_error and o.content == "No background shell output for shell_id=7 (no file /tmp/terminals/7.txt)"
    assert o.result == apb.AwaitResult(error=apb.AwaitError(error=o.content))
    no_folder = FakeCallIO(context=RunToolContext(conversation_id="c"))
    _, o = run_tool(shell.AWAIT_SHELL, {"shell_id": 7}, no_folder)
    assert o.is_error and not no_folder.execs
    for raw, message in [({}, "missing shell_id"), ({"shell_id": "abc"}, "invalid shell_id"),
                         ({"shell_id": 1, "pattern": "("}, "invalid pattern"), ({"shell_id": -1}, "out of range")]:
        with pytest.raises(ToolArgsError, match=message):
            shell.AWAIT_SHELL.parse(raw, "c", CTX)


def test_split_exit():
    assert shell.split_exit("a\nexit_code: 0\n") == (0, "a\n")
    assert shell.split_exit("exit_code: 1\nmore\nexit_code: -2") == (-2, "exit_code: 1\nmore\n")
    assert shell.split_exit("no exit") == (None, "no exit")
