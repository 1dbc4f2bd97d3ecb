"""The prompts of the one-shot services: `prompt/features/<task>.md` (the system prompt, no
placeholders) and `<task>.md.j2` (the one user message, jinja2 with StrictUndefined).

Loaded and checked when this module is imported (the addon imports it at start), so a broken file
stops start-up with a message naming it, never a user's call: every placeholder a template uses is
declared in `TASKS`, every declared one is shown when it has a value, and nothing else is used.

    system, user = PROMPTS["commit_message"].render(DIFFS=..., PREVIOUS_MESSAGES="", CONTEXT="")
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import jinja2
import jinja2.meta

from byok.prompt.assets import ROOT as PROMPT_ROOT, PromptAssetError

FOLDER = PROMPT_ROOT / "features"

TASKS: Mapping[str, frozenset[str]] = MappingProxyType({
    "commit_message": frozenset({"DIFFS", "PREVIOUS_MESSAGES", "CONTEXT"}),
    "branch_name": frozenset({"DIFF", "CONTEXT"}),
    "chat_title": frozenset({"CONVERSATION"}),
    "terminal": frozenset({"CURRENT_COMMAND", "HISTORY", "CONTEXT"}),
    "cmd_k_edit": frozenset({"QUERY", "FILE", "BEFORE", "SELECTION", "AFTER", "CONTEXT"}),
    "cmd_k_chat": frozenset({"QUERY", "WHERE", "SELECTION", "CONTEXT"}),
    "terminal_cmd_k": frozenset({"QUERY", "TERMINAL", "CONTEXT"}),
})
"""Each task and the placeholders of its user template (all of them must be passed to `render`)."""


@dataclass(frozen=True)
class TaskPrompt:
    name: str
    system: str
    placeholders: frozenset[str]
    _template: jinja2.Template = field(repr=False, compare=False)

    def render(self, **values: str) -> tuple[str, str]:
        """(system prompt, user message). Every placeholder is required ("" leaves its block out);
        values are inserted verbatim, so `{{` in user text stays literal."""
        if values.keys() != self.placeholders:
            raise ValueError(f"{self.name}: placeholders {sorted(values)} given, {sorted(self.placeholders)} expected")
        return self.system, self._template.render(values).strip("\n")


def _environment() -> jinja2.Environment:
    return jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=False)


def load(folder: Path = FOLDER) -> Mapping[str, TaskPrompt]:
    """Every task's prompt; raises PromptAssetError listing every problem, each with its file."""
    env = _environment()
    problems: list[str] = []
    tasks: dict[str, TaskPrompt] = {}
    for name, declared in TASKS.items():
        system_path, template_path = folder / f"{name}.md", folder / f"{name}.md.j2"
        try:
            system = system_path.read_text(encoding="utf-8").strip()
            source = template_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            problems.append(f"{getattr(e, 'filename', None) or system_path}: cannot read: {e}")
            continue
        if not system or "{{" in system or "{%" in system:
            problems.append(f"{system_path}: must be a non-empty system prompt without placeholders")
        try:
            used = frozenset(jinja2.meta.find_undeclared_variables(env.parse(source)))
            template = env.from_string(source)
        except jinja2.TemplateSyntaxError as e:
            problems.append(f"{template_path}: template syntax error at line {e.lineno}: {e.message}")
            continue
        if used != declared:
            problems.append(f"{template_path}: placeholders {sorted(used)}, expected exactly {sorted(declared)}")
            continue
        probe = {key: f"\0{key}\0" for key in declared}
        try:
            rendered = template.render(probe)
            template.render({key: "" for key in declared})
        except jinja2.TemplateError as e:
            problems.append(f"{template_path}: rendering failed: {e}")
            continue
        hidden = sorted(key for key, value in probe.items() if value not in rendered)
        if hidden:
            problems.append(f"{template_path}: placeholder(s) never shown even when set: {', '.join(hidden)}")
        tasks[name] = TaskPrompt(name, system, declared, template)
    if problems:
        raise PromptAssetError(problems)
    return MappingProxyType(tasks)


PROMPTS = load()
