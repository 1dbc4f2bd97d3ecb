"""Fill-in-the-middle completions: the OpenAI legacy completions dialect and Mistral's FIM endpoint.

Two provider kinds, one request shape and one stream fold:

  openai_completions   POST {base_url}/completions       (Ollama, llama.cpp's server, vLLM, DeepSeek's
                                                          beta endpoint, LiteLLM, OpenAI-compatible gateways)
  mistral_fim          POST {base_url}/fim/completions   (Mistral's Codestral)

Request: model, prompt, `suffix` (only when the model's `fim` template is `suffix`: the server
renders the model's FIM template; a family template builds one `prompt` with its FIM tokens and
sends no suffix), max_tokens, temperature, stop (when there are stop strings), stream=true, and for
openai_completions `stream_options.include_usage` (Mistral does not take it); then `extra_body`
merged last.

Stream fold: each chunk's text is `choices[0].text` (legacy completions) or
`choices[0].delta.content` (Mistral streams chat-style chunks); a missing key means empty (LiteLLM
sends content chunks without `finish_reason`, and the final chunk without `text`). `finish_reason`
`stop` / `length` (Anthropic's and a few gateways' names are aliases); usage is the last usage
object that is not all zeros (LiteLLM puts a usage of zeros on every chunk, and a real one in the
usage-only chunk that include_usage adds). Done comes at `data: [DONE]`, or at EOF after a
finish_reason (some llama.cpp builds send no [DONE] on this endpoint); EOF before any
finish_reason is a failure, as in the chat dialect. A `length` finish is Done("length"), which
`ModelCycle` turns into a ProviderError the caller may treat as a cut-off answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..wire.errors import ProviderError
from . import common, failures
from .base import Done, HttpRequest, ModelEvent, ProviderProtocolError, TextDelta, TextEnd, TextStart, Usage
from .config import ModelRoute
from .common import api_key, endpoint, json_headers, merge_extra_body

KIND = "openai_completions"
MISTRAL_KIND = "mistral_fim"
KINDS = (KIND, MISTRAL_KIND)
PATHS = {KIND: "/completions", MISTRAL_KIND: "/fim/completions"}
_FINISH_ALIASES = {"end_turn": "stop", "stop_sequence": "stop", "eos": "stop", "max_tokens": "length",
                   "model_length": "length"}


@dataclass(frozen=True)
class CompletionRequest:
    """One fill-in-the-middle call: replayable, no ids or times."""

    route: ModelRoute
    prompt: str
    suffix: str | None
    """Sent as `suffix` (the server's own FIM template); None with a family template (in `prompt`)."""
    max_tokens: int
    stop: tuple[str, ...] = ()
    temperature: float = 0.0


def build_request(req: CompletionRequest) -> HttpRequest:
    route = req.route
    key = api_key(route)
    body: dict = {"model": route.model_id, "prompt": req.prompt}
    if req.suffix is not None:
        body["suffix"] = req.suffix
    body.update(max_tokens=req.max_tokens, temperature=req.temperature, stream=True)
    if route.kind == KIND:
        body["stream_options"] = {"include_usage": True}
    if req.stop:
        body["stop"] = list(req.stop)
    body = merge_extra_body(body, route.extra_body)
    auth = {"authorization": f"Bearer {key}"} if key else {}
    return HttpRequest(url=endpoint(route, PATHS[route.kind]), headers=json_headers(route, auth), body=body)


class Fold(common.DataChunkFold):
    """Completion chunks -> Start, TextStart/TextDelta/TextEnd, Usage, Done. Pure."""

    def __init__(self, provider: str = "completions") -> None:
        self._provider = provider
        self._started = False
        self._text_open = False
        self._finish: str | None = None
        self._usage: Usage | None = None
        self._done = False

    def _chunk(self, chunk: dict) -> list[ModelEvent]:
        out: list[ModelEvent] = []
        usage = chunk.get("usage")
        if isinstance(usage, dict) and any(v for v in usage.values() if isinstance(v, int)):
            self._usage = _usage(usage)
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise ProviderProtocolError(f"{self._provider}: choices is not a list")
        for choice in choices:
            out += self._choice(choice)
        return out

    def finish(self) -> list[ModelEvent]:
        if self._done:
            return []
        if self._finish is None:
            raise ProviderError(f"{self._provider}: the stream ended before a finish_reason (EOF mid-response).")
        return self._on_done()

    def _choice(self, choice: dict) -> list[ModelEvent]:
        if choice.get("index", 0) != 0:
            raise ProviderProtocolError(f"{self._provider}: unexpected choice index {choice.get('index')}")
        text = choice.get("text")
        if text is None:
            delta = choice.get("delta") or {}
            text = delta.get("content") if isinstance(delta, dict) else None
        if text is not None and not isinstance(text, str):
            raise ProviderProtocolError(f"{self._provider}: completion text is not a string")
        finish = choice.get("finish_reason") or None
        if self._finish is not None:
            if text or finish not in (None, self._finish):
                raise ProviderProtocolError(f"{self._provider}: output after finish_reason {self._finish!r}")
            return []
        out: list[ModelEvent] = []
        if text:
            if not self._text_open:
                self._text_open = True
                out.append(TextStart())
            out.append(TextDelta(text))
        if finish:
            reason = _FINISH_ALIASES.get(finish, finish)
            if reason == "content_filter":
                raise failures.refusal(self._provider, "the provider's content filter stopped the completion")
            if reason not in ("stop", "length"):
                raise ProviderProtocolError(f"{self._provider}: unknown finish_reason {finish!r}")
            self._finish = reason
            if self._text_open:
                self._text_open = False
                out.append(TextEnd())
        return out

    def _on_done(self) -> list[ModelEvent]:
        out: list[ModelEvent] = self._finished()
        reason: Literal["stop", "length"] = "length" if self._finish == "length" else "stop"
        out.append(Done(reason=reason))
        return out


def _usage(u: dict) -> Usage:
    details = u.get("prompt_tokens_details") or {}
    return Usage(input_tokens=u.get("prompt_tokens"), output_tokens=u.get("completion_tokens"),
                 cache_read_tokens=details.get("cached_tokens") if isinstance(details, dict) else None)
