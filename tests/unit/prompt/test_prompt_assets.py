"""The prompt assets: catalog, per-mode manifests, system prompts, and start-up validation."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from byok.wire.errors import ConfigError
from byok.prompt import assets as assets_mod
from byok.prompt.assets import (
    AGENT_MODE_NAMES,
    PromptAssetError,
    UnknownModeError,
    load_assets,
    mode_name,
    resolve_mode,
)
from byok.proto import agent_pb2

M = agent_pb2.AgentMode

AGENT_TOOLS = (
    "Shell", "Grep", "Delete", "WebSearch", "WebFetch", "GenerateImage", "TodoWrite", "StrReplace",
    "Write", "Read", "ReadLints", "Glob", "Ls", "AskQuestion", "Task", "AwaitShell", "GetMcpTools",
    "FetchMcpResource", "SwitchMode", "CallMcpTool",
)  # fmt: skip
ASK_TOOLS = ("AskQuestion", "Glob", "Grep", "Ls", "Read", "ReadLints", "SwitchMode", "WebFetch", "WebSearch")
PLAN_TOOLS = (
    "Grep", "WebSearch", "WebFetch", "TodoWrite", "Read", "ReadLints", "Glob", "Ls", "AskQuestion",
    "SwitchMode", "CreatePlan",
)  # fmt: skip
DEBUG_TOOLS = (
    "Shell", "Grep", "Delete", "WebSearch", "WebFetch", "TodoWrite", "StrReplace", "Write", "Read",
    "ReadLints", "Glob", "Ls", "AskQuestion", "AwaitShell", "SwitchMode",
)  # fmt: skip
MULTITASK_TOOLS = (*DEBUG_TOOLS[:13], "Task", *DEBUG_TOOLS[13:])  # debug's set + Task, after AskQuestion
SUBAGENT_TOOLS = (
    "Shell", "Grep", "Delete", "WebSearch", "WebFetch", "GenerateImage", "TodoWrite", "StrReplace",
    "Write", "Read", "ReadLints", "Glob", "Ls", "Task", "AwaitShell", "GetMcpTools", "FetchMcpResource",
    "SwitchMode", "UpdateCurrentStep", "CallMcpTool",
)  # fmt: skip

# DESIGN.md section 6: model-facing names and parameters are facts (* = required).
DESIGN_PARAMETERS = {
    "Read": ({"path"}, {"offset", "limit"}),
    "Write": ({"path", "contents"}, set()),
    "StrReplace": ({"path", "old_string", "new_string"}, {"replace_all"}),
    "Delete": ({"path"}, set()),
    "Ls": ({"path"}, {"ignore"}),
    "Glob": ({"glob_pattern"}, {"target_directory"}),
    "Grep": (
        {"pattern"},
        {"path", "glob", "type", "output_mode", "-i", "-A", "-B", "-C", "multiline", "head_limit", "offset"},
    ),
    "ReadLints": (set(), {"paths"}),
    "Shell": ({"command"}, {"block_until_ms", "description", "working_directory"}),
    "AwaitShell": (set(), {"shell_id", "block_until_ms", "pattern"}),
    "TodoWrite": ({"todos", "merge"}, set()),
    "UpdateCurrentStep": (set(), {"current_step", "final_summary", "completed_subtitle"}),
    "AskQuestion": ({"questions"}, {"title"}),
    "SwitchMode": ({"target_mode_id"}, {"explanation"}),
    "WebFetch": ({"url"}, set()),
    "WebSearch": ({"search_term"}, {"explanation"}),
    "GenerateImage": (set(), {"description", "file_path", "image_data"}),
    "Task": (
        {"description", "prompt"},
        {"subagent_type", "model", "resume", "readonly", "attachments", "run_in_background"},
    ),
    "GetMcpTools": (set(), {"server", "toolName", "pattern"}),
    "CallMcpTool": ({"server", "toolName"}, {"arguments"}),
    "FetchMcpResource": ({"server", "uri"}, {"downloadPath"}),
    "CreatePlan": ({"name", "overview", "plan"}, {"todos"}),
}



@pytest.fixture(scope="module")
def assets():
    return load_assets()


@pytest.fixture
def asset_copy(tmp_path: Path) -> Path:
    root = tmp_path / "prompt"
    shutil.copytree(assets_mod.ROOT, root, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return root


def test_the_shipped_assets_load_and_cover_the_known_modes(assets):
    assert set(assets.modes) == {"agent", "ask", "plan", "debug", "multitask", "subagent"}


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("agent", AGENT_TOOLS), ("ask", ASK_TOOLS), ("plan", PLAN_TOOLS), ("debug", DEBUG_TOOLS),
     ("multitask", MULTITASK_TOOLS), ("subagent", SUBAGENT_TOOLS)],
)
def test_each_mode_offers_its_tools_in_a_stable_order(assets, mode, expected):
    assert assets.mode(mode).tool_names == expected


def test_subagent_is_agent_minus_askquestion_plus_updatecurrentstep(assets):
    agent = [n for n in assets.mode("agent").tool_names if n != "AskQuestion"]
    sub = [n for n in assets.mode("subagent").tool_names if n != "UpdateCurrentStep"]
    assert agent == sub


def test_only_plan_offers_createplan_and_only_subagent_offers_updatecurrentstep(assets):
    for name, mode in assets.modes.items():
        assert ("CreatePlan" in mode.tool_names) == (name == "plan")
        assert ("UpdateCurrentStep" in mode.tool_names) == (name == "subagent")


def test_ask_and_plan_cannot_change_the_workspace(assets):
    mutating = {"Shell", "Write", "StrReplace", "Delete", "GenerateImage", "AwaitShell"}
    for mode in ("ask", "plan"):
        assert not mutating & set(assets.mode(mode).tool_names)


def test_editnotebook_is_not_catalogued_and_task_is_where_cursor_offers_it(assets):
    assert "EditNotebook" not in assets.catalog
    offering = sorted(name for name, mode in assets.modes.items() if "Task" in mode.tool_names)
    assert offering == ["agent", "multitask", "subagent"]


@pytest.mark.parametrize("tool", sorted(DESIGN_PARAMETERS))
def test_catalog_names_and_parameters_follow_design(assets, tool):
    spec = assets.catalog[tool]
    required, optional = DESIGN_PARAMETERS[tool]
    params = spec.parameters
    assert params["type"] == "object"
    assert set(params["properties"]) == required | optional
    assert set(params.get("required", [])) == required
    assert spec.description.strip()
    for prop in params["properties"].values():
        assert prop.get("description", "").strip()


def test_the_catalog_holds_exactly_the_design_tools(assets):
    assert set(assets.catalog) == set(DESIGN_PARAMETERS)


def test_nested_item_shapes(assets):
    todo = assets.catalog["TodoWrite"].parameters["properties"]["todos"]["items"]
    assert set(todo["required"]) == {"id", "content", "status"}
    assert todo["properties"]["status"]["enum"] == ["pending", "in_progress", "completed", "cancelled"]
    question = assets.catalog["AskQuestion"].parameters["properties"]["questions"]["items"]
    assert set(question["properties"]) == {"id", "prompt", "options", "allow_multiple"}
    assert set(question["properties"]["options"]["items"]["properties"]) == {"id", "label"}


def test_shell_tells_the_model_how_to_background(assets):
    shell = assets.catalog["Shell"]
    block = shell.parameters["properties"]["block_until_ms"]["description"]
    assert "30000" in block and "0" in block
    for word in ("nohup", "&", "disown"):
        assert word in block
        assert word in shell.description


# Any change to a mode's tools (names, order, descriptions, schemas) changes its digest and starts a
# new provider cache domain: update these on purpose.
PINNED_DIGESTS = {
    "agent": "4cfea0e4cc261d6c3bcdaf606ddbd6068cffa05b2e047c4993293668344085ec",
    "ask": "885153ce3e9b52d760d6363ae2408b64188b67ba4cf37a08c6e46f962dfd4ff1",
    "plan": "64db00cb409cdf853e5017fb58aee75b38d7b7829552e4e40c7552ef0c38ef7c",
    "debug": "2532575fdb975a7d900702530b2a74ea5cba41599f3aeb9db625bfde1d8efaf6",
    "multitask": "09ef44d6ca4de4679545277b033e7c8126774ddf9a0c503d91a9b651230be72d",
    "subagent": "0c31dc147f9586e18f8e180a7269923e2a7f2ff015a1a94c44f37a576862f756",
}


def test_digests_pin_names_order_and_schemas(assets):
    digests = {name: m.tools_digest for name, m in assets.modes.items()}
    assert digests == PINNED_DIGESTS
    # Loading twice gives the same digests (the order is part of the provider cache prefix).
    assert {n: m.tools_digest for n, m in load_assets().modes.items()} == digests


def test_tools_without_keeps_order(assets):
    sub = assets.mode("subagent")
    assert tuple(t.name for t in sub.tools_without({"UpdateCurrentStep"})) == tuple(
        n for n in SUBAGENT_TOOLS if n != "UpdateCurrentStep")


def test_system_prompts_are_static_and_name_the_model(assets):
    for name, mode in assets.modes.items():
        text = mode.system_prompt("test-model")
        assert "powered by test-model" in text
        assert "{{" not in text and "MODEL_NAME" not in text
        assert "<user_info>" not in text
        assert "startLine:endLine:filepath" in text
        assert re.search(r"^```\d+:\d+:\S+$", text, re.M), "shows a code reference example"
        assert len(text) > 2500, f"{name} prompt looks like a placeholder"


def test_subagent_uses_the_agent_system_prompt(assets):
    assert assets.mode("subagent").system_prompt("m") == assets.mode("agent").system_prompt("m")


def test_the_model_name_is_inserted_once_and_literally(assets):
    text = assets.mode("agent").system_prompt("weird {{MODEL_NAME}} name")
    assert text.count("weird {{MODEL_NAME}} name") == 1
    with pytest.raises(ValueError):
        assets.mode("agent").system_prompt("")


# --- modes -------------------------------------------------------------------------------------


def test_agent_mode_table():
    assert mode_name(M.AGENT_MODE_AGENT) == "agent"
    assert mode_name(M.AGENT_MODE_ASK) == "ask"
    assert mode_name(M.AGENT_MODE_PLAN) == "plan"
    assert mode_name(M.AGENT_MODE_DEBUG) == "debug"
    assert mode_name(M.AGENT_MODE_MULTITASK) == "multitask"
    assert mode_name(M.AGENT_MODE_UNSPECIFIED) is None
    assert mode_name(99) == "agent-mode-99"
    assert set(AGENT_MODE_NAMES) == {v.number for v in M.DESCRIPTOR.values} - {0}


def test_resolve_mode_rules():
    assert resolve_mode(user_mode=M.AGENT_MODE_PLAN, state_mode=M.AGENT_MODE_ASK) == "plan"
    assert resolve_mode(user_mode=None, state_mode=M.AGENT_MODE_ASK) == "ask"
    assert resolve_mode(user_mode=M.AGENT_MODE_UNSPECIFIED, state_mode=M.AGENT_MODE_ASK) == "ask"
    assert resolve_mode(user_mode=None) == "agent"
    assert resolve_mode(user_mode=M.AGENT_MODE_ASK, subagent_type_name="generalPurpose") == "subagent"
    assert resolve_mode(user_mode=M.AGENT_MODE_ASK, subagent_type_name="") == "ask"


@pytest.mark.parametrize("mode", [M.AGENT_MODE_TRIAGE, M.AGENT_MODE_PROJECT, M.AGENT_MODE_CUSTOM, 42])
def test_modes_without_assets_end_the_run_with_a_config_error(assets, mode):
    with pytest.raises(UnknownModeError) as info:
        assets.for_run(user_mode=mode)
    err = info.value
    assert isinstance(err, ConfigError)
    assert repr(mode_name(mode)) in str(err)
    assert "no prompt assets" in str(err)
    assert err.to_connect().code.value == "failed_precondition"


def test_for_run_picks_assets(assets):
    assert assets.for_run(user_mode=M.AGENT_MODE_ASK).name == "ask"
    assert assets.for_run(user_mode=M.AGENT_MODE_DEBUG).name == "debug"
    assert assets.for_run(user_mode=None, state_mode=M.AGENT_MODE_MULTITASK).name == "multitask"
    assert assets.for_run(user_mode=M.AGENT_MODE_AGENT, subagent_type_name="explore").name == "subagent"


# --- broken assets stop start-up -----------------------------------------------------------------


def _problems(root: Path) -> str:
    with pytest.raises(PromptAssetError) as info:
        load_assets(root)
    return str(info.value)


def test_copy_of_the_assets_loads(asset_copy):
    assert set(load_assets(asset_copy).modes) == {"agent", "ask", "plan", "debug", "multitask", "subagent"}


def test_unknown_tool_in_a_manifest_names_the_file(asset_copy):
    path = asset_copy / "modes" / "ask.json"
    path.write_text(json.dumps(["Read", "Reed"]))
    message = _problems(asset_copy)
    assert f"{path}: unknown tool 'Reed'" in message


def test_duplicate_tool_in_a_manifest(asset_copy):
    path = asset_copy / "modes" / "plan.json"
    path.write_text(json.dumps(["Read", "Read"]))
    assert f"{path}: tool 'Read' is listed twice" in _problems(asset_copy)


def test_missing_manifest(asset_copy):
    path = asset_copy / "modes" / "subagent.json"
    path.unlink()
    assert f"{path}: missing file" in _problems(asset_copy)


def test_bad_json_names_line(asset_copy):
    path = asset_copy / "tools.json"
    path.write_text('{"tools": {,}}')
    assert f"{path}: invalid JSON at line 1" in _problems(asset_copy)


def test_template_syntax_error(asset_copy):
    path = asset_copy / "plan" / "runtime.md.j2"
    path.write_text("{% if USER_QUERY %}\n<user_query>\n{{ USER_QUERY }}\n</user_query>\n{{ TIMESTAMP }}\n")
    message = _problems(asset_copy)
    assert f"{path}: template syntax error" in message


def test_missing_required_placeholder(asset_copy):
    path = asset_copy / "ask" / "runtime.md.j2"
    path.write_text("<user_query>\n{{ USER_QUERY }}\n</user_query>\n")
    assert f"{path}: missing required placeholder(s) TIMESTAMP" in _problems(asset_copy)


def test_unknown_placeholder(asset_copy):
    path = asset_copy / "agent" / "runtime.md.j2"
    path.write_text("{{ TIMESTAMP }}{{ USER_QUERRY }}\n<user_query>\n{{ USER_QUERY }}\n</user_query>\n")
    assert f"{path}: unknown placeholder(s) USER_QUERRY" in _problems(asset_copy)


def test_template_must_hold_one_user_query_block(asset_copy):
    path = asset_copy / "agent" / "runtime.md.j2"
    path.write_text("{{ TIMESTAMP }}\n<query>{{ USER_QUERY }}</query>\n")
    assert f"{path}: must contain exactly one block" in _problems(asset_copy)


def test_template_must_not_render_empty_tags(asset_copy):
    path = asset_copy / "agent" / "runtime.md.j2"
    path.write_text(
        "<open_files>\n{{ OPEN_FILES }}\n</open_files>\n{{ TIMESTAMP }}\n<user_query>\n{{ USER_QUERY }}\n</user_query>\n"
    )
    assert f"{path}: renders empty tag(s) when their values are absent: open_files" in _problems(asset_copy)


def test_system_prompt_without_model_name(asset_copy):
    path = asset_copy / "ask" / "prompt.md"
    path.write_text("You are a helpful assistant.\n")
    assert f"{path}: the system prompt must name the model" in _problems(asset_copy)


def test_system_prompt_with_user_info_or_stray_placeholder(asset_copy):
    path = asset_copy / "plan" / "prompt.md"
    path.write_text("Powered by {{MODEL_NAME}}. {{OS}}\n<user_info>x</user_info>\n")
    message = _problems(asset_copy)
    assert f"{path}: unknown placeholder(s) {{{{OS}}}}" in message
    assert f"{path}: <user_info> belongs in the runtime message" in message


def test_shared_agent_prompt_is_reported_once(asset_copy):
    path = asset_copy / "agent" / "prompt.md"
    path.unlink()
    err = pytest.raises(PromptAssetError, load_assets, asset_copy).value
    assert err.problems.count(f"{path}: missing file") == 1


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda t: t["Read"]["parameters"]["properties"]["path"].update(type="text"), "invalid type 'text'"),
        (lambda t: t["Read"]["parameters"].update(requried=["path"]), "unsupported schema keyword(s) requried"),
        (lambda t: t["Read"]["parameters"].update(required=["path", "file"]), "undefined propert(ies) file"),
        (lambda t: t["Ls"]["parameters"]["properties"]["ignore"].pop("items"), "needs \"items\""),
        (lambda t: t["Write"]["parameters"].update(type="array"), "parameters must be a JSON Schema"),
        (lambda t: t["Write"].update(description=""), "description must be a non-empty string"),
        (lambda t: t["Grep"]["parameters"]["properties"]["output_mode"].update(enum=[]), "enum must be a non-empty"),
        (lambda t: t["Grep"]["parameters"]["properties"]["-A"].update(minimum="0"), "minimum must be a number"),
    ],
)
def test_broken_schema_is_reported_with_its_tool(asset_copy, mutate, expected):
    path = asset_copy / "tools.json"
    data = json.loads(path.read_text())
    mutate(data["tools"])
    path.write_text(json.dumps(data))
    message = _problems(asset_copy)
    assert str(path) in message and expected in message


def test_all_problems_are_reported_together(asset_copy):
    (asset_copy / "modes" / "ask.json").write_text(json.dumps(["Nope"]))
    (asset_copy / "plan" / "prompt.md").write_text("no model here")
    err = pytest.raises(PromptAssetError, load_assets, asset_copy).value
    assert len(err.problems) == 2
