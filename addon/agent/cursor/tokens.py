"""Token arithmetic: estimates by the per-character rule (PROTOCOL part 7), the 8-category breakdown a
checkpoint reports, and the size of the next prompt (compaction.py decides by it).

Estimates count (ASCII characters, UTF-16 code units) of a text, which add up: the estimate of a
concatenation is the estimate of the summed counts, so a long history's counts are kept as running
sums (projection.py) instead of being counted again on every turn.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from byok.proto import agent_pb2 as apb

from ...providers.transcript import AssistantItem, TextPart, ToolSpec, UserItem

SECTION_TAGS = {"rules": "rules", "skills": "agent_skills", "subagents": "subagents", "mcp": "mcp_meta_tools"}
BREAKDOWN_LABELS = [
    ("system_prompt", "System prompt"),
    ("tools", "Tool definitions"),
    ("rules", "Rules"),
    ("skills", "Skills"),
    ("mcp", "MCP & dynamic tools"),
    ("subagents", "Subagent definitions"),
    ("summarized_conversation", "Summarized conversation"),
    ("conversation", "Conversation"),
]


def estimate_tokens(text: str) -> tuple[int, int]:
    """(estimated tokens, UTF-16 code units): 0.273 per ASCII char, 0.55 per other code unit."""
    return estimate(text_counts(text))


def text_counts(text: str) -> tuple[int, int]:
    """(ASCII characters, UTF-16 code units) of a text: what estimate_tokens weighs. Counts add up:
    the estimate of a concatenation is the estimate of the summed counts."""
    ascii_chars = len(text.encode("ascii", "ignore"))  # counted in C: a Python loop cost ~10 ms per 40k chars
    return ascii_chars, len(text.encode("utf-16-le")) // 2


def estimate(counts: tuple[int, int]) -> tuple[int, int]:
    ascii_chars, units = counts
    return round(ascii_chars * 0.273 + (units - ascii_chars) * 0.55), units


def section(text: str, tag: str) -> str:
    start, end = f"<{tag}>", f"</{tag}>"
    out = []
    pos = 0
    while (i := text.find(start, pos)) >= 0:
        j = text.find(end, i)
        if j < 0:
            break
        out.append(text[i : j + len(end)])
        pos = j + len(end)
    return "".join(out)


def breakdown(used: int, max_tokens: int, system_prompt: str, tools: Sequence[ToolSpec],
              runtime_texts: Sequence[str], conversation_chars: int,
              summary_text: str = "", dynamic_tools: Sequence[ToolSpec] = ()) -> apb.PromptTokenBreakdownSnapshot:
    """The 8 categories; `conversation` takes the remainder so they sum exactly to `used`.
    `dynamic_tools` (MCP tools offered directly) count as `mcp` with the runtime MCP section."""
    sections = {key: text_counts("".join(section(t, tag) for t in runtime_texts)) for key, tag in SECTION_TAGS.items()}
    return breakdown_from_counts(used, max_tokens, system_prompt, tools, sections, conversation_chars, summary_text, dynamic_tools)


def breakdown_from_counts(used: int, max_tokens: int, system_prompt: str, tools: Sequence[ToolSpec],
               sections: Mapping[str, tuple[int, int]], conversation_chars: int, summary_text: str,
               dynamic_tools: Sequence[ToolSpec]) -> apb.PromptTokenBreakdownSnapshot:
    """`breakdown` from the runtime sections' counts (ASCII characters, UTF-16 units) per category."""
    estimates: dict[str, tuple[int, int]] = {
        "system_prompt": estimate_tokens(system_prompt),
        "tools": estimate_tokens(_tools_text(tools)),
    }
    for key in SECTION_TAGS:
        ascii_chars, units = sections[key]
        if key == "mcp" and dynamic_tools:
            more = text_counts(_tools_text(dynamic_tools))
            ascii_chars, units = ascii_chars + more[0], units + more[1]
        estimates[key] = estimate((ascii_chars, units))
    estimates["summarized_conversation"] = estimate_tokens(summary_text)
    fixed_keys = [k for k, _ in BREAKDOWN_LABELS if k != "conversation"]
    fixed_total = sum(estimates[k][0] for k in fixed_keys)
    if fixed_total > used:  # shrink with the largest-remainder method, never below zero
        exact = {k: estimates[k][0] * used / fixed_total for k in fixed_keys}
        floors = {k: int(v) for k, v in exact.items()}
        leftover = used - sum(floors.values())
        for k in sorted(fixed_keys, key=lambda k: exact[k] - floors[k], reverse=True)[:leftover]:
            floors[k] += 1
        estimates.update({k: (floors[k], estimates[k][1]) for k in fixed_keys})
        fixed_total = used
    estimates["conversation"] = (used - fixed_total, conversation_chars)
    snapshot = apb.PromptTokenBreakdownSnapshot(total_used_tokens=used, max_tokens=max_tokens)
    for key, label in BREAKDOWN_LABELS:
        tokens, chars = estimates[key]
        snapshot.categories.add(id=key, label=label, estimated_tokens=tokens, character_count=chars)
    return snapshot


def _tools_text(tools: Sequence[ToolSpec]) -> str:
    return json.dumps([[t.name, t.description, t.parameters] for t in tools])


def usage_total(usage: Mapping | None) -> int | None:
    if not usage or usage.get("input_tokens") is None or usage.get("output_tokens") is None:
        return None
    return int(usage["input_tokens"]) + int(usage["output_tokens"])


def _item_text(item) -> str:
    if isinstance(item, UserItem):
        return "".join(p.text for p in item.parts if isinstance(p, TextPart))
    if isinstance(item, AssistantItem):
        return item.text + item.thinking + "".join(c.name + c.arguments for c in item.tool_calls)
    return item.content


def prompt_estimate(system_prompt: str, tools: Sequence[ToolSpec], items: Sequence) -> int:
    """Estimated prompt tokens of a request nobody has measured yet (part 7's per-character rule)."""
    text = system_prompt + json.dumps([[t.name, t.description, t.parameters] for t in tools])
    return estimate_tokens(text + "".join(_item_text(i) for i in items))[0]


# ---- the size of the next prompt (compaction.py) -------------------------------------------------


def reported_prompt(usage: Mapping, replay: Mapping | None) -> int | None:
    """The prompt size a provider reported for one call. Anthropic counts cached input apart from
    `input_tokens`; the OpenAI dialects include it."""
    if usage.get("input_tokens") is None:
        return None
    total = int(usage["input_tokens"])
    if (replay or {}).get("kind") == "anthropic":
        total += int(usage.get("cache_read_tokens") or 0) + int(usage.get("cache_write_tokens") or 0)
    return total


def message_estimate(message, blobs: Mapping[bytes, bytes] | None = None) -> int:
    """Estimated tokens one stored message adds to a prompt."""
    p = message.payload
    kind = p["kind"]
    if kind in ("runtime", "summary"):
        text = "".join(part.get("text", "") for part in p["parts"])
        images = sum(1 for part in p["parts"] if part.get("type") == "image")
        return estimate_tokens(text)[0] + 1000 * images  # an image costs roughly a thousand tokens
    if kind == "assistant":
        return estimate_tokens(p["text"] + p["thinking"] + "".join(
            c["name"] + c["arguments"] for c in p["tool_calls"]))[0]
    if kind == "tool":
        return estimate_tokens(p["content"])[0]
    if kind == "import":
        size = sum(len((blobs or {}).get(bytes.fromhex(h), b"")) for h in p["roots"])
        return round(size * 0.3)
    return 0


@dataclass
class PromptSize:
    """The next prompt's size as history grows: the last provider-reported prompt and output, plus
    an estimate of the messages added since. After a compaction (or with nothing reported yet)
    all of it is estimated."""

    reported: int | None = None
    call: str | None = None
    """The model call that reported it (its other tool-round pairs add nothing)."""
    added: int = 0

    def add(self, message, blobs: Mapping[bytes, bytes] | None = None) -> None:
        p = message.payload
        if p["kind"] == "summary":
            self.reported, self.call, self.added = None, None, 0
            return
        if p["kind"] == "assistant" and p.get("usage"):
            size = reported_prompt(p["usage"], p.get("replay"))
            if size is not None:
                self.reported = size + int(p["usage"].get("output_tokens") or 0)
                self.call, self.added = p.get("model_call_id"), 0
                return
        if self.reported is not None and not (p["kind"] == "assistant" and p.get("model_call_id") == self.call):
            self.added += message_estimate(message, blobs)

    def tokens(self, system_prompt: str, tools: Sequence[ToolSpec], transcript: Callable[[], Sequence]) -> int:
        if self.reported is None:
            return prompt_estimate(system_prompt, tools, transcript())
        return self.reported + self.added
