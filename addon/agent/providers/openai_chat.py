"""OpenAI Chat Completions (any compatible base URL): request builder and stream fold.

Request (`POST {base_url}/chat/completions`, `Authorization: Bearer <key>`):
  model, messages, stream=true, stream_options.include_usage=true, tools (when any),
  reasoning_effort (only when configured), then `extra_body` merged last.
  `max_output_tokens` is NOT sent: the field's name differs between compatible servers
  (`max_tokens` vs `max_completion_tokens`, and OpenAI's reasoning models reject `max_tokens`), and the
  provider's default is already the model's limit. Put the cap in `extra_body` under your server's name.
  `thinking_budget_tokens` is an Anthropic knob: a ConfigError here.

Transcript mapping:
  system          -> {"role": "system"} first (when non-empty)
  UserItem        -> text-only: one string (parts joined by a blank line; several DeepSeek-style servers
                     accept only strings); with images: content parts `text` + `image_url` data URLs
  AssistantItem   -> {"role": "assistant", "content": text or null, "tool_calls": [...]}, arguments
                     byte-exact; `reasoning_content` only from our own replay state
                     ({"kind": "openai_chat"}), only on a message that carries tool calls, never "".
                     DeepSeek requires it there and rejects or ignores it elsewhere.
  ToolResultItem  -> {"role": "tool", "tool_call_id", "content"} in transcript (completion) order.

Stream fold: `delta.reasoning_content` -> thinking, `delta.content` -> text, `delta.tool_calls[]` by
`index` (the first fragment carries id + name; a fragment without `index` starts a new call when it
has an id, else continues the last one). Text/thinking blocks close when the other kind starts, when
tool calls begin, or at `finish_reason`; tool calls all close at `finish_reason` (in index order).
Usage (any one chunk, normally the `choices: []` chunk that include_usage adds) is held and emitted
once, just before Done, which is emitted on `data: [DONE]`. finish_reason `stop` with tool calls is
treated as `tool_use` (some compatible servers report it so); `length` -> Done("length");
`content_filter` -> refusal. EOF before [DONE], or [DONE] before any finish_reason, is a failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..errors import ProviderError
from ..transcript import AssistantItem, ImagePart, TextPart, ToolResultItem, UserItem
from . import common, failures
from .base import (
    Done, HttpRequest, ModelEvent, ModelRequest, ProviderProtocolError, SseEvent, Start, TextDelta, TextEnd,
    TextStart, ThinkingDelta, ThinkingEnd, ThinkingStart, ToolCallDelta, ToolCallEnd, ToolCallStart, Usage,
)
from .common import api_key, data_url, endpoint, json_headers, merge_extra_body, reject_knob, schema

KIND = "openai_chat"
PATH = "/chat/completions"
_FINISH_REASONS = {"stop", "tool_calls", "function_call", "length"}


# ---- request --------------------------------------------------------------------------------------


def build_request(req: ModelRequest) -> HttpRequest:
    route = req.route
    if route.thinking_budget_tokens is not None:
        reject_knob(route, "thinking_budget_tokens", "use reasoning_effort or extra_body")
    key = api_key(route)
    body: dict = {"model": route.model_id, "messages": _messages(req), "stream": True,
                  "stream_options": {"include_usage": True}}
    if req.tools:
        body["tools"] = [
            {"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": schema(t.parameters)}}
            for t in req.tools
        ]
    if route.reasoning_effort is not None:
        body["reasoning_effort"] = route.reasoning_effort
    body = merge_extra_body(body, route.extra_body)
    auth = {"authorization": f"Bearer {key}"} if key else {}
    return HttpRequest(url=endpoint(route, PATH), headers=json_headers(route, auth), body=body)


def _messages(req: ModelRequest) -> list[dict]:
    out: list[dict] = []
    if req.system:
        out.append({"role": "system", "content": req.system})
    for item in req.items:
        match item:
            case UserItem():
                out.append({"role": "user", "content": _user_content(item)})
            case AssistantItem():
                out.append(_assistant(item))
            case ToolResultItem():
                out.append({"role": "tool", "tool_call_id": item.call_id, "content": item.content})
    return out


def _user_content(item: UserItem) -> str | list[dict]:
    if all(isinstance(p, TextPart) for p in item.parts):
        return "\n\n".join(p.text for p in item.parts if isinstance(p, TextPart))
    parts: list[dict] = []
    for p in item.parts:
        if isinstance(p, ImagePart):
            parts.append({"type": "image_url", "image_url": {"url": data_url(p)}})
        else:
            parts.append({"type": "text", "text": p.text})
    return parts


def _assistant(item: AssistantItem) -> dict:
    msg: dict = {"role": "assistant", "content": item.text if (item.text or not item.tool_calls) else None}
    if item.tool_calls:
        msg["tool_calls"] = [
            {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in sorted(item.tool_calls, key=lambda c: c.index)
        ]
        replay = item.replay or {}
        reasoning = replay.get("reasoning_content") if replay.get("kind") == KIND else None
        if reasoning:
            msg["reasoning_content"] = reasoning
    return msg


# ---- stream fold ----------------------------------------------------------------------------------


@dataclass
class _Call:
    index: int
    call_id: str
    name: str
    arguments: list[str] = field(default_factory=list)


class Fold:
    """Chat completion chunks -> model events. Pure; raises ProviderError / ProviderProtocolError."""

    def __init__(self, provider: str = "OpenAI Chat") -> None:
        self._provider = provider
        self._started = False
        self._block: str | None = None  # "text" | "thinking": the open content block
        self._calls: dict[int, _Call] = {}  # provider index -> call (our index = order of arrival)
        self._last_index: int | None = None
        self._reasoning: list[str] = []
        self._finish: str | None = None
        self._usage: Usage | None = None
        self._done = False

    def feed(self, event: SseEvent) -> list[ModelEvent]:
        if self._done:
            raise ProviderProtocolError(f"{self._provider}: data after [DONE]")
        data = event.data.strip()
        if not data:
            return []
        if data == "[DONE]":
            return self._on_done()
        chunk = common.event_json(self._provider, data)
        if chunk.get("error"):
            raise failures.stream_error(self._provider, chunk)
        out: list[ModelEvent] = []
        if not self._started:
            self._started = True
            out.append(Start(response_id=chunk.get("id")))
        if chunk.get("usage"):
            if self._usage is not None:
                raise ProviderProtocolError(f"{self._provider}: usage reported twice")
            self._usage = _usage(chunk["usage"])
        for choice in chunk.get("choices") or []:
            out += self._choice(choice)
        return out

    def finish(self) -> list[ModelEvent]:
        if not self._done:
            raise ProviderError(f"{self._provider}: the stream ended before [DONE] (EOF mid-response).")
        return []

    def _choice(self, choice: dict) -> list[ModelEvent]:
        if choice.get("index", 0) != 0:
            raise ProviderProtocolError(f"{self._provider}: unexpected choice index {choice.get('index')}")
        delta = choice.get("delta") or {}
        reasoning, content, calls = delta.get("reasoning_content"), delta.get("content"), delta.get("tool_calls")
        if self._finish is not None:
            # Some servers repeat the finish_reason on the usage chunk; anything else is a violation.
            if reasoning or content or calls or choice.get("finish_reason") not in (None, self._finish):
                raise ProviderProtocolError(f"{self._provider}: output after finish_reason {self._finish!r}")
            return []
        out: list[ModelEvent] = []
        if reasoning:
            out += self._open("thinking")
            self._reasoning.append(reasoning)
            out.append(ThinkingDelta(reasoning))
        if content:
            out += self._open("text")
            out.append(TextDelta(content))
        for fragment in calls or []:
            out += self._tool_fragment(fragment)
        if choice.get("finish_reason"):
            out += self._on_finish(choice["finish_reason"])
        return out

    def _open(self, block: str | None) -> list[ModelEvent]:
        """Close the open text/thinking block unless it is `block`; open `block` (None: just close)."""
        if self._block == block:
            return []
        out: list[ModelEvent] = []
        if self._block == "text":
            out.append(TextEnd())
        elif self._block == "thinking":
            out.append(ThinkingEnd())
        if block == "text":
            out.append(TextStart())
        elif block == "thinking":
            out.append(ThinkingStart())
        self._block = block
        return out

    def _tool_fragment(self, fragment: dict) -> list[ModelEvent]:
        out = self._open(None)
        fn = fragment.get("function") or {}
        index = fragment.get("index")
        if index is None:  # servers that omit it: an id starts a new call, no id continues the last
            index = len(self._calls) if fragment.get("id") or self._last_index is None else self._last_index
        call = self._calls.get(index)
        if call is None:
            call_id, name = fragment.get("id"), fn.get("name")
            if not call_id or not name:
                raise ProviderProtocolError(f"{self._provider}: tool call {index} started without an id and name")
            call = self._calls[index] = _Call(len(self._calls), call_id, name)
            out.append(ToolCallStart(index=call.index, call_id=call_id, name=name))
        else:
            if fragment.get("id") not in (None, "", call.call_id) or fn.get("name") not in (None, "", call.name):
                raise ProviderProtocolError(f"{self._provider}: tool call {index} changed its id or name")
        self._last_index = index
        if fn.get("arguments"):
            call.arguments.append(fn["arguments"])
            out.append(ToolCallDelta(index=call.index, arguments_delta=fn["arguments"]))
        return out

    def _on_finish(self, reason: str) -> list[ModelEvent]:
        if reason == "content_filter":
            raise failures.refusal(self._provider, "the provider's content filter stopped the response")
        if reason not in _FINISH_REASONS:
            raise ProviderProtocolError(f"{self._provider}: unknown finish_reason {reason!r}")
        self._finish = reason
        out = self._open(None)
        for call in sorted(self._calls.values(), key=lambda c: c.index):
            out.append(ToolCallEnd(index=call.index, arguments="".join(call.arguments)))
        return out

    def _on_done(self) -> list[ModelEvent]:
        if self._finish is None:
            raise ProviderError(f"{self._provider}: the stream ended ([DONE]) without a finish_reason.")
        self._done = True
        out: list[ModelEvent] = [self._usage] if self._usage is not None else []
        reason: Literal["stop", "tool_use", "length"]
        if self._finish == "length":
            reason = "length"
        elif self._finish in ("tool_calls", "function_call") or self._calls:
            reason = "tool_use"
        else:
            reason = "stop"
        reasoning = "".join(self._reasoning)
        replay = {"kind": KIND, "reasoning_content": reasoning} if reasoning else None
        out.append(Done(reason=reason, replay=replay))
        return out


def _usage(u: dict) -> Usage:
    prompt_details = u.get("prompt_tokens_details") or {}
    completion_details = u.get("completion_tokens_details") or {}
    cached = prompt_details.get("cached_tokens")
    if cached is None:
        cached = u.get("prompt_cache_hit_tokens")  # DeepSeek reports its cache hits here
    return Usage(
        input_tokens=u.get("prompt_tokens"),
        output_tokens=u.get("completion_tokens"),
        cache_read_tokens=cached,
        cache_write_tokens=None,
        reasoning_tokens=completion_details.get("reasoning_tokens"),
    )
