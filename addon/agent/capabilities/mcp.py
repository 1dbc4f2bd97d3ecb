"""The MCP capability: the user's MCP servers reach the model through Cursor's meta tools.

Per run, before its action starts (`before_action`):
  - an `McpTable` (cursor/tools/mcp.py) goes into the tool context, seeded from the definitions the
    request carried: `AgentRunRequest.mcp_tools` and the MCP request-context part (fetched and
    verified like every part). GetMcpTools refreshes it from the client; it dies with the run.
  - when the mode offers CallMcpTool and the table holds at most DIRECT_LIMIT tools, each tool is
    also offered directly, after the mode's tools, under a provider-safe name that maps back exactly
    (`direct_names`), with its schema normalised (`mcp_schema`). Larger sets stay behind the meta
    tools: dozens of schemas in every request cost more than one GetMcpTools call.
The meta tools themselves are ordinary catalog tools (registry.py), offered by the mode manifests.
"""

from __future__ import annotations

import dataclasses
import logging

from byok.proto import agent_pb2 as apb

from ..cursor import request_parts
from ..cursor.tools.mcp import EXTRA_KEY, META_TOOLS, McpTable, direct_names, direct_tool
from ..turn_base import TurnHooks, TurnState

log = logging.getLogger("byok.mcp")

DIRECT_LIMIT = 20
"""At most this many MCP tools are offered directly (all or none)."""


class McpCapability(TurnHooks):
    def __init__(self, turn: TurnState) -> None:
        self.table = McpTable()
        context = turn.tool_context
        turn.tool_context = dataclasses.replace(context, extra={**context.extra, EXTRA_KEY: self.table})

    async def before_action(self, turn: TurnState) -> None:
        offered = set(turn.offered_tools)
        if not META_TOOLS & offered:
            return
        request = turn.request
        part = None
        if request.action.HasField("request_context_parts"):
            part = await request_parts.part(turn, request.action.request_context_parts, "mcps")
        definitions = [*request.mcp_tools.mcp_tools, *(part.tools if part is not None else ())]
        self.table.seed(definitions, _descriptors(request, part))
        if not len(self.table):
            return
        if "CallMcpTool" not in offered:
            return
        if len(self.table) > DIRECT_LIMIT:
            log.info("[%s] %d MCP tools: reachable through GetMcpTools/CallMcpTool only (more than %d)",
                     turn.run.request_id, len(self.table), DIRECT_LIMIT)
            return
        tools = self.table.tools()
        names = direct_names(tools, reserved=offered)
        specs, implementations = [], dict(turn.offered_tools)
        for tool in tools:
            spec, implementation = direct_tool(tool, names[tool.name])
            specs.append(spec)
            implementations[spec.name] = implementation
        turn.use_tools(turn.tools, implementations, dynamic=(*turn.dynamic_tools, *specs))


def _descriptors(request: apb.AgentRunRequest, part: apb.RequestContextMcpsPart | None) -> list[apb.McpDescriptor]:
    """Every server descriptor the request carried (they tell which server a bare definition is of)."""
    out: list[apb.McpDescriptor] = []
    contexts = []
    if part is not None:
        contexts.append(part)
    action = request.action
    if action.WhichOneof("action") == "user_message_action":
        contexts.append(action.user_message_action.request_context)
    for source in contexts:
        for name in ("mcp_meta_tool_options", "mcp_file_system_options"):
            if source.HasField(name):
                out.extend(getattr(source, name).mcp_descriptors)
    if request.HasField("mcp_file_system_options"):
        out.extend(request.mcp_file_system_options.mcp_descriptors)
    return out

