"""OpenAI Chat Completions (any compatible base URL): request builder and stream fold.

Request (`POST {base_url}/chat/completions`, `Authorization: Bearer <key>`):
  model, stream=true, stream_options.include_usage=true, reasoning_effort (only when configured),
  prompt_cache_key (the conversation id, only when the provider sets `prompt_cache_key = true`),
  tools (when any), messages (last: the bytes of a request start with the previous request's), then
  `extra_body` merged last.
  `max_output_tokens` is NOT sent: the field's name differs between compatible servers
  (`max_tokens` vs `max_completion_tokens`, and OpenAI's reasoning models reject `max_tokens`), and the
  provider's default is already the model's limit. Put the cap in `extra_body` under your server's name.
  `thinking_budget_tokens` is an Anthropic knob: a ConfigError here.

Transcript mapping:
  system          -> {"role": "system"} first (when non-empty)
  UserItem        -> text-only: one string (parts joined by a blank line; several DeepSeek-style servers
                     accept only strings); with images: content parts `text` + `image_url` data URLs
  AssistantItem   -> {"role": "assistant", "content": text or null, "tool_calls": [...]}, arguments
                     byte-exact. From our own replay state ({"kind": "openai_chat", ...}) only:
                     `reasoning_details` (OpenRouter) and `thinking_blocks` (LiteLLM for Claude) go
                     back unmodified on every assistant message that produced them; the reasoning
                     string goes back under the field it arrived in (`reasoning_content` or
                     `reasoning`), only on a message that carries tool calls, never "", and not when
                     reasoning_details hold it. DeepSeek requires it there and rejects it elsewhere.
  ToolResultItem  -> {"role": "tool", "tool_call_id", "content"} in transcript (completion) order.
                     A tool message holds text only: images a result carries (MCP tools) follow the
                     round's tool messages as one user message, when the model takes images.

Stream fold: reasoning (`delta.reasoning_content`, `delta.reasoning`, or the text inside
`delta.reasoning_details` / `delta.thinking_blocks`) -> thinking, `delta.content` -> text,
`delta.tool_calls[]` by `index` (the first fragment carries id + name; a fragment without `index`
starts a new call when it has an id, else continues the last one; a new id and name at an index in
use starts a new call). Text/thinking blocks close when the other kind starts, when tool calls
begin, or at `finish_reason` (which may arrive on a chunk that also carries content); tool calls all
close at `finish_reason` (in order). Usage (any one chunk, normally the `choices: []` chunk that
include_usage adds) is held and emitted once, just before Done, which is emitted on `data: [DONE]`
(a repeated [DONE] is ignored). finish_reason `stop` with tool calls is treated as `tool_use` (some
compatible servers report it so); Anthropic's names (`end_turn`, `tool_use`, `max_tokens`) as
their OpenAI equivalents; "" as absent; `length` -> Done("length"); `content_filter` -> refusal;
`error` (OpenRouter) -> provider error. EOF before [DONE], or [DONE] before any finish_reason, is
a failure. SSE comments (`: OPENROUTER PROCESSING`) never reach the fold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..wire.errors import ProviderError
from .transcript import AssistantItem, ImagePart, TextPart, ToolResultItem, UserItem
from . import common, failures
from .base import (
    Done, HttpRequest, ModelEvent, ModelRequest, ProviderProtocolError, TextDelta, TextEnd, TextStart, ThinkingDelta, ThinkingEnd, ThinkingStart, ToolCallDelta, ToolCallEnd, ToolCallStart, Usage,
)
from .common import api_key, data_url, endpoint, json_headers, merge_extra_body, reject_knob, schema

KIND = "openai_chat"
PATH = "/chat/completions"
_FINISH_REASONS = {"stop", "tool_calls", "function_call", "length"}
# Anthropic's stop reasons, passed through by gateways that relay Claude (one-api, LiteLLM bridges).
_FINISH_ALIASES = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length"}


# ---- request --------------------------------------------------------------------------------------


def build_request(req: ModelRequest) -> HttpRequest:
    route = req.route
    if route.thinking_budget_tokens is not None:
        reject_knob(route, "thinking_budget_tokens", "use reasoning_effort or extra_body")
    key = api_key(route)
    # What stays the same across a conversation's calls comes first and the growing history last, so
    # each request's bytes start with the previous one's (a prefix cache keyed on bytes or tokens hits).
    body: dict = {"model": route.model_id, "stream": True, "stream_options": {"include_usage": True}}
    if route.reasoning_effort is not None:
        body["reasoning_effort"] = route.reasoning_effort
    if route.prompt_cache_key and req.cache_key:
        body["prompt_cache_key"] = req.cache_key
    if req.tools:
        body["tools"] = [
            {"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": schema(t.parameters)}}
            for t in req.tools
        ]
    body["messages"] = _messages(req)
    body = common.history_last(merge_extra_body(body, route.extra_body), "messages")
    auth = {"authorization": f"Bearer {key}"} if key else {}
    return HttpRequest(url=endpoint(route, PATH), headers=json_headers(route, auth), body=body)


def _messages(req: ModelRequest) -> list[dict]:
    out: list[dict] = []
    if req.system:
        out.append({"role": "system", "content": req.system})
    images: list[dict] = []  # images of the current run of tool results (a tool message holds text only)
    for item in req.items:
        if not isinstance(item, ToolResultItem) and images:
            out.append({"role": "user", "content": images})
            images = []
        match item:
            case UserItem():
                out.append({"role": "user", "content": _user_content(item)})
            case AssistantItem():
                out.append(_assistant(item))
            case ToolResultItem():
                out.append({"role": "tool", "tool_call_id": item.call_id, "content": item.content})
                if item.images and req.route.supports_images:
                    images.append({"type": "text", "text": f"The images returned by tool call {item.call_id}:"})
                    images += [{"type": "image_url", "image_url": {"url": data_url(i)}} for i in item.images]
    if images:
        out.append({"role": "user", "content": images})
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
    replay = item.replay if (item.replay or {}).get("kind") == KIND else {}
    if item.tool_calls:
        msg["tool_calls"] = [
            {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in sorted(item.tool_calls, key=lambda c: c.index)
        ]
        if not replay.get("reasoning_details"):  # the details already hold this text
            for name in ("reasoning_content", "reasoning"):
                if replay.get(name):
                    msg[name] = replay[name]
    # Structured reasoning goes back unmodified on every assistant message that produced it:
    # OpenRouter asks for that, LiteLLM needs Claude's signed thinking blocks before tool results.
    for name in ("reasoning_details", "thinking_blocks"):
        if replay.get(name):
            msg[name] = [dict(x) for x in replay[name]]
    return msg


# ---- stream fold ----------------------------------------------------------------------------------


@dataclass
class _Call:
    index: int
    call_id: str
    name: str
    arguments: list[str] = field(default_factory=list)


class Fold(common.DataChunkFold):
    """Chat completion chunks -> model events. Pure; raises ProviderError / ProviderProtocolError."""

    def __init__(self, provider: str = "OpenAI Chat") -> None:
        self._provider = provider
        self._started = False
        self._block: str | None = None  # "text" | "thinking": the open content block
        self._calls: list[_Call] = []  # in order of arrival (= our index)
        self._slots: dict[int, _Call] = {}  # provider index -> the call it currently continues
        self._last: _Call | None = None
        self._reasoning = _Reasoning()
        self._finish: str | None = None
        self._usage: Usage | None = None
        self._done = False

    def _chunk(self, chunk: dict) -> list[ModelEvent]:
        out: list[ModelEvent] = []
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
        thinking = self._reasoning.feed(delta)
        content, calls = delta.get("content"), delta.get("tool_calls")
        finish = choice.get("finish_reason") or None  # some gateways send "" on every chunk
        if self._finish is not None:
            # Some servers repeat the finish_reason on the usage chunk; anything else is a violation.
            if thinking or content or calls or finish not in (None, self._finish):
                raise ProviderProtocolError(f"{self._provider}: output after finish_reason {self._finish!r}")
            return []
        out: list[ModelEvent] = []
        if thinking:
            out += self._open("thinking")
            out.append(ThinkingDelta(thinking))
        if content:
            out += self._open("text")
            out.append(TextDelta(content))
        for fragment in calls or []:
            out += self._tool_fragment(fragment)
        if finish:
            out += self._on_finish(finish)
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
        call_id, name, index = fragment.get("id"), fn.get("name"), fragment.get("index")
        if index is None:  # Ollama omits it: an id starts a new call, no id continues the last one
            call = None if call_id or self._last is None else self._last
        else:
            call = self._slots.get(index)
            if call is not None and call_id and call_id != call.call_id and name:
                call = None  # a new id and name at a used index: a new call (LiteLLM's Ollama bridge numbers all 0)
        if call is None:
            if not call_id or not name:
                raise ProviderProtocolError(
                    f"{self._provider}: tool call {index if index is not None else len(self._calls)} "
                    f"started without an id and name"
                )
            call = _Call(len(self._calls), call_id, name)
            self._calls.append(call)
            out.append(ToolCallStart(index=call.index, call_id=call_id, name=name))
        elif call_id not in (None, "", call.call_id) or name not in (None, "", call.name):
            raise ProviderProtocolError(f"{self._provider}: tool call {index} changed its id or name")
        if index is not None:
            self._slots[index] = call
        self._last = call
        if fn.get("arguments"):
            call.arguments.append(fn["arguments"])
            out.append(ToolCallDelta(index=call.index, arguments_delta=fn["arguments"]))
        return out

    def _on_finish(self, reason: str) -> list[ModelEvent]:
        reason = _FINISH_ALIASES.get(reason, reason)
        if reason == "content_filter":
            raise failures.refusal(self._provider, "the provider's content filter stopped the response")
        if reason == "error":  # OpenRouter: the provider failed mid-answer (normally with an `error` object first)
            raise failures.stream_error(self._provider, {"error": {"message": "finish_reason error"}})
        if reason not in _FINISH_REASONS:
            raise ProviderProtocolError(f"{self._provider}: unknown finish_reason {reason!r}")
        self._finish = reason
        out = self._open(None)
        for call in self._calls:
            out.append(ToolCallEnd(index=call.index, arguments="".join(call.arguments)))
        return out

    def _on_done(self) -> list[ModelEvent]:
        out: list[ModelEvent] = self._finished()
        reason: Literal["stop", "tool_use", "length"]
        if self._finish == "length":
            reason = "length"
        elif self._finish in ("tool_calls", "function_call") or self._calls:
            reason = "tool_use"
        else:
            reason = "stop"
        out.append(Done(reason=reason, replay=self._reasoning.replay()))
        return out


class _Reasoning:
    """The reasoning a chunk's delta carries, in whichever field its server uses, and what to send back.

    Display text comes from the first of `reasoning_content` (DeepSeek, LiteLLM, older vLLM),
    `reasoning` (OpenRouter, vLLM >= 0.10, Ollama), or else the text inside `reasoning_details`
    (OpenRouter) / `thinking_blocks` (LiteLLM for Claude). The replay keeps each field under its own
    name: the string under the name it arrived in, OpenRouter's `reasoning_details` and LiteLLM's
    `thinking_blocks` rebuilt from their streamed fragments as the non-streaming message holds them.
    """

    def __init__(self) -> None:
        self.field: str | None = None
        self.text: list[str] = []
        self.details: list[dict] = []
        self.blocks: list[dict] = []

    def feed(self, delta: dict) -> str:
        for detail in _dict_list(delta.get("reasoning_details")):
            _merge_fragment(self.details, detail, same=lambda last, new: (
                new.get("index") is not None and last.get("index") == new.get("index")
                and last.get("type") == new.get("type")))
        for block in _dict_list(delta.get("thinking_blocks")):
            _merge_fragment(self.blocks, block, same=lambda last, new: (
                new.get("type") == last.get("type") == "thinking" and not last.get("signature")))
        text = ""
        for name in ("reasoning_content", "reasoning"):
            value = delta.get(name)
            if isinstance(value, str) and value:
                self.field = self.field or name
                text = value
                break
        else:
            if delta.get("reasoning_details") is not None:
                text = "".join(_detail_text(d) for d in _dict_list(delta["reasoning_details"]))
            elif delta.get("thinking_blocks") is not None:
                text = "".join(b.get("thinking") or "" for b in _dict_list(delta["thinking_blocks"]))
        if text:
            self.text.append(text)
        return text

    def replay(self) -> dict | None:
        replay: dict = {}
        text = "".join(self.text)
        if text and self.field:
            replay[self.field] = text
        if self.details:
            replay["reasoning_details"] = self.details
        if self.blocks:
            replay["thinking_blocks"] = self.blocks
        return {"kind": KIND, **replay} if replay else None


_CONCATENATED = ("text", "summary", "data", "thinking")


def _merge_fragment(acc: list[dict], fragment: dict, same) -> None:
    """Streamed fragments of one entry share its identity (`same`): their text concatenates, any
    other field keeps its latest non-null value (a signature usually arrives last)."""
    if acc and same(acc[-1], fragment):
        last = acc[-1]
        for key, value in fragment.items():
            if value is None:
                continue
            if key in _CONCATENATED and isinstance(value, str) and isinstance(last.get(key), str):
                last[key] += value
            else:
                last[key] = value
    else:
        acc.append({k: v for k, v in fragment.items() if v is not None})


def _detail_text(detail: dict) -> str:
    if detail.get("type") == "reasoning.text":
        return detail.get("text") or ""
    if detail.get("type") == "reasoning.summary":
        return detail.get("summary") or ""
    return ""  # reasoning.encrypted: nothing to show


def _dict_list(value: object) -> list[dict]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


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
