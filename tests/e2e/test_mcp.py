"""Issue 12, MCP end to end: the user's MCP servers through Cursor's meta tools (GetMcpTools,
CallMcpTool, FetchMcpResource) and as tools offered directly, through a real mitmdump, the Cursor-like
client answering the MCP execs from scripted servers (`ScriptedMcp`), on all three dialects.

The module's scripted provider validates every tool schema it is sent the way providers do
(`tests/support/schema_rules.py`: an object at the top, no combinator there, arrays with items, no
keyword outside the common core; strict mode's rules for a `strict: true` function) and answers 400
otherwise, so an MCP schema that is not normalised fails the run."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from byok.agent.cursor.tools.mcp import ERROR_LINE
from byok.cli.client import RunResult, user_turn_request
from byok.cli.executor import LocalExecutor
from byok.cli.mcp_servers import (
    McpResource, McpServerScript, McpToolScript, ScriptedMcp, image_result, text_result,
)
from byok.proto import agent_pb2 as apb
from tests.e2e.conftest import run
from tests.e2e.harness import Proxy, ProxyEnv, mode_tools, model_entry, providers_toml, public_id
from tests.support import turns
from tests.support.schema_rules import check_tools, portable_problems, strict_problems
from tests.support.scripted_provider import KINDS, SCRIPTS, RecordedRequest, ScriptedProvider

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

AGENT_TOOLS = mode_tools("agent", web_configured=True)
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    with ScriptedProvider() as provider:
        provider.check_request = check_tools  # a provider that refuses bad tool schemas
        home = tmp_path_factory.mktemp("mcp")
        entries = {kind: model_entry(provider.base_url, kind=kind, model_id=f"{kind}-model", name=f"mcp-{kind}",
                                     extra={"supports_images": "true",
                                            **({"max_output_tokens": 4096} if kind == "anthropic" else {})})
                   for kind in KINDS}
        (home / "providers.toml").write_text(providers_toml(list(entries.values())))
        proxy = Proxy(home).start()
        try:
            yield ProxyEnv(proxy, provider, {k: public_id(e) for k, e in entries.items()})
        finally:
            proxy.stop()


@pytest.fixture(autouse=True)
def _clean_queue(env):
    yield
    env.provider.clear()


@dataclass
class Turn:
    result: RunResult
    requests: list[RecordedRequest]
    executor: LocalExecutor
    blobs: dict[bytes, bytes]
    log: str

    def completed(self, call_id: str) -> apb.ToolCall:
        [card] = [f.message.interaction_update.tool_call_completed.tool_call
                  for f in self.result.down("interaction_update.tool_call_completed")
                  if f.message.interaction_update.tool_call_completed.call_id == call_id]
        return card


def mcp_turn(env: ProxyEnv, tmp_path: Path, kind: str, scripts, mcp: ScriptedMcp, *, seed: str = "part",
             mode: int = apb.AGENT_MODE_AGENT, described: ScriptedMcp | None = None) -> Turn:
    """One user turn whose request describes the servers as Cursor does: the MCP request-context
    part by blob reference (`seed="part"`, fetched by KV GET), `AgentRunRequest.mcp_tools`
    (`seed="request"`), or not at all. The request describes `described` (default: `mcp`, the live
    servers that answer the execs)."""
    described = described or mcp
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    request = user_turn_request("use the MCP servers", model_id=env.models[kind], workspace=str(workspace), mode=mode)
    blobs: dict[bytes, bytes] = {}
    if seed == "part":
        data = described.request_part().SerializeToString()
        blob_id = hashlib.sha256(data).digest()
        refs = request.action.request_context_parts
        refs.mcps_blob_id, refs.mcps_byte_length = blob_id, len(data)
        blobs[blob_id] = data
    elif seed == "request":
        request.mcp_tools.mcp_tools.extend(described.definitions())
    executor = LocalExecutor(workspace, mcp=mcp)
    before = len(env.provider.requests)
    offset = len(env.proxy.log())
    env.provider.enqueue(kind, *scripts)

    async def scenario():
        async with env.proxy.client(blobs=blobs, on_exec=executor.on_exec) as client:
            result = await client.run(request, on_frame=executor.on_frame)
            await executor.aclose()
            return result, dict(client.blobs)

    result, held = run(scenario())
    log = env.proxy.log()[offset:]
    assert "Traceback" not in log, log
    assert result.end_error is None, (result.end_error, log)
    requests = env.provider.requests[before:]
    assert len(requests) == len(scripts)
    assert all(not r.json or r.script is not None for r in requests)
    return Turn(result, requests, executor, held, log)


def docs_server() -> McpServerScript:
    return McpServerScript(
        identifier="user-docs", name="Docs", instructions="Search before you fetch.",
        tools=[
            McpToolScript("search", text_result("Found 2 pages: intro, setup", structured={"hits": 2}),
                          description="Search the docs.", provider_identifier="docs-provider",
                          input_schema={"type": "object", "properties": {"query": {"type": "string"}},
                                        "required": ["query"]}),
            McpToolScript("explode", text_result("quota exceeded", is_error=True), description="Always fails.",
                          provider_identifier="docs-provider"),
            McpToolScript("screenshot", image_result(PNG, caption="the page"), description="Render a page.",
                          provider_identifier="docs-provider"),
        ],
        resources={"docs://intro": McpResource(text="# Intro\nWelcome.", mime_type="text/markdown", name="Intro"),
                   "docs://logo.png": McpResource(blob=PNG, mime_type="image/png")},
    )


@pytest.mark.parametrize("kind", KINDS)
def test_get_mcp_tools_then_call_with_text_and_error_results(env, tmp_path, kind):
    mcp = ScriptedMcp([docs_server()])
    s = SCRIPTS[kind]
    get = ("call_get", "GetMcpTools", '{"server": "Docs"}')
    search = ("call_search", "CallMcpTool", '{"server": "user-docs", "toolName": "search", "arguments": {"query": "install"}}')
    explode = ("call_explode", "CallMcpTool", '{"server": "Docs", "toolName": "explode", "arguments": {}}')
    turn = mcp_turn(env, tmp_path, kind, [s.tool_calls([get]), s.tool_calls([search, explode]), s.text_reply("ok")], mcp)

    # the execs, exactly: the live listing of the named server, then each call with its definition
    fields = [m.WhichOneof("message") for m in turn.executor.log]
    assert fields == ["mcp_state_exec_args", "mcp_args", "mcp_args"]
    listing = turn.executor.log[0]
    assert listing.HasField("accept_hook_additional_contexts") and not listing.accept_hook_additional_contexts
    assert listing.mcp_state_exec_args == apb.McpStateExecArgs(server_identifiers=["user-docs"], kick_only=False)
    calls = {c.tool_call_id: c for c in mcp.calls}
    expected = apb.McpArgs(name="user-docs-search", tool_call_id="call_search", provider_identifier="docs-provider",
                           tool_name="search", server_identifier="user-docs")
    expected.args["query"].string_value = "install"
    assert calls["call_search"] == expected
    assert (calls["call_explode"].name, calls["call_explode"].provider_identifier) == ("user-docs-explode", "docs-provider")

    # what the model got back, in its dialect
    listed = turns.result_of(kind, turn.requests[1].json, "call_get")
    assert listed.content.startswith("Server: user-docs (name: Docs)\nInstructions: Search before you fetch.\n")
    assert "- toolName: search\n  description: Search the docs.\n  input schema: " \
           '{"properties":{"query":{"type":"string"}},"required":["query"],"type":"object"}' in listed.content
    found = turns.result_of(kind, turn.requests[2].json, "call_search")
    assert found.content == 'Found 2 pages: intro, setup\n\nStructured content:\n{"hits":2}'
    failed = turns.result_of(kind, turn.requests[2].json, "call_explode")
    assert failed.content == f"{ERROR_LINE}\nquota exceeded"
    if kind == "anthropic":
        assert (found.is_error, failed.is_error) == (False, True)

    # the cards carry the typed call and result
    card = turn.completed("call_search").mcp_tool_call
    assert card.args == expected
    assert card.result.success.content[0].text.text == "Found 2 pages: intro, setup"
    assert turn.completed("call_explode").mcp_tool_call.result.success.is_error
    get_card = turn.completed("call_get").get_mcp_tools_tool_call
    assert get_card.args == apb.GetMcpToolsArgs(server="Docs", tool_call_id="call_get")
    assert get_card.result.success.content == listed.content

    # the servers' tools were also offered directly, after the mode's tools
    names = turns.tool_names(kind, turn.requests[0].json)
    assert names[-3:] == ["mcp_user-docs__search", "mcp_user-docs__explode", "mcp_user-docs__screenshot"]
    assert names[:-3] == [n for n in AGENT_TOOLS if n in names[:-3]]  # the mode's tools first, in order
    assert {"GetMcpTools", "CallMcpTool", "FetchMcpResource"} <= set(names[:-3])
    # and they count in the breakdown's `mcp` category, with the runtime message's <mcp_meta_tools>
    final = turn.result.checkpoints()[-1].token_details.breakdown
    mcp_tokens = {c.id: c.estimated_tokens for c in final.categories}["mcp"]
    assert mcp_tokens > 0


@pytest.mark.parametrize("kind", KINDS)
def test_names_that_need_care_and_a_schema_strict_mode_rejects(env, tmp_path, kind):
    long_name = "fetch.customer record " + "x" * 58  # 80 characters, dots and spaces
    assert len(long_name) == 80
    raw_schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "$defs": {"Range": {"type": "object", "properties": {"from": {"type": "integer", "default": 1},
                                                              "to": {"type": "integer"}}, "required": ["from"]}},
        "properties": {
            "customer": {"type": "string", "format": "uuid", "minLength": 3},
            "range": {"$ref": "#/$defs/Range"},
            "mode": {"oneOf": [{"const": "fast"}, {"const": "full"}]},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["customer"],
    }
    assert portable_problems(raw_schema) and strict_problems(raw_schema)  # what providers would refuse
    seen: list[dict] = []

    def record(args: dict) -> apb.McpResult:
        seen.append(args)
        return text_result("customer found")

    server = McpServerScript(identifier="acme.tools prod", name="Acme Tools", tools=[
        McpToolScript(long_name, record, description="Fetch a customer.", input_schema=raw_schema,
                      provider_identifier="acme")])
    mcp = ScriptedMcp([server])
    s = SCRIPTS[kind]
    # A first turn shows the name the model gets; the model then calls that tool (with the nulls a
    # strict schema makes it send for optional fields) and the same tool through CallMcpTool, naming
    # the server by its display name.
    direct_name = _direct_name(env, tmp_path, kind, mcp)
    assert NAME_RE.match(direct_name) and direct_name.startswith("mcp_acme_tools_prod__fetch_customer_record_x")
    call_direct = ("call_direct", direct_name,
                   '{"customer": "c-42", "range": {"from": 2, "to": null}, "mode": null, "tags": null}')
    call_meta = ("call_meta", "CallMcpTool", json.dumps(
        {"server": "Acme Tools", "toolName": long_name, "arguments": {"customer": "c-7"}}))
    turn = mcp_turn(env, tmp_path, kind, [s.tool_calls([call_direct, call_meta]), s.text_reply("done")], mcp)

    defs = turns.tool_defs(kind, turn.requests[0].json)
    assert direct_name in defs
    shown = defs[direct_name]["schema"]
    assert not portable_problems(shown)
    if kind == "openai_responses":  # strict mode: the strict form, and only for this tool
        assert defs[direct_name]["strict"] is True and not strict_problems(shown)
        assert all(d["strict"] is False for n, d in defs.items() if n != direct_name)
    # both calls reached the exact definition; the nulls a strict schema asks for were dropped again
    for call in mcp.calls:
        assert (call.name, call.provider_identifier, call.tool_name, call.server_identifier) == (
            f"acme.tools prod-{long_name}", "acme", long_name, "acme.tools prod")
    assert sorted(seen, key=lambda a: a["customer"]) == [{"customer": "c-42", "range": {"from": 2}},
                                                         {"customer": "c-7"}]
    assert turns.result_of(kind, turn.requests[1].json, "call_direct").content == "customer found"
    card = turn.completed("call_direct")
    assert card.WhichOneof("tool") == "mcp_tool_call" and card.mcp_tool_call.args.tool_name == long_name


def _direct_name(env: ProxyEnv, tmp_path: Path, kind: str, mcp: ScriptedMcp) -> str:
    turn = mcp_turn(env, tmp_path, kind, [SCRIPTS[kind].text_reply("nothing to do")], mcp)
    names = turns.tool_names(kind, turn.requests[0].json)
    [direct] = [n for n in names if n.startswith("mcp_")]
    return direct


@pytest.mark.parametrize("kind", KINDS)
def test_fetch_resources_and_an_image_result(env, tmp_path, kind):
    mcp = ScriptedMcp([docs_server()])
    s = SCRIPTS[kind]
    text = ("call_text", "FetchMcpResource", '{"server": "Docs", "uri": "docs://intro"}')
    logo = ("call_logo", "FetchMcpResource", '{"server": "user-docs", "uri": "docs://logo.png"}')
    missing = ("call_missing", "FetchMcpResource", '{"server": "user-docs", "uri": "docs://nope"}')
    shot = ("call_shot", "CallMcpTool", '{"server": "user-docs", "toolName": "screenshot"}')
    turn = mcp_turn(env, tmp_path, kind, [s.tool_calls([text, logo, missing, shot]), s.text_reply("ok")], mcp)
    assert [r.server for r in mcp.reads] == ["user-docs"] * 3  # the name became the identifier
    body = turn.requests[1].json
    assert turns.result_of(kind, body, "call_text").content == (
        "Resource: docs://intro\nName: Intro\nMIME type: text/markdown\n\n# Intro\nWelcome.")
    image_b64 = base64.b64encode(PNG).decode()
    got_logo = turns.result_of(kind, body, "call_logo")
    assert got_logo.content == f"Resource: docs://logo.png\nMIME type: image/png\n\n[image: image/png, {len(PNG)} bytes]"
    got_shot = turns.result_of(kind, body, "call_shot")
    assert got_shot.content == f"the page\n\n[image 1: image/png, {len(PNG)} bytes]"
    for got in (got_logo, got_shot):  # the image itself reaches the model, in the dialect's own form
        assert len(got.images) == 1 and got.images[0].endswith(image_b64)
    assert turns.result_of(kind, body, "call_missing").content == "MCP resource not found: docs://nope"
    card = turn.completed("call_text").read_mcp_resource_tool_call
    assert card.args == apb.ReadMcpResourceExecArgs(server="user-docs", uri="docs://intro", tool_call_id="call_text")
    assert card.result.success.text == "# Intro\nWelcome."
    # the checkpoint's tool root carries the image in AI SDK form
    roots = [json.loads(turn.blobs[r]) for r in turn.result.checkpoints()[-1].root_prompt_messages_json]
    [shot_root] = [r for r in roots if r.get("id") == "call_shot"]
    assert shot_root["content"][0]["output"]["type"] == "content"
    assert shot_root["content"][0]["output"]["value"][1] == {"type": "media", "data": image_b64, "mediaType": "image/png"}


def test_a_tool_that_no_longer_exists_and_an_unknown_one_are_tool_errors(env, tmp_path):
    kind = "openai_chat"
    mcp = ScriptedMcp([docs_server()])
    s = SCRIPTS[kind]
    mcp_tools_before = len(mcp.calls)
    listing = ("call_list", "GetMcpTools", "{}")
    # the request still describes `explode`, but the server no longer offers it
    mcp.remove_tool("user-docs", "explode")
    gone = ("call_gone", "mcp_user-docs__explode", "{}")
    unknown = ("call_unknown", "CallMcpTool", '{"server": "nowhere", "toolName": "search"}')
    turn = mcp_turn(env, tmp_path, kind, [s.tool_calls([listing]), s.tool_calls([gone, unknown]), s.text_reply("ok")],
                    mcp, described=ScriptedMcp([docs_server()]))
    assert "mcp_user-docs__explode" in turns.tool_names(kind, turn.requests[0].json)  # offered at the start
    assert "explode" not in turns.result_of(kind, turn.requests[1].json, "call_list").content
    body = turn.requests[2].json
    assert turns.result_of(kind, body, "call_gone").content.startswith(
        "The MCP tool explode of server user-docs no longer exists")
    assert turns.result_of(kind, body, "call_unknown").content.startswith(
        "MCP tool 'search' on server 'nowhere' is not known in this run")
    assert len(mcp.calls) == mcp_tools_before  # neither reached the client
    assert turn.completed("call_gone").mcp_tool_call.result.HasField("error")


def test_definitions_from_the_run_request_alone_are_enough_to_call(env, tmp_path):
    """`AgentRunRequest.mcp_tools` carries bare definitions (no server descriptors): the model's server
    is matched against the definition itself, and the exec still copies every field from it."""
    kind = "openai_chat"
    mcp = ScriptedMcp([docs_server()])
    s = SCRIPTS[kind]
    call = ("call_search", "CallMcpTool", '{"server": "user-docs", "toolName": "search", "arguments": {"query": "q"}}')
    turn = mcp_turn(env, tmp_path, kind, [s.tool_calls([call]), s.text_reply("ok")], mcp, seed="request")
    [sent] = mcp.calls
    assert (sent.name, sent.provider_identifier, sent.tool_name, sent.server_identifier) == (
        "user-docs-search", "docs-provider", "search", "")
    assert turns.result_of(kind, turn.requests[1].json, "call_search").content.startswith("Found 2 pages")
    assert "mcp_docs-provider__search" in turns.tool_names(kind, turn.requests[0].json)


def test_mcp_is_left_out_of_a_mode_without_mcp_tools(env, tmp_path):
    kind = "openai_chat"
    mcp = ScriptedMcp([docs_server()])
    turn = mcp_turn(env, tmp_path, kind, [SCRIPTS[kind].text_reply("ok")], mcp, mode=apb.AGENT_MODE_ASK)
    body = turn.requests[0].json
    assert not any(n.startswith("mcp_") for n in turns.tool_names(kind, body))
    assert not any("<mcp_meta_tools>" in t for t in turns.user_texts(kind, body))
    assert "request context: <mcp_meta_tools> left out: this run offers none of CallMcpTool, FetchMcpResource, " \
           "GetMcpTools (mode ask)" in turn.log
    # in Agent mode the same part renders once, in the runtime message
    agent = mcp_turn(env, tmp_path, kind, [SCRIPTS[kind].text_reply("ok")], mcp)
    [runtime] = turns.user_texts(kind, agent.requests[0].json)
    assert runtime.count("<mcp_meta_tools>") == 1 and 'identifier="user-docs"' in runtime

