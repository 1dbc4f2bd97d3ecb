"""OpenAI Responses API: request builder and stream fold. Stateless: no `previous_response_id`,
every request carries the full history.

Request (`POST {base_url}/responses`, `Authorization: Bearer <key>`):
  model, stream=true, only when `reasoning_effort` is configured:
  `reasoning: {effort, summary: "auto"}`, `include: ["reasoning.encrypted_content"]`, `store: false`;
  prompt_cache_key (the conversation id, only when the provider sets `prompt_cache_key = true`);
  tools (when any, `strict: false` because Responses makes functions strict by default and Cursor's
  tool schemas have optional parameters; a tool with a strict form, an MCP tool offered directly, goes
  `strict: true` with that form), instructions (the system prompt, when non-empty), and
  input last (the bytes of a request start with the previous request's). Then `extra_body` merged last. `max_output_tokens` is not sent (it is the model's limit, already the
  provider's default); `thinking_budget_tokens` is an Anthropic knob: a ConfigError here.

Transcript mapping:
  UserItem        -> {"type": "message", "role": "user", "content": [input_text | input_image]}
  AssistantItem   -> with our replay state ({"kind": "openai_responses", "output": [...]}): the stored
                     output items in their original order (reasoning incl. encrypted_content, message,
                     function_call). Without it: an output_text message (when there is text) and one
                     function_call item per call, arguments byte-exact.
  ToolResultItem  -> {"type": "function_call_output", "call_id", "output"} in transcript order; the
                     output is [input_text, input_image...] when the result carries images and the
                     model takes them.
  When the final body has `store: false`, replayed items lose their `id` (the server did not keep
  them, and echoing an id makes it look them up) and reasoning items without encrypted_content are
  dropped (they only point at server state that does not exist). Nothing else is changed.

Stream fold (dispatch on the payload's `type`):
  response.created                      -> Start(response id)
  output_item.added function_call       -> ToolCallStart (index = order among the calls)
  output_text.delta                     -> TextStart (first) + TextDelta; the message item's done -> TextEnd
  reasoning_summary_text.delta / reasoning_text.delta
                                        -> ThinkingStart (first) + ThinkingDelta; summary parts are
                                           separated by a blank line; the reasoning item's done -> ThinkingEnd
  function_call_arguments.delta         -> ToolCallDelta; the call item's done -> ToolCallEnd(item.arguments)
  output_item.done                      -> the item, verbatim, is kept for the replay state
  response.completed                    -> Usage, Done(tool_use if any call else stop, replay)
  response.incomplete                   -> max_output_tokens: Usage, Done("length"); content_filter: refusal
  response.failed / error               -> ProviderError; refusal.done -> refusal
  data: [DONE]                          -> ignored after the terminal event (LiteLLM sends it);
                                           before it, the same failure as EOF
Other event types (content_part.*, *.done echoes, annotations) carry nothing new and are ignored.
"""

from __future__ import annotations


from ..wire.errors import InternalError, ProviderError
from .transcript import AssistantItem, ImagePart, ToolResultItem, UserItem
from . import common, failures
from .base import (
    Done, HttpRequest, ModelEvent, ModelRequest, ProviderProtocolError, SseEvent, Start, TextDelta, TextEnd, TextStart, ThinkingDelta, ThinkingEnd, ThinkingStart, ToolCallDelta, ToolCallEnd, ToolCallStart, Usage,
)
from .common import api_key, data_url, endpoint, json_headers, merge_extra_body, reject_knob, schema

KIND = "openai_responses"
PATH = "/responses"
_STATELESS_TYPES = {"message", "reasoning", "function_call"}


# ---- request --------------------------------------------------------------------------------------


def build_request(req: ModelRequest) -> HttpRequest:
    route = req.route
    if route.thinking_budget_tokens is not None:
        reject_knob(route, "thinking_budget_tokens", "use reasoning_effort or extra_body")
    key = api_key(route)
    body: dict = {"model": route.model_id, "stream": True}  # stable parts first, the history last
    if route.reasoning_effort is not None:
        body["reasoning"] = {"effort": route.reasoning_effort, "summary": "auto"}
        body["include"] = ["reasoning.encrypted_content"]
        body["store"] = False
    if route.prompt_cache_key and req.cache_key:
        body["prompt_cache_key"] = req.cache_key
    if req.tools:
        body["tools"] = [_function(t) for t in req.tools]
    if req.system:
        body["instructions"] = req.system
    body["input"] = _input(req)
    body = common.history_last(merge_extra_body(body, route.extra_body), "input")
    if body.get("store") is False:
        body["input"] = _stateless(body["input"])
    auth = {"authorization": f"Bearer {key}"} if key else {}
    return HttpRequest(url=endpoint(route, PATH), headers=json_headers(route, auth), body=body)


def _function(tool) -> dict:
    """A tool with a strict form (MCP tools offered directly) goes strict; the catalog's own tools,
    which have optional parameters, do not."""
    if tool.strict_parameters is not None:
        return {"type": "function", "name": tool.name, "description": tool.description,
                "parameters": tool.strict_parameters, "strict": True}
    return {"type": "function", "name": tool.name, "description": tool.description,
            "parameters": schema(tool.parameters), "strict": False}


def _input(req: ModelRequest) -> list[dict]:
    out: list[dict] = []
    for item in req.items:
        match item:
            case UserItem():
                out.append({"type": "message", "role": "user", "content": [_user_part(p) for p in item.parts]})
            case AssistantItem():
                out += _assistant(item)
            case ToolResultItem():
                output: str | list = item.content
                if item.images and req.route.supports_images:
                    output = [{"type": "input_text", "text": item.content}] + [
                        {"type": "input_image", "image_url": data_url(i)} for i in item.images]
                out.append({"type": "function_call_output", "call_id": item.call_id, "output": output})
    return out


def _user_part(part: object) -> dict:
    if isinstance(part, ImagePart):
        return {"type": "input_image", "image_url": data_url(part)}
    return {"type": "input_text", "text": part.text}  # type: ignore[attr-defined]


def _assistant(item: AssistantItem) -> list[dict]:
    calls = sorted(item.tool_calls, key=lambda c: c.index)
    replay = item.replay or {}
    if replay.get("kind") == KIND:
        output = [dict(x) for x in replay.get("output") or []]
        replayed = [x.get("call_id") for x in output if x.get("type") == "function_call"]
        if sorted(replayed) != sorted(c.call_id for c in calls):
            raise InternalError("openai_responses replay state does not match the assistant's tool calls")
        return output
    out: list[dict] = []
    if item.text:
        out.append({"type": "message", "role": "assistant",
                    "content": [{"type": "output_text", "text": item.text}]})
    for c in calls:
        out.append({"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments})
    return out


def _stateless(items: list[dict]) -> list[dict]:
    out = []
    for x in items:
        if x.get("type") == "reasoning" and not x.get("encrypted_content"):
            continue
        if x.get("type") in _STATELESS_TYPES and "id" in x:
            x = {k: v for k, v in x.items() if k != "id"}
        out.append(x)
    return out


# ---- stream fold ----------------------------------------------------------------------------------


class Fold:
    """Responses streaming events -> model events. Pure; raises ProviderError / ProviderProtocolError."""

    def __init__(self, provider: str = "OpenAI Responses") -> None:
        self._provider = provider
        self._started = False
        self._done = False
        self._items: dict[int, dict] = {}  # output_index -> finished item, verbatim
        self._open: dict[int, str] = {}  # output_index -> "text" | "thinking" | "tool"
        self._calls: dict[int, int] = {}  # output_index -> our call index
        self._summary_index: dict[int, int] = {}
        self._refusal: list[str] = []

    def feed(self, event: SseEvent) -> list[ModelEvent]:
        if common.is_done_sentinel(event.data):  # LiteLLM ends its Responses streams with [DONE]
            if self._done:
                return []
            raise ProviderError(
                f"{self._provider}: the stream ended ([DONE]) without response.completed (EOF mid-response)."
            )
        payload = common.event_json(self._provider, event.data)
        if payload is None:
            return []
        etype = payload.get("type") or event.event
        if self._done:
            raise ProviderProtocolError(f"{self._provider}: {etype} after the response finished")
        if etype == "error":
            raise failures.stream_error(self._provider, payload)
        if etype == "response.created":
            if self._started:
                raise ProviderProtocolError(f"{self._provider}: response.created twice")
            self._started = True
            return [Start(response_id=(payload.get("response") or {}).get("id"))]
        if not self._started:
            raise ProviderProtocolError(f"{self._provider}: {etype} before response.created")
        handler = _HANDLERS.get(etype)
        return handler(self, payload) if handler else []

    def finish(self) -> list[ModelEvent]:
        if not self._done:
            raise ProviderError(
                f"{self._provider}: the stream ended without response.completed (EOF mid-response)."
            )
        return []

    # -- items

    def _item_added(self, p: dict) -> list[ModelEvent]:
        item, oi = p.get("item") or {}, p.get("output_index")
        if item.get("type") != "function_call":
            return []
        if oi in self._calls:
            raise ProviderProtocolError(f"{self._provider}: output item {oi} added twice")
        if not item.get("call_id") or not item.get("name"):
            raise ProviderProtocolError(f"{self._provider}: function_call {oi} without call_id and name")
        self._calls[oi] = len(self._calls)
        self._open[oi] = "tool"
        return [ToolCallStart(index=self._calls[oi], call_id=item["call_id"], name=item["name"])]

    def _item_done(self, p: dict) -> list[ModelEvent]:
        item, oi = p.get("item") or {}, p.get("output_index")
        if oi in self._items:
            raise ProviderProtocolError(f"{self._provider}: output item {oi} finished twice")
        self._items[oi] = item
        block = self._open.pop(oi, None)
        if item.get("type") == "function_call":
            if block != "tool":
                raise ProviderProtocolError(f"{self._provider}: function_call {oi} finished but never added")
            return [ToolCallEnd(index=self._calls[oi], arguments=item.get("arguments", ""))]
        if block == "text":
            return [TextEnd()]
        if block == "thinking":
            return [ThinkingEnd()]
        return []

    # -- deltas

    def _text(self, p: dict) -> list[ModelEvent]:
        return self._delta(p.get("output_index"), "text", p.get("delta", ""))

    def _reasoning(self, p: dict) -> list[ModelEvent]:
        oi = p.get("output_index")
        out: list[ModelEvent] = []
        part = p.get("summary_index", 0)
        previous = self._summary_index.get(oi)
        if previous is not None and part != previous:
            out += self._delta(oi, "thinking", "\n\n")  # a new summary part: keep parts apart for display
        self._summary_index[oi] = part
        return out + self._delta(oi, "thinking", p.get("delta", ""))

    def _delta(self, oi: int | None, kind: str, text: str) -> list[ModelEvent]:
        if oi is None:
            raise ProviderProtocolError(f"{self._provider}: {kind} delta without output_index")
        out: list[ModelEvent] = []
        current = self._open.get(oi)
        if current is None:
            if oi in self._items:
                raise ProviderProtocolError(f"{self._provider}: delta for finished output item {oi}")
            self._open[oi] = kind
            out.append(TextStart() if kind == "text" else ThinkingStart())
        elif current != kind:
            raise ProviderProtocolError(f"{self._provider}: {kind} delta inside a {current} item")
        if text:
            out.append(TextDelta(text) if kind == "text" else ThinkingDelta(text))
        return out

    def _arguments(self, p: dict) -> list[ModelEvent]:
        oi = p.get("output_index")
        if self._open.get(oi) != "tool":
            raise ProviderProtocolError(f"{self._provider}: arguments for output item {oi} that is not an open call")
        delta = p.get("delta", "")
        return [ToolCallDelta(index=self._calls[oi], arguments_delta=delta)] if delta else []

    def _refusal_delta(self, p: dict) -> list[ModelEvent]:
        self._refusal.append(p.get("delta", ""))
        return []

    def _refusal_done(self, p: dict) -> list[ModelEvent]:
        raise failures.refusal(self._provider, p.get("refusal") or "".join(self._refusal) or "(no text)")

    # -- terminal

    def _completed(self, p: dict) -> list[ModelEvent]:
        return self._end(p.get("response") or {}, "tool_use" if self._calls else "stop")

    def _incomplete(self, p: dict) -> list[ModelEvent]:
        response = p.get("response") or {}
        reason = (response.get("incomplete_details") or {}).get("reason")
        if reason == "content_filter":
            raise failures.refusal(self._provider, "the provider's content filter stopped the response")
        # A cut-off is a failure (ModelCycle turns Done("length") into the error): close what is open
        # so the verdict is "length", not "open blocks".
        out: list[ModelEvent] = []
        for oi, block in sorted(self._open.items()):
            if block == "tool":
                out.append(ToolCallEnd(index=self._calls[oi], arguments=""))
            else:
                out.append(TextEnd() if block == "text" else ThinkingEnd())
        self._open.clear()
        return out + self._end(response, "length")

    def _failed(self, p: dict) -> list[ModelEvent]:
        response = p.get("response") or {}
        raise failures.stream_error(self._provider, {"error": response.get("error") or {"message": "response.failed"}})

    def _end(self, response: dict, reason: str) -> list[ModelEvent]:
        self._done = True
        out: list[ModelEvent] = []
        if response.get("usage"):
            out.append(_usage(response["usage"]))
        replay = {"kind": KIND, "output": [self._items[oi] for oi in sorted(self._items)]}
        out.append(Done(reason=reason, replay=replay))  # type: ignore[arg-type]
        return out


_HANDLERS = {
    "response.output_item.added": Fold._item_added,
    "response.output_item.done": Fold._item_done,
    "response.output_text.delta": Fold._text,
    "response.reasoning_summary_text.delta": Fold._reasoning,
    "response.reasoning_text.delta": Fold._reasoning,
    "response.function_call_arguments.delta": Fold._arguments,
    "response.refusal.delta": Fold._refusal_delta,
    "response.refusal.done": Fold._refusal_done,
    "response.completed": Fold._completed,
    "response.incomplete": Fold._incomplete,
    "response.failed": Fold._failed,
}


def _usage(u: dict) -> Usage:
    return Usage(
        input_tokens=u.get("input_tokens"),
        output_tokens=u.get("output_tokens"),
        cache_read_tokens=(u.get("input_tokens_details") or {}).get("cached_tokens"),
        cache_write_tokens=None,
        reasoning_tokens=(u.get("output_tokens_details") or {}).get("reasoning_tokens"),
    )
