"""File and search tools executed by the client in one exec each: Read, Ls, Grep, Glob, Delete,
ReadLints (one exec per path).

Each codec owns: model args -> card args -> exec args, and the client's typed result -> the card's
typed result + the string the model sees. Success or failure always comes from the result's oneof.
"""

from __future__ import annotations

import posixpath

from google.protobuf.message import Message

from byok.proto import agent_pb2 as apb

from .base import CallIO, RunToolContext, ToolArgsError, ToolDef, ToolOutcome
from .common import Args, cap_head, resolve_path, variant

READ_CONTENT_LIMIT = 100_000
"""Characters of a file the model sees from one Read (the client truncates first; this is a backstop)."""


# ---- Read ---------------------------------------------------------------------------------------


def _parse_read(raw: dict, call_id: str, ctx: RunToolContext) -> apb.ReadToolArgs:
    a = Args(raw)
    args = apb.ReadToolArgs(path=resolve_path(a.string("path", required=True, non_empty=True), ctx.workspace))
    offset = a.integer("offset")
    limit = a.integer("limit", minimum=1)
    if offset is not None:
        args.offset = offset
    if limit is not None:
        args.limit = limit
    return args


def number_lines(content: str, start: int = 1) -> str:
    """Cursor's Read view: each line as `{n:>6}|{line}` (the numbers are not part of the file)."""
    lines = content.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return "\n".join(f"{start + i:>6}|{line.rstrip(chr(13))}" for i, line in enumerate(lines))


def read_outcome(result: apb.ReadResult, card: apb.ReadToolArgs) -> ToolOutcome:
    kind = variant(result, "result", "ReadResult")
    if kind != "success":
        message = read_failure(result, kind)
        return ToolOutcome(_read_error(message), message, is_error=True)
    s = result.success
    out = apb.ReadToolSuccess(path=s.path or card.path, total_lines=max(s.total_lines, 0),
                              file_size=max(s.file_size, 0), exceeded_limit=s.truncated)
    if s.WhichOneof("output") == "data":
        out.data = s.data
        content = f"{out.path} is a binary file ({len(s.data)} bytes); its content cannot be shown as text."
        return ToolOutcome(apb.ReadToolResult(success=out), content)
    out.content = s.content
    out.is_empty = s.content == ""
    start = card.offset if s.range_applied and card.HasField("offset") and card.offset > 0 else 1
    shown = len(s.content.split("\n")) - (1 if s.content.endswith("\n") else 0) if s.content else 0
    if s.range_applied:
        out.read_range.start_line = start
        out.read_range.end_line = start + max(shown, 1) - 1
    if out.is_empty:
        content = "File is empty." if not s.range_applied else "No lines in the requested range."
    else:
        content = cap_head(number_lines(s.content, start), READ_CONTENT_LIMIT)
        if s.truncated:
            content += (f"\n[Output truncated: showing lines {start}-{start + shown - 1} of {s.total_lines}. "
                        "Read the rest with offset and limit.]")
    return ToolOutcome(apb.ReadToolResult(success=out), content)


def read_failure(result: apb.ReadResult, kind: str) -> str:
    """The model-facing sentence for a non-success ReadResult (shared with the hidden edit read)."""
    sub = getattr(result, kind)
    if kind == "file_not_found":
        return f"File not found: {sub.path}"
    if kind == "permission_denied":
        return f"Permission denied reading {sub.path}"
    if kind == "rejected":
        return f"Reading {sub.path} was rejected" + (f": {sub.reason}" if sub.reason else "")
    if kind == "invalid_file":
        return f"Cannot read {sub.path}" + (f": {sub.reason}" if sub.reason else "")
    return f"Error reading {sub.path}: {sub.error}"


def _read_error(message: str) -> apb.ReadToolResult:
    return apb.ReadToolResult(error=apb.ReadToolError(error_message=message))


async def _run_read(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    args = apb.ReadArgs(path=card.path, tool_call_id=io.call_id)
    if card.HasField("offset"):
        args.offset = card.offset
    if card.HasField("limit"):
        args.limit = card.limit
    _, result = await io.exec("read_args", args, results=frozenset({"read_result"}))
    return read_outcome(result, card)


READ = ToolDef("Read", "exec", "read_tool_call", _parse_read, _run_read, _read_error)


# ---- Ls -----------------------------------------------------------------------------------------


def _parse_ls(raw: dict, call_id: str, ctx: RunToolContext) -> apb.LsArgs:
    a = Args(raw)
    path = resolve_path(a.string("path", required=True, non_empty=True), ctx.workspace)
    return apb.LsArgs(path=path, ignore=a.str_list("ignore") or [], tool_call_id=call_id)


def render_tree(root: apb.LsDirectoryTreeNode) -> str:
    """An indented listing: the root path, then `- dir/` and `- file` entries, dirs first."""
    lines = [root.abs_path.rstrip("/") + "/"]

    def walk(node: apb.LsDirectoryTreeNode, depth: int) -> None:
        pad = "  " * depth
        for d in node.children_dirs:
            name = posixpath.basename(d.abs_path.rstrip("/\\").replace("\\", "/")) or d.abs_path
            empty = not d.children_dirs and not d.children_files
            lines.append(f"{pad}- {name}/" + (" (not listed)" if empty and not d.children_were_processed else ""))
            walk(d, depth + 1)
        for f in node.children_files:
            lines.append(f"{pad}- {f.name}")

    walk(root, 1)
    if len(lines) == 1:
        lines.append("  (empty directory)")
    return "\n".join(lines)


def ls_outcome(result: apb.LsResult) -> ToolOutcome:
    kind = variant(result, "result", "LsResult")
    if kind == "success":
        return ToolOutcome(result, cap_head(render_tree(result.success.directory_tree_root)))
    if kind == "timeout":
        tree = render_tree(result.timeout.directory_tree_root)
        return ToolOutcome(result, cap_head("Listing timed out; partial result:\n" + tree), is_error=True)
    sub = getattr(result, kind)
    if kind == "rejected":
        message = f"Listing {sub.path} was rejected" + (f": {sub.reason}" if sub.reason else "")
    else:
        message = f"Error listing {sub.path}: {sub.error}"
    return ToolOutcome(result, message, is_error=True)


async def _run_ls(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    _, result = await io.exec("ls_args", card, results=frozenset({"ls_result"}))
    return ls_outcome(result)


LS = ToolDef("Ls", "exec", "ls_tool_call", _parse_ls, _run_ls,
             lambda message: apb.LsResult(error=apb.LsError(error=message)))


# ---- Grep ---------------------------------------------------------------------------------------

OUTPUT_MODES = ("content", "files_with_matches", "count")


def _parse_grep(raw: dict, call_id: str, ctx: RunToolContext) -> apb.GrepArgs:
    a = Args(raw)
    args = apb.GrepArgs(pattern=a.string("pattern", required=True, non_empty=True), tool_call_id=call_id,
                        output_mode=a.choice("output_mode", OUTPUT_MODES) or "content")
    path = a.string("path", non_empty=True)
    if path is not None:
        args.path = resolve_path(path, ctx.workspace)
    for key, name in (("glob", "glob"), ("type", "type")):
        value = a.string(key, non_empty=True)
        if value is not None:
            setattr(args, name, value)
    for key, name in (("-A", "context_after"), ("-B", "context_before"), ("-C", "context")):
        value = a.integer(key, minimum=0)
        if value is not None:
            setattr(args, name, value)
    for key, name in (("-i", "case_insensitive"), ("multiline", "multiline")):
        value = a.boolean(key)
        if value is not None:
            setattr(args, name, value)
    head_limit = a.integer("head_limit", minimum=1)
    if head_limit is not None:
        args.head_limit = head_limit
    offset = a.integer("offset", minimum=0)
    if offset is not None:
        args.offset = offset
    return args


def _render_union(u: apb.GrepUnionResult) -> tuple[list[str], bool]:
    """(lines, truncated) of one workspace's grep result."""
    kind = u.WhichOneof("result")
    if kind == "files":
        return list(u.files.files), u.files.client_truncated or u.files.ripgrep_truncated
    if kind == "count":
        c = u.count
        return [f"{fc.file}:{fc.count}" for fc in c.counts], c.client_truncated or c.ripgrep_truncated
    if kind == "content":
        c = u.content
        lines: list[str] = []
        for fm in c.matches:
            if lines:
                lines.append("")
            lines.append(fm.file)
            for m in fm.matches:
                sep = "-" if m.is_context_line else ":"
                lines.append(f"{m.line_number}{sep}{m.content}" + (" [line truncated]" if m.content_truncated else ""))
        return lines, c.client_truncated or c.ripgrep_truncated
    return [], False


def render_grep(success: apb.GrepSuccess) -> str:
    groups = [(key, success.workspace_results[key]) for key in sorted(success.workspace_results)]
    if success.HasField("active_editor_result"):
        groups.append(("active editor", success.active_editor_result))
    sections, truncated = [], False
    for key, union in groups:
        lines, cut = _render_union(union)
        truncated |= cut
        if lines:
            sections.append((f"Workspace {key}:\n" if len(groups) > 1 else "") + "\n".join(lines))
    if not sections:
        return "No matches found."
    text = "\n\n".join(sections)
    if truncated:
        text += "\n[Results truncated: narrow the pattern or page with head_limit and offset.]"
    return cap_head(text)


def grep_outcome(result: apb.GrepResult) -> ToolOutcome:
    kind = variant(result, "result", "GrepResult")
    if kind == "success":
        return ToolOutcome(result, render_grep(result.success))
    return ToolOutcome(result, f"Grep failed: {result.error.error}", is_error=True)


async def _run_grep(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    _, result = await io.exec("grep_args", card, results=frozenset({"grep_result"}))
    return grep_outcome(result)


GREP = ToolDef("Grep", "exec", "grep_tool_call", _parse_grep, _run_grep,
               lambda message: apb.GrepResult(error=apb.GrepError(error=message)))


# ---- Glob (UI card glob_tool_call, executed as grep_args; seed §26.13) ---------------------------

GLOB_GREP_PATTERN = ""
"""The grep pattern of a Glob exec: the empty regex matches every file the glob selects."""


def _parse_glob(raw: dict, call_id: str, ctx: RunToolContext) -> apb.GlobToolArgs:
    a = Args(raw)
    args = apb.GlobToolArgs(glob_pattern=a.string("glob_pattern", required=True, non_empty=True))
    target = a.string("target_directory", non_empty=True)
    if target is not None:
        args.target_directory = resolve_path(target, ctx.workspace)
    return args


def glob_grep_args(card: apb.GlobToolArgs, call_id: str) -> apb.GrepArgs:
    """Glob as a grep: files-with-matches of the empty pattern under the glob (path = target dir)."""
    args = apb.GrepArgs(pattern=GLOB_GREP_PATTERN, glob=card.glob_pattern, output_mode="files_with_matches",
                        tool_call_id=call_id)
    if card.HasField("target_directory"):
        args.path = card.target_directory
    return args


def glob_outcome(result: apb.GrepResult, card: apb.GlobToolArgs) -> ToolOutcome:
    kind = variant(result, "result", "GrepResult")
    if kind != "success":
        message = f"Glob failed: {result.error.error}"
        return ToolOutcome(_glob_error(message), message, is_error=True)
    s = result.success
    files: list[str] = []
    client_cut = rg_cut = False
    for key in sorted(s.workspace_results):
        u = s.workspace_results[key]
        kind = u.WhichOneof("result")
        if kind == "files":
            files.extend(u.files.files)
            client_cut |= u.files.client_truncated
            rg_cut |= u.files.ripgrep_truncated
        elif kind == "count":
            files.extend(fc.file for fc in u.count.counts)
        elif kind == "content":
            files.extend(fm.file for fm in u.content.matches)
    success = apb.GlobToolSuccess(pattern=card.glob_pattern, path=card.target_directory or s.path, files=files,
                                  total_files=len(files), client_truncated=client_cut, ripgrep_truncated=rg_cut)
    if files:
        content = f"{len(files)} file(s) matching {card.glob_pattern}:\n" + "\n".join(files)
        if client_cut or rg_cut:
            content += "\n[Results truncated: use a more specific pattern or target_directory.]"
    else:
        content = f"No files found matching {card.glob_pattern}"
    return ToolOutcome(apb.GlobToolResult(success=success), cap_head(content))


def _glob_error(message: str) -> apb.GlobToolResult:
    return apb.GlobToolResult(error=apb.GlobToolError(error=message))


async def _run_glob(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    _, result = await io.exec("grep_args", glob_grep_args(card, io.call_id), results=frozenset({"grep_result"}))
    return glob_outcome(result, card)


GLOB = ToolDef("Glob", "exec", "glob_tool_call", _parse_glob, _run_glob, _glob_error)


# ---- Delete -------------------------------------------------------------------------------------


def _parse_delete(raw: dict, call_id: str, ctx: RunToolContext) -> apb.DeleteArgs:
    path = Args(raw).string("path", required=True, non_empty=True)
    return apb.DeleteArgs(path=resolve_path(path, ctx.workspace), tool_call_id=call_id)


def delete_outcome(result: apb.DeleteResult, card: apb.DeleteArgs) -> ToolOutcome:
    kind = variant(result, "result", "DeleteResult")
    sub = getattr(result, kind)
    path = sub.path or card.path
    if kind == "success":
        return ToolOutcome(result, f"Deleted {path}")
    messages = {
        "file_not_found": lambda: f"File not found: {path}",
        "not_file": lambda: f"{path} is not a file" + (f" (it is a {sub.actual_type})" if sub.actual_type else ""),
        "permission_denied": lambda: f"Permission denied deleting {path}"
        + (f": {sub.client_visible_error}" if sub.client_visible_error else ""),
        "file_busy": lambda: f"{path} is busy (in use by another process)",
        "rejected": lambda: f"Deleting {path} was rejected" + (f": {sub.reason}" if sub.reason else ""),
        "error": lambda: f"Error deleting {path}: {sub.error}",
    }
    return ToolOutcome(result, messages[kind](), is_error=True)


async def _run_delete(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    _, result = await io.exec("delete_args", card, results=frozenset({"delete_result"}))
    return delete_outcome(result, card)


DELETE = ToolDef("Delete", "exec", "delete_tool_call", _parse_delete, _run_delete,
                 lambda message: apb.DeleteResult(error=apb.DeleteError(error=message)))


# ---- ReadLints (diagnostics_args, one exec per path) ----------------------------------------------

_SEVERITY = {
    apb.DIAGNOSTIC_SEVERITY_ERROR: "error",
    apb.DIAGNOSTIC_SEVERITY_WARNING: "warning",
    apb.DIAGNOSTIC_SEVERITY_INFORMATION: "info",
    apb.DIAGNOSTIC_SEVERITY_HINT: "hint",
}


def _parse_lints(raw: dict, call_id: str, ctx: RunToolContext) -> apb.ReadLintsToolArgs:
    paths = Args(raw).str_list("paths") or []
    for i, p in enumerate(paths):
        if not p.strip():
            raise ToolArgsError(f"invalid paths[{i}]: a path must not be empty")
    return apb.ReadLintsToolArgs(paths=[resolve_path(p, ctx.workspace) for p in paths])


def _file_diagnostics(s: apb.DiagnosticsSuccess, path: str) -> apb.FileDiagnostics:
    fd = apb.FileDiagnostics(path=s.path or path)
    for d in s.diagnostics:
        item = fd.diagnostics.add(severity=d.severity, message=d.message, source=d.source, code=d.code,
                                  is_stale=d.is_stale)
        if d.HasField("range"):
            item.range.start.CopyFrom(d.range.start)
            item.range.end.CopyFrom(d.range.end)
    fd.diagnostics_count = len(fd.diagnostics)
    return fd


def _render_diagnostics(files: list[apb.FileDiagnostics]) -> str:
    sections = []
    for fd in files:
        if not fd.diagnostics:
            continue
        lines = [f"{fd.path}:"]
        for d in fd.diagnostics:
            where = f"L{d.range.start.line}:{d.range.start.column}" if d.HasField("range") else "L?"
            tag = " ".join(x for x in (d.source, str(d.code) if d.code else "") if x)
            lines.append(f"  {where} {_SEVERITY.get(d.severity, 'diagnostic')}: {d.message}"
                         + (f" [{tag}]" if tag else "") + (" (stale)" if d.is_stale else ""))
        sections.append("\n".join(lines))
    return "\n\n".join(sections)


def _diagnostics_failure(result: apb.DiagnosticsResult, kind: str, path: str) -> str:
    sub = getattr(result, kind)
    path = sub.path or path
    if kind == "file_not_found":
        return f"File not found: {path}"
    if kind == "permission_denied":
        return f"Permission denied: {path}"
    if kind == "rejected":
        return f"Reading diagnostics of {path} was rejected" + (f": {sub.reason}" if sub.reason else "")
    return f"Error reading diagnostics of {path}: {sub.error}"


async def _run_lints(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    # No paths = the whole workspace: one exec for the workspace root.
    paths = list(card.paths) or [io.context.workspace]
    files: list[apb.FileDiagnostics] = []
    failures: list[str] = []
    for path in paths:
        _, result = await io.exec("diagnostics_args", apb.DiagnosticsArgs(path=path, tool_call_id=io.call_id),
                                  results=frozenset({"diagnostics_result"}))
        kind = variant(result, "result", "DiagnosticsResult")
        if kind == "success":
            files.append(_file_diagnostics(result.success, path))
        else:
            failures.append(_diagnostics_failure(result, kind, path))
    total = sum(fd.diagnostics_count for fd in files)
    text = _render_diagnostics(files)
    if failures:
        message = "\n".join(failures)
        content = message + (f"\n\n{text}" if text else "")
        return ToolOutcome(_lints_error(message), cap_head(content), is_error=True)
    success = apb.ReadLintsToolSuccess(file_diagnostics=files, total_files=len(files), total_diagnostics=total)
    return ToolOutcome(apb.ReadLintsToolResult(success=success), cap_head(text) if total else "No linter errors found.")


def _lints_error(message: str) -> apb.ReadLintsToolResult:
    return apb.ReadLintsToolResult(error=apb.ReadLintsToolError(error_message=message))


READ_LINTS = ToolDef("ReadLints", "exec", "read_lints_tool_call", _parse_lints, _run_lints, _lints_error)
