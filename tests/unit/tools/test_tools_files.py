"""Read, Ls, Grep, Glob, Delete, ReadLints codecs: argument validation, the exact exec sent, the
typed result and the string the model sees for success and every error branch."""

from __future__ import annotations

import pytest

from byok.agent.cursor.tools import files
from byok.agent.cursor.tools.base import RunToolContext, ToolArgsError
from byok.wire.errors import ProtocolError
from byok.proto import agent_pb2 as apb
from tests.support.fake_call_io import CLOSE, EMPTY, FakeCallIO, run_tool

CTX = RunToolContext(conversation_id="conv-1", workspace_paths=("/ws",), terminals_folder="/ws/.terminals")


def io(*replies) -> FakeCallIO:
    fake = FakeCallIO(context=CTX)
    for r in replies:
        fake.reply(*r) if isinstance(r, list) else fake.script.append(r)
    return fake


def parse(tool, raw):
    return tool.parse(raw, "call-1", CTX)


# ---- Read ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw,message", [
    ({}, "missing path"),
    ({"path": 3}, "missing path"),
    ({"path": ""}, "missing path"),
    ({"path": "a", "limit": 0}, "limit out of range"),
    ({"path": "a", "offset": "x"}, "invalid offset"),
    ({"path": "a", "limit": 1.5}, "invalid limit"),
])
def test_read_args_errors(raw, message):
    with pytest.raises(ToolArgsError, match=message):
        parse(files.READ, raw)


def test_read_sends_read_args_and_numbers_lines():
    fake = io([("read_result", apb.ReadResult(success=apb.ReadSuccess(
        path="/ws/src/a.py", content="alpha\nbeta\n", total_lines=2, file_size=11)))])
    card, out = run_tool(files.READ, {"path": "src/a.py", "ignored_extra": 1}, fake)
    assert card == apb.ReadToolArgs(path="/ws/src/a.py")
    (sent,) = fake.execs
    assert sent.field == "read_args" and sent.results == {"read_result"}
    assert sent.message.read_args == apb.ReadArgs(path="/ws/src/a.py", tool_call_id=fake.call_id)
    assert sent.message.exec_id == fake.call_id and sent.message.id == 1
    assert out.content == "     1|alpha\n     2|beta"
    assert not out.is_error
    s = out.result.success
    assert (s.path, s.content, s.total_lines, s.file_size, s.is_empty) == ("/ws/src/a.py", "alpha\nbeta\n", 2, 11, False)


def test_read_range_and_truncation():
    fake = io([("read_result", apb.ReadResult(success=apb.ReadSuccess(
        path="/a", content="x\ny\n", total_lines=100, range_applied=True, truncated=True)))])
    card, out = run_tool(files.READ, {"path": "/a", "offset": 10, "limit": 2}, fake)
    assert fake.execs[0].args == apb.ReadArgs(path="/a", tool_call_id=fake.call_id, offset=10, limit=2)
    assert out.content.startswith("    10|x\n    11|y\n[Output truncated: showing lines 10-11 of 100.")
    assert out.result.success.read_range == apb.ReadRange(start_line=10, end_line=11)
    assert out.result.success.exceeded_limit


def test_read_empty_and_binary():
    _, out = run_tool(files.READ, {"path": "/e"}, io([("read_result", apb.ReadResult(success=apb.ReadSuccess(path="/e")))]))
    assert out.content == "File is empty." and out.result.success.is_empty
    _, out = run_tool(files.READ, {"path": "/b"}, io([("read_result", apb.ReadResult(success=apb.ReadSuccess(
        path="/b", data=b"\x00\x01")))]))
    assert "binary file (2 bytes)" in out.content and not out.is_error


@pytest.mark.parametrize("result,content", [
    (apb.ReadResult(file_not_found=apb.ReadFileNotFound(path="/x")), "File not found: /x"),
    (apb.ReadResult(permission_denied=apb.ReadPermissionDenied(path="/x")), "Permission denied reading /x"),
    (apb.ReadResult(rejected=apb.ReadRejected(path="/x", reason="ignored file")), "Reading /x was rejected: ignored file"),
    (apb.ReadResult(invalid_file=apb.ReadInvalidFile(path="/x", reason="too big")), "Cannot read /x: too big"),
    (apb.ReadResult(error=apb.ReadError(path="/x", error="EIO")), "Error reading /x: EIO"),
])
def test_read_error_branches(result, content):
    _, out = run_tool(files.READ, {"path": "/x"}, io([("read_result", result)]))
    assert out.is_error and out.content == content
    assert out.result == apb.ReadToolResult(error=apb.ReadToolError(error_message=content))


def test_read_success_with_error_words_is_success():
    fake = io([("read_result", apb.ReadResult(success=apb.ReadSuccess(path="/x", content="Error: failure\n")))])
    _, out = run_tool(files.READ, {"path": "/x"}, fake)
    assert not out.is_error and out.result.WhichOneof("result") == "success"


def test_read_protocol_violations():
    with pytest.raises(ProtocolError):
        run_tool(files.READ, {"path": "/x"}, io([("write_result", apb.WriteResult())]))
    with pytest.raises(ProtocolError, match="closed before result"):
        run_tool(files.READ, {"path": "/x"}, io([EMPTY, CLOSE]))
    with pytest.raises(ProtocolError, match="no result set"):
        run_tool(files.READ, {"path": "/x"}, io([("read_result", apb.ReadResult())]))


# ---- Ls -----------------------------------------------------------------------------------------

def tree() -> apb.LsDirectoryTreeNode:
    root = apb.LsDirectoryTreeNode(abs_path="/ws", children_were_processed=True)
    src = root.children_dirs.add(abs_path="/ws/src", children_were_processed=True)
    src.children_files.add(name="a.py")
    root.children_dirs.add(abs_path="/ws/node_modules", children_were_processed=False)
    root.children_files.add(name="README.md")
    return root


def test_ls_sends_args_and_renders_tree():
    fake = io([("ls_result", apb.LsResult(success=apb.LsSuccess(directory_tree_root=tree())))])
    card, out = run_tool(files.LS, {"path": ".", "ignore": ["*.log"]}, fake)
    assert card == apb.LsArgs(path="/ws", ignore=["*.log"], tool_call_id="call-1\nfc_1")
    assert fake.execs[0].message.ls_args == card
    assert out.content == "/ws/\n  - src/\n    - a.py\n  - node_modules/ (not listed)\n  - README.md"
    assert out.result.success.directory_tree_root == tree()


@pytest.mark.parametrize("result,content", [
    (apb.LsResult(error=apb.LsError(path="/ws", error="ENOENT")), "Error listing /ws: ENOENT"),
    (apb.LsResult(rejected=apb.LsRejected(path="/ws", reason="outside workspace")),
     "Listing /ws was rejected: outside workspace"),
])
def test_ls_errors(result, content):
    _, out = run_tool(files.LS, {"path": "/ws"}, io([("ls_result", result)]))
    assert out.is_error and out.content == content and out.result == result


def test_ls_timeout_is_error_with_partial_tree():
    result = apb.LsResult(timeout=apb.LsTimeout(directory_tree_root=tree()))
    _, out = run_tool(files.LS, {"path": "/ws"}, io([("ls_result", result)]))
    assert out.is_error and out.content.startswith("Listing timed out; partial result:\n/ws/")


def test_ls_args_errors():
    with pytest.raises(ToolArgsError, match="invalid ignore\\[1\\]"):
        parse(files.LS, {"path": "/ws", "ignore": ["a", 1]})


# ---- Grep ---------------------------------------------------------------------------------------

def test_grep_maps_every_argument():
    card = parse(files.GREP, {"pattern": "foo\\(", "path": "src", "glob": "*.py", "type": "py",
                              "output_mode": "content", "-i": True, "-A": 1, "-B": 2, "-C": 3,
                              "multiline": False, "head_limit": 5, "offset": 10})
    assert card == apb.GrepArgs(pattern="foo\\(", path="/ws/src", glob="*.py", type="py", output_mode="content",
                                case_insensitive=True, context_after=1, context_before=2, context=3,
                                multiline=False, head_limit=5, offset=10, tool_call_id="call-1")


def test_grep_defaults():
    assert parse(files.GREP, {"pattern": "x"}) == apb.GrepArgs(pattern="x", output_mode="content", tool_call_id="call-1")


@pytest.mark.parametrize("raw,message", [
    ({}, "missing pattern"),
    ({"pattern": ""}, "missing pattern"),
    ({"pattern": "x", "output_mode": "lines"}, "invalid output_mode"),
    ({"pattern": "x", "-A": -1}, "-A out of range"),
    ({"pattern": "x", "-i": "yes"}, "invalid -i"),
    ({"pattern": "x", "head_limit": 0}, "head_limit out of range"),
])
def test_grep_args_errors(raw, message):
    with pytest.raises(ToolArgsError, match=message):
        parse(files.GREP, raw)


def grep_success(union: apb.GrepUnionResult, mode: str, **more) -> apb.GrepResult:
    return apb.GrepResult(success=apb.GrepSuccess(pattern="x", path="/ws", output_mode=mode,
                                                  workspace_results={"/ws": union, **more}))


def test_grep_content_rendering():
    content = apb.GrepContentResult(total_lines=3, total_matched_lines=2)
    fm = content.matches.add(file="src/a.py")
    fm.matches.add(line_number=3, content="before", is_context_line=True)
    fm.matches.add(line_number=4, content="x = 1")
    content.matches.add(file="b.py").matches.add(line_number=1, content="x", content_truncated=True)
    result = grep_success(apb.GrepUnionResult(content=content), "content")
    fake = io([("grep_result", result)])
    _, out = run_tool(files.GREP, {"pattern": "x"}, fake)
    assert fake.execs[0].field == "grep_args"
    assert out.content == "src/a.py\n3-before\n4:x = 1\n\nb.py\n1:x [line truncated]"
    assert out.result == result and not out.is_error


def test_grep_files_count_and_truncation_and_workspaces():
    files_u = apb.GrepUnionResult(files=apb.GrepFilesResult(files=["a", "b"], total_files=2, client_truncated=True))
    count_u = apb.GrepUnionResult(count=apb.GrepCountResult(counts=[apb.GrepFileCount(file="c", count=3)]))
    _, out = run_tool(files.GREP, {"pattern": "x"}, io([("grep_result", grep_success(files_u, "files_with_matches"))]))
    assert out.content == "a\nb\n[Results truncated: narrow the pattern or page with head_limit and offset.]"
    result = grep_success(files_u, "files", **{"/other": count_u})
    _, out = run_tool(files.GREP, {"pattern": "x"}, io([("grep_result", result)]))
    assert out.content.startswith("Workspace /other:\nc:3\n\nWorkspace /ws:\na\nb")


def test_grep_no_matches_and_error():
    empty = grep_success(apb.GrepUnionResult(files=apb.GrepFilesResult()), "files_with_matches")
    _, out = run_tool(files.GREP, {"pattern": "x"}, io([("grep_result", empty)]))
    assert out.content == "No matches found." and not out.is_error
    err = apb.GrepResult(error=apb.GrepError(error="regex parse error"))
    _, out = run_tool(files.GREP, {"pattern": "("}, io([("grep_result", err)]))
    assert out.is_error and out.content == "Grep failed: regex parse error" and out.result == err


# ---- Glob ---------------------------------------------------------------------------------------

def test_glob_card_and_grep_exec():
    union = apb.GrepUnionResult(files=apb.GrepFilesResult(files=["/ws/src/a_test.py", "/ws/b_test.py"], total_files=2))
    fake = io([("grep_result", grep_success(union, "files_with_matches"))])
    card, out = run_tool(files.GLOB, {"glob_pattern": "**/*_test.py", "target_directory": "src"}, fake)
    assert files.GLOB.variant == "glob_tool_call"
    assert card == apb.GlobToolArgs(glob_pattern="**/*_test.py", target_directory="/ws/src")
    (sent,) = fake.execs
    assert sent.field == "grep_args"
    assert sent.args == apb.GrepArgs(pattern="", glob="**/*_test.py", path="/ws/src", output_mode="files_with_matches",
                                     tool_call_id=fake.call_id)
    assert out.result == apb.GlobToolResult(success=apb.GlobToolSuccess(
        pattern="**/*_test.py", path="/ws/src", files=["/ws/src/a_test.py", "/ws/b_test.py"], total_files=2))
    assert out.content == "2 file(s) matching **/*_test.py:\n/ws/src/a_test.py\n/ws/b_test.py"


def test_glob_without_target_none_found_and_error():
    fake = io([("grep_result", grep_success(apb.GrepUnionResult(files=apb.GrepFilesResult()), "files_with_matches"))])
    card, out = run_tool(files.GLOB, {"glob_pattern": "*.zig"}, fake)
    assert not fake.execs[0].args.HasField("path")
    assert out.content == "No files found matching *.zig" and not out.is_error
    assert out.result.success.path == "/ws"
    _, out = run_tool(files.GLOB, {"glob_pattern": "["}, io([("grep_result", apb.GrepResult(error=apb.GrepError(error="bad glob")))]))
    assert out.is_error and out.result == apb.GlobToolResult(error=apb.GlobToolError(error="Glob failed: bad glob"))
    with pytest.raises(ToolArgsError, match="missing glob_pattern"):
        parse(files.GLOB, {"target_directory": "/ws"})


# ---- Delete -------------------------------------------------------------------------------------

def test_delete_success_and_errors():
    fake = io([("delete_result", apb.DeleteResult(success=apb.DeleteSuccess(path="/ws/a", deleted_file="/ws/a")))])
    card, out = run_tool(files.DELETE, {"path": "a"}, fake)
    assert card == apb.DeleteArgs(path="/ws/a", tool_call_id=fake.call_id) == fake.execs[0].message.delete_args
    assert out.content == "Deleted /ws/a" and not out.is_error
    cases = [
        (apb.DeleteResult(file_not_found=apb.DeleteFileNotFound(path="/ws/a")), "File not found: /ws/a"),
        (apb.DeleteResult(not_file=apb.DeleteNotFile(path="/ws/a", actual_type="directory")),
         "/ws/a is not a file (it is a directory)"),
        (apb.DeleteResult(permission_denied=apb.DeletePermissionDenied(path="/ws/a", client_visible_error="EPERM")),
         "Permission denied deleting /ws/a: EPERM"),
        (apb.DeleteResult(file_busy=apb.DeleteFileBusy(path="/ws/a")), "/ws/a is busy (in use by another process)"),
        (apb.DeleteResult(rejected=apb.DeleteRejected(path="/ws/a", reason="no")), "Deleting /ws/a was rejected: no"),
        (apb.DeleteResult(error=apb.DeleteError(path="/ws/a", error="EIO")), "Error deleting /ws/a: EIO"),
    ]
    for result, content in cases:
        _, out = run_tool(files.DELETE, {"path": "/ws/a"}, io([("delete_result", result)]))
        assert (out.is_error, out.content, out.result) == (True, content, result)


# ---- ReadLints ----------------------------------------------------------------------------------

def diag(line, message, severity=apb.DIAGNOSTIC_SEVERITY_ERROR, source="pyright", code="E1"):
    d = apb.Diagnostic(severity=severity, message=message, source=source, code=code)
    d.range.start.line, d.range.start.column = line, 2
    d.range.end.line, d.range.end.column = line, 5
    return d


def test_read_lints_one_exec_per_path():
    ok_a = apb.DiagnosticsResult(success=apb.DiagnosticsSuccess(path="/ws/a.py", diagnostics=[diag(3, "bad")],
                                                                total_diagnostics=1))
    ok_b = apb.DiagnosticsResult(success=apb.DiagnosticsSuccess(path="/ws/b.py"))
    fake = io([("diagnostics_result", ok_a)], [("diagnostics_result", ok_b)])
    card, out = run_tool(files.READ_LINTS, {"paths": ["a.py", "/ws/b.py"]}, fake)
    assert card == apb.ReadLintsToolArgs(paths=["/ws/a.py", "/ws/b.py"])
    assert [s.args for s in fake.execs] == [apb.DiagnosticsArgs(path="/ws/a.py", tool_call_id=fake.call_id),
                                           apb.DiagnosticsArgs(path="/ws/b.py", tool_call_id=fake.call_id)]
    assert [s.id for s in fake.execs] == [1, 2]
    assert out.content == "/ws/a.py:\n  L3:2 error: bad [pyright E1]"
    s = out.result.success
    assert (s.total_files, s.total_diagnostics) == (2, 1)
    item = s.file_diagnostics[0].diagnostics[0]
    assert (item.message, item.range.end.column, s.file_diagnostics[0].diagnostics_count) == ("bad", 5, 1)


def test_read_lints_no_paths_is_workspace_and_clean():
    fake = io([("diagnostics_result", apb.DiagnosticsResult(success=apb.DiagnosticsSuccess(path="/ws")))])
    _, out = run_tool(files.READ_LINTS, {}, fake)
    assert fake.execs[0].args.path == "/ws"
    assert out.content == "No linter errors found." and not out.is_error


def test_read_lints_failure_keeps_other_diagnostics():
    ok = apb.DiagnosticsResult(success=apb.DiagnosticsSuccess(path="/ws/a.py", diagnostics=[
        diag(1, "unused", apb.DIAGNOSTIC_SEVERITY_WARNING, source="", code="")]))
    missing = apb.DiagnosticsResult(file_not_found=apb.DiagnosticsFileNotFound(path="/ws/zz.py"))
    _, out = run_tool(files.READ_LINTS, {"paths": ["/ws/a.py", "/ws/zz.py"]},
                      io([("diagnostics_result", ok)], [("diagnostics_result", missing)]))
    assert out.is_error
    assert out.content == "File not found: /ws/zz.py\n\n/ws/a.py:\n  L1:2 warning: unused"
    assert out.result == apb.ReadLintsToolResult(error=apb.ReadLintsToolError(error_message="File not found: /ws/zz.py"))


def test_error_results_are_typed():
    assert files.READ.error_result("m") == apb.ReadToolResult(error=apb.ReadToolError(error_message="m"))
    assert files.LS.error_result("m") == apb.LsResult(error=apb.LsError(error="m"))
    assert files.GREP.error_result("m") == apb.GrepResult(error=apb.GrepError(error="m"))
    assert files.GLOB.error_result("m") == apb.GlobToolResult(error=apb.GlobToolError(error="m"))
    assert files.DELETE.error_result("m") == apb.DeleteResult(error=apb.DeleteError(error="m"))
    assert files.READ_LINTS.error_result("m") == apb.ReadLintsToolResult(error=apb.ReadLintsToolError(error_message="m"))
