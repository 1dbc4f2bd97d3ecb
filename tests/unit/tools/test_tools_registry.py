"""The registry: names match the catalog, every ToolDef's types fit its ToolCall variant, and the
model's mistakes become tool errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from byok.agent.cursor.tools.base import RunToolContext, ToolArgsError
from byok.agent.cursor.tools.registry import REGISTRY, decode_args, invalid_args_outcome, lookup, unknown_tool_outcome
from byok.proto import agent_pb2 as apb

CATALOG = json.loads((Path(__file__).resolve().parents[3] / "prompt" / "tools.json").read_text())["tools"]
CTX = RunToolContext(conversation_id="c", workspace_paths=("/ws",), terminals_folder="/t")

SAMPLES = {
    "Read": {"path": "a"}, "Ls": {"path": "a"}, "Grep": {"pattern": "x"}, "Glob": {"glob_pattern": "*"},
    "Delete": {"path": "a"}, "ReadLints": {}, "Write": {"path": "a", "contents": ""},
    "StrReplace": {"path": "a", "old_string": "x", "new_string": "y"}, "Shell": {"command": "ls"},
    "AwaitShell": {"shell_id": 1}, "TodoWrite": {"todos": [], "merge": False}, "UpdateCurrentStep": {},
    "AskQuestion": {"questions": [{"id": "q", "prompt": "p", "options": [{"id": "a", "label": "A"}, {"id": "b", "label": "B"}]}]},
    "CreatePlan": {"name": "n", "overview": "o", "plan": "p"}, "SwitchMode": {"target_mode_id": "plan"},
    "WebFetch": {"url": "https://x.dev"}, "WebSearch": {"search_term": "q"}, "GenerateImage": {"description": "d"},
    "GetMcpTools": {"server": "s"}, "CallMcpTool": {"server": "s", "toolName": "t", "arguments": {"a": [1, "x"]}},
    "FetchMcpResource": {"server": "s", "uri": "file:///r"},
    "Task": {"description": "d", "prompt": "p", "subagent_type": "explore", "attachments": ["a.py"]},
}


def test_registry_names_are_catalog_names():
    assert set(REGISTRY) == set(SAMPLES)
    assert set(REGISTRY) <= set(CATALOG)
    assert lookup("Read") is REGISTRY["Read"] and lookup("read") is None and lookup("task") is None


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_tooldef_types_fit_the_variant(name):
    tool = REGISTRY[name]
    assert tool.name == name
    assert tool.variant in apb.ToolCall.DESCRIPTOR.fields_by_name
    card = tool.parse(SAMPLES[name], "call-1", CTX)
    call = tool.tool_call(card, tool.error_result("boom"))  # CopyFrom type-checks args and result
    assert call.WhichOneof("tool") == tool.variant
    assert tool.tool_call().WhichOneof("tool") == tool.variant  # the empty placeholder card
    assert tool.transport in ("exec", "interaction", "local")


def test_decode_args():
    assert decode_args("") == {} and decode_args("  \n") == {}
    assert decode_args('{"a": 1}') == {"a": 1}
    with pytest.raises(ToolArgsError, match="not valid JSON"):
        decode_args('{"path":')
    with pytest.raises(ToolArgsError, match="must be a JSON object"):
        decode_args("[1]")
    with pytest.raises(ToolArgsError, match="lone surrogate"):
        decode_args('{"contents": "\\ud800"}')


def test_unknown_tool_outcome():
    out = unknown_tool_outcome("OldTool", ["Read", "Shell"])
    assert out.is_error and out.result is None
    assert out.content == ("Tool 'OldTool' is not available: it is not in the current advertised tool set. "
                           "Available tools: Read, Shell.")


def test_invalid_args_outcome():
    tool = REGISTRY["Shell"]
    with pytest.raises(ToolArgsError) as e:
        tool.parse({}, "c", CTX)
    out = invalid_args_outcome(tool, str(e.value))
    assert out.is_error and "missing command" in out.content
    assert out.result == apb.ShellResult(spawn_error=apb.ShellSpawnError(error=out.content))


def test_lone_surrogate_in_a_string_argument_is_an_args_error():
    import json as _json
    raw = _json.loads('{"path": "a\\ud800"}')  # what a plain json.loads lets through
    with pytest.raises(ToolArgsError, match="lone surrogate"):
        REGISTRY["Read"].parse(raw, "c", CTX)


def test_invalid_args_outcome_does_not_repeat_a_prefix():
    out = invalid_args_outcome(REGISTRY["Read"], "Invalid arguments for Read: missing path: `path` is required (a string)")
    assert out.content == ("Invalid arguments for Read: missing path: `path` is required (a string). "
                           "Fix the arguments and call Read again.")
