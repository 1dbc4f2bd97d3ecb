"""Cursor's request context -> the text of the runtime (user-role) message.

Owns how the model sees what Cursor gathered for a run: `agent.v1.RequestContext` (+ the
rules/skills/subagents/MCP parts the caller fetched by KV GET, hash- and length-checked) and the
UserMessage's `selected_context`. Produces the values of the runtime template's placeholders:

    REQUEST_CONTEXT    user_info -> git_status -> agent_transcripts -> rules -> agent_skills
                       -> subagents -> mcp_meta_tools   (captured order, seed §25)
    OPEN_FILES         the editor's visible and recently viewed files
    SELECTED_CONTEXT   what the user attached (files, selections, terminals, rules, diffs, ...)
    ACTION_CONTEXT     per-message instructions (execute plan, subagent reminder, hook context)
    TIMESTAMP, USER_QUERY

Every section appears only when the request carried data for it: no empty tags, no defaults, nothing
guessed from history. The tag names `rules`, `agent_skills`, `subagents` and `mcp_meta_tools` are
read back by the token breakdown; keep them stable. Selected images come back separately as
`SelectedImageRef`s (private uuid and local path dropped).

Pure: protobuf in, strings out, no clock (the caller passes the time). The one lookup is the IANA
time-zone database (`zoneinfo`) when a datetime is formatted in the user's zone.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from byok.providers.transcript import ImagePart
from byok.proto import agent_pb2 as apb

if TYPE_CHECKING:
    from byok.prompt.assets import ModeAssets

__all__ = [
    "MCP_TAG",
    "OPEN_FILES_TAG",
    "RULES_TAG",
    "SECTION_ORDER",
    "SELECTED_CONTEXT_TAG",
    "SKILLS_TAG",
    "SUBAGENTS_TAG",
    "ContextParts",
    "SelectedImageRef",
    "format_timestamp",
    "left_out",
    "render_action_context",
    "render_open_files",
    "render_request_context",
    "render_selected_context",
    "runtime_text",
    "runtime_values",
    "selected_images",
]

RULES_TAG = "rules"
SKILLS_TAG = "agent_skills"
SUBAGENTS_TAG = "subagents"
MCP_TAG = "mcp_meta_tools"
OPEN_FILES_TAG = "open_and_recently_viewed_files"
SELECTED_CONTEXT_TAG = "attached_context"
SECTION_ORDER = ("user_info", "git_status", "agent_transcripts", RULES_TAG, SKILLS_TAG, SUBAGENTS_TAG, MCP_TAG)

# Sections that only make sense when the mode offers the tools they point at.
_SUBAGENT_TOOLS = frozenset({"Task"})
_MCP_TOOLS = frozenset({"GetMcpTools", "CallMcpTool", "FetchMcpResource"})


@dataclass(frozen=True)
class ContextParts:
    """The request-context parts referenced by `ConversationAction.request_context_parts`, already
    fetched and verified by the caller. A part given here replaces the inline RequestContext
    fields it covers; a part left None falls back to those inline fields (PROTOCOL 8.4)."""

    rules: apb.RequestContextRulesPart | None = None
    skills: apb.RequestContextSkillsPart | None = None
    subagents: apb.RequestContextSubagentsPart | None = None
    mcps: apb.RequestContextMcpsPart | None = None


@dataclass(frozen=True)
class SelectedImageRef:
    """An image the user attached. `data_b64` is None when Cursor sent only a blob id, which the
    caller resolves from the server's blob store."""

    mime_type: str
    data_b64: str | None
    blob_id: bytes | None = None
    width: int | None = None
    height: int | None = None

    def to_part(self) -> ImagePart:
        if self.data_b64 is None:
            raise ValueError("image data not resolved yet (only a blob id was sent)")
        return ImagePart(mime_type=self.mime_type, data_b64=self.data_b64)


# --- small text helpers ------------------------------------------------------------------------


def _attr(value: object) -> str:
    return str(value).replace("&", "&amp;").replace('"', "&quot;").replace("\n", " ")


def _block(tag: str, body: str, **attrs: object) -> str:
    """`<tag a="..">\\nbody\\n</tag>`, or "" when the body is blank (never an empty tag)."""
    body = body.strip("\n")
    if not body.strip():
        return ""
    rendered = "".join(f' {k}="{_attr(v)}"' for k, v in attrs.items() if v not in (None, ""))
    return f"<{tag}{rendered}>\n{body}\n</{tag}>"


render_block = _block


def _join(blocks: Iterable[str], sep: str = "\n\n") -> str:
    return sep.join(b for b in blocks if b)


def _fence(info: str, code: str) -> str:
    """A fenced block that survives backticks inside `code`."""
    longest = max((len(m) for m in re.findall(r"`{3,}", code)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{info}\n{code.rstrip(chr(10))}\n{ticks}"


def _one_line(text: str, limit: int = 160) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def _opt(msg: object, name: str) -> str:
    """An optional string field's value, "" when unset."""
    return getattr(msg, name) if msg.HasField(name) else ""  # type: ignore[attr-defined]


def _basename(path: str) -> str:
    return re.split(r"[\\/]", path.rstrip("\\/"))[-1] if path else ""


# --- REQUEST_CONTEXT -----------------------------------------------------------------------------


def render_request_context(
    ctx: apb.RequestContext | None,
    parts: ContextParts | None = None,
    *,
    offered_tools: Collection[str] | None = None,
) -> str:
    """The REQUEST_CONTEXT text, sections in captured order, each only when present.

    With `offered_tools`, the subagents section needs Task and the MCP section needs one of the MCP
    tools (a section about tools the model cannot call only costs tokens and invites bad calls).
    """
    ctx = ctx if ctx is not None else apb.RequestContext()
    parts = parts or ContextParts()
    env = ctx.env if ctx.HasField("env") else None

    if parts.rules is not None:
        rules = _rules(parts.rules.rules, parts.rules.non_file_rules, _opt(parts.rules, "cloud_rule"))
    else:
        rules = _rules(ctx.rules, ctx.non_file_rules, _opt(ctx, "cloud_rule"))

    if parts.skills is not None:
        skill_options = parts.skills.skill_options if parts.skills.HasField("skill_options") else None
        skills = _skills(parts.skills.agent_skills, skill_options)
    else:
        skills = _skills(ctx.agent_skills, ctx.skill_options if ctx.HasField("skill_options") else None)

    subagents = ""
    if offered_tools is None or _SUBAGENT_TOOLS & set(offered_tools):
        source = parts.subagents.custom_subagents if parts.subagents is not None else ctx.custom_subagents
        subagents = _subagents(source)

    mcp = ""
    if offered_tools is None or _MCP_TOOLS & set(offered_tools):
        if parts.mcps is not None:
            p = parts.mcps
            mcp = _mcp(
                p.mcp_instructions,
                p.mcp_meta_tool_options if p.HasField("mcp_meta_tool_options") else None,
                p.mcp_file_system_options if p.HasField("mcp_file_system_options") else None,
            )
        else:
            mcp = _mcp(
                ctx.mcp_instructions,
                ctx.mcp_meta_tool_options if ctx.HasField("mcp_meta_tool_options") else None,
                ctx.mcp_file_system_options if ctx.HasField("mcp_file_system_options") else None,
            )

    return _join(
        [
            _user_info(env) if env is not None else "",
            _git_status(ctx.git_repos),
            _agent_transcripts(env) if env is not None else "",
            rules,
            skills,
            subagents,
            mcp,
        ]
    )


def left_out(
    ctx: apb.RequestContext | None, parts: ContextParts | None, offered_tools: Collection[str]
) -> list[str]:
    """Why each section the request carried is missing from this run's text (for the log): the
    subagent definitions need Task, the MCP servers one of the MCP tools."""
    full = render_request_context(ctx, parts)
    offered = set(offered_tools)
    reasons = []
    for tag, tools in ((SUBAGENTS_TAG, _SUBAGENT_TOOLS), (MCP_TAG, _MCP_TOOLS)):
        if f"<{tag}>" in full and not tools & offered:
            reasons.append(f"<{tag}> left out: this run offers none of {', '.join(sorted(tools))}")
    return reasons


def _user_info(env: apb.RequestContextEnv) -> str:
    lines: list[str] = []
    if env.os_version:
        lines.append(f"OS Version: {env.os_version}")
    if env.shell:
        lines.append(f"Shell: {env.shell}")
    paths = [p for p in env.workspace_paths if p]
    if len(paths) == 1:
        lines.append(f"Workspace Path: {paths[0]}")
    elif paths:
        lines.append("Workspace Paths:\n" + "\n".join(f"- {p}" for p in paths))
    cwd = _opt(env, "process_working_directory")
    if cwd and cwd not in paths:
        lines.append(f"Working directory: {cwd}")
    if env.HasField("is_working_dir_home_dir") and env.is_working_dir_home_dir:
        lines.append(
            "Note: the workspace is the user's home directory; keep searches and commands scoped to the "
            "folders that matter."
        )
    if env.terminals_folder:
        # The model needs this to follow commands that moved to the background (seed §29).
        lines.append(
            f"Terminals folder: {env.terminals_folder}\n"
            "The output of every shell command, including commands that moved to the background, is written to "
            "`<shell_id>.txt` in this folder; read that file to check on a background command."
        )
    if env.time_zone:
        lines.append(f"Time zone: {env.time_zone}")
    if env.sandbox_enabled:
        lines.append("Shell sandbox: enabled")
    return _block("user_info", "\n".join(lines))


def _git_status(repos: Sequence[apb.GitRepoInfo]) -> str:
    entries: list[str] = []
    for repo in repos:
        lines = []
        if repo.path:
            lines.append(f"Repository: {repo.path}")
        if repo.branch_name:
            lines.append(f"Branch: {repo.branch_name}")
        status = repo.status.strip("\n")
        if status:
            lines.append(status)
        if lines:
            entries.append("\n".join(lines))
    if not entries:
        return ""
    intro = "Git status when the conversation started. It is a snapshot and does not change as work happens."
    return _block("git_status", _join([intro, *entries]))


def _agent_transcripts(env: apb.RequestContextEnv) -> str:
    if not env.agent_transcripts_folder:
        return ""
    return _block(
        "agent_transcripts",
        f"Transcripts of earlier agent conversations in this workspace are stored in {env.agent_transcripts_folder}. "
        "Look there only when the user refers to earlier work that is not in this conversation.",
    )


_SOURCES = {apb.CURSOR_RULE_SOURCE_TEAM: "team", apb.CURSOR_RULE_SOURCE_USER: "user"}


def _rules(rules: Sequence[apb.CursorRule], non_file_rules: Sequence[apb.CursorRule], cloud_rule: str) -> str:
    items = [_rule(r) for r in rules]
    items += [_rule(r, default_source="user") for r in non_file_rules]
    if cloud_rule.strip():
        items.append(_block("rule", cloud_rule, source="cloud", applies="always"))
    items = [i for i in items if i]
    if not items:
        return ""
    intro = (
        "Rules the user and their team set for this work. Follow each rule whenever it applies. "
        'A rule marked applies="when relevant" is given by its description only: read its file '
        "when the description fits the task."
    )
    return _block(RULES_TAG, _join([intro, *items]))


def _rule(rule: apb.CursorRule, default_source: str = "") -> str:
    if rule.HasField("parse_error"):
        return ""  # Cursor shows broken rules to the user; the model gets nothing useful from them
    source = _SOURCES.get(rule.source, default_source)
    kind = rule.type.WhichOneof("type") if rule.HasField("type") else None
    path = rule.full_path
    if kind == "manually_attached":
        return ""  # applies only when the user attaches it; it then arrives in SELECTED_CONTEXT
    if kind == "agent_fetched":
        description = rule.type.agent_fetched.description.strip()
        if path and description:
            return _block("rule", description, path=path, source=source, applies="when relevant")
        return _block("rule", rule.content or description, path=path, source=source, applies="when relevant")
    if kind == "file_globbed":
        globs = ", ".join(g for g in rule.type.file_globbed.globs if g)
        applies = f"to files matching {globs}" if globs else "always"
        return _block("rule", rule.content, path=path, source=source, applies=applies)
    return _block("rule", rule.content, path=path, source=source, applies="always")


def _skill_name(path: str) -> str:
    # .../skills/<name>/SKILL.md -> <name>
    parts = [p for p in re.split(r"[\\/]", path) if p]
    if len(parts) >= 2 and parts[-1].lower() == "skill.md":
        return parts[-2]
    return parts[-1] if parts else ""


def _skills(agent_skills: Sequence[apb.AgentSkill], options: apb.SkillOptions | None) -> str:
    entries: dict[str, str] = {}  # path (or name) -> rendered entry, first wins
    for skill in agent_skills:
        if skill.disable_model_invocation or skill.HasField("parse_error"):
            continue  # user-invoked only, or unusable
        key = skill.full_path or skill.description
        if not key or key in entries:
            continue
        body = skill.description.strip() if skill.full_path else (skill.content or skill.description)
        entries[key] = _block("skill", body, name=_skill_name(skill.full_path), path=skill.full_path)
    for d in options.skill_descriptors if options is not None else ():
        if not d.enabled or d.HasField("parse_error"):
            continue
        path = d.readme_file_path or d.folder_path
        key = path or d.name
        if not key or key in entries:
            continue
        entries[key] = _block("skill", d.description, name=d.name or _skill_name(path), path=path)
    items = [e for e in entries.values() if e]
    if not items:
        return ""
    intro = (
        "Skills are packaged instructions for particular kinds of tasks. When a task matches a skill's "
        "description, read the skill's file before you start and follow it."
    )
    return _block(SKILLS_TAG, _join([intro, *items]))


def _subagents(custom: Sequence[apb.CustomSubagent]) -> str:
    items = []
    for s in custom:
        if not s.name:
            continue
        items.append(
            _block(
                "subagent",
                s.description or "(no description)",
                name=s.name,
                model=s.model,
                background="true" if s.is_background else None,
            )
        )
    if not items:
        return ""
    intro = "Custom subagents the user defined. Launch one with the Task tool, passing its name as subagent_type."
    return _block(SUBAGENTS_TAG, _join([intro, *items]))


@dataclass
class _Server:
    name: str
    identifier: str
    tools: dict[str, str]
    instructions: str = ""
    folder: str = ""


def _mcp(
    instructions: Sequence[apb.McpInstructions],
    meta: apb.McpMetaToolOptions | None,
    files: apb.McpFileSystemOptions | None,
) -> str:
    servers: dict[str, _Server] = {}

    def server(name: str, identifier: str) -> _Server:
        key = identifier or name
        if key not in servers:
            servers[key] = _Server(name=name, identifier=identifier, tools={})
        return servers[key]

    for options in (meta, files):
        for d in options.mcp_descriptors if options is not None else ():
            if not (d.server_name or d.server_identifier):
                continue
            s = server(d.server_name, d.server_identifier)
            for t in d.tools:
                if t.tool_name and t.tool_name not in s.tools:
                    s.tools[t.tool_name] = _one_line(_opt(t, "description"))
            if not s.instructions:
                s.instructions = _opt(d, "server_use_instructions").strip()
            if not s.folder:
                s.folder = _opt(d, "folder_path")
    for i in instructions:
        if not (i.server_name or i.server_identifier) or not i.instructions.strip():
            continue
        # Explicit server instructions win over the descriptor's copy.
        server(i.server_name, i.server_identifier).instructions = i.instructions.strip()

    items = []
    for s in servers.values():
        body = []
        if s.tools:
            body.append("Tools:\n" + "\n".join(f"- {n}: {d}" if d else f"- {n}" for n, d in s.tools.items()))
        if s.folder:
            body.append(f"Tool definitions folder: {s.folder}")
        if s.instructions:
            body.append(_block("instructions", s.instructions))
        items.append(_block("mcp_server", _join(body) or "(no tools reported)", name=s.name, identifier=s.identifier))
    if not items:
        return ""
    intro = (
        "MCP servers connected in Cursor. Their tools are not in your tool list: look them up with GetMcpTools "
        "(it returns each tool's input schema), call them with CallMcpTool using the server and tool names shown "
        "here, and read server resources with FetchMcpResource."
    )
    return _block(MCP_TAG, _join([intro, *items]))


# --- OPEN_FILES ----------------------------------------------------------------------------------


def _ide_file(f: apb.InvocationContext.IdeState.File) -> str:
    path = f.path or _opt(f, "relative_path")
    details = []
    if f.HasField("cursor_position"):
        # Cursor's line numbers are passed through as sent.
        text = f.cursor_position.text.strip()
        at = f"cursor on line {f.cursor_position.line}"
        details.append(f"{at}: `{_one_line(text, 120)}`" if text and "`" not in text else at)
    if f.total_lines:
        details.append(f"{f.total_lines} lines")
    return f"- {path} ({', '.join(details)})" if details else f"- {path}"


def render_open_files(selected: apb.SelectedContext | None) -> str:
    """The OPEN_FILES text from the IDE state Cursor attached to the message, or ""."""
    if selected is None or not selected.HasField("invocation_context"):
        return ""
    context = selected.invocation_context
    if context.WhichOneof("data") != "ide_state":
        return ""
    ide = context.ide_state
    visible = [f for f in ide.visible_files if f.path or f.relative_path]
    shown = {f.path or f.relative_path for f in visible}
    recent = [f for f in ide.recently_viewed_files if (f.path or f.relative_path) not in shown | {""}]
    if not visible and not recent:
        return ""
    body = ["Files the user had open when sending this message; they may or may not relate to the request."]
    if visible:
        body.append("Visible in the editor:\n" + "\n".join(_ide_file(f) for f in visible))
    if recent:
        body.append("Recently viewed:\n" + "\n".join(_ide_file(f) for f in recent))
    return _block(OPEN_FILES_TAG, _join(body))


# --- SELECTED_CONTEXT ----------------------------------------------------------------------------


def _lines(r: apb.Range) -> tuple[int, int] | None:
    start, end = r.start.line, r.end.line
    return (start, max(start, end)) if start else None


def _selected_file(f: apb.SelectedFile) -> str:
    path = f.path or _opt(f, "relative_path")
    if not f.content:
        return _block("file", "(empty file)", path=path)
    count = len(f.content.splitlines()) or 1
    return _block("file", _fence(f"1:{count}:{path}", f.content), path=path)


def _code_selection(s: apb.SelectedCodeSelection) -> str:
    path = s.path or _opt(s, "relative_path")
    lines = _lines(s.range) if s.HasField("range") else None
    if lines is None:
        return _block("code_selection", _fence("", s.content), path=path)
    return _block("code_selection", _fence(f"{lines[0]}:{lines[1]}:{path}", s.content), path=path)


def _folder(f: apb.SelectedFolder) -> str:
    path = f.path or _opt(f, "relative_path")
    body = ["The user attached this folder; explore it with the search and listing tools as needed."]
    if f.HasField("directory_tree"):
        tree = f.directory_tree
        names = [_basename(d.abs_path) + "/" for d in tree.children_dirs if d.abs_path]
        names += [c.name for c in tree.children_files if c.name]
        if names:
            body.append("Top-level entries:\n" + "\n".join(f"- {n}" for n in names))
    return _block("folder", _join(body), path=path)


def _git_diff(content: str, full_length: int, scope: str | None = None) -> str:
    note = ""
    if full_length > len(content):
        note = f"\n(diff cut off: {full_length} characters in full)"
    return _block("git_diff", _fence("diff", content) + note if content.strip() else "", scope=scope)


def _git_commit(c: apb.SelectedGitCommit) -> str:
    body = [c.message.strip(), _opt(c, "description").strip(), _fence("diff", c.diff) if c.diff.strip() else ""]
    return _block("git_commit", _join(body), sha=c.sha)


def _invocation(context: apb.InvocationContext) -> str:
    kind = context.WhichOneof("data")
    if kind == "github_pr":
        pr = context.github_pr
        body = [
            pr.description.strip(),
            _block("comments", pr.comments),
            _block("ci_failures", _opt(pr, "ci_failures")),
        ]
        return _block("github_pull_request", _join(body) or "(no description)", title=pr.title)
    if kind == "slack_thread":
        t = context.slack_thread
        return _block("slack_thread", t.thread, channel=_opt(t, "channel_name"))
    if kind == "microsoft_teams_thread":
        t = context.microsoft_teams_thread
        return _block("teams_thread", t.thread, channel=_opt(t, "channel_name"), team=_opt(t, "team_name"))
    return ""  # ide_state -> OPEN_FILES; blob_id -> nothing we can resolve here


def render_selected_context(selected: apb.SelectedContext | None) -> str:
    """The SELECTED_CONTEXT text: everything the user attached that the model can read, or ""."""
    if selected is None:
        return ""
    s = selected
    items: list[str] = []
    items += [_selected_file(f) for f in s.files]
    items += [_code_selection(c) for c in s.code_selections]
    for t in s.terminal_selections:
        items.append(_block("terminal_selection", t.content, title=_opt(t, "title"), path=_opt(t, "path")))
    for t in s.terminals:
        items.append(_block("terminal", t.content, title=_opt(t, "title"), path=_opt(t, "path")))
    items += [_folder(f) for f in s.folders]
    for r in s.cursor_rules:
        if r.HasField("rule") and not r.rule.HasField("parse_error"):
            items.append(_block("rule", r.rule.content, path=r.rule.full_path))
    for c in s.cursor_commands:
        items.append(_block("cursor_command", c.content, name=c.name))
    for skill in s.selected_skills:
        body = skill.content or skill.description
        items.append(_block("skill", body, name=_skill_name(skill.full_path), path=skill.full_path))
    if s.HasField("git_diff"):
        items.append(_git_diff(s.git_diff.content, s.git_diff.full_content_length_char_count))
    if s.HasField("git_diff_from_branch_to_main"):
        d = s.git_diff_from_branch_to_main
        items.append(_git_diff(d.content, d.full_content_length_char_count, scope="current branch against main"))
    items += [_git_commit(c) for c in s.git_commits]
    for p in s.git_pr_diff_selections:
        lines = f"{p.start_line}-{p.end_line}" if p.start_line else None
        diff = _opt(p, "diff_content")
        body = _fence("diff", diff) if diff.strip() else ""
        items.append(_block("pr_diff_selection", body, url=p.pr_url, path=p.file_path, lines=lines))
    for pr in s.selected_pull_requests:
        body = _opt(pr, "description").strip() or "(no description)"
        items.append(_block("pull_request", body, number=pr.number or None, url=pr.url, title=_opt(pr, "title")))
    for link in s.external_links:
        body = _opt(link, "pdf_content") or "(content not included)"
        items.append(_block("link", body, url=link.url, filename=_opt(link, "filename")))
    if s.documentations:
        names = [d.name for d in s.documentations if d.name]
        items.append(_block("documentation", "\n".join(f"- {n}" for n in names)))
    if s.past_chats:
        chats = [f"- {c.name or '(untitled)'} (agent id {c.agent_id})" for c in s.past_chats if c.agent_id or c.name]
        items.append(_block("past_chats", "\n".join(chats)))
    if s.selected_subagents:
        names = [a.name for a in s.selected_subagents if a.name]
        items.append(_block("requested_subagents", "\n".join(f"- {n}" for n in names)))
    for el in s.ui_elements:
        body = _join([el.element, el.text_content and f"Text: {el.text_content}", el.extra], "\n")
        items.append(_block("ui_element", body, component=_opt(el, "component"), xpath=el.xpath))
    for log in s.console_logs:
        trace = _opt(log.stack_trace, "raw_stack_trace") if log.HasField("stack_trace") else ""
        items.append(_block("console_log", _join([log.message, trace], "\n"), level=log.level, client=log.client_name))
    for text in s.extra_context:
        items.append(_block("extra_context", text))
    for entry in s.extra_context_entries:
        if entry.WhichOneof("data_or_blob_id") == "data":
            items.append(_block("extra_context", entry.data))
    if s.HasField("invocation_context"):
        items.append(_invocation(s.invocation_context))
    items = [i for i in items if i]
    if not items:
        return ""
    return _block(SELECTED_CONTEXT_TAG, _join(["The user attached the following to this message.", *items]))


# --- images --------------------------------------------------------------------------------------

_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def _sniff(data: bytes) -> str:
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return "application/octet-stream"


def sniff_image_type(data: bytes) -> str:
    """The image's MIME type from its first bytes (for images sent without one)."""
    return _sniff(data)


def selected_images(selected: apb.SelectedContext | None) -> tuple[SelectedImageRef, ...]:
    """The images the user attached, in order. Their uuid and local path are left out on purpose:
    they are private to the user's machine and mean nothing to the model."""
    if selected is None:
        return ()
    refs = []
    for image in selected.selected_images:
        which = image.WhichOneof("data_or_blob_id")
        data: bytes | None = None
        blob_id: bytes | None = None
        if which == "data":
            data = image.data
        elif which == "blob_id_with_data":
            data, blob_id = image.blob_id_with_data.data, image.blob_id_with_data.blob_id or None
        elif which == "blob_id":
            blob_id = image.blob_id
        else:
            continue
        mime = image.mime_type or (_sniff(data) if data else "")
        dims = image.dimension if image.HasField("dimension") else None
        refs.append(
            SelectedImageRef(
                mime_type=mime,
                data_b64=base64.b64encode(data).decode("ascii") if data else None,
                blob_id=blob_id,
                width=dims.width if dims and dims.width else None,
                height=dims.height if dims and dims.height else None,
            )
        )
    return tuple(refs)


# --- ACTION_CONTEXT ------------------------------------------------------------------------------


def render_action_context(
    user_message: apb.UserMessage,
    request_context: apb.RequestContext | None = None,
    extra: Iterable[str] = (),
) -> str:
    """Per-message instructions: an approved plan to execute, a subagent's system reminder, hook
    output, plus any blocks the caller adds (e.g. a background completion's detail)."""
    blocks = []
    if user_message.HasField("execute_plan_info"):
        info = user_message.execute_plan_info
        title = f' "{info.plan_title}"' if info.plan_title else ""
        blocks.append(
            _block(
                "execute_plan",
                f"The user approved the plan{title} and asked you to carry it out now. Follow the plan, "
                "work through its todos in order and keep their status up to date.",
                plan_id=info.plan_id,
            )
        )
    blocks.append(_block("system_reminder", _opt(user_message, "subagent_system_reminder")))
    for hook in user_message.hook_additional_contexts:
        blocks.append(_block("hook_context", hook.content, event=hook.hook_event_name))
    if request_context is not None:
        blocks.append(_block("hook_context", _opt(request_context, "hooks_additional_context")))
    blocks.extend(extra)
    return _join(blocks)


def plan_block(content: str, *, path: str = "", uri: str = "") -> str:
    """The approved plan an execute-plan action hands over, verbatim (ExecutePlanAction)."""
    return _block("plan", content.strip("\n"), path=path or None, uri=uri or None)


def answers_block(answers: str, *, tool_call_id: str = "") -> str:
    """The user's late answers to an AskQuestion that returned before they were given."""
    return _block("question_answers", answers, tool_call_id=tool_call_id or None)


# --- time ----------------------------------------------------------------------------------------

_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip


def format_timestamp(now: datetime, time_zone: str = "") -> str:
    """E.g. "Tuesday, December 2, 2025, 14:33 (Europe/Berlin, UTC+01:00)".

    Shown in the user's IANA `time_zone` when it is known; otherwise in `now`'s own zone. Names are
    spelled here, not by strftime, so the text never depends on the process locale.
    """
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("format_timestamp needs a timezone-aware datetime")
    label = ""
    if time_zone:
        try:
            now = now.astimezone(ZoneInfo(time_zone))
            label = time_zone
        except (ZoneInfoNotFoundError, ValueError):
            label = ""  # an unknown zone name: keep the given zone rather than guess
    offset = now.utcoffset()
    assert offset is not None
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    utc = f"UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
    zone = f"{label}, {utc}" if label else utc
    return (
        f"{_DAYS[now.weekday()]}, {_MONTHS[now.month - 1]} {now.day}, {now.year}, "
        f"{now.hour:02d}:{now.minute:02d} ({zone})"
    )


# --- the runtime message -------------------------------------------------------------------------


def runtime_values(
    mode: ModeAssets,
    request_context: apb.RequestContext | None,
    parts: ContextParts | None,
    user_message: apb.UserMessage,
    timestamp: datetime | str,
    *,
    query: str | None = None,
    action_context: Iterable[str] = (),
    offered_tools: Collection[str] | None = None,
) -> dict[str, str]:
    """The placeholder values of one run's runtime message (see `runtime_text`)."""
    ctx = request_context
    selected = user_message.selected_context if user_message.HasField("selected_context") else None
    if isinstance(timestamp, datetime):
        zone = ctx.env.time_zone if ctx is not None and ctx.HasField("env") else ""
        timestamp = format_timestamp(timestamp, zone)
    values = {
        "REQUEST_CONTEXT": render_request_context(
            ctx, parts, offered_tools=mode.tool_names if offered_tools is None else offered_tools),
        "OPEN_FILES": render_open_files(selected),
        "SELECTED_CONTEXT": render_selected_context(selected),
        "ACTION_CONTEXT": render_action_context(user_message, ctx, action_context),
        "TIMESTAMP": timestamp,
        "USER_QUERY": user_message.text if query is None else query,
    }
    if ctx is not None and ctx.HasField("debug_mode_config"):
        debug = ctx.debug_mode_config
        values |= {
            "DEBUG_SERVER_ENDPOINT": debug.server_endpoint,
            "DEBUG_LOG_PATH": debug.log_path,
            "DEBUG_SESSION_ID": debug.session_id,
        }
    return values


def runtime_text(
    mode: ModeAssets,
    request_context: apb.RequestContext | None,
    parts: ContextParts | None,
    user_message: apb.UserMessage,
    timestamp: datetime | str,
    *,
    query: str | None = None,
    action_context: Iterable[str] = (),
    offered_tools: Collection[str] | None = None,
) -> str:
    """The full text of the run's one runtime (user-role) message, rendered once.

    `timestamp` is a preformatted string or an aware datetime (shown in the user's time zone).
    `query` replaces `user_message.text` when the caller resolved the text from `text_blob_id`.
    `action_context` adds caller-built blocks (e.g. a background completion) to ACTION_CONTEXT.
    `offered_tools` is the run's tool set when it differs from the mode's (a read-only subagent).
    The selected images travel separately: see `selected_images`.
    """
    values = runtime_values(
        mode, request_context, parts, user_message, timestamp, query=query, action_context=action_context,
        offered_tools=offered_tools,
    )
    return mode.render_runtime(**values)
