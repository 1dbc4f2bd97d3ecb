"""MCP pieces without the wire: schema normalisation (portable and strict), direct tool names, the
run's definition table, and the canonical result strings."""

from __future__ import annotations

import re

import pytest
from google.protobuf import json_format

from byok.agent.cursor.tools import mcp_schema
from byok.agent.cursor.tools.mcp import (
    ERROR_LINE, McpTable, McpTool, UnknownMcpTool, direct_names, direct_tool, mcp_outcome, success_content,
)
from byok.proto import agent_pb2 as apb
from tests.support.schema_rules import portable_problems, strict_problems

NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

HOSTILE = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Args",
    "type": "object",
    "definitions": {"Point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                              "required": ["x", "y"]}},
    "properties": {
        "at": {"$ref": "#/definitions/Point", "description": "Where."},
        "when": {"type": "string", "format": "date-time", "default": "now"},
        "kind": {"oneOf": [{"const": "a"}, {"const": "b"}]},
        "both": {"allOf": [{"type": "object", "properties": {"p": {"type": "string"}}, "required": ["p"]},
                           {"properties": {"q": {"type": "integer"}}}]},
        "list": {"type": "array"},
        "maybe": {"type": "string", "nullable": True},
        "meta": {"type": "object", "additionalProperties": {"type": "string"}},
        "loop": {"$ref": "#/definitions/Missing"},
    },
    "required": ["at", "ghost"],
    "not": {"required": ["x"]},
}


def test_hostile_schema_is_refused_until_normalised():
    assert portable_problems(HOSTILE)
    shown = mcp_schema.portable(HOSTILE)
    assert portable_problems(shown) == []
    assert shown["required"] == ["at"]  # an undefined required name is dropped
    assert shown["properties"]["at"] == {
        "type": "object", "description": "Where.", "required": ["x", "y"],
        "properties": {"x": {"type": "number"}, "y": {"type": "number"}}}
    assert shown["properties"]["when"] == {"type": "string", "description": '(format: date-time; default: "now")'}
    assert shown["properties"]["kind"] == {"anyOf": [{"enum": ["a"], "type": "string"}, {"enum": ["b"], "type": "string"}]}
    assert shown["properties"]["both"]["required"] == ["p"]
    assert set(shown["properties"]["both"]["properties"]) == {"p", "q"}
    assert shown["properties"]["list"] == {"type": "array", "items": {}}
    assert shown["properties"]["maybe"]["type"] == ["string", "null"]
    assert shown["properties"]["loop"] == {}


def test_strict_form_closes_objects_and_makes_optional_fields_nullable():
    schema = mcp_schema.portable({"type": "object", "properties": {
        "q": {"type": "string", "minLength": 2}, "n": {"type": "integer"},
        "opt": {"type": "object", "properties": {"a": {"type": "string", "enum": ["x", "y"]}}}},
        "required": ["q"]})
    strict = mcp_schema.strict(schema)
    assert strict_problems(strict) == [] and strict_problems(schema)
    assert strict["required"] == ["q", "n", "opt"] and strict["additionalProperties"] is False
    assert strict["properties"]["q"] == {"type": "string", "description": "(minLength: 2)"}
    assert strict["properties"]["n"]["type"] == ["integer", "null"]
    assert strict["properties"]["opt"]["type"] == ["object", "null"]
    assert strict["properties"]["opt"]["properties"]["a"] == {"type": ["string", "null"], "enum": ["x", "y", None]}
    # a map, an untyped value or a free-form object has no strict form
    assert mcp_schema.strict(mcp_schema.portable(HOSTILE)) is None
    assert mcp_schema.strict(mcp_schema.portable({"type": "object"})) == {
        "type": "object", "properties": {}, "required": [], "additionalProperties": False}


def test_top_level_combinators_become_one_object():
    shown = mcp_schema.portable({"oneOf": [
        {"type": "object", "properties": {"id": {"type": "string"}, "v": {"type": "integer"}}, "required": ["id", "v"]},
        {"type": "object", "properties": {"id": {"type": "string"}, "name": {"type": "string"}}, "required": ["id"]}]})
    assert portable_problems(shown) == []
    assert shown["type"] == "object" and set(shown["properties"]) == {"id", "v", "name"}
    assert shown["required"] == ["id"]
    assert mcp_schema.portable({"type": "string"}) == {"type": "object", "properties": {}}
    assert mcp_schema.portable('{"type": "object", "properties": {"a": {"type": "string"}}}')["properties"] == {
        "a": {"type": "string"}}
    assert mcp_schema.portable("not json") == {"type": "object", "properties": {}}


def test_nulls_for_optional_fields_are_dropped_before_the_exec():
    schema = mcp_schema.portable({"type": "object", "required": ["a"], "properties": {
        "a": {"type": ["string", "null"]}, "b": {"type": "string"},
        "c": {"type": "object", "properties": {"d": {"type": "integer"}}},
        "e": {"type": "array", "items": {"type": "object", "properties": {"f": {"type": "string"}}}}}})
    args = {"a": None, "b": None, "c": {"d": None}, "e": [{"f": None}, {"f": "x"}], "extra": None}
    assert mcp_schema.drop_unset(args, schema) == {"a": None, "c": {}, "e": [{}, {"f": "x"}], "extra": None}


def definition(name: str, tool_name: str, provider: str = "p", schema: dict | None = None) -> apb.McpToolDefinition:
    d = apb.McpToolDefinition(name=name, tool_name=tool_name, provider_identifier=provider, description=f"{tool_name} it")
    json_format.ParseDict(schema or {"type": "object", "properties": {}}, d.input_schema)
    return d


def test_direct_names_are_provider_safe_unique_and_stable():
    long_tool = "fetch.customer record " + "x" * 58
    tools = [
        McpTool(definition("acme.tools prod-" + long_tool, long_tool), "acme.tools prod", "Acme Tools"),
        McpTool(definition("acme.tools prod-" + long_tool + "2", long_tool + "2"), "acme.tools prod", "Acme Tools"),
        McpTool(definition("a-b", "b"), "a"),
        McpTool(definition("a_-b", "b"), "a_"),  # sanitises to the same name as the one above
    ]
    names = direct_names(tools, reserved={"Read", "Shell"})
    assert all(NAME.match(n) for n in names.values())
    assert len(set(names.values())) == 4
    assert names["a-b"] == "mcp_a__b" and names["a_-b"].startswith("mcp_a__b_")
    assert names == direct_names(tools, reserved={"Read", "Shell"})  # deterministic
    spec, tool = direct_tool(tools[0], names[tools[0].name])
    assert spec.name == tool.name == names[tools[0].name]
    assert tool.variant == "mcp_tool_call" and tool.transport == "exec"
    assert "(MCP server acme.tools prod, tool " + long_tool + ")" in spec.description


def test_table_follows_the_live_listing():
    table = McpTable()
    descriptor = apb.McpDescriptor(server_name="Docs", server_identifier="user-docs")
    descriptor.tools.add(tool_name="search")
    table.seed([definition("user-docs-search", "search", "docs-provider"), definition("other-x", "x")], [descriptor])
    assert table.find("Docs", "search").server_identifier == "user-docs"
    assert table.find("docs-provider", "search").name == "user-docs-search"
    assert table.find("other", "x").name == "other-x"  # a bare definition: its full name's prefix
    with pytest.raises(UnknownMcpTool):
        table.find("Docs", "nope")
    # a listing of one server replaces only that server's entries
    server = apb.McpStateServer(server_name="Docs", server_identifier="user-docs",
                                tools=[definition("user-docs-fetch", "fetch", "docs-provider")])
    table.refresh([server], complete=False)
    assert sorted(t.name for t in table.tools()) == ["other-x", "user-docs-fetch"]
    # a complete listing replaces everything
    table.refresh([server], complete=True)
    assert [t.name for t in table.tools()] == ["user-docs-fetch"]
    assert table.server_identifier("Docs") == "user-docs" and table.server_identifier("unknown") == "unknown"


def test_results_are_canonical_strings_never_summaries():
    success = apb.McpSuccess()
    success.content.add().text.text = "first"
    item = success.content.add()
    item.text.text = "head"
    item.text.output_location.CopyFrom(apb.OutputLocation(file_path="/tmp/out.txt", size_bytes=5000, line_count=40))
    success.content.add().image.CopyFrom(apb.McpImageContent(data=b"\x89PNG", mime_type="image/png"))
    json_format.ParseDict({"rows": [1, 2.5]}, success.structured_content)
    content, images = success_content(success)
    assert content == ('first\n\nhead\n[The full output was saved to /tmp/out.txt (5000 bytes, 40 lines)]\n\n'
                       '[image 1: image/png, 4 bytes]\n\nStructured content:\n{"rows":[1,2.5]}')
    assert len(images) == 1 and images[0].mime_type == "image/png"
    success.is_error = True
    assert success_content(success)[0].startswith(ERROR_LINE + "\nfirst")
    assert success_content(apb.McpSuccess())[0] == "(the MCP tool returned no content)"
    card = apb.McpArgs(name="n", tool_name="t")
    for result, expected in [
        (apb.McpResult(error=apb.McpError(error="boom")), f"{ERROR_LINE}\nboom"),
        (apb.McpResult(rejected=apb.McpRejected(reason="no")), "The user declined the MCP call t: no"),
        (apb.McpResult(tool_not_found=apb.McpToolNotFound(name="n", available_tools=["a"])),
         "Cursor reports MCP tool not found: n. Available: a. Call GetMcpTools to refresh the list."),
        (apb.McpResult(approved=apb.McpApproved()), "The MCP call was approved but the client returned no result."),
    ]:
        outcome = mcp_outcome(result, card)
        assert outcome.is_error and outcome.content == expected
