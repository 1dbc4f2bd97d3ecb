"""MCP through Cursor's meta tools (PROTOCOL 5.10, 10.5; seed §33.3). Every call is exec'd by the
client, which holds the live connections to the user's MCP servers.

    GetMcpTools       mcp_state_exec_args{server_identifiers (only when a server is named),
                      kick_only=false}, envelope accept_hook_additional_contexts=false
                      -> mcp_state_exec_result: the servers' live tool definitions. They replace the
                      run's table entries (all of them when no server was named), then the listing is
                      filtered by server, toolName and pattern.
    CallMcpTool       mcp_args{name, args, tool_call_id, provider_identifier, tool_name, server_identifier}
                      copied exactly from the table's definition of (server, toolName) -> mcp_result.
    FetchMcpResource  read_mcp_resource_exec_args{server, uri, download_path, tool_call_id}
                      -> read_mcp_resource_exec_result.
    direct tools      each MCP tool offered under its own provider-safe name (small tool sets only,
                      `mcp.py` capability): a CallMcpTool with a fixed definition.

The table (`McpTable`, one per run, released with it) starts from the definitions the request
carried (`AgentRunRequest.mcp_tools` and the MCP request-context part) and follows GetMcpTools. A
call to a tool the table does not (or no longer) hold is a tool error telling the model to run
GetMcpTools; nothing is ever derived from a server's name. The model's `server` argument may be a
server identifier or name.

Results become one canonical string per variant: the content first (text, the location of output
the client saved to a file, structured content as JSON, a note per image); an error result starts
with a line saying so, so the model sees `is_error` in every dialect. Images also travel as image
parts (`ToolOutcome.images`) for the dialects that take them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message

from byok.proto import agent_pb2 as apb

from ....providers.transcript import ImagePart, ToolSpec
from . import mcp_schema
from .base import CallIO, RunToolContext, ToolArgsError, ToolDef, ToolOutcome
from .common import Args, cap_head, dumps, variant

META_TOOLS = frozenset({"GetMcpTools", "CallMcpTool", "FetchMcpResource"})
EXTRA_KEY = "mcp"
"""`RunToolContext.extra[EXTRA_KEY]` holds the run's McpTable."""
DIRECT_PREFIX = "mcp_"
NAME_LIMIT = 64
_NAME_OK = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


# ---- the run's definition table ---------------------------------------------------------------------


@dataclass(frozen=True)
class McpTool:
    definition: apb.McpToolDefinition
    """Exactly as the client sent it (the exec copies name, provider and tool name from here)."""
    server_identifier: str = ""
    """"" when the definition came without its server (seeded from a bare definition list)."""
    server_name: str = ""

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def tool_name(self) -> str:
        return self.definition.tool_name

    @property
    def server_label(self) -> str:
        return self.server_identifier or self.server_name or self.definition.provider_identifier

    def input_schema(self) -> dict:
        d = self.definition
        if d.HasField("input_schema"):
            return mcp_schema.parse(_plain(json_format.MessageToDict(d.input_schema)))
        return mcp_schema.parse(d.input_schema_json) if d.HasField("input_schema_json") else {}

    def matches_server(self, server: str) -> bool:
        """The model named this tool's server: by identifier, name or provider, or (for a definition
        that came without its server) as the prefix of the definition's full name."""
        if not server:
            return False
        return (server in (self.server_identifier, self.server_name, self.definition.provider_identifier)
                or (not self.server_identifier and self.definition.name == f"{server}-{self.tool_name}"))


class UnknownMcpTool(Exception):
    """The model named a tool the table does not hold (or holds more than once)."""


class McpTable:
    """The run's MCP tool definitions, keyed by the definition's full name (unique per client)."""

    def __init__(self) -> None:
        self._tools: dict[str, McpTool] = {}
        self.instructions: dict[str, str] = {}
        self.refreshed = False

    def __len__(self) -> int:
        return len(self._tools)

    def tools(self) -> list[McpTool]:
        return list(self._tools.values())

    def by_name(self, name: str) -> McpTool | None:
        return self._tools.get(name)

    def seed(self, definitions: Iterable[apb.McpToolDefinition], descriptors: Iterable[apb.McpDescriptor] = ()) -> None:
        """Definitions the request carried. A descriptor that lists the tool tells which server it
        belongs to (used only to accept the server's name from the model)."""
        descriptors = list(descriptors)
        for d in definitions:
            if not d.name or d.name in self._tools:
                continue
            owners = [x for x in descriptors if any(t.tool_name == d.tool_name for t in x.tools)]
            if len(owners) > 1:
                owners = [x for x in owners if d.name == f"{x.server_identifier}-{d.tool_name}"
                          or d.provider_identifier in (x.server_identifier, x.server_name)]
            owner = owners[0] if len(owners) == 1 else None
            self._tools[d.name] = McpTool(_copy(d), owner.server_identifier if owner else "",
                                          owner.server_name if owner else "")

    def refresh(self, servers: Sequence[apb.McpStateServer], *, complete: bool) -> None:
        """A live McpStateExecResult: its servers' tools replace what the table held for them (and,
        when no server was named, everything: a server missing from a complete listing is gone)."""
        fresh = {d.name for s in servers for d in s.tools}
        named = {s.server_identifier for s in servers}
        self._tools = {
            name: tool for name, tool in self._tools.items()
            if not complete and name not in fresh and tool.server_identifier not in named
        }
        for s in servers:
            text = "\n".join(i.instructions.strip() for i in s.instructions if i.instructions.strip())
            if text:
                self.instructions[s.server_identifier] = text
            for d in s.tools:
                self._tools[d.name] = McpTool(_copy(d), s.server_identifier, s.server_name)
        self.refreshed = True

    def find(self, server: str, tool_name: str) -> McpTool:
        found = [t for t in self._tools.values() if t.tool_name == tool_name and t.matches_server(server)]
        if len(found) == 1:
            return found[0]
        if not found:
            raise UnknownMcpTool(
                f"MCP tool {tool_name!r} on server {server!r} is not known in this run (it may have been "
                "removed, or never listed). Call GetMcpTools to list the connected servers' tools, then "
                "call it with the server and toolName exactly as listed.")
        names = ", ".join(sorted(t.server_identifier or t.name for t in found))
        raise UnknownMcpTool(f"MCP tool {tool_name!r} exists on several servers matching {server!r} ({names}); "
                             "pass the server identifier GetMcpTools reports.")

    def server_identifier(self, server: str) -> str:
        """The identifier of a server the model named by identifier or name; the name as given when
        the table does not know it (the client decides)."""
        for t in self._tools.values():
            if server and server in (t.server_identifier, t.server_name) and t.server_identifier:
                return t.server_identifier
        return server


def _copy(d: apb.McpToolDefinition) -> apb.McpToolDefinition:
    out = apb.McpToolDefinition()
    out.CopyFrom(d)
    return out


def table_of(ctx: RunToolContext) -> McpTable:
    table = ctx.extra.get(EXTRA_KEY)
    if table is None:  # a run without the MCP capability still answers with a tool error, not a crash
        table = McpTable()
    return table


# ---- results -----------------------------------------------------------------------------------------


ERROR_LINE = "Error: the MCP tool reported an error."


def _value(obj: object) -> struct_pb2.Value:
    v = struct_pb2.Value()
    json_format.ParseDict(obj, v)
    return v


def _plain(obj: object) -> object:
    """protobuf Struct numbers are doubles: show 2, not 2.0, when the value is integral."""
    if isinstance(obj, float) and obj.is_integer() and abs(obj) < 2**53:
        return int(obj)
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    return obj


def _location(loc: apb.OutputLocation) -> str:
    details = [f"{loc.size_bytes} bytes" if loc.size_bytes else "", f"{loc.line_count} lines" if loc.line_count else ""]
    details = [d for d in details if d]
    return f"[The full output was saved to {loc.file_path}" + (f" ({', '.join(details)})" if details else "") + "]"


def success_content(success: apb.McpSuccess) -> tuple[str, tuple[ImagePart, ...]]:
    """The canonical string of an McpSuccess and its images (never a summary like "content=N")."""
    texts: list[str] = []
    images: list[ImagePart] = []
    for item in success.content:
        kind = item.WhichOneof("content")
        if kind == "text":
            text = item.text.text
            if item.text.HasField("output_location") and item.text.output_location.file_path:
                text = (text + "\n" if text else "") + _location(item.text.output_location)
            texts.append(text)
        elif kind == "image":
            mime = item.image.mime_type or "image/png"
            images.append(ImagePart(mime, base64.b64encode(item.image.data).decode("ascii")))
            texts.append(f"[image {len(images)}: {mime}, {len(item.image.data)} bytes]")
    if success.HasField("structured_content"):
        structured = dumps(_plain(json_format.MessageToDict(success.structured_content)))
        if structured not in texts and structured != "{}":
            texts.append("Structured content:\n" + structured)
    body = "\n\n".join(t for t in texts if t) or "(the MCP tool returned no content)"
    if success.is_error:
        body = f"{ERROR_LINE}\n{body}"
    return cap_head(body), tuple(images)


def mcp_outcome(result: apb.McpResult, card: apb.McpArgs, table: McpTable | None = None) -> ToolOutcome:
    kind = variant(result, "result", "McpResult")
    label = f"{card.tool_name or card.name}"
    if kind == "success":
        content, images = success_content(result.success)
        return ToolOutcome(apb.McpToolResult(success=result.success), content, result.success.is_error,
                           args=card, images=images)
    if kind == "error":
        message = f"{ERROR_LINE}\n{result.error.error}"
        return ToolOutcome(_error(result.error.error), message, True, args=card)
    if kind == "rejected":
        r = result.rejected
        message = f"The user declined the MCP call {label}" + (f": {r.reason}" if r.reason else "")
        return ToolOutcome(apb.McpToolResult(rejected=apb.McpRejected(reason=r.reason, is_readonly=r.is_readonly)),
                           message, True, args=card)
    if kind == "permission_denied":
        p = result.permission_denied
        message = f"Permission denied for the MCP call {label}" + (f": {p.error}" if p.error else "")
        return ToolOutcome(apb.McpToolResult(permission_denied=apb.McpPermissionDenied(
            error=p.error, is_readonly=p.is_readonly)), message, True, args=card)
    if kind == "tool_not_found":
        t = result.tool_not_found
        available = f" Available: {', '.join(t.available_tools)}." if t.available_tools else ""
        message = (f"Cursor reports MCP tool not found: {t.name or card.name}.{available} "
                   "Call GetMcpTools to refresh the list.")
        return ToolOutcome(_error(message), message, True, args=card)
    if kind == "server_not_found":
        s = result.server_not_found
        available = f" Connected servers: {', '.join(s.available_servers)}." if s.available_servers else ""
        message = f"Cursor reports MCP server not found: {s.name}.{available}"
        return ToolOutcome(_error(message), message, True, args=card)
    # `approved` carries no result: the closest the card can show is an error saying so.
    message = "The MCP call was approved but the client returned no result."
    return ToolOutcome(_error(message), message, True, args=card)


def _error(message: str) -> apb.McpToolResult:
    return apb.McpToolResult(error=apb.McpToolError(error=message))


# ---- CallMcpTool -----------------------------------------------------------------------------------


def _json_arguments(a: Args) -> dict:
    value = a.raw.get("arguments")
    if value is None:
        return {}
    if isinstance(value, str):  # some models send the object as JSON text
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            raise ToolArgsError("invalid arguments: expected an object (or its JSON text)") from None
    if not isinstance(value, dict):
        raise ToolArgsError("invalid arguments: expected an object")
    return value


def mcp_args(tool: McpTool | None, tool_name: str, server: str, arguments: Mapping, call_id: str) -> apb.McpArgs:
    """The exec's McpArgs: every identifying field copied from the definition (PROTOCOL 10.5)."""
    args = apb.McpArgs(tool_call_id=call_id)
    for key, value in arguments.items():
        args.args[key].CopyFrom(_value(value))
    if tool is None:
        args.tool_name = tool_name
        args.server_identifier = server
        return args
    d = tool.definition
    args.name, args.provider_identifier, args.tool_name = d.name, d.provider_identifier, d.tool_name
    if tool.server_identifier:
        args.server_identifier = tool.server_identifier
    return args


def _parse_call(raw: dict, call_id: str, ctx: RunToolContext) -> apb.McpArgs:
    a = Args(raw)
    server = a.string("server", required=True, non_empty=True)
    tool_name = a.string("toolName", required=True, non_empty=True)
    arguments = _json_arguments(a)
    try:
        tool = table_of(ctx).find(server, tool_name)
    except UnknownMcpTool:
        tool = None  # the card still opens; running it tells the model what to do
    return mcp_args(tool, tool_name, server, arguments, call_id)


async def _run_call(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    a = Args(raw)
    table = table_of(io.context)
    try:
        tool = table.find(a.raw["server"], a.raw["toolName"])
    except UnknownMcpTool as e:
        return ToolOutcome(_error(str(e)), str(e), True)
    return await call_tool(io, tool, _json_arguments(a))


async def call_tool(io: CallIO, tool: McpTool, arguments: Mapping) -> ToolOutcome:
    args = mcp_args(tool, tool.tool_name, tool.server_identifier, arguments, io.call_id)
    _, result = await io.exec("mcp_args", args, results=frozenset({"mcp_result"}))
    return mcp_outcome(result, args)


CALL_MCP_TOOL = ToolDef("CallMcpTool", "exec", "mcp_tool_call", _parse_call, _run_call, _error)


# ---- GetMcpTools ------------------------------------------------------------------------------------


def _parse_get(raw: dict, call_id: str, ctx: RunToolContext) -> apb.GetMcpToolsArgs:
    a = Args(raw)
    args = apb.GetMcpToolsArgs(tool_call_id=call_id)
    for key, field in (("server", "server"), ("toolName", "tool_name"), ("pattern", "pattern")):
        value = a.string(key)
        if value:
            setattr(args, field, value)
    if args.HasField("pattern"):
        try:
            re.compile(args.pattern)
        except re.error as e:
            raise ToolArgsError(f"invalid pattern: {e}") from None
    return args


def _get_error(message: str) -> apb.GetMcpToolsAgentResult:
    return apb.GetMcpToolsAgentResult(error=apb.GetMcpToolsError(error=message))


def render_listing(tools: Sequence[McpTool], table: McpTable) -> str:
    """What GetMcpTools shows: per server, each tool with its description and normalised schema."""
    by_server: dict[str, list[McpTool]] = {}
    for t in tools:
        by_server.setdefault(t.server_identifier or t.server_label, []).append(t)
    blocks = []
    for server, items in by_server.items():
        first = items[0]
        head = f"Server: {server}"
        if first.server_name and first.server_name != server:
            head += f" (name: {first.server_name})"
        lines = [head]
        if table.instructions.get(server):
            lines.append("Instructions: " + table.instructions[server])
        for t in items:
            lines.append(f"- toolName: {t.tool_name}")
            if t.definition.description.strip():
                lines.append("  description: " + " ".join(t.definition.description.split()))
            lines.append("  input schema: " + dumps(mcp_schema.portable(t.input_schema())))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


async def _run_get(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    table = table_of(io.context)
    server = card.server if card.HasField("server") else ""
    state = apb.McpStateExecArgs(kick_only=False)
    if server:
        state.server_identifiers.append(table.server_identifier(server))
    _, result = await io.exec("mcp_state_exec_args", state, results=frozenset({"mcp_state_exec_result"}),
                              envelope={"accept_hook_additional_contexts": False})
    kind = variant(result, "result", "McpStateExecResult")
    if kind == "error":
        message = f"Listing the MCP tools failed: {result.error.error}"
        return ToolOutcome(_get_error(message), message, True)
    if kind == "rejected":
        message = "Listing the MCP tools was rejected" + (f": {result.rejected.reason}" if result.rejected.reason else "")
        return ToolOutcome(_get_error(message), message, True)
    servers = list(result.success.servers)
    table.refresh(servers, complete=not server)
    listed = [t for t in table.tools() if any(t.server_identifier == s.server_identifier for s in servers)]
    if server:
        listed = [t for t in listed if t.matches_server(server)]
    if card.HasField("tool_name"):
        listed = [t for t in listed if t.tool_name == card.tool_name]
    if card.HasField("pattern"):
        pattern = re.compile(card.pattern, re.IGNORECASE)
        listed = [t for t in listed if pattern.search(t.tool_name) or pattern.search(t.definition.description)]
    if listed:
        content = cap_head(render_listing(listed, table))
    else:
        connected = ", ".join(s.server_identifier for s in servers) or "none"
        content = f"No MCP tools match this request. Connected servers: {connected}."
    return ToolOutcome(apb.GetMcpToolsAgentResult(success=apb.GetMcpToolsSuccess(content=content)), content)


GET_MCP_TOOLS = ToolDef("GetMcpTools", "exec", "get_mcp_tools_tool_call", _parse_get, _run_get, _get_error)


# ---- FetchMcpResource ---------------------------------------------------------------------------------


def _parse_fetch(raw: dict, call_id: str, ctx: RunToolContext) -> apb.ReadMcpResourceExecArgs:
    a = Args(raw)
    server = a.string("server", required=True, non_empty=True)
    args = apb.ReadMcpResourceExecArgs(server=table_of(ctx).server_identifier(server),
                                       uri=a.string("uri", required=True, non_empty=True), tool_call_id=call_id)
    path = a.string("downloadPath", non_empty=True)
    if path is not None:
        args.download_path = path
    return args


def _resource_error(message: str) -> apb.ReadMcpResourceExecResult:
    return apb.ReadMcpResourceExecResult(error=apb.ReadMcpResourceError(error=message))


def resource_outcome(result: apb.ReadMcpResourceExecResult, card: apb.ReadMcpResourceExecArgs) -> ToolOutcome:
    kind = variant(result, "result", "ReadMcpResourceExecResult")
    if kind == "error":
        return ToolOutcome(result, f"Reading the MCP resource {card.uri} failed: {result.error.error}", True)
    if kind == "rejected":
        reason = result.rejected.reason
        return ToolOutcome(result, f"Reading the MCP resource {card.uri} was rejected" + (f": {reason}" if reason else ""), True)
    if kind == "not_found":
        return ToolOutcome(result, f"MCP resource not found: {result.not_found.uri or card.uri}", True)
    s = result.success
    head = [f"Resource: {s.uri or card.uri}"]
    if s.HasField("name") and s.name:
        head.append(f"Name: {s.name}")
    if s.HasField("mime_type") and s.mime_type:
        head.append(f"MIME type: {s.mime_type}")
    if s.HasField("description") and s.description:
        head.append(f"Description: {s.description}")
    images: tuple[ImagePart, ...] = ()
    which = s.WhichOneof("content")
    if s.HasField("download_path") and s.download_path:
        size = len(s.blob) if which == "blob" else len(s.text.encode("utf-8")) if which == "text" else 0
        body = f"Saved to {s.download_path}" + (f" ({size} bytes)" if size else "")
    elif which == "text":
        body = s.text
    elif which == "blob":
        mime = s.mime_type if s.HasField("mime_type") else ""
        if mime.startswith("image/"):
            images = (ImagePart(mime, base64.b64encode(s.blob).decode("ascii")),)
            body = f"[image: {mime}, {len(s.blob)} bytes]"
        else:
            body = (f"[binary content, {len(s.blob)} bytes; call FetchMcpResource again with downloadPath "
                    "to save it to a file]")
    else:
        body = "(the resource is empty)"
    if s.HasField("output_location") and s.output_location.file_path:
        body += "\n" + _location(s.output_location)
    return ToolOutcome(result, cap_head("\n".join(head) + "\n\n" + body), images=images)


async def _run_fetch(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    _, result = await io.exec("read_mcp_resource_exec_args", card,
                              results=frozenset({"read_mcp_resource_exec_result"}))
    return resource_outcome(result, card)


FETCH_MCP_RESOURCE = ToolDef("FetchMcpResource", "exec", "read_mcp_resource_tool_call", _parse_fetch,
                             _run_fetch, _resource_error)


# ---- MCP tools offered directly -------------------------------------------------------------------------


def _sanitize(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_") or "x"


def direct_names(tools: Sequence[McpTool], reserved: Iterable[str] = ()) -> dict[str, str]:
    """definition name -> a provider-safe tool name (`^[a-zA-Z0-9_-]{1,64}$`), unique in the run and
    stable for the same definitions: `mcp_<server>__<tool>`, cut to fit with a short hash of the
    exact server and tool when it is too long or would collide."""
    taken = set(reserved)
    out: dict[str, str] = {}
    for t in tools:
        base = f"{DIRECT_PREFIX}{_sanitize(t.server_label)}__{_sanitize(t.tool_name)}"
        if len(base) > NAME_LIMIT or base in taken:
            digest = hashlib.sha256(f"{t.server_label}\0{t.tool_name}\0{t.name}".encode()).hexdigest()[:8]
            base = f"{base[:NAME_LIMIT - 9]}_{digest}"
        assert _NAME_OK.match(base), base
        if base in taken:
            raise ValueError(f"MCP tool name {base!r} collides in this run")
        taken.add(base)
        out[t.name] = base
    return out


def direct_tool(tool: McpTool, name: str) -> tuple[ToolSpec, ToolDef]:
    """One MCP tool as its own model tool: the normalised schema for the provider (with a strict
    form when it has one), a CallMcpTool with this definition for the exec."""
    shown = mcp_schema.portable(tool.input_schema())
    description = tool.definition.description.strip() or f"The {tool.tool_name} tool of the MCP server {tool.server_label}."
    description = f"{description}\n(MCP server {tool.server_label}, tool {tool.tool_name})"
    spec = ToolSpec(name, description, shown, mcp_schema.strict(shown))
    definition_name = tool.name

    def parse(raw: dict, call_id: str, ctx: RunToolContext) -> apb.McpArgs:
        current = table_of(ctx).by_name(definition_name) or tool
        return mcp_args(current, tool.tool_name, tool.server_identifier, mcp_schema.drop_unset(raw, shown), call_id)

    async def run(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
        current = table_of(io.context).by_name(definition_name)
        if current is None:
            message = (f"The MCP tool {tool.tool_name} of server {tool.server_label} no longer exists (the server "
                       "stopped offering it). Call GetMcpTools to see what is available now.")
            return ToolOutcome(_error(message), message, True)
        return await call_tool(io, current, mcp_schema.drop_unset(raw, shown))

    return spec, ToolDef(name, "exec", "mcp_tool_call", parse, run, _error)
