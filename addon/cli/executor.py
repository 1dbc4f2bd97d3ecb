"""The client side of tools for the Cursor-like test client: executes exec requests for real inside a
workspace and answers interaction queries from a script, replying the way Cursor does.

`LocalExecutor(workspace)` runs `ExecServerMessage`s: read, ls, grep (Python `re` over a directory
walk; also Glob's files-with-matches form), delete, diagnostics (scripted), write, shell_stream
(asyncio subprocess: start, stdout/stderr chunks as separate replies, then exit; with
TIMEOUT_BEHAVIOR_BACKGROUND a command that outlives `timeout` is reported `backgrounded` and keeps
writing to `<terminals_folder>/<shell_id>.txt`, which gets `exit_code: N` when it ends) and fetch
(scripted pages, no network), and with `mcp=ScriptedMcp(...)` the MCP execs (mcp_servers.py). After
the terminal reply it always sends `stream_close{id}`.

`ScriptedQueries` answers interaction queries: approve/reject per kind, AskQuestion answers,
CreatePlan result, SwitchMode.

Both plug into `CursorClient(on_exec=executor.on_exec, on_query=queries.on_query)`; pass
`on_frame=executor.on_frame` to `client.run` so an `abort` from the server kills the running shell.
`Misbehave` rules make them break the protocol on purpose (wrong result type, close before the
result, throw, a result for a never-issued id, a late duplicate, an empty reply first).
"""

from __future__ import annotations

import asyncio
import codecs
import os
import re
import signal
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from byok.proto import agent_pb2 as apb

from .client import CursorClient, Frame, handler_request_id
from .mcp_servers import MCP_EXECS, ScriptedMcp

A = apb.AgentClientMessage
E = apb.ExecClientMessage


# ---- misbehaviour -------------------------------------------------------------------------------

MISBEHAVIOURS = ("wrong_result", "close_before_result", "throw", "unknown_id", "duplicate_late", "empty_first",
                 "wrong_response")


@dataclass
class Misbehave:
    """Break the protocol for the next `times` requests of `field` (None = any)."""

    kind: str
    field: str | None = None
    times: int = 1
    delay_s: float = 0.2
    """duplicate_late: how long after the normal reply the duplicate goes."""

    def __post_init__(self) -> None:
        if self.kind not in MISBEHAVIOURS:
            raise ValueError(f"unknown misbehaviour {self.kind!r}")


def _take_rule(rules: list[Misbehave], field_name: str) -> Misbehave | None:
    for rule in rules:
        if rule.times > 0 and rule.field in (None, field_name):
            rule.times -= 1
            return rule
    return None


# ---- glob and file types for grep -----------------------------------------------------------------

FILE_TYPES: Mapping[str, tuple[str, ...]] = {
    "py": ("*.py", "*.pyi"), "python": ("*.py", "*.pyi"), "js": ("*.js", "*.mjs", "*.cjs", "*.jsx"),
    "ts": ("*.ts", "*.tsx", "*.mts", "*.cts"), "typescript": ("*.ts", "*.tsx"), "rust": ("*.rs",),
    "go": ("*.go",), "java": ("*.java",), "c": ("*.c", "*.h"), "cpp": ("*.cpp", "*.cc", "*.hpp", "*.hh", "*.h"),
    "md": ("*.md", "*.markdown"), "markdown": ("*.md", "*.markdown"), "json": ("*.json",), "yaml": ("*.yaml", "*.yml"),
    "toml": ("*.toml",), "html": ("*.html", "*.htm"), "css": ("*.css",), "sh": ("*.sh", "*.bash"), "txt": ("*.txt",),
}


def glob_to_regex(glob: str) -> re.Pattern[str]:
    """ripgrep-like glob: `**` spans directories, `*`/`?` stay inside one, `{a,b}` alternates."""
    out, i, depth = [], 0, 0
    while i < len(glob):
        c = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = glob.find("]", i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = glob[i + 1:end]
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
                i = end
        elif c == "{":
            out.append("(?:")
            depth += 1
        elif c == "}" and depth:
            out.append(")")
            depth -= 1
        elif c == "," and depth:
            out.append("|")
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def glob_matches(glob: str, rel_path: str) -> bool:
    """A glob without "/" matches the file name at any depth; with "/" the path under the root."""
    pattern = glob_to_regex(glob.lstrip("/") if "/" in glob else glob)
    target = rel_path if "/" in glob else rel_path.rsplit("/", 1)[-1]
    return bool(pattern.match(target))


# ---- shell jobs ---------------------------------------------------------------------------------


@dataclass
class _ShellJob:
    exec_id: int
    command: str
    cwd: str
    proc: asyncio.subprocess.Process
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    output: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    aborted: bool = False
    abort_reason: int = apb.SHELL_ABORT_REASON_UNSPECIFIED
    readers: list[asyncio.Task] = field(default_factory=list)


@dataclass(frozen=True)
class FetchPage:
    content: str
    status_code: int = 200
    content_type: str = "text/markdown"


# ---- the executor -------------------------------------------------------------------------------


class LocalExecutor:
    def __init__(
        self,
        workspace: Path,
        *,
        terminals_folder: Path | None = None,
        pages: Mapping[str, FetchPage | str] | None = None,
        diagnostics: Mapping[str, Sequence[apb.Diagnostic]] | None = None,
        read_line_limit: int | None = None,
        ls_depth: int = 3,
        misbehave: Sequence[Misbehave] = (),
        mcp: "ScriptedMcp | None" = None,
    ) -> None:
        self.workspace = Path(workspace)
        self.terminals_folder = Path(terminals_folder) if terminals_folder else self.workspace / ".terminals"
        self.pages = dict(pages or {})
        self.diagnostics = {k: list(v) for k, v in (diagnostics or {}).items()}
        self.read_line_limit = read_line_limit
        self.ls_depth = ls_depth
        self.misbehave = list(misbehave)
        self.mcp = mcp
        self.subagents = None
        """A SubagentRunner (subagents.py) that runs `subagent_args` as child runs, when set."""
        """Answers the MCP execs (GetMcpTools, CallMcpTool, FetchMcpResource) when set."""
        self.log: list[apb.ExecServerMessage] = []
        """Every exec request received, in order."""
        self._next_shell_id = 1
        self._running: dict[int, _ShellJob] = {}
        self._background: dict[int, tuple[_ShellJob, asyncio.Task]] = {}

    # ---- client plumbing ------------------------------------------------------------------------

    async def on_exec(self, client: CursorClient, message: apb.ExecServerMessage) -> None:
        """`CursorClient.on_exec`: execute, reply (streamed), then stream_close, like Cursor."""
        request_id = handler_request_id()
        self.log.append(message)
        field_name = message.WhichOneof("message") or ""
        rule = _take_rule(self.misbehave, field_name)
        kind = rule.kind if rule else None

        def send(msg: E) -> None:
            client.append_soon(request_id, A(exec_client_message=msg))

        def close() -> None:
            client.append_soon(request_id, A(exec_client_control_message=apb.ExecClientControlMessage(
                stream_close=apb.ExecClientStreamClose(id=message.id))))

        if field_name == "subagent_args" and self.subagents is not None and kind is None:
            reply = await self.subagents.execute(client, request_id, message)
            if reply is not None:
                send(reply)
            close()
            return
        if kind == "empty_first":
            send(E(id=message.id))
        if kind == "close_before_result":
            close()
            return
        if kind == "throw":
            client.append_soon(request_id, A(exec_client_control_message=apb.ExecClientControlMessage(
                throw=apb.ExecClientThrow(id=message.id, error="scripted client failure"))))
            return
        last: E | None = None
        try:
            async for reply in self.execute(message):
                last = reply
                if kind == "wrong_result" and _is_terminal(reply):
                    reply = _wrong_result(reply)
                send(reply)
        except UnsupportedExec as e:  # fail visibly, like a client that cannot run it
            client.append_soon(request_id, A(exec_client_control_message=apb.ExecClientControlMessage(
                throw=apb.ExecClientThrow(id=message.id, error=str(e)))))
            return
        close()
        if last is None:
            return
        if kind == "unknown_id":
            stray = E()
            stray.CopyFrom(last)
            stray.id = message.id + 1000
            send(stray)
        elif kind == "duplicate_late":
            await asyncio.sleep(rule.delay_s)
            send(last)

    def on_frame(self, frame: Frame) -> None:
        """`client.run(on_frame=...)`: an ExecServerAbort kills the running (foreground) shell."""
        if frame.direction != "down" or frame.kind != "exec_server_control_message":
            return
        control = frame.message.exec_server_control_message
        if control.WhichOneof("message") == "abort":
            self.abort(control.abort.id)

    def abort(self, exec_id: int) -> bool:
        job = self._running.get(exec_id)
        if job is None:
            return False  # finished or backgrounded: a background shell is never aborted
        job.aborted, job.abort_reason = True, apb.SHELL_ABORT_REASON_USER_ABORT
        _kill(job.proc)
        return True

    async def aclose(self) -> None:
        """Kill every process still running (foreground or background)."""
        for job in list(self._running.values()):
            _kill(job.proc)
        for job, task in list(self._background.values()):
            _kill(job.proc)
            await asyncio.gather(task, return_exceptions=True)
        self._background.clear()

    async def wait_background(self, shell_id: int, timeout: float = 30.0) -> None:
        """Tests: wait until a backgrounded shell finished and its exit_code line was written."""
        entry = self._background.get(shell_id)
        if entry is not None:
            await asyncio.wait_for(asyncio.shield(entry[1]), timeout)

    # ---- dispatch -------------------------------------------------------------------------------

    async def execute(self, message: apb.ExecServerMessage) -> AsyncIterator[E]:
        """The client's replies to one exec, in order (stream events, then the terminal one)."""
        field_name = message.WhichOneof("message")
        handler = {
            "read_args": self._read, "ls_args": self._ls, "grep_args": self._grep, "delete_args": self._delete,
            "diagnostics_args": self._diagnostics, "write_args": self._write, "fetch_args": self._fetch,
        }.get(field_name or "")
        if handler is not None:
            yield handler(message.id, getattr(message, field_name))
        elif field_name in MCP_EXECS and self.mcp is not None:
            yield self.mcp.execute(message.id, field_name, getattr(message, field_name))
        elif field_name == "shell_stream_args":
            async for reply in self._shell(message.id, message.shell_stream_args):
                yield reply
        else:
            raise UnsupportedExec(f"LocalExecutor does not execute {field_name!r}")

    def _path(self, path: str) -> Path:
        p = Path(os.path.expanduser(path))
        return p if p.is_absolute() else self.workspace / p

    # ---- files ----------------------------------------------------------------------------------

    def _read(self, exec_id: int, a: apb.ReadArgs) -> E:
        p = self._path(a.path)
        try:
            raw = p.read_bytes()
        except FileNotFoundError:
            return E(id=exec_id, read_result=apb.ReadResult(file_not_found=apb.ReadFileNotFound(path=a.path)))
        except PermissionError:
            return E(id=exec_id, read_result=apb.ReadResult(permission_denied=apb.ReadPermissionDenied(path=a.path)))
        except IsADirectoryError:
            return E(id=exec_id, read_result=apb.ReadResult(invalid_file=apb.ReadInvalidFile(
                path=a.path, reason="is a directory")))
        except OSError as e:
            return E(id=exec_id, read_result=apb.ReadResult(error=apb.ReadError(path=a.path, error=str(e))))
        success = apb.ReadSuccess(path=a.path, file_size=len(raw))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            success.data = raw
            return E(id=exec_id, read_result=apb.ReadResult(success=success))
        lines = text.splitlines(keepends=True)
        success.total_lines = len(lines)
        start = max(a.offset, 1) - 1 if a.HasField("offset") else 0
        limit = a.limit if a.HasField("limit") else self.read_line_limit
        if a.HasField("offset") or a.HasField("limit"):
            success.range_applied = True
        end = len(lines) if limit is None else min(len(lines), start + limit)
        if limit is not None and not a.HasField("limit") and end < len(lines):
            success.truncated = True
        success.content = "".join(lines[start:end]) if success.range_applied or success.truncated else text
        return E(id=exec_id, read_result=apb.ReadResult(success=success))

    def _ls(self, exec_id: int, a: apb.LsArgs) -> E:
        root = self._path(a.path)
        if not root.is_dir():
            error = "no such directory" if not root.exists() else "not a directory"
            return E(id=exec_id, ls_result=apb.LsResult(error=apb.LsError(path=a.path, error=error)))

        def ignored(p: Path) -> bool:
            rel = p.relative_to(root).as_posix()
            return any(glob_matches(g, rel) or glob_matches(g.rstrip("/"), rel) for g in a.ignore)

        def node(d: Path, depth: int) -> apb.LsDirectoryTreeNode:
            n = apb.LsDirectoryTreeNode(abs_path=str(d), children_were_processed=depth < self.ls_depth)
            if depth >= self.ls_depth:
                return n
            entries = sorted(d.iterdir(), key=lambda x: x.name)
            for e in entries:
                if ignored(e):
                    continue
                if e.is_dir():
                    n.children_dirs.append(node(e, depth + 1))
                else:
                    n.children_files.add(name=e.name)
            n.num_files = len(n.children_files)
            return n

        tree = node(root, 0)
        return E(id=exec_id, ls_result=apb.LsResult(success=apb.LsSuccess(directory_tree_root=tree)))

    def _grep(self, exec_id: int, a: apb.GrepArgs) -> E:
        def fail(error: str) -> E:
            return E(id=exec_id, grep_result=apb.GrepResult(error=apb.GrepError(error=error)))

        root = self._path(a.path) if a.HasField("path") else self.workspace
        if not root.exists():
            return fail(f"{a.path}: no such file or directory")
        flags = (re.IGNORECASE if a.case_insensitive else 0) | (re.DOTALL | re.MULTILINE if a.multiline else 0)
        try:
            regex = re.compile(a.pattern, flags)
        except re.error as e:
            return fail(f"regex parse error: {e}")
        if a.type and a.type not in FILE_TYPES:
            return fail(f"unrecognized file type: {a.type}")
        mode = a.output_mode or "content"

        def shown(p: Path) -> str:
            # An explicit path gives absolute names (like rg with an absolute path); else workspace-relative.
            return str(p) if a.HasField("path") else p.relative_to(self.workspace).as_posix()

        files_out: list[str] = []
        counts: list[apb.GrepFileCount] = []
        matches: list[apb.GrepFileMatch] = []
        total_lines = total_matched = 0
        for p in _walk(root):
            rel = p.relative_to(root).as_posix() if root.is_dir() else p.name
            if a.glob and not glob_matches(a.glob, rel):
                continue
            if a.type and not any(glob_matches(g, rel) for g in FILE_TYPES[a.type]):
                continue
            try:
                raw = p.read_bytes()
            except OSError:
                continue
            if b"\0" in raw[:8192]:
                continue
            text = raw.decode("utf-8", errors="replace")
            lines = text.splitlines()
            if a.multiline:
                hit_lines = sorted({text.count("\n", 0, m.start()) for m in regex.finditer(text)})
            else:
                hit_lines = [i for i, line in enumerate(lines) if regex.search(line)]
            if a.pattern == "":
                hit_lines = hit_lines or [0]  # the empty pattern selects every file, even an empty one
            if not hit_lines:
                continue
            files_out.append(shown(p))
            counts.append(apb.GrepFileCount(file=shown(p), count=len(hit_lines)))
            before = a.context_before if a.HasField("context_before") else a.context
            after = a.context_after if a.HasField("context_after") else a.context
            keep: dict[int, bool] = {}
            for i in hit_lines:
                for j in range(max(0, i - before), min(len(lines), i + after + 1)):
                    keep.setdefault(j, True)
                keep[i] = False
            fm = apb.GrepFileMatch(file=shown(p))
            for j in sorted(keep):
                if j < len(lines):
                    fm.matches.add(line_number=j + 1, content=lines[j], is_context_line=keep[j])
            total_lines += len(fm.matches)
            total_matched += len(hit_lines)
            matches.append(fm)

        offset = a.offset if a.HasField("offset") else 0
        limit = a.head_limit if a.HasField("head_limit") else None
        union = apb.GrepUnionResult()
        if mode == "files_with_matches":
            page = files_out[offset:offset + limit if limit else None]
            union.files.CopyFrom(apb.GrepFilesResult(files=page, total_files=len(files_out),
                                                     client_truncated=len(page) < len(files_out) - offset))
            target = union.files
        elif mode == "count":
            page = counts[offset:offset + limit if limit else None]
            union.count.CopyFrom(apb.GrepCountResult(counts=page, total_files=len(counts), total_matches=total_matched,
                                                     client_truncated=len(page) < len(counts) - offset))
            target = union.count
        elif mode == "content":
            flat = [(fm.file, m) for fm in matches for m in fm.matches]
            page = flat[offset:offset + limit if limit else None]
            content = apb.GrepContentResult(total_lines=total_lines, total_matched_lines=total_matched,
                                            client_truncated=len(page) < len(flat) - offset)
            for file, m in page:
                if not content.matches or content.matches[-1].file != file:
                    content.matches.add(file=file)
                content.matches[-1].matches.append(m)
            union.content.CopyFrom(content)
            target = union.content
        else:
            return fail(f"unknown output_mode {mode!r}")
        if limit is not None:
            target.head_limit_applied = limit
        if offset:
            target.offset_applied = offset
        success = apb.GrepSuccess(pattern=a.pattern, path=str(root), output_mode=mode,
                                  workspace_results={str(self.workspace): union})
        return E(id=exec_id, grep_result=apb.GrepResult(success=success))

    def _delete(self, exec_id: int, a: apb.DeleteArgs) -> E:
        p = self._path(a.path)
        if not p.exists():
            return E(id=exec_id, delete_result=apb.DeleteResult(file_not_found=apb.DeleteFileNotFound(path=a.path)))
        if p.is_dir():
            return E(id=exec_id, delete_result=apb.DeleteResult(not_file=apb.DeleteNotFile(
                path=a.path, actual_type="directory")))
        try:
            raw = p.read_bytes()
            p.unlink()
        except PermissionError as e:
            return E(id=exec_id, delete_result=apb.DeleteResult(permission_denied=apb.DeletePermissionDenied(
                path=a.path, client_visible_error=str(e))))
        except OSError as e:
            return E(id=exec_id, delete_result=apb.DeleteResult(error=apb.DeleteError(path=a.path, error=str(e))))
        return E(id=exec_id, delete_result=apb.DeleteResult(success=apb.DeleteSuccess(
            path=a.path, deleted_file=str(p), file_size=len(raw), prev_content=raw.decode("utf-8", errors="replace"))))

    def _diagnostics(self, exec_id: int, a: apb.DiagnosticsArgs) -> E:
        p = self._path(a.path)
        if not p.exists():
            return E(id=exec_id, diagnostics_result=apb.DiagnosticsResult(
                file_not_found=apb.DiagnosticsFileNotFound(path=a.path)))
        found = self.diagnostics.get(a.path) or self.diagnostics.get(str(p)) or []
        return E(id=exec_id, diagnostics_result=apb.DiagnosticsResult(success=apb.DiagnosticsSuccess(
            path=a.path, diagnostics=found, total_diagnostics=len(found))))

    def _write(self, exec_id: int, a: apb.WriteArgs) -> E:
        p = self._path(a.path)
        data = a.file_bytes if a.file_bytes else a.file_text.encode("utf-8")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        except PermissionError as e:
            return E(id=exec_id, write_result=apb.WriteResult(permission_denied=apb.WritePermissionDenied(
                path=a.path, directory=str(p.parent), operation="write", error=str(e))))
        except OSError as e:
            return E(id=exec_id, write_result=apb.WriteResult(error=apb.WriteError(path=a.path, error=str(e))))
        success = apb.WriteSuccess(path=a.path, lines_created=len(a.file_text.splitlines()), file_size=len(data))
        if a.return_file_content_after_write:
            success.file_content_after_write = a.file_text
        return E(id=exec_id, write_result=apb.WriteResult(success=success))

    def _fetch(self, exec_id: int, a: apb.FetchArgs) -> E:
        page = self.pages.get(a.url)
        if page is None:
            return E(id=exec_id, fetch_result=apb.FetchResult(error=apb.FetchError(
                url=a.url, error="no scripted page for this URL (the test executor has no network)")))
        if isinstance(page, str):
            page = FetchPage(page)
        return E(id=exec_id, fetch_result=apb.FetchResult(success=apb.FetchSuccess(
            url=a.url, content=page.content, status_code=page.status_code, content_type=page.content_type)))

    # ---- shell ----------------------------------------------------------------------------------

    async def _shell(self, exec_id: int, a: apb.ShellArgs) -> AsyncIterator[E]:
        def ev(**kw) -> E:
            return E(id=exec_id, shell_stream=apb.ShellStream(**kw))

        cwd = str(self._path(a.working_directory)) if a.working_directory else str(self.workspace)
        denied = next((d for d in a.admin_command_denylist if d and d in a.command), None)
        if denied is not None:
            yield ev(rejected=apb.ShellRejected(command=a.command, working_directory=cwd,
                                                reason=f"blocked by the admin command denylist ({denied})"))
            return
        if not Path(cwd).is_dir():
            yield ev(stderr=apb.ShellStreamStderr(data=f"working directory does not exist: {cwd}\n"))
            yield ev(exit=apb.ShellStreamExit(code=1, cwd=cwd))
            return
        proc = await asyncio.create_subprocess_shell(
            a.command, cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True)
        job = _ShellJob(exec_id, a.command, cwd, proc)
        job.readers = [asyncio.get_running_loop().create_task(_pump(proc.stdout, "stdout", job.queue)),
                       asyncio.get_running_loop().create_task(_pump(proc.stderr, "stderr", job.queue))]
        self._running[exec_id] = job
        yield ev(start=apb.ShellStreamStart())
        background = a.timeout_behavior == apb.TIMEOUT_BEHAVIOR_BACKGROUND
        limit_ms = a.timeout if (a.timeout > 0 or background) else None
        deadline = None if limit_ms is None else job.started + limit_ms / 1000
        open_streams = 2
        try:
            while open_streams:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                try:
                    kind, text = await asyncio.wait_for(job.queue.get(), left)
                except asyncio.TimeoutError:
                    break
                if text is None:
                    open_streams -= 1
                    continue
                job.output.append(text)
                yield ev(**{kind: (apb.ShellStreamStdout if kind == "stdout" else apb.ShellStreamStderr)(data=text)})
            if open_streams and background and not job.aborted:
                yield ev(backgrounded=self._to_background(job, a))
                return
            if open_streams:  # timeout with CANCEL behaviour: kill, then report an aborted exit
                job.aborted, job.abort_reason = True, apb.SHELL_ABORT_REASON_TIMEOUT
                _kill(proc)
            code = await proc.wait()
        finally:
            self._running.pop(exec_id, None)
        await asyncio.gather(*job.readers, return_exceptions=True)
        exit_ = apb.ShellStreamExit(code=_exit_code(code), cwd=cwd,
                                    local_execution_time_ms=int((time.monotonic() - job.started) * 1000))
        if job.aborted:
            exit_.aborted = True
            exit_.abort_reason = job.abort_reason
        yield ev(exit=exit_)

    def _to_background(self, job: _ShellJob, a: apb.ShellArgs) -> apb.ShellStreamBackgrounded:
        shell_id = self._next_shell_id
        self._next_shell_id += 1
        self.terminals_folder.mkdir(parents=True, exist_ok=True)
        path = self.terminals_folder / f"{shell_id}.txt"
        path.write_text("".join(job.output), encoding="utf-8")
        task = asyncio.get_running_loop().create_task(self._drain(job, path, a.hard_timeout or None))
        self._background[shell_id] = (job, task)
        return apb.ShellStreamBackgrounded(shell_id=shell_id, command=job.command, working_directory=job.cwd,
                                           pid=job.proc.pid, reason=apb.SHELL_BACKGROUND_REASON_TIMEOUT)

    async def _drain(self, job: _ShellJob, path: Path, hard_timeout_ms: int | None) -> None:
        """A background shell: keep its output flowing into its file, then append the exit code."""
        open_streams = 2
        deadline = None if hard_timeout_ms is None else job.started + hard_timeout_ms / 1000
        with path.open("a", encoding="utf-8") as f:
            while open_streams:
                left = None if deadline is None else max(deadline - time.monotonic(), 0)
                try:
                    kind, text = await asyncio.wait_for(job.queue.get(), left)
                except asyncio.TimeoutError:
                    _kill(job.proc)
                    deadline = None
                    continue
                if text is None:
                    open_streams -= 1
                    continue
                f.write(text)
                f.flush()
            code = await job.proc.wait()
            f.write(f"exit_code: {_exit_code(code)}\n")


class UnsupportedExec(Exception):
    """An exec kind the test executor does not implement (a visible test failure, never a guess)."""


def _walk(root: Path):
    """Files under root (or root itself), skipping hidden entries like ripgrep, in sorted order."""
    if root.is_file():
        yield root
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if not name.startswith("."):
                yield Path(dirpath) / name


async def _pump(stream: asyncio.StreamReader | None, kind: str, queue: asyncio.Queue) -> None:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    if stream is not None:
        while chunk := await stream.read(4096):
            text = decoder.decode(chunk)
            if text:
                await queue.put((kind, text))
    tail = decoder.decode(b"", final=True)
    if tail:
        await queue.put((kind, tail))
    await queue.put((kind, None))


def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the whole session: the shell and its children
        except (ProcessLookupError, PermissionError):
            pass


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode  # killed by signal N -> 128 + N


def _is_terminal(reply: E) -> bool:
    if reply.WhichOneof("message") != "shell_stream":
        return True
    return reply.shell_stream.WhichOneof("event") not in ("stdout", "stderr", "start", "hook_context")


def _wrong_result(reply: E) -> E:
    """The same id with a result of another tool (a WriteResult for a Read, else a ReadResult)."""
    if reply.WhichOneof("message") == "read_result":
        return E(id=reply.id, write_result=apb.WriteResult(success=apb.WriteSuccess(path="wrong")))
    return E(id=reply.id, read_result=apb.ReadResult(success=apb.ReadSuccess(path="wrong", content="")))


# ---- interaction queries ------------------------------------------------------------------------

APPROVAL_KINDS = ("web_search_request_query", "web_fetch_request_query", "generate_image_request_query",
                  "switch_mode_request_query")


@dataclass
class ScriptedQueries:
    """Answers interaction queries. Defaults: approve everything, pick each question's first option,
    accept plans."""

    approve: bool = True
    approvals: dict[str, bool] = field(default_factory=dict)
    """Per query kind (e.g. "web_fetch_request_query": False) over `approve`."""
    reject_reason: str = "declined by the test user"
    answers: Mapping[str, Sequence[str]] | Callable[[apb.AskQuestionArgs], apb.AskQuestionResult] | None = None
    """question id -> selected option ids, or a function building the whole result."""
    ask_result: apb.AskQuestionResult | None = None
    plan_result: apb.CreatePlanResult | None = None
    misbehave: list[Misbehave] = field(default_factory=list)
    """`wrong_response` (answer with another query's response type) and `unknown_id`."""
    log: list[apb.InteractionQuery] = field(default_factory=list)

    async def on_query(self, client: CursorClient, query: apb.InteractionQuery) -> None:
        """`CursorClient.on_query`."""
        self.log.append(query)
        kind = query.WhichOneof("query") or ""
        response = self.respond(query)
        rule = _take_rule(self.misbehave, kind)
        if rule is not None and rule.kind == "wrong_response":
            other = "switch_mode_request_query" if kind != "switch_mode_request_query" else "web_search_request_query"
            response = self.respond(apb.InteractionQuery(id=query.id, **{other: {}}))
        if rule is not None and rule.kind == "unknown_id":
            response.id = query.id + 1000
        client.append_soon(handler_request_id(), A(interaction_response=response))

    def approved(self, kind: str) -> bool:
        return self.approvals.get(kind, self.approve)

    def respond(self, query: apb.InteractionQuery) -> apb.InteractionResponse:
        kind = query.WhichOneof("query")
        r = apb.InteractionResponse(id=query.id)
        ok = self.approved(kind or "")
        reason = self.reject_reason
        if kind == "ask_question_interaction_query":
            r.ask_question_interaction_response.result.CopyFrom(self._ask(query.ask_question_interaction_query.args))
        elif kind == "create_plan_request_query":
            result = self.plan_result or apb.CreatePlanResult(success=apb.CreatePlanSuccess(),
                                                             plan_uri="file:///plans/plan.md")
            r.create_plan_request_response.result.CopyFrom(result)
        elif kind in ("switch_mode_request_query", "web_fetch_request_query", "web_search_request_query"):
            m = getattr(r, kind.replace("_query", "_response"))
            if ok:
                m.approved.SetInParent()
            else:
                m.rejected.reason = reason
        elif kind == "generate_image_request_query":
            m = r.generate_image_request_response
            if ok:
                m.approved.description = query.generate_image_request_query.args.description
            else:
                m.rejected.reason = reason
        else:
            raise UnsupportedExec(f"ScriptedQueries does not answer {kind!r}")
        return r

    def _ask(self, args: apb.AskQuestionArgs) -> apb.AskQuestionResult:
        if self.ask_result is not None:
            return self.ask_result
        if callable(self.answers):
            return self.answers(args)
        result = apb.AskQuestionResult()
        success = result.success
        success.SetInParent()
        for q in args.questions:
            chosen = list(self.answers[q.id]) if self.answers and q.id in self.answers else [q.options[0].id] if q.options else []
            success.answers.add(question_id=q.id, selected_option_ids=chosen)
        return result
