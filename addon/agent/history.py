"""Canonical history: the payloads we store, and the fold into the logical transcript.

Stored form (append-only, see store/): one runtime user message per run request; a final
assistant message; for each tool round, adjacent (assistant with ONE call, tool result) pairs in
completion order, where only the round's first pair carries the text, thinking and replay state;
`import` messages holding a client checkpoint we did not write (hybrid or lost DB); and `summary`
messages, each a compaction (compaction.py) that the provider view applies (`view`).

`fold` turns that into transcript items: each complete round becomes ONE assistant item (calls in
provider index order) followed by its results in completion order. Deterministic and pure.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..wire.errors import InternalError, ProtocolError
from ..providers.transcript import (
    AssistantItem, ImagePart, TextPart, ToolCall, ToolResultItem, TranscriptItem, UserItem, UserPart,
)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


# ---- payload constructors (the stored JSON shapes) -----------------------------------------------


def runtime_user_payload(
    parts: Sequence[UserPart], *, wire_id: str, turn: dict | None = None, blob_refs: Sequence[bytes] = (),
    context_digest: str | None = None,
) -> dict:
    """`turn` = {"request_id", "user_message_blob" (b64 of the UserMessage blob bytes)} when this
    message starts a Cursor turn. `context_digest` = sha256 hex of the request context it showed."""
    payload = {
        "kind": "runtime",
        "wire_id": wire_id,
        "parts": [_part_json(p) for p in parts],
        "turn": turn,
        "blob_refs": [b.hex() for b in blob_refs],
    }
    if context_digest is not None:
        payload["context_digest"] = context_digest
    return payload


def assistant_payload(
    item: AssistantItem, *, thinking_ms: int | None, usage: dict | None, model_call_id: str,
    tool_round_id: str | None = None, round_size: int | None = None,
) -> dict:
    return {
        "kind": "assistant",
        "text": item.text,
        "thinking": item.thinking,
        "thinking_ms": thinking_ms,
        "tool_calls": [
            {"call_id": c.call_id, "name": c.name, "arguments": c.arguments, "index": c.index}
            for c in item.tool_calls
        ],
        "replay": item.replay,
        "usage": usage,
        "model_call_id": model_call_id,
        "tool_round_id": tool_round_id,
        "round_size": round_size,
    }


def tool_payload(
    result: ToolResultItem, *, tool_round_id: str, call_index: int, tool_call_pb: bytes,
    marks: Mapping[str, object] | None = None,
) -> dict:
    """`tool_call_pb` = the completed, typed `agent.v1.ToolCall` (args, result, timestamps);
    `marks` = the tool's own extra keys (ToolOutcome.marks)."""
    payload = {
        **(marks or {}),
        "kind": "tool",
        "call_id": result.call_id,
        "name": result.name,
        "content": result.content,
        "is_error": result.is_error,
        "tool_round_id": tool_round_id,
        "call_index": call_index,
        "tool_call": b64(tool_call_pb),
    }
    if result.images:
        payload["images"] = [_part_json(i) for i in result.images]
    return payload


def summary_payload(
    parts: Sequence[UserPart], *, wire_id: str, summary: str, context_id: int | None, tail_from: int | None,
    summarized_roots: Sequence[bytes], window_tail: int, model_call_id: str,
) -> dict:
    """A compaction: from here on the provider sees [context, this summary, the tail, what follows].

    `context_id` / `tail_from` are stored message ids in the view this summary replaced: the runtime
    message kept verbatim before the summary (the current user turn), and the first message kept
    verbatim after it (None = no tail). `summarized_roots` and `window_tail` feed the checkpoint's
    ConversationSummaryArchive (the root blob ids the summary replaced, the roots kept after it)."""
    return {
        "kind": "summary",
        "wire_id": wire_id,
        "parts": [_part_json(p) for p in parts],
        "summary": summary,
        "context_id": context_id,
        "tail_from": tail_from,
        "summarized_roots": [r.hex() for r in summarized_roots],
        "window_tail": window_tail,
        "model_call_id": model_call_id,
    }


def import_payload(*, roots: Sequence[bytes], turns: Sequence[bytes], source: str) -> dict:
    """A client checkpoint taken over: its non-system roots (appended) and its full turn list
    (which replaces the turn list from here on)."""
    return {
        "kind": "import",
        "roots": [r.hex() for r in roots],
        "turns": [t.hex() for t in turns],
        "source": source,
        "blob_refs": [r.hex() for r in [*roots, *turns]],
    }


def _part_json(part: UserPart) -> dict:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    return {"type": "image", "mimeType": part.mime_type, "data": part.data_b64}


def _parts(payload_parts: Sequence[dict]) -> tuple[UserPart, ...]:
    out: list[UserPart] = []
    for p in payload_parts:
        if p["type"] == "text":
            out.append(TextPart(p["text"]))
        else:
            out.append(ImagePart(p["mimeType"], p["data"]))
    return tuple(out)


def assistant_item(payload: Mapping) -> AssistantItem:
    return AssistantItem(
        text=payload["text"],
        thinking=payload["thinking"],
        tool_calls=tuple(
            ToolCall(c["call_id"], c["name"], c["arguments"], c["index"]) for c in payload["tool_calls"]
        ),
        replay=payload.get("replay"),
    )


# ---- fold ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FoldedItem:
    """One transcript item plus where it came from: `imported_root` holds the exact root blob id
    when the item came from a client checkpoint (its root is reused, never re-rendered)."""

    item: TranscriptItem
    imported_root: bytes | None = None
    root_group: int = 0
    """Items with the same group come from one imported root (a tool root may hold many results)."""


class IncompleteRound(InternalError):
    pass


def fold(messages: Sequence, blobs: Mapping[bytes, bytes] | None = None) -> list[FoldedItem]:
    """Canonical messages (StoredMessage-like: .role and .payload) -> transcript items."""
    out: list[FoldedItem] = []
    rounds: dict[str, dict] = {}
    group = 0
    for msg in messages:
        p = msg.payload
        kind = p["kind"]
        if kind in ("runtime", "summary"):
            out.append(FoldedItem(UserItem(_parts(p["parts"]), wire_id=p["wire_id"])))
        elif kind == "assistant" and p.get("tool_round_id") is None:
            out.append(FoldedItem(assistant_item(p)))
        elif kind == "assistant":
            rid = p["tool_round_id"]
            state = rounds.get(rid)
            if state is None:
                state = rounds[rid] = {"first": p, "calls": [], "results": [], "size": p["round_size"],
                                       "slot": len(out)}
                out.append(FoldedItem(AssistantItem()))  # placeholder, filled below
            state["calls"].extend(p["tool_calls"])
        elif kind == "tool":
            state = rounds.get(p["tool_round_id"])
            if state is None:
                raise InternalError(f"tool result {p['call_id']!r} without its assistant call")
            item = ToolResultItem(p["call_id"], p["name"], p["content"], p["is_error"],
                                  tuple(i for i in _parts(p.get("images", ())) if isinstance(i, ImagePart)))
            state["results"].append(item)
            out.append(FoldedItem(item))
        elif kind == "import":
            if blobs is None:
                raise InternalError("folding an import needs its root blobs")
            for hex_id in p["roots"]:
                group += 1
                root_id = bytes.fromhex(hex_id)
                for item in parse_root_json(blobs[root_id]):
                    out.append(FoldedItem(item, imported_root=root_id, root_group=group))
        else:
            raise InternalError(f"unknown stored message kind {kind!r}")
    for rid, state in rounds.items():
        if state["size"] is not None and len(state["results"]) != state["size"]:
            raise IncompleteRound(f"tool round {rid} has {len(state['results'])} of {state['size']} results")
        first = state["first"]
        calls = sorted(state["calls"], key=lambda c: c["index"])
        out[state["slot"]] = FoldedItem(
            AssistantItem(
                text=first["text"],
                thinking=first["thinking"],
                tool_calls=tuple(ToolCall(c["call_id"], c["name"], c["arguments"], c["index"]) for c in calls),
                replay=first.get("replay"),
            )
        )
    return out


def transcript(messages: Sequence, blobs: Mapping[bytes, bytes] | None = None) -> tuple[TranscriptItem, ...]:
    """What the provider sees: the fold of the current view (compactions applied)."""
    return tuple(f.item for f in fold(view(messages), blobs))


def view(messages: Sequence) -> list:
    """The stored messages the provider sees, in order. History is append-only; a summary message
    replaces what came before it with [its context message, itself, its tail], and everything after
    it follows as usual. Without summaries this is `messages` unchanged."""
    out: list = []
    for msg in messages:
        p = msg.payload
        if p["kind"] != "summary":
            out.append(msg)
            continue
        ids = [m.id for m in out]
        context_id, tail_from = p.get("context_id"), p.get("tail_from")
        for needed in (context_id, tail_from):
            if needed is not None and needed not in ids:
                raise InternalError(f"summary {p['wire_id']} refers to message {needed}, which is not before it")
        head = [out[ids.index(context_id)]] if context_id is not None else []
        tail = out[ids.index(tail_from):] if tail_from is not None else []
        out = [*head, msg, *(m for m in tail if m.id != context_id)]
    return out


def summaries(messages: Sequence) -> list:
    """The summary messages of a history, oldest first."""
    return [m for m in messages if m.payload["kind"] == "summary"]


# ---- imported roots (AI-SDK-style JSON model messages written by someone else) -----------------


def parse_root_json(data: bytes) -> list[TranscriptItem]:
    """Decode one root prompt message blob. A system root yields nothing (ours replaces it)."""
    try:
        msg = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError(f"root prompt message is not JSON: {e}") from e
    if not isinstance(msg, dict) or "role" not in msg:
        raise ProtocolError("root prompt message has no role")
    role, content = msg["role"], msg.get("content", "")
    if role == "system":
        return []
    if role == "user":
        return [UserItem(_user_parts(content), wire_id=msg.get("id"))]
    if role == "assistant":
        return [_assistant_from_json(content)]
    if role == "tool":
        return _tool_results_from_json(content)
    raise ProtocolError(f"root prompt message has unknown role {role!r}")


def _user_parts(content) -> tuple[UserPart, ...]:
    if isinstance(content, str):
        return (TextPart(content),)
    parts: list[UserPart] = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            parts.append(TextPart(part.get("text", "")))
        elif kind in ("image", "file") and isinstance(part.get("data", part.get("image")), str):
            mime = part.get("mimeType") or part.get("mediaType") or "image/png"
            parts.append(ImagePart(mime, part.get("data", part.get("image"))))
        else:
            parts.append(TextPart(json.dumps(part, ensure_ascii=False)))
    return tuple(parts)


def _assistant_from_json(content) -> AssistantItem:
    if isinstance(content, str):
        return AssistantItem(text=content)
    text, thinking, calls = [], [], []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            text.append(part.get("text", ""))
        elif kind == "reasoning":
            thinking.append(part.get("text", ""))
        elif kind == "tool-call":
            args = part.get("input", part.get("args", {}))
            arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            calls.append(ToolCall(part["toolCallId"], part["toolName"], arguments, len(calls)))
    return AssistantItem(text="".join(text), thinking="".join(thinking), tool_calls=tuple(calls))


def _tool_results_from_json(content) -> list[TranscriptItem]:
    results: list[TranscriptItem] = []
    for part in content if isinstance(content, list) else []:
        if part.get("type") != "tool-result":
            continue
        output = part.get("output", part.get("result"))
        is_error = False
        images: list[ImagePart] = []
        if isinstance(output, dict) and output.get("type") == "content" and isinstance(output.get("value"), list):
            texts = []
            for p in output["value"]:
                if p.get("type") == "media" and isinstance(p.get("data"), str):
                    images.append(ImagePart(p.get("mediaType") or "image/png", p["data"]))
                elif p.get("type") == "text":
                    texts.append(p.get("text", ""))
            text = "\n\n".join(texts)
        elif isinstance(output, dict) and "type" in output:
            is_error = output["type"].startswith("error")
            value = output.get("value")
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
        else:
            text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False, sort_keys=True)
        results.append(ToolResultItem(part["toolCallId"], part.get("toolName", ""), text, is_error, tuple(images)))
    return results
