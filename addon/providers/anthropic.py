"""Anthropic Messages API: request builder and stream fold.

Request (`POST {base_url}/messages`, `x-api-key: <key>`, `anthropic-version: 2023-06-01`):
  model, max_tokens (= the model's `max_output_tokens`; required by the API, so a model without it is a
  ConfigError), stream=true, `thinking: {type: "enabled", budget_tokens}` only when
  `thinking_budget_tokens` is configured, tools (when any, as {name, description, input_schema}),
  system (when non-empty, one text block), messages last, then `extra_body` merged (e.g.
  `anthropic-beta` features go in the route's extra_headers). `reasoning_effort` is an OpenAI knob: a
  ConfigError here.

Prompt caching: at most 4 `cache_control: {type: ephemeral}` breakpoints: the last tool, the system
block, and the last cacheable block of the newest two user messages (`cache_breakpoints`). They move
forward each round, so every call after the first reads what the call before it wrote.

Transcript mapping:
  UserItem        -> user message: `text` blocks and base64 `image` blocks
  AssistantItem   -> with our replay state ({"kind": "anthropic", "content": [...]}): the stored content
                     blocks verbatim and in order (thinking with signature, redacted_thinking, text,
                     tool_use). Without it: a text block (when non-empty) and tool_use blocks whose
                     `input` is the parsed arguments ({} when they are not a JSON object; the loop
                     already answered such a call with a tool error). Thinking from another provider
                     is never sent (it has no valid signature). An assistant with no content at all is
                     left out (the API rejects empty content).
  ToolResultItem  -> consecutive results form ONE user message of `tool_result` blocks
                     ({tool_use_id, content, is_error only when true}; content is [text, image...]
                     when the result carries images and the model takes them); a user item right after them
                     joins that message (after the results, as the API requires).

Stream fold:
  message_start         -> Start(message id); its usage is held
  content_block_start   -> TextStart | ThinkingStart | ToolCallStart (index = order among tool_use
                           blocks); redacted_thinking and unknown block types are kept for replay only
  content_block_delta   -> text_delta / thinking_delta / input_json_delta; signature_delta is kept
  content_block_stop    -> TextEnd | ThinkingEnd | ToolCallEnd(the exact partial_json text, "{}" if none)
  message_delta         -> stop_reason and usage (merged over message_start's); `refusal` and
                           `model_context_window_exceeded` fail at once
  message_stop          -> Usage (once), Done(stop | tool_use | length, replay content blocks)
  error                 -> ProviderError; ping and unknown event types are ignored
  data: [DONE]          -> ignored after message_stop (gateways append it); before it, the EOF failure

Usage: values exactly as Anthropic reports them. Anthropic's `input_tokens` EXCLUDES cached input:
cache reads and writes are only in cache_read_tokens / cache_write_tokens (Cursor's turn_ended has
separate fields for them). The OpenAI dialects' input_tokens include cached tokens, as they report it.
"""

from __future__ import annotations

import json

from ..wire.errors import ConfigError, ProviderError
from .transcript import AssistantItem, ImagePart, ToolResultItem, UserItem
from . import common, failures
from .base import (
    Done, HttpRequest, ModelEvent, ModelRequest, ProviderProtocolError, SseEvent, Start, TextDelta, TextEnd, TextStart, ThinkingDelta, ThinkingEnd, ThinkingStart, ToolCallDelta, ToolCallEnd, ToolCallStart, Usage,
)
from .common import api_key, endpoint, json_headers, merge_extra_body, parse_json_object, reject_knob, schema

KIND = "anthropic"
PATH = "/messages"
API_VERSION = "2023-06-01"
_STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_use", "max_tokens": "length"}


# ---- request --------------------------------------------------------------------------------------


def build_request(req: ModelRequest) -> HttpRequest:
    route = req.route
    if route.reasoning_effort is not None:
        reject_knob(route, "reasoning_effort", "use thinking_budget_tokens or extra_body")
    if not route.max_output_tokens:
        raise ConfigError(
            f"Model '{route.display_name}' (provider '{route.provider}'): Anthropic requires max_tokens; "
            f"set max_output_tokens for model '{route.model_id}' in the providers file."
        )
    key = api_key(route)
    # Stable parts first, the growing history last (the bytes of a request start with the previous one's).
    body: dict = {"model": route.model_id, "max_tokens": route.max_output_tokens, "stream": True}
    if route.thinking_budget_tokens is not None:
        body["thinking"] = {"type": "enabled", "budget_tokens": route.thinking_budget_tokens}
    if req.tools:
        tools = [{"name": t.name, "description": t.description, "input_schema": schema(t.parameters)}
                 for t in req.tools]
        tools[-1]["cache_control"] = dict(EPHEMERAL)  # breakpoint 1: the tool definitions
        body["tools"] = tools
    if req.system:
        body["system"] = [{"type": "text", "text": req.system, "cache_control": dict(EPHEMERAL)}]  # breakpoint 2
    body["messages"] = cache_breakpoints(_messages(req))  # breakpoints 3 and 4
    body = common.history_last(merge_extra_body(body, route.extra_body), "messages")
    auth = {"x-api-key": key} if key else {}
    auth["anthropic-version"] = API_VERSION
    return HttpRequest(url=endpoint(route, PATH), headers=json_headers(route, auth), body=body)


EPHEMERAL = {"type": "ephemeral"}
MESSAGE_BREAKPOINTS = 2
_UNCACHEABLE = {"thinking", "redacted_thinking"}


def cache_breakpoints(messages: list[dict]) -> list[dict]:
    """`messages` with a cache_control breakpoint on the last block of each of the newest two user
    messages. A pure function of the list: the newest marks where this request ends (written to the
    cache), the one before it where the previous request ended (read from the cache), whatever the
    history holds (a compaction summary, a queued message...). Thinking blocks cannot carry a marker
    and empty text blocks are not cached: the marker goes on the last block that can."""
    out = list(messages)
    users = [i for i, m in enumerate(out) if m.get("role") == "user"][-MESSAGE_BREAKPOINTS:]
    for i in users:
        blocks = list(out[i].get("content") or [])
        for b in range(len(blocks) - 1, -1, -1):
            block = blocks[b]
            if block.get("type") in _UNCACHEABLE or (block.get("type") == "text" and not block.get("text")):
                continue
            blocks[b] = {**block, "cache_control": dict(EPHEMERAL)}
            out[i] = {**out[i], "content": blocks}
            break
    return out


def _messages(req: ModelRequest) -> list[dict]:
    out: list[dict] = []

    def add(role: str, blocks: list[dict]) -> None:
        if not blocks:
            return
        if role == "user" and out and out[-1]["role"] == "user":
            out[-1]["content"].extend(blocks)  # results + the next user item: one user turn
        else:
            out.append({"role": role, "content": blocks})

    for item in req.items:
        match item:
            case UserItem():
                add("user", [_user_block(p) for p in item.parts])
            case AssistantItem():
                add("assistant", _assistant(item))
            case ToolResultItem():
                content: str | list = item.content
                if item.images and req.route.supports_images:
                    content = [{"type": "text", "text": item.content}] + [_user_block(i) for i in item.images]
                block: dict = {"type": "tool_result", "tool_use_id": item.call_id, "content": content}
                if item.is_error:
                    block["is_error"] = True
                add("user", [block])
    return out


def _user_block(part: object) -> dict:
    if isinstance(part, ImagePart):
        return {"type": "image", "source": {"type": "base64", "media_type": part.mime_type, "data": part.data_b64}}
    return {"type": "text", "text": part.text}  # type: ignore[attr-defined]


def _assistant(item: AssistantItem) -> list[dict]:
    replay = item.replay or {}
    if replay.get("kind") == KIND:
        return [dict(b) for b in replay.get("content") or []]
    blocks: list[dict] = []
    if item.text:
        blocks.append({"type": "text", "text": item.text})
    for c in sorted(item.tool_calls, key=lambda c: c.index):
        blocks.append({"type": "tool_use", "id": c.call_id, "name": c.name, "input": parse_json_object(c.arguments) or {}})
    return blocks


# ---- stream fold ----------------------------------------------------------------------------------

_USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


class Fold:
    """Messages streaming events -> model events. Pure; raises ProviderError / ProviderProtocolError."""

    def __init__(self, provider: str = "Anthropic") -> None:
        self._provider = provider
        self._started = False
        self._done = False
        self._blocks: dict[int, dict] = {}  # content index -> block under construction
        self._open: set[int] = set()
        self._calls = 0
        self._usage: dict[str, int] = {}
        self._stop_reason: str | None = None

    def feed(self, event: SseEvent) -> list[ModelEvent]:
        if common.is_done_sentinel(event.data):  # OpenAI-style gateways append it to every stream
            if self._done:
                return []
            raise ProviderError(f"{self._provider}: the stream ended ([DONE]) without message_stop (EOF mid-response).")
        payload = common.event_json(self._provider, event.data)
        if payload is None:
            return []
        etype = payload.get("type") or event.event
        if self._done:
            raise ProviderProtocolError(f"{self._provider}: {etype} after message_stop")
        if etype == "error":
            raise failures.stream_error(self._provider, payload)
        if etype == "message_start":
            if self._started:
                raise ProviderProtocolError(f"{self._provider}: message_start twice")
            self._started = True
            message = payload.get("message") or {}
            self._merge_usage(message.get("usage"))
            return [Start(response_id=message.get("id"))]
        if etype == "ping":
            return []
        if not self._started:
            raise ProviderProtocolError(f"{self._provider}: {etype} before message_start")
        handler = _HANDLERS.get(etype)
        return handler(self, payload) if handler else []

    def finish(self) -> list[ModelEvent]:
        if not self._done:
            raise ProviderError(f"{self._provider}: the stream ended without message_stop (EOF mid-response).")
        return []

    def _block_start(self, p: dict) -> list[ModelEvent]:
        index, block = p.get("index"), dict(p.get("content_block") or {})
        if not isinstance(index, int) or index in self._blocks:
            raise ProviderProtocolError(f"{self._provider}: content block {index} started twice or without index")
        self._blocks[index] = block
        self._open.add(index)
        kind = block.get("type")
        if kind == "text":
            block["_parts"] = [block.get("text", "")]
            return [TextStart()] + ([TextDelta(block["text"])] if block.get("text") else [])
        if kind == "thinking":
            block["_parts"] = [block.get("thinking", "")]
            return [ThinkingStart()] + ([ThinkingDelta(block["thinking"])] if block.get("thinking") else [])
        if kind == "tool_use":
            if not block.get("id") or not block.get("name"):
                raise ProviderProtocolError(f"{self._provider}: tool_use block {index} without id and name")
            block["_call"] = self._calls
            block["_parts"] = []
            self._calls += 1
            return [ToolCallStart(index=block["_call"], call_id=block["id"], name=block["name"])]
        return []  # redacted_thinking and block types we do not show: kept verbatim for replay

    def _block_delta(self, p: dict) -> list[ModelEvent]:
        index, delta = p.get("index"), p.get("delta") or {}
        if index not in self._open:
            raise ProviderProtocolError(f"{self._provider}: delta for content block {index} that is not open")
        block = self._blocks[index]
        dtype, kind = delta.get("type"), block.get("type")
        if dtype == "text_delta" and kind == "text":
            block["_parts"].append(delta.get("text", ""))
            return [TextDelta(delta["text"])] if delta.get("text") else []
        if dtype == "thinking_delta" and kind == "thinking":
            block["_parts"].append(delta.get("thinking", ""))
            return [ThinkingDelta(delta["thinking"])] if delta.get("thinking") else []
        if dtype == "signature_delta" and kind == "thinking":
            block["signature"] = block.get("signature", "") + delta.get("signature", "")
            return []
        if dtype == "input_json_delta" and kind == "tool_use":
            block["_parts"].append(delta.get("partial_json", ""))
            text = delta.get("partial_json", "")
            return [ToolCallDelta(index=block["_call"], arguments_delta=text)] if text else []
        if dtype in ("text_delta", "thinking_delta", "signature_delta", "input_json_delta"):
            raise ProviderProtocolError(f"{self._provider}: {dtype} inside a {kind} block")
        return []  # citations_delta and future delta types: nothing to show

    def _block_stop(self, p: dict) -> list[ModelEvent]:
        index = p.get("index")
        if index not in self._open:
            raise ProviderProtocolError(f"{self._provider}: stop for content block {index} that is not open")
        self._open.discard(index)
        block = self._blocks[index]
        kind = block.get("type")
        if kind == "text":
            return [TextEnd()]
        if kind == "thinking":
            return [ThinkingEnd()]
        if kind == "tool_use":
            arguments = "".join(block["_parts"]) or json.dumps(block.get("input") or {})
            return [ToolCallEnd(index=block["_call"], arguments=arguments)]
        return []

    def _message_delta(self, p: dict) -> list[ModelEvent]:
        self._merge_usage(p.get("usage"))
        reason = (p.get("delta") or {}).get("stop_reason")
        if reason is None:
            return []
        if reason == "refusal":
            raise failures.refusal(self._provider, "stop_reason refusal")
        if reason == "model_context_window_exceeded":
            raise failures.context_length(self._provider, "stop_reason model_context_window_exceeded")
        if reason not in _STOP_REASONS:
            raise ProviderProtocolError(f"{self._provider}: unsupported stop_reason {reason!r}")
        self._stop_reason = reason
        return []

    def _message_stop(self, p: dict) -> list[ModelEvent]:
        if self._stop_reason is None:
            raise ProviderProtocolError(f"{self._provider}: message_stop without a stop_reason")
        self._done = True
        out: list[ModelEvent] = []
        if self._usage:
            u = self._usage
            out.append(Usage(
                input_tokens=u.get("input_tokens"), output_tokens=u.get("output_tokens"),
                cache_read_tokens=u.get("cache_read_input_tokens"),
                cache_write_tokens=u.get("cache_creation_input_tokens"),
            ))
        out.append(Done(reason=_STOP_REASONS[self._stop_reason], replay={"kind": KIND, "content": self._replay()}))  # type: ignore[arg-type]
        return out

    def _merge_usage(self, usage: dict | None) -> None:
        # message_delta's counts are cumulative and may repeat message_start's: latest value wins.
        for name in _USAGE_FIELDS:
            value = (usage or {}).get(name)
            if isinstance(value, int):
                self._usage[name] = value

    def _replay(self) -> list[dict]:
        out: list[dict] = []
        for index in sorted(self._blocks):
            block = self._blocks[index]
            kind = block.get("type")
            if kind == "text":
                text = "".join(block["_parts"])
                if text:  # the API rejects empty text blocks
                    out.append({"type": "text", "text": text})
            elif kind == "thinking":
                out.append({"type": "thinking", "thinking": "".join(block["_parts"]),
                            "signature": block.get("signature", "")})
            elif kind == "tool_use":
                arguments = "".join(block["_parts"])
                tool_input = parse_json_object(arguments) if arguments else (block.get("input") or {})
                out.append({"type": "tool_use", "id": block.get("id"), "name": block.get("name"),
                            "input": tool_input or {}})
            else:
                out.append({k: v for k, v in block.items() if not k.startswith("_")})
        return out


_HANDLERS = {
    "content_block_start": Fold._block_start,
    "content_block_delta": Fold._block_delta,
    "content_block_stop": Fold._block_stop,
    "message_delta": Fold._message_delta,
    "message_stop": Fold._message_stop,
}
