"""Fill-in-the-middle prompts: the window of the file around the cursor, and each model family's template.

The model key `fim` (providers file) names the template:

  suffix     prompt = the text before the cursor, suffix = the text after it: the server applies the
             model's own FIM template (Ollama, llama.cpp, DeepSeek's beta endpoint, Mistral)
  qwen       <|fim_prefix|>P<|fim_suffix|>S<|fim_middle|>                 (Qwen2.5-Coder base models)
  starcoder  <fim_prefix>P<fim_suffix>S<fim_middle>                       (StarCoder, StarCoder2)
  codellama  <PRE> P <SUF>S <MID>                                          (CodeLlama 7B/13B; spaces matter)
  deepseek   <｜fim▁begin｜>P<｜fim▁hole｜>S<｜fim▁end｜>                  (DeepSeek-Coder; U+FF5C, U+2581)

A family template sends its stop tokens as `stop`; every template also stops locally on all known FIM
and end-of-text tokens (a server that prints special tokens as text must not put them in the file).
`stop` also carries where the local rules would end the completion anyway (tab_trim.py): the line
break in single-line mode, a blank line otherwise. So the server usually ends the completion itself,
reports its usage, and generates nothing that would be thrown away.

The window: up to PREFIX_LINES lines before the cursor and SUFFIX_LINES after it, cut on line
boundaries to PREFIX_CHARS / SUFFIX_CHARS. The prefix starts on a multiple of WINDOW_STEP lines, so
keystrokes on nearby lines send prompts with the same beginning (servers that cache the prompt's
prefix, llama.cpp's `cache_prompt` or vLLM's prefix caching, then only read the new tail).
Line breaks are "\\n" in the prompt whatever the file uses (models learned on "\\n").
"""

from __future__ import annotations

from dataclasses import dataclass

from ..providers.config import ModelRoute
from ..providers.openai_completions import CompletionRequest
from .tab_edit import TabFile

PREFIX_LINES, SUFFIX_LINES = 200, 60
PREFIX_CHARS, SUFFIX_CHARS = 12_000, 4_000
WINDOW_STEP = 32


@dataclass(frozen=True)
class Template:
    name: str
    start: str
    middle: str
    end: str
    stop: tuple[str, ...]

    def render(self, prefix: str, suffix: str) -> str:
        return f"{self.start}{prefix}{self.middle}{suffix}{self.end}"


TEMPLATES: dict[str, Template] = {t.name: t for t in (
    Template("qwen", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", (
        "<|endoftext|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>", "<|fim_prefix|>", "<|fim_suffix|>",
        "<|fim_middle|>", "<|im_end|>")),
    Template("starcoder", "<fim_prefix>", "<fim_suffix>", "<fim_middle>", (
        "<|endoftext|>", "<file_sep>", "<fim_prefix>", "<fim_suffix>", "<fim_middle>")),
    Template("codellama", "<PRE> ", " <SUF>", " <MID>", ("<EOT>",)),
    Template("deepseek", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>", (
        "<｜end▁of▁sentence｜>", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>")),
)}
LOCAL_STOPS = tuple(dict.fromkeys(s for t in TEMPLATES.values() for s in t.stop if s != "<EOT>"))
"""Stopped on locally with any template: no code contains these."""


@dataclass(frozen=True)
class Window:
    prefix: str
    suffix: str
    first: int
    """Index of the window's first line."""
    last: int
    """Index of the window's last line."""


def window(file: TabFile) -> Window:
    """The text around the cursor that the prompt shows (see the module docstring)."""
    lines, at = file.lines, file.cursor_line
    first = max(0, (at - PREFIX_LINES) // WINDOW_STEP * WINDOW_STEP) if at > PREFIX_LINES else 0
    before = list(lines[first:at])
    size = sum(len(line) + 1 for line in before)
    while before and size + len(file.line_before) > PREFIX_CHARS:
        size -= len(before.pop(0)) + 1
        first += 1
    after = [file.line_after]
    size = len(file.line_after)
    last = at
    for line in lines[at + 1:at + 1 + SUFFIX_LINES]:
        if size + len(line) + 1 > SUFFIX_CHARS:
            break
        after.append(line)
        size += len(line) + 1
        last += 1
    prefix = "".join(line + "\n" for line in before) + file.line_before
    return Window(prefix=prefix, suffix="\n".join(after), first=first, last=last)


def completion_request(route: ModelRoute, win: Window, max_tokens: int, *, single_line: bool) -> CompletionRequest:
    ends = ("\n",) if single_line else ("\n\n",)
    if route.fim == "suffix":
        return CompletionRequest(route=route, prompt=win.prefix, suffix=win.suffix, max_tokens=max_tokens, stop=ends)
    template = TEMPLATES[route.fim]
    return CompletionRequest(route=route, prompt=template.render(win.prefix, win.suffix), suffix=None,
                             max_tokens=max_tokens, stop=(*ends, *template.stop))


def stop_strings(route: ModelRoute) -> tuple[str, ...]:
    """What the completion is cut at locally."""
    own = TEMPLATES[route.fim].stop if route.fim in TEMPLATES else ()
    return tuple(dict.fromkeys((*own, *LOCAL_STOPS)))
