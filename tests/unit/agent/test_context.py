"""Rendering Cursor's RequestContext and selected context into the runtime message."""

from __future__ import annotations

import base64
import re
from datetime import datetime, timedelta, timezone

import pytest

from byok.agent.cursor.context import (
    SECTION_ORDER,
    ContextParts,
    format_timestamp,
    render_action_context,
    render_open_files,
    left_out,
    render_request_context,
    render_selected_context,
    runtime_text,
    selected_images,
)
from byok.providers.transcript import ImagePart
from byok.prompt.assets import load_assets
from byok.proto import agent_pb2 as apb

IdeFile = apb.InvocationContext.IdeState.File
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
WS = "/Users/dev/shop"
ALL_TOOLS = None  # offered_tools=None: no gating


def env(**overrides) -> apb.RequestContextEnv:
    fields = dict(
        os_version="darwin 24.5.0",
        workspace_paths=[WS],
        shell="zsh",
        terminals_folder="/Users/dev/.cursor/projects/shop/terminals",
        time_zone="Europe/Berlin",
        agent_transcripts_folder="/Users/dev/.cursor/projects/shop/agent-transcripts",
    )
    fields.update(overrides)
    return apb.RequestContextEnv(**fields)


def rule(path: str, content: str, kind: str, **kind_fields) -> apb.CursorRule:
    types = {
        "global": apb.CursorRuleTypeGlobal,
        "file_globbed": apb.CursorRuleTypeFileGlobs,
        "agent_fetched": apb.CursorRuleTypeAgentFetched,
        "manually_attached": apb.CursorRuleTypeManuallyAttached,
    }
    return apb.CursorRule(full_path=path, content=content, type=apb.CursorRuleType(**{kind: types[kind](**kind_fields)}))


def full_parts() -> ContextParts:
    return ContextParts(
        rules=apb.RequestContextRulesPart(
            rules=[
                rule(f"{WS}/AGENTS.md", "Run `make test` before you finish.", "global"),
                rule(f"{WS}/.cursor/rules/py.mdc", "Use type hints everywhere.", "file_globbed", globs=["**/*.py"]),
                rule(f"{WS}/.cursor/rules/db.mdc", "SECRET-BODY", "agent_fetched", description="How to write DB migrations"),
                rule(f"{WS}/.cursor/rules/manual.mdc", "MANUAL-BODY", "manually_attached"),
                apb.CursorRule(full_path=f"{WS}/.cursor/rules/bad.mdc", content="BROKEN", parse_error="bad yaml"),
            ],
            non_file_rules=[apb.CursorRule(content="Always answer in English.", source=apb.CURSOR_RULE_SOURCE_USER)],
            cloud_rule="Never push to main.",
        ),
        skills=apb.RequestContextSkillsPart(
            agent_skills=[
                apb.AgentSkill(full_path="/Users/dev/.cursor/skills/pdf/SKILL.md", description="Read and fill PDF forms", content="FULL"),
                apb.AgentSkill(full_path="/Users/dev/.cursor/skills/deploy/SKILL.md", description="Deploy", disable_model_invocation=True),
            ],
            skill_options=apb.SkillOptions(
                skill_descriptors=[
                    apb.SkillDescriptor(name="pdf", description="dup", readme_file_path="/Users/dev/.cursor/skills/pdf/SKILL.md", enabled=True),
                    apb.SkillDescriptor(name="charts", description="Draw charts", readme_file_path="/s/charts/SKILL.md", enabled=True),
                    apb.SkillDescriptor(name="off", description="Disabled", readme_file_path="/s/off/SKILL.md", enabled=False),
                ]
            ),
        ),
        subagents=apb.RequestContextSubagentsPart(
            custom_subagents=[apb.CustomSubagent(name="reviewer", description="Reviews a diff for bugs", model="fast", is_background=True)]
        ),
        mcps=apb.RequestContextMcpsPart(
            tools=[apb.McpToolDefinition(name="ctx7-query", tool_name="query-docs", provider_identifier="context7")],
            mcp_instructions=[
                apb.McpInstructions(server_name="context7", server_identifier="user-context7", instructions="Resolve the library id first.")
            ],
            mcp_meta_tool_options=apb.McpMetaToolOptions(
                enabled=True,
                mcp_descriptors=[
                    apb.McpDescriptor(
                        server_name="context7",
                        server_identifier="user-context7",
                        server_use_instructions="descriptor copy",
                        tools=[
                            apb.McpToolDescriptor(tool_name="resolve-library-id", description="Resolve a package name\nto an id."),
                            apb.McpToolDescriptor(tool_name="query-docs"),
                        ],
                    ),
                    apb.McpDescriptor(
                        server_name="browser-use",
                        server_identifier="plugin-browser-use",
                        server_use_instructions="Take a screenshot first.",
                        tools=[apb.McpToolDescriptor(tool_name="browser_exec")],
                    ),
                ],
            ),
        ),
    )


def context() -> apb.RequestContext:
    return apb.RequestContext(
        env=env(),
        git_repos=[apb.GitRepoInfo(path=WS, branch_name="feature/cart", status="M src/cart.py\n?? notes.md")],
        admin_command_denylist=["rm -rf /"],
    )


def sections(text: str) -> list[str]:
    """The top-level section tags, in order (nested <rule>, <skill>, ... are not sections)."""
    return [t for t in re.findall(r"^<([a-z_]+)>$", text, re.M) if t in SECTION_ORDER]


# --- REQUEST_CONTEXT ---------------------------------------------------------------------------


def test_sections_follow_the_captured_order():
    text = render_request_context(context(), full_parts(), offered_tools=ALL_TOOLS)
    assert sections(text) == list(SECTION_ORDER)
    assert SECTION_ORDER == ("user_info", "git_status", "agent_transcripts", "rules", "agent_skills", "subagents", "mcp_meta_tools")


def test_nothing_given_renders_nothing():
    assert render_request_context(None) == ""
    assert render_request_context(apb.RequestContext()) == ""
    assert render_request_context(apb.RequestContext(env=apb.RequestContextEnv())) == ""
    assert render_request_context(apb.RequestContext(), ContextParts(
        rules=apb.RequestContextRulesPart(), skills=apb.RequestContextSkillsPart(),
        subagents=apb.RequestContextSubagentsPart(), mcps=apb.RequestContextMcpsPart(),
    )) == ""  # fmt: skip


def test_user_info_carries_the_environment_and_the_terminals_folder():
    text = render_request_context(apb.RequestContext(env=env(workspace_paths=[WS, "/Users/dev/lib"], sandbox_enabled=True)))
    body = text.split("<user_info>\n", 1)[1].split("\n</user_info>", 1)[0]
    assert "OS Version: darwin 24.5.0" in body
    assert "Shell: zsh" in body
    assert f"Workspace Paths:\n- {WS}\n- /Users/dev/lib" in body
    assert "Terminals folder: /Users/dev/.cursor/projects/shop/terminals" in body
    assert "<shell_id>.txt" in body
    assert "Time zone: Europe/Berlin" in body
    assert "Shell sandbox: enabled" in body
    assert sections(text) == ["user_info", "agent_transcripts"]


def test_only_present_env_fields_are_shown():
    text = render_request_context(apb.RequestContext(env=apb.RequestContextEnv(terminals_folder="/t")))
    assert text.startswith("<user_info>\nTerminals folder: /t\n")
    assert "OS Version" not in text and "Shell:" not in text and "Time zone" not in text


def test_git_status_snapshot():
    text = render_request_context(context())
    block = re.search(r"<git_status>\n(.*?)\n</git_status>", text, re.S).group(1)
    assert "snapshot" in block
    assert f"Repository: {WS}\nBranch: feature/cart\nM src/cart.py\n?? notes.md" in block


def test_rules_apply_by_type():
    text = render_request_context(None, full_parts())
    block = re.search(r"<rules>\n(.*?)\n</rules>", text, re.S).group(1)
    assert f'<rule path="{WS}/AGENTS.md" applies="always">\nRun `make test` before you finish.\n</rule>' in block
    assert 'applies="to files matching **/*.py">\nUse type hints everywhere.' in block
    assert 'applies="when relevant">\nHow to write DB migrations\n</rule>' in block
    assert "SECRET-BODY" not in block  # described, read on demand
    assert "MANUAL-BODY" not in block and "BROKEN" not in block
    assert '<rule source="user" applies="always">\nAlways answer in English.' in block
    assert '<rule source="cloud" applies="always">\nNever push to main.' in block


def test_skills_list_descriptions_and_paths():
    text = render_request_context(None, full_parts())
    block = re.search(r"<agent_skills>\n(.*?)\n</agent_skills>", text, re.S).group(1)
    assert '<skill name="pdf" path="/Users/dev/.cursor/skills/pdf/SKILL.md">\nRead and fill PDF forms\n</skill>' in block
    assert '<skill name="charts" path="/s/charts/SKILL.md">\nDraw charts\n</skill>' in block
    assert "FULL" not in block and "Deploy" not in block and "Disabled" not in block and "dup" not in block


def test_subagents_and_mcp():
    text = render_request_context(None, full_parts())
    assert '<subagent name="reviewer" model="fast" background="true">\nReviews a diff for bugs\n</subagent>' in text
    mcp = re.search(r"<mcp_meta_tools>\n(.*?)\n</mcp_meta_tools>", text, re.S).group(1)
    assert "GetMcpTools" in mcp and "CallMcpTool" in mcp
    assert '<mcp_server name="context7" identifier="user-context7">' in mcp
    assert "- resolve-library-id: Resolve a package name to an id.\n- query-docs" in mcp
    assert "<instructions>\nResolve the library id first.\n</instructions>" in mcp  # explicit wins
    assert "descriptor copy" not in mcp
    assert '<mcp_server name="browser-use" identifier="plugin-browser-use">' in mcp
    assert "Take a screenshot first." in mcp
    assert "ctx7-query" not in mcp  # dynamic tool definitions travel as functions, not text


def test_sections_about_unoffered_tools_are_left_out():
    everything = render_request_context(context(), full_parts(), offered_tools=ALL_TOOLS)
    ask_tools = load_assets().mode("ask").tool_names
    text = render_request_context(context(), full_parts(), offered_tools=ask_tools)
    assert sections(text) == ["user_info", "git_status", "agent_transcripts", "rules", "agent_skills"]
    assert "<subagents>" in everything and "<mcp_meta_tools>" in everything
    with_task = render_request_context(context(), full_parts(), offered_tools=[*ask_tools, "Task"])
    assert "<subagents>" in with_task and "<mcp_meta_tools>" not in with_task
    with_mcp = render_request_context(context(), full_parts(), offered_tools=[*ask_tools, "GetMcpTools"])
    assert "<mcp_meta_tools>" in with_mcp and "<subagents>" not in with_mcp


def test_parts_replace_inline_fields_and_inline_fields_serve_when_no_part_came():
    ctx = context()
    ctx.rules.append(rule(f"{WS}/INLINE.md", "inline rule", "global"))
    ctx.agent_skills.append(apb.AgentSkill(full_path="/inline/SKILL.md", description="inline skill"))
    ctx.custom_subagents.append(apb.CustomSubagent(name="inline-agent", description="inline"))
    ctx.mcp_instructions.append(apb.McpInstructions(server_name="inline-server", instructions="inline mcp"))

    inline = render_request_context(ctx)
    for needle in ("inline rule", "inline skill", "inline-agent", "inline mcp"):
        assert needle in inline

    replaced = render_request_context(ctx, full_parts())
    for needle in ("inline rule", "inline skill", "inline-agent", "inline mcp"):
        assert needle not in replaced

    # An empty part (Cursor sends the empty-string blob for "no subagents") means: none.
    empty = render_request_context(ctx, ContextParts(subagents=apb.RequestContextSubagentsPart()))
    assert "<subagents>" not in empty and "inline rule" in empty


def test_tag_names_read_by_the_token_breakdown():
    text = render_request_context(context(), full_parts())
    for tag in ("rules", "agent_skills", "subagents", "mcp_meta_tools"):
        assert text.count(f"<{tag}>\n") == 1 and text.count(f"\n</{tag}>") == 1


# --- OPEN_FILES / SELECTED_CONTEXT ---------------------------------------------------------------


def ide(visible=(), recent=()) -> apb.SelectedContext:
    return apb.SelectedContext(
        invocation_context=apb.InvocationContext(
            ide_state=apb.InvocationContext.IdeState(visible_files=list(visible), recently_viewed_files=list(recent))
        )
    )


def test_open_files():
    selected = ide(
        visible=[
            IdeFile(path=f"{WS}/src/cart.py", total_lines=120, cursor_position=IdeFile.CursorPosition(line=42, text="    total = sum(items)")),
        ],
        recent=[IdeFile(path=f"{WS}/src/cart.py"), IdeFile(path=f"{WS}/README.md")],
    )
    text = render_open_files(selected)
    assert text.startswith("<open_and_recently_viewed_files>\n")
    assert f"Visible in the editor:\n- {WS}/src/cart.py (cursor on line 42: `total = sum(items)`, 120 lines)" in text
    assert f"Recently viewed:\n- {WS}/README.md" in text
    assert text.count("src/cart.py") == 1


def test_no_open_files_renders_nothing():
    assert render_open_files(None) == ""
    assert render_open_files(apb.SelectedContext()) == ""
    assert render_open_files(ide()) == ""


def test_selected_context_blocks():
    selected = apb.SelectedContext(
        files=[apb.SelectedFile(path=f"{WS}/a.py", content="x = 1\ny = 2\n")],
        code_selections=[
            apb.SelectedCodeSelection(
                path=f"{WS}/b.py",
                content="def f():\n    return '```'",
                range=apb.Range(start=apb.Position(line=10), end=apb.Position(line=11)),
            )
        ],
        terminal_selections=[apb.SelectedTerminalSelection(content="$ make\nerror: boom", title="zsh")],
        folders=[apb.SelectedFolder(path=f"{WS}/src")],
        cursor_rules=[apb.SelectedCursorRule(rule=rule(f"{WS}/.cursor/rules/manual.mdc", "Manual rule body", "manually_attached"))],
        cursor_commands=[apb.SelectedCursorCommand(name="review", content="Review the staged changes.")],
        git_diff=apb.SelectedGitDiff(content="-a\n+b", full_content_length_char_count=5000),
        external_links=[apb.SelectedExternalLink(url="https://example.com/doc")],
        extra_context=["The user is on a train."],
        selected_images=[apb.SelectedImage(data=PNG)],
    )
    text = render_selected_context(selected)
    assert text.startswith("<attached_context>\nThe user attached the following")
    assert f'<file path="{WS}/a.py">\n```1:2:{WS}/a.py\nx = 1\ny = 2\n```\n</file>' in text
    assert f"````10:11:{WS}/b.py\ndef f():\n    return '```'\n````" in text  # fence outgrows the content
    assert '<terminal_selection title="zsh">\n$ make\nerror: boom\n</terminal_selection>' in text
    assert f'<folder path="{WS}/src">' in text
    assert "Manual rule body" in text
    assert '<cursor_command name="review">\nReview the staged changes.' in text
    assert "(diff cut off: 5000 characters in full)" in text
    assert '<link url="https://example.com/doc">' in text
    assert "The user is on a train." in text
    assert "PNG" not in text  # images travel separately


def test_selected_context_without_readable_content_renders_nothing():
    assert render_selected_context(None) == ""
    assert render_selected_context(apb.SelectedContext()) == ""
    assert render_selected_context(apb.SelectedContext(selected_images=[apb.SelectedImage(data=PNG)])) == ""
    assert render_selected_context(ide(visible=[IdeFile(path="/x")])) == ""


def test_selected_images():
    selected = apb.SelectedContext(
        selected_images=[
            apb.SelectedImage(uuid="private-uuid", path="/Users/dev/Desktop/shot.png", data=PNG, dimension=apb.SelectedImage.Dimension(width=800, height=600)),
            apb.SelectedImage(mime_type="image/jpeg", blob_id=b"\x01" * 32),
            apb.SelectedImage(mime_type="image/webp", blob_id_with_data=apb.SelectedImage.BlobIdWithData(blob_id=b"\x02" * 32, data=b"RIFF....WEBP")),
            apb.SelectedImage(uuid="nothing"),
        ]
    )
    first, second, third = selected_images(selected)
    assert first.mime_type == "image/png" and base64.b64decode(first.data_b64) == PNG
    assert (first.width, first.height, first.blob_id) == (800, 600, None)
    assert "private-uuid" not in repr(first) and "Desktop" not in repr(first)
    assert first.to_part() == ImagePart(mime_type="image/png", data_b64=first.data_b64)
    assert second.data_b64 is None and second.blob_id == b"\x01" * 32
    with pytest.raises(ValueError):
        second.to_part()
    assert third.data_b64 == base64.b64encode(b"RIFF....WEBP").decode() and third.blob_id == b"\x02" * 32
    assert selected_images(None) == ()


# --- ACTION_CONTEXT ------------------------------------------------------------------------------


def test_action_context():
    um = apb.UserMessage(
        text="go",
        execute_plan_info=apb.ExecutePlanInfo(plan_id="plan-1", plan_title="Cart refactor"),
        subagent_system_reminder="Only touch src/cart.py.",
        hook_additional_contexts=[apb.HookAdditionalContext(hook_event_name="beforeSubmitPrompt", content="Ticket SHOP-12")],
    )
    text = render_action_context(um, apb.RequestContext(hooks_additional_context="Session hook says hi"), ["<done>\nextra\n</done>"])
    assert '<execute_plan plan_id="plan-1">\nThe user approved the plan "Cart refactor"' in text
    assert "<system_reminder>\nOnly touch src/cart.py.\n</system_reminder>" in text
    assert '<hook_context event="beforeSubmitPrompt">\nTicket SHOP-12\n</hook_context>' in text
    assert "Session hook says hi" in text
    assert text.endswith("<done>\nextra\n</done>")
    assert render_action_context(apb.UserMessage(text="plain")) == ""


# --- time ------------------------------------------------------------------------------------------


def test_format_timestamp():
    now = datetime(2025, 12, 2, 13, 33, 5, tzinfo=timezone.utc)
    assert format_timestamp(now, "Europe/Berlin") == "Tuesday, December 2, 2025, 14:33 (Europe/Berlin, UTC+01:00)"
    assert format_timestamp(now, "America/St_Johns") == "Tuesday, December 2, 2025, 10:03 (America/St_Johns, UTC-03:30)"
    assert format_timestamp(now) == "Tuesday, December 2, 2025, 13:33 (UTC+00:00)"
    assert format_timestamp(now, "Not/AZone") == "Tuesday, December 2, 2025, 13:33 (UTC+00:00)"
    assert format_timestamp(now.astimezone(timezone(timedelta(hours=9)))) == "Tuesday, December 2, 2025, 22:33 (UTC+09:00)"
    with pytest.raises(ValueError):
        format_timestamp(datetime(2025, 12, 2, 13, 33))


# --- the whole runtime message ---------------------------------------------------------------------


def user_message(text: str, mode: int = apb.AGENT_MODE_AGENT) -> apb.UserMessage:
    return apb.UserMessage(
        text=text,
        message_id="msg-1",
        mode=mode,
        selected_context=apb.SelectedContext(
            files=[apb.SelectedFile(path=f"{WS}/a.py", content="x = 1\n")],
            invocation_context=apb.InvocationContext(
                ide_state=apb.InvocationContext.IdeState(visible_files=[IdeFile(path=f"{WS}/a.py")])
            ),
        ),
    )


NOW = datetime(2025, 12, 2, 13, 33, tzinfo=timezone.utc)


@pytest.mark.parametrize("mode", ["agent", "ask", "plan", "subagent"])
def test_runtime_text_per_mode(mode):
    assets = load_assets()
    text = runtime_text(assets.mode(mode), context(), full_parts(), user_message("Why is {{ total }} wrong?"), NOW)
    assert text.startswith("<user_info>\n")
    assert text.count("<user_query>") == 1
    assert text.endswith("<user_query>\nWhy is {{ total }} wrong?\n</user_query>")
    assert "<timestamp>Tuesday, December 2, 2025, 14:33 (Europe/Berlin, UTC+01:00)</timestamp>" in text
    order = ["<user_info>", "<git_status>", "<agent_transcripts>", "<rules>", "<agent_skills>",
             "<system_reminder>", "<open_and_recently_viewed_files>", "<attached_context>", "<timestamp>", "<user_query>"]  # fmt: skip
    assert [text.index(tag) for tag in order] == sorted(text.index(tag) for tag in order)
    offered = set(assets.mode(mode).tool_names)
    assert ("<subagents>" in text) == ("Task" in offered)
    assert ("<mcp_meta_tools>" in text) == bool(offered & {"GetMcpTools", "CallMcpTool", "FetchMcpResource"})
    assert not re.search(r"<([\w-]+)[^>]*>\s*</\1>", text)
    assert "\n\n\n" not in text


def test_runtime_text_minimal_request():
    mode = load_assets().mode("agent")
    text = runtime_text(mode, None, None, apb.UserMessage(text="hello"), "T")
    assert text == (
        "<system_reminder>\n"
        + text.split("<system_reminder>\n", 1)[1].split("\n</system_reminder>", 1)[0]
        + "\n</system_reminder>\n\n<timestamp>T</timestamp>\n\n<user_query>\nhello\n</user_query>"
    )


def test_runtime_text_query_override_and_action_context():
    mode = load_assets().mode("subagent")
    um = apb.UserMessage(text="", subagent_system_reminder="Stay in src/.")
    text = runtime_text(mode, None, None, um, "T", query="resolved from blob", action_context=["<extra>\nE\n</extra>"])
    assert text.endswith("<user_query>\nresolved from blob\n</user_query>")
    assert "<system_reminder>\nStay in src/.\n</system_reminder>" in text
    assert "<extra>\nE\n</extra>" in text


def test_runtime_text_is_deterministic():
    mode = load_assets().mode("plan")
    a = runtime_text(mode, context(), full_parts(), user_message("q"), NOW)
    b = runtime_text(mode, context(), full_parts(), user_message("q"), NOW)
    assert a == b


def test_debug_config_does_not_disturb_modes_without_debug_placeholders():
    ctx = context()
    ctx.debug_mode_config.CopyFrom(apb.DebugModeConfig(log_path="/tmp/debug.log", server_endpoint="http://127.0.0.1:7777", session_id="s1"))
    text = runtime_text(load_assets().mode("agent"), ctx, None, apb.UserMessage(text="q"), "T")
    assert "/tmp/debug.log" not in text


def test_left_out_names_each_section_the_run_cannot_use():
    ask_tools = load_assets().mode("ask").tool_names
    reasons = left_out(context(), full_parts(), ask_tools)
    assert reasons == [
        "<subagents> left out: this run offers none of Task",
        "<mcp_meta_tools> left out: this run offers none of CallMcpTool, FetchMcpResource, GetMcpTools",
    ]
    assert left_out(context(), full_parts(), ["Task", "GetMcpTools"]) == []
    assert left_out(context(), None, ask_tools) == []  # nothing carried, nothing left out
