"""Shell (a streamed exec, PROTOCOL 5.8, seed §29) and AwaitShell (reads a background shell's
output file, peers' contract).

Shell sends `shell_stream_args` = ShellArgs exactly as Cursor's server does: the command unchanged,
timeout = block_until_ms (default 30000; 0 = background at once) with TIMEOUT_BEHAVIOR_BACKGROUND,
hard_timeout 86400000, file_output_threshold_bytes 40000, close_stdin, conversation id and the
admin denylist; the envelope accepts hook contexts. stdout/stderr events stream to the card as
tool_call_delta; exit / backgrounded / rejected / permission_denied / sandbox_unsupported end it. A
backgrounded shell is a success and leaves the abortable set (never aborted at turn end).

AwaitShell reads `<terminals_folder>/<shell_id>.txt` (read_args). The file ends with an
`exit_code: N` line once the command finished. Without an exit code and without a `pattern` match,
it re-reads the file (each read its own exec) with a growing pause until `block_until_ms` (default
30000) has passed, then reports the shell as still running. The pattern is searched in the whole
output so far.
"""

from __future__ import annotations

import asyncio
import json
import re

from google.protobuf.message import Message

from byok.proto import agent_pb2 as apb

from .base import CallIO, RunToolContext, ToolArgsError, ToolDef, ToolOutcome
from .common import Args, cap_tail, join_path, resolve_path, variant
from .files import read_failure
from .shell_parse import parse_command

DEFAULT_BLOCK_MS = 30_000
FILE_OUTPUT_THRESHOLD_BYTES = 40_000
HARD_TIMEOUT_MS = 86_400_000
INT32_MAX = 2**31 - 1
TERMINAL_EVENTS = frozenset({"exit", "backgrounded", "rejected", "permission_denied", "sandbox_unsupported"})


# ---- Shell --------------------------------------------------------------------------------------


def _parse_shell(raw: dict, call_id: str, ctx: RunToolContext) -> apb.ShellArgs:
    a = Args(raw)
    command = a.string("command", required=True, non_empty=True)
    block = a.integer("block_until_ms", minimum=0, maximum=INT32_MAX)
    description = a.string("description")
    cwd = a.string("working_directory", non_empty=True)
    parsed = parse_command(command)
    args = apb.ShellArgs(
        command=command,
        working_directory=resolve_path(cwd, ctx.workspace) if cwd is not None else ctx.workspace,
        timeout=DEFAULT_BLOCK_MS if block is None else block,
        tool_call_id=call_id,
        simple_commands=parsed.simple_commands,
        has_input_redirect=parsed.has_input_redirect,
        has_output_redirect=parsed.has_output_redirect,
        parsing_result=parsed.result,
        file_output_threshold_bytes=FILE_OUTPUT_THRESHOLD_BYTES,
        timeout_behavior=apb.TIMEOUT_BEHAVIOR_BACKGROUND,
        hard_timeout=HARD_TIMEOUT_MS,
        close_stdin=True,
        conversation_id=ctx.conversation_id,
        admin_command_denylist=list(ctx.admin_command_denylist),
    )
    if description is not None:
        args.description = description
    return args


class _ShellStream:
    """Folds the non-terminal ShellStream events of one exec: output to the card and a buffer."""

    def __init__(self, io: CallIO) -> None:
        self.io = io
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.interleaved: list[str] = []

    def __call__(self, name: str, event: Message) -> bool:
        kind = variant(event, "event", "ShellStream")
        if kind == "stdout":
            self._out(self.stdout, event.stdout.data,
                      apb.ShellToolCallDelta(stdout=apb.ShellToolCallStdoutDelta(content=event.stdout.data)))
        elif kind == "stderr":
            self._out(self.stderr, event.stderr.data,
                      apb.ShellToolCallDelta(stderr=apb.ShellToolCallStderrDelta(content=event.stderr.data)))
        elif kind == "backgrounded":
            self.io.set_background()  # while the exec is still current: it must never be aborted
        return kind in TERMINAL_EVENTS

    def _out(self, buffer: list[str], data: str, delta: apb.ShellToolCallDelta) -> None:
        if data:
            buffer.append(data)
            self.interleaved.append(data)
            self.io.delta(apb.ToolCallDelta(shell_tool_call_delta=delta))

    @property
    def output(self) -> str:
        return "".join(self.interleaved)


def _signed(code: int) -> int:
    return code - 2**32 if code >= 2**31 else code


def shell_outcome(event: apb.ShellStream, card: apb.ShellArgs, out: _ShellStream, terminals_folder: str) -> ToolOutcome:
    kind = variant(event, "event", "ShellStream")
    stdout, stderr, output = "".join(out.stdout), "".join(out.stderr), out.output
    if kind == "exit":
        e = event.exit
        code = _signed(e.code)
        common = dict(command=card.command, working_directory=e.cwd or card.working_directory, exit_code=code,
                      stdout=stdout, stderr=stderr, interleaved_output=output)
        if e.HasField("local_execution_time_ms"):
            common["local_execution_time_ms"] = e.local_execution_time_ms
        if e.HasField("output_location"):
            common["output_location"] = e.output_location
        if code == 0 and not e.aborted:
            result, is_error = apb.ShellResult(success=apb.ShellSuccess(**common)), False
            head = "Exit code: 0"
        else:
            failure = apb.ShellFailure(aborted=e.aborted, **common)
            if e.HasField("abort_reason"):
                failure.abort_reason = e.abort_reason
            result, is_error = apb.ShellResult(failure=failure), True
            head = f"Exit code: {code}"
            if e.aborted:
                reason = apb.ShellAbortReason.Name(e.abort_reason).removeprefix("SHELL_ABORT_REASON_").lower()
                head = f"Command aborted ({reason}). " + head
        content = head + "\n" + (cap_tail(output) if output else "(no output)")
        if e.HasField("output_location"):
            loc = e.output_location
            content += f"\n[Full output: {loc.file_path} ({loc.size_bytes} bytes, {loc.line_count} lines)]"
        return ToolOutcome(result, content, is_error)
    if kind == "backgrounded":
        b = event.backgrounded
        success = apb.ShellSuccess(command=card.command, working_directory=b.working_directory or card.working_directory,
                                   stdout=stdout, stderr=stderr, interleaved_output=output, shell_id=b.shell_id)
        if b.HasField("pid"):
            success.pid = b.pid
        if b.HasField("ms_to_wait"):
            success.ms_to_wait = b.ms_to_wait
        if b.HasField("reason"):
            success.background_reason = b.reason
        result = apb.ShellResult(success=success, is_background=True, terminals_folder=terminals_folder)
        if b.HasField("pid"):
            result.pid = b.pid
        pid = str(b.pid) if b.HasField("pid") else "unknown"
        content = (f"shell running in background shell_id={b.shell_id} pid={pid} "
                   f"terminals_folder={terminals_folder}\n{cap_tail(output)}")
        return ToolOutcome(result, content)
    if kind == "rejected":
        r = event.rejected
        content = "The command was rejected" + (f": {r.reason}" if r.reason else "") + (" (read-only mode)" if r.is_readonly else "")
        return ToolOutcome(apb.ShellResult(rejected=r), content, is_error=True)
    if kind == "permission_denied":
        p = event.permission_denied
        content = "Permission denied running the command" + (f": {p.error}" if p.error else "")
        return ToolOutcome(apb.ShellResult(permission_denied=p), content, is_error=True)
    # sandbox_unsupported: ShellResult has no such branch; it is a refusal to run, i.e. rejected.
    s = event.sandbox_unsupported
    reason = f"sandbox not supported ({s.sandbox_policy_type})" + (f": {s.reason}" if s.reason else "")
    rejected = apb.ShellRejected(command=s.command or card.command, working_directory=s.working_directory or card.working_directory,
                                 reason=reason, is_readonly=s.is_readonly)
    return ToolOutcome(apb.ShellResult(rejected=rejected), f"The command could not run: {reason}", is_error=True)


async def _run_shell(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    out = _ShellStream(io)
    _, event = await io.exec("shell_stream_args", card, results=frozenset({"shell_stream"}), stream=out,
                             envelope={"accept_hook_additional_contexts": True})
    return shell_outcome(event, card, out, io.context.terminals_folder)


def _shell_error(message: str) -> apb.ShellResult:
    return apb.ShellResult(spawn_error=apb.ShellSpawnError(error=message))


SHELL = ToolDef("Shell", "exec", "shell_tool_call", _parse_shell, _run_shell, _shell_error,
                card_fields=lambda args: {"description": args.description} if args.HasField("description") else {})


# ---- AwaitShell ---------------------------------------------------------------------------------

POLL_FIRST_S = 0.25
POLL_MAX_S = 2.0
_EXIT_LINE = re.compile(r"^exit_code:[ \t]*(-?\d+)[ \t]*\r?$", re.MULTILINE)


def _parse_await(raw: dict, call_id: str, ctx: RunToolContext) -> apb.AwaitArgs:
    a = Args(raw)
    shell_id = raw.get("shell_id")
    if isinstance(shell_id, str) and shell_id.strip().isdigit():
        shell_id = int(shell_id)  # "42" copied from the Shell result text
    if shell_id is None:
        raise ToolArgsError("missing shell_id: `shell_id` is required (the id a backgrounded Shell reported)")
    shell_id = Args({"shell_id": shell_id}).integer("shell_id", minimum=0)
    args = apb.AwaitArgs(task_id=str(shell_id))
    block = a.integer("block_until_ms", minimum=0, maximum=2**32 - 1)
    if block is not None:
        args.block_until_ms = block
    pattern = a.string("pattern")
    if pattern:
        try:
            re.compile(pattern)
        except re.error as e:
            raise ToolArgsError(f"invalid pattern: not a valid regular expression ({e})") from None
        args.regex = pattern
    return args


def split_exit(text: str) -> tuple[int | None, str]:
    """(exit code or None while running, the output without the exit_code line)."""
    matches = list(_EXIT_LINE.finditer(text))
    if not matches:
        return None, text
    m = matches[-1]
    end = m.end() + (1 if text[m.end():m.end() + 1] == "\n" else 0)
    return int(m.group(1)), text[:m.start()] + text[end:]


def _await_error(message: str) -> apb.AwaitResult:
    return apb.AwaitResult(error=apb.AwaitError(error=message))


async def _run_await(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    folder = io.context.terminals_folder
    if not folder:
        message = "AwaitShell cannot work here: the client reported no terminals folder"
        return ToolOutcome(_await_error(message), message, is_error=True)
    path = join_path(folder, f"{card.task_id}.txt")
    regex = re.compile(card.regex, re.MULTILINE) if card.HasField("regex") else None
    budget_ms = card.block_until_ms if card.HasField("block_until_ms") else DEFAULT_BLOCK_MS
    loop = asyncio.get_running_loop()
    start = loop.time()
    pause = POLL_FIRST_S
    while True:
        _, read = await io.exec("read_args", apb.ReadArgs(path=path, tool_call_id=io.call_id),
                                results=frozenset({"read_result"}))
        kind = variant(read, "result", "ReadResult")
        if kind != "success":
            if kind == "file_not_found":
                message = f"No background shell output for shell_id={card.task_id} (no file {path})"
            else:
                message = read_failure(read, kind)
            return ToolOutcome(_await_error(message), message, is_error=True)
        text = read.success.content
        exit_code, output = split_exit(text)
        match = regex.search(output) if regex else None
        elapsed_ms = int((loop.time() - start) * 1000)
        if exit_code is not None or match or elapsed_ms >= budget_ms:
            break
        await asyncio.sleep(min(pause, (budget_ms - elapsed_ms) / 1000))
        pause = min(pause * 2, POLL_MAX_S)

    wake = "exit" if exit_code is not None else "pattern" if match else "timeout"
    common = dict(task_id=card.task_id, runtime_ms=elapsed_ms, output_file_path=path, output_length=len(text),
                  regex_requested=regex is not None, wake_reason=wake)
    if match:
        common["regex_match"] = match.group(0)
    if exit_code is not None:
        success = apb.AwaitSuccess(complete=apb.AwaitTaskComplete(exit_code=exit_code, **common))
        head = f"shell_id={card.task_id} exited exit_code={exit_code}"
    else:
        success = apb.AwaitSuccess(still_running=apb.AwaitTaskStillRunning(**common))
        head = f"shell_id={card.task_id} still running after {elapsed_ms} ms"
    if regex is not None:
        head += f" pattern_match={json.dumps(match.group(0), ensure_ascii=False)}" if match else " pattern not matched"
    content = f"{head} output_file={path}\n{cap_tail(output) if output else '(no output yet)'}"
    return ToolOutcome(apb.AwaitResult(success=success), content)


AWAIT_SHELL = ToolDef("AwaitShell", "exec", "await_tool_call", _parse_await, _run_await, _await_error)
