"""Helpers for end-to-end turns whose provider requests are read in any of the three dialects:
what tools a request offered, and which tool results it carried back to the model."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SentResult:
    call_id: str
    content: str
    """The text the model got (for a result with images: its text part)."""
    is_error: bool | None
    """As the dialect expresses it: Anthropic's `is_error`; None where the dialect has no flag."""
    images: list = field(default_factory=list)
    """Image data URLs / base64 strings sent with the result, in the dialect's own form."""


def tool_names(kind: str, body: dict) -> list[str]:
    tools = body.get("tools") or []
    if kind == "openai_chat":
        return [t["function"]["name"] for t in tools]
    return [t["name"] for t in tools]


def tool_defs(kind: str, body: dict) -> dict[str, dict]:
    """name -> {"schema", "strict", "description"} of every tool the request offered."""
    out = {}
    for t in body.get("tools") or []:
        if kind == "openai_chat":
            fn = t["function"]
            out[fn["name"]] = {"schema": fn["parameters"], "strict": fn.get("strict"), "description": fn["description"]}
        elif kind == "openai_responses":
            out[t["name"]] = {"schema": t["parameters"], "strict": t.get("strict"), "description": t["description"]}
        else:
            out[t["name"]] = {"schema": t["input_schema"], "strict": t.get("strict"), "description": t["description"]}
    return out


def results(kind: str, body: dict) -> list[SentResult]:
    """Every tool result in the request, in order."""
    out: list[SentResult] = []
    if kind == "openai_chat":
        messages = body["messages"]
        for i, m in enumerate(messages):
            if m["role"] != "tool":
                continue
            images = []
            # images follow the round's tool messages as one user message
            j = i + 1
            while j < len(messages) and messages[j]["role"] == "tool":
                j += 1
            if j < len(messages) and messages[j]["role"] == "user" and isinstance(messages[j]["content"], list):
                parts = messages[j]["content"]
                for k, p in enumerate(parts):
                    if p.get("type") == "text" and m["tool_call_id"] in p.get("text", ""):
                        for q in parts[k + 1:]:
                            if q.get("type") != "image_url":
                                break
                            images.append(q["image_url"]["url"])
            out.append(SentResult(m["tool_call_id"], m["content"], None, images))
    elif kind == "openai_responses":
        for item in body["input"]:
            if item.get("type") != "function_call_output":
                continue
            output = item["output"]
            if isinstance(output, list):
                text = "".join(p.get("text", "") for p in output if p["type"] == "input_text")
                images = [p["image_url"] for p in output if p["type"] == "input_image"]
                out.append(SentResult(item["call_id"], text, None, images))
            else:
                out.append(SentResult(item["call_id"], output, None))
    else:
        for m in body["messages"]:
            if m["role"] != "user" or not isinstance(m["content"], list):
                continue
            for block in m["content"]:
                if block.get("type") != "tool_result":
                    continue
                content = block["content"]
                if isinstance(content, list):
                    text = "".join(p.get("text", "") for p in content if p["type"] == "text")
                    images = [p["source"]["data"] for p in content if p["type"] == "image"]
                    out.append(SentResult(block["tool_use_id"], text, bool(block.get("is_error")), images))
                else:
                    out.append(SentResult(block["tool_use_id"], content, bool(block.get("is_error"))))
    return out


def result_of(kind: str, body: dict, call_id: str) -> SentResult:
    [found] = [r for r in results(kind, body) if r.call_id == call_id]
    return found


def user_texts(kind: str, body: dict) -> list[str]:
    """The text of every user message (the runtime messages), in order."""
    out = []
    items = body["input"] if kind == "openai_responses" else body["messages"]
    for m in items:
        if m.get("role") != "user":
            continue
        content = m["content"]
        if isinstance(content, str):
            out.append(content)
            continue
        texts = [p.get("text", "") for p in content
                 if p.get("type") in ("text", "input_text")]
        if texts:
            out.append("".join(texts))
    return out


def body_text(body: Any) -> str:
    return json.dumps(body, ensure_ascii=False)
