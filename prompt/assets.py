"""Prompt assets: what the model is told in each mode, loaded and validated once at start-up.

Owns the files next to this module (layout and editing rules in prompt/README.md):

    tools.json              the one tool catalog (name -> description + JSON Schema parameters)
    modes/<mode>.json       the ordered list of catalog tools a mode offers
    <mode>/prompt.md        the static system prompt ({{MODEL_NAME}} is the only placeholder)
    <mode>/runtime.md.j2    the runtime (user-role) template, jinja2 with StrictUndefined

`load_assets()` checks everything at once and raises one `PromptAssetError` that names every broken
file, so a bad asset stops start-up instead of failing a user's run. `PromptAssets.mode()` raises
`UnknownModeError` (a `ConfigError`, so the run ends with a clear configuration error) for modes
Cursor has but this version ships no assets for (triage, project, custom, ...).

Nothing here reads the clock or the network; rendering is a pure function of its arguments.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import jinja2
import jinja2.meta

from byok.wire.errors import ConfigError
from byok.providers.transcript import ToolSpec
from byok.proto import agent_pb2

__all__ = [
    "AGENT_MODE_NAMES",
    "DEFAULT_MODE",
    "KNOWN_PLACEHOLDERS",
    "REQUIRED_PLACEHOLDERS",
    "SUBAGENT_MODE",
    "ModeAssets",
    "PromptAssetError",
    "PromptAssets",
    "UnknownModeError",
    "load_assets",
    "mode_name",
    "resolve_mode",
]

ROOT = Path(__file__).resolve().parent

# --- modes -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Layout:
    """Which files make up one mode. Sharing a file is explicit here, never a runtime fallback."""

    prompt: str
    """Folder whose prompt.md is the system prompt."""
    runtime: str
    """Folder whose runtime.md.j2 is the runtime template."""
    manifest: str
    """modes/<manifest>.json lists the tools."""


# The modes this version ships. Subagents keep the Agent system prompt byte for byte (Cursor's own
# subagents share the Agent prompt blob, seed §33); only their tools and runtime reminder differ.
_LAYOUT: Mapping[str, _Layout] = MappingProxyType(
    {
        "agent": _Layout(prompt="agent", runtime="agent", manifest="agent"),
        "ask": _Layout(prompt="ask", runtime="ask", manifest="ask"),
        "plan": _Layout(prompt="plan", runtime="plan", manifest="plan"),
        "debug": _Layout(prompt="debug", runtime="debug", manifest="debug"),
        "multitask": _Layout(prompt="multitask", runtime="multitask", manifest="multitask"),
        "subagent": _Layout(prompt="agent", runtime="subagent", manifest="subagent"),
    }
)

_M = agent_pb2.AgentMode
AGENT_MODE_NAMES: Mapping[int, str] = MappingProxyType(
    {
        _M.AGENT_MODE_AGENT: "agent",
        _M.AGENT_MODE_ASK: "ask",
        _M.AGENT_MODE_PLAN: "plan",
        _M.AGENT_MODE_DEBUG: "debug",
        _M.AGENT_MODE_TRIAGE: "triage",
        _M.AGENT_MODE_PROJECT: "project",
        _M.AGENT_MODE_MULTITASK: "multitask",
        _M.AGENT_MODE_CUSTOM: "custom",
    }
)
"""Cursor's `agent.v1.AgentMode` -> our mode name. UNSPECIFIED (0) is absent on purpose: it means
"not given" (see `resolve_mode`)."""

DEFAULT_MODE = "agent"
"""Used only when neither the UserMessage nor the conversation state names a mode: Cursor's default
mode is Agent, and proto3 cannot tell an unset enum from UNSPECIFIED."""

SUBAGENT_MODE = "subagent"


def mode_name(agent_mode: int) -> str | None:
    """The mode name of an `AgentMode` value; None for UNSPECIFIED. A value newer than our schema
    gets a name of its own, so asking for its assets fails with a message naming it."""
    if agent_mode == _M.AGENT_MODE_UNSPECIFIED:
        return None
    return AGENT_MODE_NAMES.get(agent_mode, f"agent-mode-{agent_mode}")


def resolve_mode(
    *,
    user_mode: int | None,
    state_mode: int | None = None,
    subagent_type_name: str | None = None,
) -> str:
    """Pick the mode of a run (PROTOCOL 8.1).

    A subagent run (`AgentRunRequest.subagent_type_name` set) uses the subagent assets whatever its
    type. Otherwise `UserMessage.mode` decides; a restored `conversation_state.mode` only serves
    actions that carry no UserMessage (background completions), never overriding a given mode.
    """
    if subagent_type_name:
        return SUBAGENT_MODE
    for value in (user_mode, state_mode):
        if value is not None and (name := mode_name(value)) is not None:
            return name
    return DEFAULT_MODE


# --- errors ------------------------------------------------------------------------------------


class PromptAssetError(Exception):
    """One or more prompt assets are broken; each problem names its file. Raised at start-up."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = tuple(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"cursor-byok prompt assets are invalid ({len(self.problems)} problem(s)):\n{lines}")


class UnknownModeError(ConfigError):
    """A run asked for a mode this version has no assets for. Ends the run as a config error."""

    def __init__(self, mode: str, available: Iterable[str]) -> None:
        self.mode = mode
        names = ", ".join(sorted(available))
        super().__init__(
            f"mode {mode!r} has no prompt assets in this version of cursor-byok (available: {names}); "
            "switch the chat to one of those modes"
        )


# --- placeholders ------------------------------------------------------------------------------

REQUIRED_PLACEHOLDERS = frozenset({"TIMESTAMP", "USER_QUERY"})
KNOWN_PLACEHOLDERS = frozenset(
    {
        "REQUEST_CONTEXT",
        "OPEN_FILES",
        "SELECTED_CONTEXT",
        "ACTION_CONTEXT",
        "TIMESTAMP",
        "USER_QUERY",
        # Debug mode's extra values (PROTOCOL 8.2), from RequestContext.debug_mode_config.
        "DEBUG_SERVER_ENDPOINT",
        "DEBUG_LOG_PATH",
        "DEBUG_SESSION_ID",
    }
)

_MODEL_NAME = re.compile(r"\{\{\s*MODEL_NAME\s*\}\}")
_ANY_PLACEHOLDER = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)
_EMPTY_TAG = re.compile(r"<([A-Za-z_][\w-]*)(?:\s[^>]*)?>\s*</\1>")
_TOOL_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


def _environment() -> jinja2.Environment:
    # No autoescape: this is model text, not HTML. trim/lstrip let each `{% if %}` block vanish
    # completely when its value is empty.
    return jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )


# --- values ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModeAssets:
    """Everything one mode contributes to a provider request."""

    name: str
    tools: tuple[ToolSpec, ...]
    """The mode's tools in manifest order (the order is part of the provider cache prefix).
    Treat each `parameters` dict as read-only."""
    tools_digest: str
    """sha256 (hex) of the canonical JSON of `tools`; pins names, order, descriptions and schemas."""
    placeholders: frozenset[str]
    """The placeholders the runtime template uses."""
    _system_parts: tuple[str, ...] = field(repr=False)
    _template: jinja2.Template = field(repr=False, compare=False)

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tools)

    def tools_without(self, names: Iterable[str]) -> tuple[ToolSpec, ...]:
        """The tools minus `names`, order kept (e.g. UpdateCurrentStep when the run request sets
        `suppress_subagent_progress_update_tool`)."""
        drop = frozenset(names)
        return tuple(t for t in self.tools if t.name not in drop)

    def system_prompt(self, model_name: str) -> str:
        """The static system prompt with the model's display name filled in (single pass)."""
        if not model_name:
            raise ValueError("system_prompt needs a non-empty model name")
        return model_name.join(self._system_parts)

    def render_runtime(self, **values: str) -> str:
        """Render the runtime message. TIMESTAMP and USER_QUERY are required; every other known
        placeholder defaults to "" (its block is then left out). Values are inserted verbatim:
        `{{ ... }}` inside user text stays literal."""
        unknown = sorted(values.keys() - KNOWN_PLACEHOLDERS)
        if unknown:
            raise ValueError(f"unknown runtime placeholder(s): {', '.join(unknown)}")
        missing = sorted(REQUIRED_PLACEHOLDERS - values.keys())
        if missing:
            raise ValueError(f"missing required runtime placeholder(s): {', '.join(missing)}")
        for key, value in values.items():
            if not isinstance(value, str):
                raise TypeError(f"runtime placeholder {key} must be a str, not {type(value).__name__}")
        context = {name: values.get(name, "") for name in self.placeholders}
        return self._template.render(context).strip("\n")


@dataclass(frozen=True)
class PromptAssets:
    """All validated assets: the catalog and the modes this version ships."""

    root: Path
    catalog: Mapping[str, ToolSpec]
    """Every catalogued tool by name, including ones no manifest offers yet (Task, MCP tools)."""
    modes: Mapping[str, ModeAssets]

    def mode(self, name: str) -> ModeAssets:
        try:
            return self.modes[name]
        except KeyError:
            raise UnknownModeError(name, self.modes) from None

    def for_run(
        self,
        *,
        user_mode: int | None,
        state_mode: int | None = None,
        subagent_type_name: str | None = None,
    ) -> ModeAssets:
        """The assets of a run, chosen as `resolve_mode` says."""
        return self.mode(
            resolve_mode(user_mode=user_mode, state_mode=state_mode, subagent_type_name=subagent_type_name)
        )


# --- loading -----------------------------------------------------------------------------------


def load_assets(root: Path | str | None = None) -> PromptAssets:
    """Load and validate every asset under `root` (default: this package's folder).

    Raises PromptAssetError listing every problem found, each with the file it is in.
    """
    base = Path(root) if root is not None else ROOT
    problems: list[str] = []
    catalog = _load_catalog(base / "tools.json", problems)
    env = _environment()

    modes: dict[str, ModeAssets] = {}
    for name, layout in _LAYOUT.items():
        tools = _load_manifest(base / "modes" / f"{layout.manifest}.json", catalog, problems)
        system_parts = _load_system_prompt(base / layout.prompt / "prompt.md", problems)
        template = _load_template(env, base / layout.runtime / "runtime.md.j2", problems)
        if tools is None or system_parts is None or template is None:
            continue
        compiled, placeholders = template
        modes[name] = ModeAssets(
            name=name,
            tools=tools,
            tools_digest=_digest(tools),
            placeholders=placeholders,
            _system_parts=system_parts,
            _template=compiled,
        )

    if problems:
        # The same shared file (agent/prompt.md) may be reported once per mode using it.
        raise PromptAssetError(dict.fromkeys(problems))
    return PromptAssets(root=base, catalog=MappingProxyType(dict(catalog)), modes=MappingProxyType(modes))


def _read(path: Path, problems: list[str]) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        problems.append(f"{path}: missing file")
    except (OSError, UnicodeDecodeError) as e:
        problems.append(f"{path}: cannot read: {e}")
    return None


def _read_json(path: Path, problems: list[str]) -> Any:
    text = _read(path, problems)
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        problems.append(f"{path}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}")
        return None


def _load_catalog(path: Path, problems: list[str]) -> dict[str, ToolSpec]:
    data = _read_json(path, problems)
    if data is None:
        return {}
    tools = data.get("tools") if isinstance(data, dict) else None
    if not isinstance(tools, dict) or not tools:
        problems.append(f"{path}: expected an object with a non-empty \"tools\" object")
        return {}
    catalog: dict[str, ToolSpec] = {}
    for name, entry in tools.items():
        where = f"{path}: tool {name!r}"
        before = len(problems)
        if not _TOOL_NAME.match(name):
            problems.append(f"{where}: invalid tool name (letters, digits, '_' or '-', at most 64)")
        if not isinstance(entry, dict):
            problems.append(f"{where}: expected an object with description and parameters")
            continue
        extra = sorted(entry.keys() - {"description", "parameters"})
        if extra:
            problems.append(f"{where}: unexpected key(s) {', '.join(extra)}")
        description = entry.get("description")
        if not isinstance(description, str) or not description.strip():
            problems.append(f"{where}: description must be a non-empty string")
        parameters = entry.get("parameters")
        if not isinstance(parameters, dict) or parameters.get("type") != "object":
            problems.append(f"{where}: parameters must be a JSON Schema with \"type\": \"object\"")
        else:
            problems.extend(_check_schema(parameters, f"{where}: parameters"))
            if "properties" not in parameters:
                problems.append(f"{where}: parameters must declare \"properties\" (may be empty)")
        if len(problems) == before:
            catalog[name] = ToolSpec(name=name, description=description, parameters=parameters)
    return catalog


def _load_manifest(path: Path, catalog: Mapping[str, ToolSpec], problems: list[str]) -> tuple[ToolSpec, ...] | None:
    data = _read_json(path, problems)
    if data is None:
        return None
    if not isinstance(data, list) or not all(isinstance(n, str) for n in data):
        problems.append(f"{path}: expected a JSON list of tool names")
        return None
    before = len(problems)
    seen: set[str] = set()
    for name in data:
        if name in seen:
            problems.append(f"{path}: tool {name!r} is listed twice")
        seen.add(name)
        if name not in catalog:
            problems.append(f"{path}: unknown tool {name!r} (not defined in tools.json)")
    if len(problems) != before:
        return None
    return tuple(catalog[n] for n in data)


def _load_system_prompt(path: Path, problems: list[str]) -> tuple[str, ...] | None:
    text = _read(path, problems)
    if text is None:
        return None
    text = text.strip()
    before = len(problems)
    if not text:
        problems.append(f"{path}: the system prompt is empty")
    if not _MODEL_NAME.search(text):
        problems.append(f"{path}: the system prompt must name the model with {{{{MODEL_NAME}}}}")
    stray = _ANY_PLACEHOLDER.findall(_MODEL_NAME.sub("", text))
    if stray:
        names = ", ".join(sorted(set(stray)))
        problems.append(f"{path}: unknown placeholder(s) {names}; only {{{{MODEL_NAME}}}} is allowed")
    if "<user_info>" in text:
        problems.append(f"{path}: <user_info> belongs in the runtime message, not the static system prompt")
    if len(problems) != before:
        return None
    return tuple(_MODEL_NAME.split(text))


def _load_template(
    env: jinja2.Environment, path: Path, problems: list[str]
) -> tuple[jinja2.Template, frozenset[str]] | None:
    source = _read(path, problems)
    if source is None:
        return None
    try:
        ast = env.parse(source, name=str(path))
        template = env.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        problems.append(f"{path}: template syntax error at line {e.lineno}: {e.message}")
        return None
    used = frozenset(jinja2.meta.find_undeclared_variables(ast))
    before = len(problems)
    unknown = sorted(used - KNOWN_PLACEHOLDERS)
    if unknown:
        problems.append(f"{path}: unknown placeholder(s) {', '.join(unknown)}")
    missing = sorted(REQUIRED_PLACEHOLDERS - used)
    if missing:
        problems.append(f"{path}: missing required placeholder(s) {', '.join(missing)}")
    if len(problems) != before:
        return None
    problems.extend(f"{path}: {p}" for p in _probe_template(template, used))
    if len(problems) != before:
        return None
    return template, used


def _probe_template(template: jinja2.Template, used: frozenset[str]) -> list[str]:
    """Render with sample values to check the contract a parse cannot: exactly one
    `<user_query>` block holding the query, no empty tags, every placeholder reachable."""
    found: list[str] = []
    query = "probe-user-query"
    minimal = {name: "" for name in used} | {"TIMESTAMP": "probe-timestamp", "USER_QUERY": query}
    full = {name: f"probe-{name}" for name in used} | {"USER_QUERY": query}
    try:
        bare = template.render(minimal)
        rich = template.render(full)
    except jinja2.TemplateError as e:
        return [f"rendering failed: {e}"]
    if bare.count("<user_query>") != 1 or rich.count(f"<user_query>\n{query}\n</user_query>") != 1:
        found.append("must contain exactly one block \"<user_query>\\n{{ USER_QUERY }}\\n</user_query>\"")
    empty = sorted({m.group(1) for m in _EMPTY_TAG.finditer(bare)})
    if empty:
        found.append(f"renders empty tag(s) when their values are absent: {', '.join(empty)}")
    unreachable = sorted(name for name in used if full[name] not in rich)
    if unreachable:
        found.append(f"placeholder(s) never rendered even when set: {', '.join(unreachable)}")
    return found


def _digest(tools: Iterable[ToolSpec]) -> str:
    canonical = json.dumps(
        [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# --- JSON Schema, checked structurally (no validator dependency) -------------------------------

_TYPES = frozenset({"string", "integer", "number", "boolean", "array", "object", "null"})
_KEYWORDS = frozenset(
    {
        "type", "description", "title", "default", "examples", "enum", "const",
        "properties", "required", "additionalProperties",
        "items", "minItems", "maxItems", "uniqueItems",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
        "minLength", "maxLength", "pattern", "format",
    }
)  # fmt: skip
_NUMERIC = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_COUNTS = ("minItems", "maxItems", "minLength", "maxLength")


def _check_schema(schema: Any, where: str) -> list[str]:
    """Problems with one (sub)schema of the subset of draft 2020-12 the catalog may use.

    Deliberately strict: an unknown keyword is far more often a typo ("requried") than a need,
    and providers differ in what they accept beyond this subset.
    """
    if not isinstance(schema, dict):
        return [f"{where}: a schema must be an object"]
    found: list[str] = []
    unknown = sorted(schema.keys() - _KEYWORDS)
    if unknown:
        found.append(f"{where}: unsupported schema keyword(s) {', '.join(unknown)}")

    declared = schema.get("type")
    types = declared if isinstance(declared, list) else [declared]
    if declared is None:
        if "enum" not in schema and "const" not in schema:
            found.append(f"{where}: missing \"type\"")
        types = []
    elif not types or not all(isinstance(t, str) and t in _TYPES for t in types):
        found.append(f"{where}: invalid type {declared!r}")
        types = []

    if "description" in schema and not isinstance(schema["description"], str):
        found.append(f"{where}: description must be a string")
    if "enum" in schema and (not isinstance(schema["enum"], list) or not schema["enum"]):
        found.append(f"{where}: enum must be a non-empty list")
    for key in _NUMERIC:
        if key in schema and (isinstance(schema[key], bool) or not isinstance(schema[key], (int, float))):
            found.append(f"{where}: {key} must be a number")
    for key in _COUNTS:
        if key in schema and (isinstance(schema[key], bool) or not isinstance(schema[key], int) or schema[key] < 0):
            found.append(f"{where}: {key} must be a non-negative integer")

    if "object" in types or "properties" in schema:
        properties = schema.get("properties", {})
        if not isinstance(properties, dict):
            found.append(f"{where}: properties must be an object")
            properties = {}
        for prop, sub in properties.items():
            found.extend(_check_schema(sub, f"{where}.{prop}"))
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            found.append(f"{where}: required must be a list of property names")
        else:
            if len(set(required)) != len(required):
                found.append(f"{where}: required lists a property twice")
            undefined = sorted(set(required) - properties.keys())
            if undefined:
                found.append(f"{where}: required names undefined propert(ies) {', '.join(undefined)}")
        extra = schema.get("additionalProperties", True)
        if not isinstance(extra, bool):
            found.extend(_check_schema(extra, f"{where}.additionalProperties"))
    if "array" in types:
        if "items" not in schema:
            found.append(f"{where}: an array schema needs \"items\"")
        else:
            found.extend(_check_schema(schema["items"], f"{where}[]"))
    return found
