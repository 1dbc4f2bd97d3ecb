"""Every model tool this version executes: name -> `ToolDef` (one transport, one ToolCall variant).

| model tool        | transport          | ToolCall variant              | wire (server -> client)                        | client reply                        |
|-------------------|--------------------|-------------------------------|------------------------------------------------|-------------------------------------|
| Read              | exec               | read_tool_call                | read_args                                      | read_result                         |
| Ls                | exec               | ls_tool_call                  | ls_args                                        | ls_result                           |
| Grep              | exec               | grep_tool_call                | grep_args                                      | grep_result                         |
| Glob              | exec               | glob_tool_call                | grep_args (files_with_matches, glob)           | grep_result                         |
| Delete            | exec               | delete_tool_call              | delete_args                                    | delete_result                       |
| ReadLints         | exec               | read_lints_tool_call          | diagnostics_args (one per path)                | diagnostics_result                  |
| Write             | exec x2            | edit_tool_call                | hidden read_args, then write_args              | read_result, write_result           |
| StrReplace        | exec x2            | edit_tool_call                | hidden read_args, then write_args              | read_result, write_result           |
| Shell             | exec (stream)      | shell_tool_call               | shell_stream_args (ShellArgs)                  | shell_stream events                 |
| AwaitShell        | exec               | await_tool_call               | read_args of <terminals_folder>/<id>.txt       | read_result                         |
| TodoWrite         | local              | update_todos_tool_call        | -                                              | -                                   |
| UpdateCurrentStep | local              | communicate_update_tool_call  | -                                              | -                                   |
| AskQuestion       | interaction        | ask_question_tool_call        | ask_question_interaction_query                 | ask_question_interaction_response   |
| CreatePlan        | interaction        | create_plan_tool_call         | create_plan_request_query                      | create_plan_request_response        |
| SwitchMode        | interaction        | switch_mode_tool_call         | switch_mode_request_query                      | switch_mode_request_response        |
| WebFetch          | interaction + exec | web_fetch_tool_call           | web_fetch_request_query, then fetch_args       | ..._response, then fetch_result     |
| WebSearch         | interaction        | web_search_tool_call          | web_search_request_query (then "not configured") | web_search_request_response       |
| GenerateImage     | interaction        | generate_image_tool_call      | generate_image_request_query (then "not configured") | generate_image_request_response |
| GetMcpTools       | exec               | get_mcp_tools_tool_call       | mcp_state_exec_args                            | mcp_state_exec_result               |
| CallMcpTool       | exec               | mcp_tool_call                 | mcp_args (the exact cached definition)         | mcp_result                          |
| FetchMcpResource  | exec               | read_mcp_resource_tool_call   | read_mcp_resource_exec_args                    | read_mcp_resource_exec_result       |
| Task              | exec               | task_tool_call                | subagent_args (the client runs the child)      | subagent_result                     |

`ctx.extra` keys the dispatcher provides: `todos` (TodoWrite: the current list of TodoItem),
`now_ms` (TodoWrite timestamps, optional), `message_index` (UpdateCurrentStep, required), `mcp`
(the run's McpTable, from the MCP capability). MCP tools offered directly are not in this table:
they are built per run (`mcp.direct_tool`).

How the dispatcher uses a ToolDef: `decode_args(text)` then `tool.parse(args, call_id, ctx)`; a
`ToolArgsError` from either becomes `invalid_args_outcome(tool, str(e))` (card shown and closed, no
exec). A name not in this run's tool set becomes `unknown_tool_outcome(name, available)`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from .base import ToolDef, ToolOutcome
from .common import decode_args
from .edit import STR_REPLACE, WRITE
from .files import DELETE, GLOB, GREP, LS, READ, READ_LINTS
from .interaction import ASK_QUESTION, CREATE_PLAN, GENERATE_IMAGE, SWITCH_MODE, WEB_FETCH, WEB_SEARCH
from .local import TODO_WRITE, UPDATE_CURRENT_STEP
from .mcp import CALL_MCP_TOOL, FETCH_MCP_RESOURCE, GET_MCP_TOOLS
from .task import TASK
from .shell import AWAIT_SHELL, SHELL

__all__ = ["REGISTRY", "decode_args", "invalid_args_outcome", "lookup", "unknown_tool_outcome"]

REGISTRY: Mapping[str, ToolDef] = MappingProxyType({
    tool.name: tool
    for tool in (
        READ, LS, GREP, GLOB, DELETE, READ_LINTS, WRITE, STR_REPLACE, SHELL, AWAIT_SHELL,
        TODO_WRITE, UPDATE_CURRENT_STEP,
        ASK_QUESTION, CREATE_PLAN, SWITCH_MODE, WEB_FETCH, WEB_SEARCH, GENERATE_IMAGE,
        GET_MCP_TOOLS, CALL_MCP_TOOL, FETCH_MCP_RESOURCE, TASK,
    )
})


def lookup(name: str) -> ToolDef | None:
    """The exact (case-sensitive) model tool name; no aliases, no fallback."""
    return REGISTRY.get(name)


def unknown_tool_outcome(name: str, available: Iterable[str]) -> ToolOutcome:
    """A tool the model invented or that this run does not offer: a tool error it can recover from."""
    names = ", ".join(available) or "(none)"
    content = (f"Tool {name!r} is not available: it is not in the current advertised tool set. "
               f"Available tools: {names}.")
    return ToolOutcome(None, content, is_error=True)


def invalid_args_outcome(tool: ToolDef, message: str) -> ToolOutcome:
    """Arguments that are not JSON or break the tool's schema: the typed error result of its card.
    `message` is the bare reason (a ToolArgsError's text); a caller's own prefix is not repeated."""
    prefix = f"Invalid arguments for {tool.name}: "
    message = message.removeprefix(prefix).rstrip(". ")
    content = f"{prefix}{message}. Fix the arguments and call {tool.name} again."
    return ToolOutcome(tool.error_result(content), content, is_error=True)
