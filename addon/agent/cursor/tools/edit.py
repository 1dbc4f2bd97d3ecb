"""Write and StrReplace: the two-phase edit behind Cursor's `edit_tool_call` card (seed §30).

    card   EditArgs{path, stream_content = the LF-normalised new text}
    exec 1 hidden read_args{path, tool_call_id}        -> before (file_not_found: "" for Write only)
           compute after (LF everywhere; StrReplace: exact, unique unless replace_all)
    exec 2 hidden write_args{path, file_text=after, tool_call_id}
    result EditResult{success=EditSuccess{path, lines_added, lines_removed, diff_string,
                                          before_full_file_content, after_full_file_content}}

Each exec takes its own numeric id from the port; both carry the same tool_call_id. A failed read,
an ambiguous replacement or a failed write ends the call with the matching typed EditResult branch.

`EditArgsStream` turns the streaming argument text into live card updates: the decoded
`contents` / `new_string` characters at once as `tool_call_delta` (never waiting for the path),
and a `partial_tool_call` with `EditArgs{path}` once the path string is complete.
"""

from __future__ import annotations

from collections.abc import Callable

from google.protobuf.message import Message

from byok.proto import agent_pb2 as apb

from .base import CallIO, RunToolContext, ToolArgsError, ToolDef, ToolOutcome
from .common import Args, resolve_path, variant
from .edit_text import LFStream, ReplaceError, count_lines, diff, replace_exact, to_lf
from .files import read_failure
from .jsonscan import JsonFieldScanner

Compute = Callable[[str], tuple[str, int]]
"""before (LF) -> (after (LF), occurrences replaced); raises ReplaceError."""


# ---- parse --------------------------------------------------------------------------------------


def _parse_write(raw: dict, call_id: str, ctx: RunToolContext) -> apb.EditArgs:
    a = Args(raw)
    path = resolve_path(a.string("path", required=True, non_empty=True), ctx.workspace)
    contents = a.string("contents", required=True)
    return apb.EditArgs(path=path, stream_content=to_lf(contents))


def _parse_str_replace(raw: dict, call_id: str, ctx: RunToolContext) -> apb.EditArgs:
    a = Args(raw)
    path = resolve_path(a.string("path", required=True, non_empty=True), ctx.workspace)
    old = to_lf(a.string("old_string", required=True))
    new = to_lf(a.string("new_string", required=True))
    a.boolean("replace_all")
    if not old:
        raise ToolArgsError("invalid old_string: it must not be empty (use Write to create or overwrite a file)")
    if old == new:
        raise ToolArgsError("invalid new_string: it must differ from old_string")
    return apb.EditArgs(path=path, stream_content=new)


# ---- run ----------------------------------------------------------------------------------------


def _error(path: str, message: str) -> apb.EditResult:
    return apb.EditResult(error=apb.EditError(path=path, error=message, model_visible_error=message))


def edit_error_result(message: str) -> apb.EditResult:
    return _error("", message)


def _read_failure(read: apb.ReadResult, kind: str, path: str) -> ToolOutcome:
    message = read_failure(read, kind)
    if kind == "file_not_found":
        result = apb.EditResult(file_not_found=apb.EditFileNotFound(path=path))
    elif kind == "permission_denied":
        result = apb.EditResult(read_permission_denied=apb.EditReadPermissionDenied(path=path))
    elif kind == "rejected":
        result = apb.EditResult(rejected=apb.EditRejected(path=path, reason=read.rejected.reason))
    else:
        result = _error(path, message)
    return ToolOutcome(result, message, is_error=True)


def _write_failure(write: apb.WriteResult, kind: str, path: str) -> ToolOutcome:
    sub = getattr(write, kind)
    if kind == "permission_denied":
        message = f"Permission denied writing {path}" + (f": {sub.error}" if sub.error else "")
        result = apb.EditResult(write_permission_denied=apb.EditWritePermissionDenied(
            path=path, error=sub.error, is_readonly=sub.is_readonly))
    elif kind == "rejected":
        message = f"Writing {path} was rejected" + (f": {sub.reason}" if sub.reason else "")
        result = apb.EditResult(rejected=apb.EditRejected(path=path, reason=sub.reason))
    elif kind == "no_space":
        message = f"Cannot write {path}: no space left on the device"
        result = _error(path, message)
    else:
        message = f"Error writing {path}: {sub.error}"
        result = _error(path, message)
    return ToolOutcome(result, message, is_error=True)


async def run_edit(io: CallIO, card: apb.EditArgs, compute: Compute, *, create: bool) -> ToolOutcome:
    """The hidden read -> compute -> hidden write of one edit. `create`: a missing file is empty."""
    path = card.path
    _, read = await io.exec("read_args", apb.ReadArgs(path=path, tool_call_id=io.call_id),
                            results=frozenset({"read_result"}))
    kind = variant(read, "result", "ReadResult")
    if kind == "success":
        s = read.success
        if s.WhichOneof("output") == "data":
            message = f"{path} is not a text file; it cannot be edited"
            return ToolOutcome(_error(path, message), message, is_error=True)
        if s.truncated or s.range_applied:
            # Writing back a partial read would silently drop the rest of the file.
            message = f"{path} is too large to edit safely (the client returned only part of it)"
            return ToolOutcome(_error(path, message), message, is_error=True)
        before, existed = to_lf(s.content), True
    elif kind == "file_not_found" and create:
        before, existed = "", False
    else:
        return _read_failure(read, kind, path)
    try:
        after, replaced = compute(before)
    except ReplaceError as e:
        message = f"{e} ({path})"
        return ToolOutcome(_error(path, message), message, is_error=True)
    _, write = await io.exec("write_args", apb.WriteArgs(path=path, file_text=after, tool_call_id=io.call_id),
                             results=frozenset({"write_result"}))
    kind = variant(write, "result", "WriteResult")
    if kind != "success":
        return _write_failure(write, kind, path)
    d = diff(before, after, path)
    success = apb.EditSuccess(path=path, lines_added=d.lines_added, lines_removed=d.lines_removed,
                              diff_string=d.text, before_full_file_content=before,
                              after_full_file_content=after)
    if existed:
        content = f"Updated {path}: +{d.lines_added} -{d.lines_removed} lines"
        if replaced > 1:
            content += f" ({replaced} occurrences replaced)"
    else:
        content = f"Created {path} ({count_lines(after)} lines)"
    return ToolOutcome(apb.EditResult(success=success), content)


async def _run_write(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    after = card.stream_content
    return await run_edit(io, card, lambda before: (after, 0), create=True)


async def _run_str_replace(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    a = Args(raw)
    old, new = to_lf(a.string("old_string") or ""), to_lf(a.string("new_string") or "")
    replace_all = bool(a.boolean("replace_all"))
    return await run_edit(io, card, lambda before: replace_exact(before, old, new, replace_all=replace_all),
                          create=False)


# ---- streaming card -----------------------------------------------------------------------------


class EditArgsStream:
    """Streaming argument text of one Write/StrReplace -> live edit-card updates."""

    def __init__(self, call_id: str, model_call_id: str, content_key: str, workspace: str = "") -> None:
        self.workspace = workspace
        """The path card shows the path as the tool will use it (resolved against the workspace)."""
        self.call_id = call_id
        self.model_call_id = model_call_id
        self.content_key = content_key
        self._scanner = JsonFieldScanner({"path", content_key})
        self._lf = LFStream()
        self._path: list[str] = []
        self._path_sent = False

    def feed(self, text: str) -> list[apb.InteractionUpdate]:
        updates: list[apb.InteractionUpdate] = []
        for chunk in self._scanner.feed(text):
            if chunk.key == self.content_key:
                out = self._lf.feed(chunk.text) + (self._lf.finish() if chunk.done else "")
                if out:
                    updates.append(self._delta(out))
            elif not self._path_sent:  # "path"
                self._path.append(chunk.text)
                if chunk.done:
                    self._path_sent = True
                    path = "".join(self._path)
                    updates.append(self._partial(resolve_path(path, self.workspace) if self.workspace else path))
        return updates

    def _delta(self, text: str) -> apb.InteractionUpdate:
        delta = apb.ToolCallDelta(edit_tool_call_delta=apb.EditToolCallDelta(stream_content_delta=text))
        return apb.InteractionUpdate(tool_call_delta=apb.ToolCallDeltaUpdate(
            call_id=self.call_id, tool_call_delta=delta, model_call_id=self.model_call_id))

    def _partial(self, path: str) -> apb.InteractionUpdate:
        call = apb.ToolCall(edit_tool_call=apb.EditToolCall(args=apb.EditArgs(path=path)))
        return apb.InteractionUpdate(partial_tool_call=apb.PartialToolCallUpdate(
            call_id=self.call_id, tool_call=call, model_call_id=self.model_call_id))


WRITE = ToolDef("Write", "exec", "edit_tool_call", _parse_write, _run_write, edit_error_result,
                stream=lambda call_id, model_call_id, ctx=None: EditArgsStream(
                    call_id, model_call_id, "contents", ctx.workspace if ctx else ""))
STR_REPLACE = ToolDef("StrReplace", "exec", "edit_tool_call", _parse_str_replace, _run_str_replace,
                      edit_error_result,
                      stream=lambda call_id, model_call_id, ctx=None: EditArgsStream(
                          call_id, model_call_id, "new_string", ctx.workspace if ctx else ""))
