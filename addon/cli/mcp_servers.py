"""Scripted MCP servers for the Cursor-like client: what Cursor's MCP layer answers to the three MCP
execs, without any real server.

    mcp_state_exec_args          -> McpStateExecResult{success{servers (those named, or all)}}
    mcp_args                     -> the tool's scripted McpResult, but only for the EXACT definition:
                                    name, provider_identifier and tool_name must all match one tool
                                    (Cursor answers "MCP tool not found" otherwise, seed §33.3)
    read_mcp_resource_exec_args  -> the scripted resource, or not_found

`ScriptedMcp.definitions()` / `.descriptors()` give what a run request carries about the servers
(`AgentRunRequest.mcp_tools`, the MCP request-context part), so tests can seed a run as Cursor does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from google.protobuf import json_format, struct_pb2

from byok.proto import agent_pb2 as apb

E = apb.ExecClientMessage
MCP_EXECS = ("mcp_state_exec_args", "mcp_args", "read_mcp_resource_exec_args")


def text_result(text: str, *, is_error: bool = False, structured: dict | None = None) -> apb.McpResult:
    success = apb.McpSuccess(is_error=is_error)
    success.content.add().text.text = text
    if structured is not None:
        json_format.ParseDict(structured, success.structured_content)
    return apb.McpResult(success=success)


def image_result(data: bytes, mime_type: str = "image/png", caption: str = "") -> apb.McpResult:
    success = apb.McpSuccess()
    if caption:
        success.content.add().text.text = caption
    success.content.add().image.CopyFrom(apb.McpImageContent(data=data, mime_type=mime_type))
    return apb.McpResult(success=success)


@dataclass
class McpToolScript:
    tool_name: str
    reply: apb.McpResult | Callable[[dict], apb.McpResult]
    """The result, or a function of the call's arguments (as JSON)."""
    description: str = ""
    input_schema: dict = field(default_factory=lambda: {"type": "object", "properties": {}})
    provider_identifier: str = ""
    name: str = ""
    """The definition's full name; default `<server identifier>-<tool name>` (Cursor's plugin naming)."""


@dataclass
class McpResource:
    text: str | None = None
    blob: bytes | None = None
    mime_type: str = "text/plain"
    name: str = ""


@dataclass
class McpServerScript:
    identifier: str
    name: str = ""
    tools: list[McpToolScript] = field(default_factory=list)
    resources: dict[str, McpResource] = field(default_factory=dict)
    instructions: str = ""

    def definition(self, tool: McpToolScript) -> apb.McpToolDefinition:
        d = apb.McpToolDefinition(name=tool.name or f"{self.identifier}-{tool.tool_name}",
                                  provider_identifier=tool.provider_identifier or self.identifier,
                                  tool_name=tool.tool_name, description=tool.description)
        json_format.ParseDict(tool.input_schema, d.input_schema)
        return d


@dataclass
class ScriptedMcp:
    servers: list[McpServerScript]
    calls: list[apb.McpArgs] = field(default_factory=list)
    """Every mcp_args received, in order."""
    listings: list[apb.McpStateExecArgs] = field(default_factory=list)
    reads: list[apb.ReadMcpResourceExecArgs] = field(default_factory=list)

    def definitions(self) -> list[apb.McpToolDefinition]:
        return [s.definition(t) for s in self.servers for t in s.tools]

    def descriptors(self) -> list[apb.McpDescriptor]:
        out = []
        for s in self.servers:
            d = apb.McpDescriptor(server_name=s.name or s.identifier, server_identifier=s.identifier)
            if s.instructions:
                d.server_use_instructions = s.instructions
            for t in s.tools:
                d.tools.add(tool_name=t.tool_name, description=t.description)
            out.append(d)
        return out

    def request_part(self) -> apb.RequestContextMcpsPart:
        """The MCP request-context part a run request references, as Cursor builds it."""
        part = apb.RequestContextMcpsPart(tools=self.definitions())
        part.mcp_meta_tool_options.enabled = True
        part.mcp_meta_tool_options.mcp_descriptors.extend(self.descriptors())
        return part

    def remove_tool(self, identifier: str, tool_name: str) -> None:
        """The server stops offering a tool (seen by the next GetMcpTools)."""
        for s in self.servers:
            if s.identifier == identifier:
                s.tools = [t for t in s.tools if t.tool_name != tool_name]

    def execute(self, exec_id: int, field_name: str, args) -> E:
        if field_name == "mcp_state_exec_args":
            self.listings.append(args)
            wanted = set(args.server_identifiers)
            result = apb.McpStateExecResult()
            result.success.SetInParent()
            for s in self.servers:
                if wanted and s.identifier not in wanted:
                    continue
                server = result.success.servers.add(server_name=s.name or s.identifier, server_identifier=s.identifier,
                                                    tools=[s.definition(t) for t in s.tools])
                if s.instructions:
                    server.instructions.add(server_name=s.name, server_identifier=s.identifier,
                                            instructions=s.instructions)
            return E(id=exec_id, mcp_state_exec_result=result)
        if field_name == "mcp_args":
            self.calls.append(args)
            for s in self.servers:
                for t in s.tools:
                    d = s.definition(t)
                    if (d.name, d.provider_identifier, d.tool_name) == (args.name, args.provider_identifier, args.tool_name):
                        reply = t.reply
                        if callable(reply):
                            reply = reply({k: json_format.MessageToDict(v) for k, v in args.args.items()})
                        return E(id=exec_id, mcp_result=reply)
            available = [s.definition(t).name for s in self.servers for t in s.tools]
            return E(id=exec_id, mcp_result=apb.McpResult(tool_not_found=apb.McpToolNotFound(
                name=args.name or args.tool_name, available_tools=available)))
        if field_name == "read_mcp_resource_exec_args":
            self.reads.append(args)
            for s in self.servers:
                if args.server in (s.identifier, s.name) and args.uri in s.resources:
                    r = s.resources[args.uri]
                    success = apb.ReadMcpResourceSuccess(uri=args.uri, mime_type=r.mime_type)
                    if r.name:
                        success.name = r.name
                    if r.blob is not None:
                        success.blob = r.blob
                    else:
                        success.text = r.text or ""
                    if args.HasField("download_path"):
                        success.download_path = args.download_path
                    return E(id=exec_id, read_mcp_resource_exec_result=apb.ReadMcpResourceExecResult(success=success))
            return E(id=exec_id, read_mcp_resource_exec_result=apb.ReadMcpResourceExecResult(
                not_found=apb.ReadMcpResourceNotFound(uri=args.uri)))
        raise ValueError(f"ScriptedMcp does not execute {field_name!r}")


def value(obj: object) -> struct_pb2.Value:
    v = struct_pb2.Value()
    json_format.ParseDict(obj, v)
    return v
