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
from dataclasses import dataclass, field

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


@dataclass(frozen=True, slots=True)
class FoldedItem:
    """One transcript item plus where it came from: `imported_root` holds the exact root blob id
    when the item came from a client checkpoint (its root is reused, never re-rendered)."""

    item: TranscriptItem
    imported_root: bytes | None = None
    root_group: int = 0
    """Items with the same group come from one imported root (a tool root may hold many results)."""


class IncompleteRound(InternalError):
    pass


@dataclass(eq=False)
class _Round:
    """A tool round as its pairs arrive: one assistant item once every result is in."""

    round_id: str
    first: Mapping
    """The round's first pair: its text, thinking and replay state are the round's."""
    size: int | None
    calls: list = field(default_factory=list)
    results: int = 0

    def item(self) -> AssistantItem:
        if self.size is not None and self.results != self.size:
            raise IncompleteRound(f"tool round {self.round_id} has {self.results} of {self.size} results")
        calls = sorted(self.calls, key=lambda c: c["index"])
        first = self.first
        return AssistantItem(
            text=first["text"], thinking=first["thinking"],
            tool_calls=tuple(ToolCall(c["call_id"], c["name"], c["arguments"], c["index"]) for c in calls),
            replay=first.get("replay"))


@dataclass(eq=False, slots=True)
class Entry:
    """One stored message of the provider view and the transcript items it adds (a tool round's
    assistant item stands on the round's first pair; its other pairs add only their results)."""

    message_id: int | None
    kind: str
    folded: list[FoldedItem]
    round: _Round | None = None
    """The round this entry holds the assistant item of, until all its results are in."""
    rendered: list[bytes] | None = None
    """Cache slot of the checkpoint projection: the root blob ids of `folded`, once final."""
    counted: object = None
    """Cache slot of the checkpoint projection: what this entry adds to the token breakdown."""

    def items(self) -> list[FoldedItem]:
        if self.round is not None:
            return [FoldedItem(self.round.item())]
        return self.folded


class Fold:
    """The provider view of a history, folded into transcript items one message at a time: a warm
    conversation adds only its new messages. `Fold(blobs).extend(messages)` is the whole history's
    fold, and extending in any number of steps gives the same entries. History is append-only; a
    summary message replaces the view before it with [its context message, itself, its tail]."""

    def __init__(self, blobs: Mapping[bytes, bytes] | None = None) -> None:
        self.blobs = blobs
        """Bytes of imported roots (an import's roots are parsed, never re-rendered)."""
        self.entries: list[Entry] = []
        self.generation = 0
        """Counts the summaries applied: the entries before one are not the entries after."""
        self._rounds: dict[str, _Round] = {}
        self._groups = 0

    def extend(self, messages: Sequence) -> "Fold":
        for msg in messages:
            self.add(msg)
        return self

    def add(self, msg) -> None:
        p = msg.payload
        kind = p["kind"]
        if kind == "summary":
            self.entries = self.with_summary(p, getattr(msg, "id", None))
            kept = {e.round.round_id for e in self.entries if e.round is not None}
            self._rounds = {rid: r for rid, r in self._rounds.items() if rid in kept}  # open ones in view
            self.generation += 1
            return
        self.entries.append(self._entry(getattr(msg, "id", None), p, kind))

    def with_summary(self, summary: Mapping, message_id: int | None = None) -> list[Entry]:
        """The view's entries as a summary message (its payload) would leave them; changes nothing."""
        placed = Entry(message_id, "summary", [FoldedItem(UserItem(_parts(summary["parts"]), wire_id=summary["wire_id"]))])
        return compacted(self.entries, summary, lambda e: e.message_id, placed)

    def _entry(self, message_id: int | None, p: Mapping, kind: str) -> Entry:
        if kind == "runtime":
            return Entry(message_id, kind, [FoldedItem(UserItem(_parts(p["parts"]), wire_id=p["wire_id"]))])
        if kind == "assistant" and p.get("tool_round_id") is None:
            return Entry(message_id, kind, [FoldedItem(assistant_item(p))])
        if kind == "assistant":
            rid = p["tool_round_id"]
            found = self._rounds.get(rid)
            if found is None:
                found = self._rounds[rid] = _Round(rid, {k: p[k] for k in ("text", "thinking")} | {
                    "replay": p.get("replay")}, p["round_size"])
                found.calls.extend(p["tool_calls"])
                return Entry(message_id, kind, [], round=found)
            found.calls.extend(p["tool_calls"])
            return Entry(message_id, kind, [])
        if kind == "tool":
            found = self._rounds.get(p["tool_round_id"])
            if found is None:
                raise InternalError(f"tool result {p['call_id']!r} without its assistant call")
            found.results += 1
            if found.size is not None and found.results == found.size:
                self._close(found)
            item = ToolResultItem(p["call_id"], p["name"], p["content"], p["is_error"],
                                  tuple(i for i in _parts(p.get("images", ())) if isinstance(i, ImagePart)))
            return Entry(message_id, kind, [FoldedItem(item)])
        if kind == "import":
            if self.blobs is None:
                raise InternalError("folding an import needs its root blobs")
            folded = []
            for hex_id in p["roots"]:
                self._groups += 1
                root_id = bytes.fromhex(hex_id)
                folded += [FoldedItem(item, imported_root=root_id, root_group=self._groups)
                           for item in parse_root_json(self.blobs[root_id])]
            return Entry(message_id, kind, folded)
        raise InternalError(f"unknown stored message kind {kind!r}")

    def _close(self, done: _Round) -> None:
        """Every result of a round is in: its assistant item is final (and the round forgotten)."""
        del self._rounds[done.round_id]
        for entry in reversed(self.entries):
            if entry.round is done:
                entry.folded, entry.round = [FoldedItem(done.item())], None
                return

    def folded(self) -> list[FoldedItem]:
        return [f for e in self.entries for f in e.items()]

    def transcript(self) -> tuple[TranscriptItem, ...]:
        return tuple(f.item for e in self.entries for f in e.items())


def compacted(view_: list, summary: Mapping, id_of, placed) -> list:
    """`view_` (the provider view before a summary) as the summary leaves it: [its context message,
    `placed` (the summary itself), its tail]."""
    ids = [id_of(x) for x in view_]
    context_id, tail_from = summary.get("context_id"), summary.get("tail_from")
    for needed in (context_id, tail_from):
        if needed is not None and needed not in ids:
            raise InternalError(f"summary {summary['wire_id']} refers to message {needed}, which is not before it")
    head = [view_[ids.index(context_id)]] if context_id is not None else []
    tail = view_[ids.index(tail_from):] if tail_from is not None else []
    return [*head, placed, *(x for x in tail if id_of(x) != context_id)]


def fold(messages: Sequence, blobs: Mapping[bytes, bytes] | None = None) -> list[FoldedItem]:
    """The provider view's transcript items, each with where it came from (compactions applied)."""
    return Fold(blobs).extend(messages).folded()


def transcript(messages: Sequence, blobs: Mapping[bytes, bytes] | None = None) -> tuple[TranscriptItem, ...]:
    """What the provider sees: the fold of the current view (compactions applied)."""
    return Fold(blobs).extend(messages).transcript()


def view(messages: Sequence) -> list:
    """The stored messages the provider sees, in order. History is append-only; a summary message
    replaces what came before it with [its context message, itself, its tail], and everything after
    it follows as usual. Without summaries this is `messages` unchanged."""
    out: list = []
    for msg in messages:
        if msg.payload["kind"] != "summary":
            out.append(msg)
        else:
            out = compacted(out, msg.payload, lambda m: m.id, msg)
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
