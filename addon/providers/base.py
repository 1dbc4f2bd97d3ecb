"""The provider-neutral side of a model call: request, events, and the strict cycle check.

Each adapter (openai_chat, openai_responses, anthropic) is three parts:
  build_request(ModelRequest) -> HttpRequest        pure
  Fold().feed(sse_event) -> list[ModelEvent]         pure; Fold().finish() at EOF
  stream(...)                                        thin httpx IO shell (providers/io.py)

All adapters emit the same events. `ModelCycle` checks the sequence: usage at most once, nothing
after Done, no block open at Done, `length` and EOF-without-Done are failures (ProviderError).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol, Union

from .config import ModelRoute
from ..wire.errors import ProviderError
from .transcript import ToolSpec, TranscriptItem


@dataclass(frozen=True)
class ModelRequest:
    """Replayable input of one model call: no request ids, times or Cursor modes."""

    route: ModelRoute
    system: str
    items: tuple[TranscriptItem, ...]
    tools: tuple[ToolSpec, ...] = ()
    cache_key: str | None = None
    """Stable for the conversation (its id): sent as `prompt_cache_key` where the provider opts in."""


@dataclass(frozen=True)
class HttpRequest:
    url: str
    headers: dict[str, str]
    """Includes the auth header; never log or store these unredacted (see redact_headers)."""
    body: dict

    def __repr__(self) -> str:
        # The dataclass repr would print the key: show redacted headers instead.
        return f"HttpRequest(url={self.url!r}, headers={redact_headers(self.headers)!r}, body=<{len(self.body)} keys>)"


SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key",
                            "cookie", "set-cookie"})
"""Header names whose values are credentials: redacted wherever headers are logged, stored or
exported (provider calls here, captures in cli/capture.py). The one list."""


def redact_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: ("<redacted>" if k.lower() in SECRET_HEADERS else v) for k, v in headers.items()}


# ---- events -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    response_id: str | None = None


@dataclass(frozen=True)
class TextStart:
    pass


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class TextEnd:
    pass


@dataclass(frozen=True)
class ThinkingStart:
    pass


@dataclass(frozen=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True)
class ThinkingEnd:
    pass


@dataclass(frozen=True)
class ToolCallStart:
    index: int
    call_id: str
    name: str


@dataclass(frozen=True)
class ToolCallDelta:
    index: int
    arguments_delta: str


@dataclass(frozen=True)
class ToolCallEnd:
    index: int
    arguments: str
    """The complete arguments text (may be invalid JSON: the loop turns that into a tool error)."""


@dataclass(frozen=True)
class Usage:
    """As the provider reported it; a field it did not report stays None (never an invented 0)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None


@dataclass(frozen=True)
class Done:
    reason: Literal["stop", "tool_use", "length"]
    replay: dict | None = None
    """Provider replay state for the assistant message (see transcript.AssistantItem.replay)."""


ModelEvent = Union[
    Start, TextStart, TextDelta, TextEnd, ThinkingStart, ThinkingDelta, ThinkingEnd,
    ToolCallStart, ToolCallDelta, ToolCallEnd, Usage, Done,
]


@dataclass(frozen=True)
class SseEvent:
    """One decoded server-sent event (from httpx-sse), independent of the library."""

    event: str
    data: str


class StreamFold(Protocol):
    """A dialect's pure stream fold: SSE events in, model events out (raises ProviderError)."""

    def feed(self, event: SseEvent) -> list[ModelEvent]: ...

    def finish(self) -> list[ModelEvent]:
        """End of the byte stream: raises unless the dialect's terminal event was seen."""
        ...


@dataclass(frozen=True)
class Adapter:
    """One provider dialect: its pure request builder and its stream fold factory."""

    kind: str
    build_request: Callable[[ModelRequest], HttpRequest]
    new_fold: Callable[[str], StreamFold]
    """Called with the provider's display name (used in error messages)."""


class ProviderProtocolError(ProviderError):
    """The provider's stream broke the dialect's rules (duplicate usage, events after done...)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"provider protocol error: {message}", retryable=True)


@dataclass
class ModelCycle:
    """Folds one call's events into its result and rejects impossible sequences."""

    text: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    calls: dict[int, dict] = field(default_factory=dict)
    usage: Usage | None = None
    done: Done | None = None
    _open: set[str] = field(default_factory=set)

    def feed(self, event: ModelEvent) -> None:
        if self.done is not None:
            raise ProviderProtocolError(f"{type(event).__name__} after done")
        match event:
            case Start():
                pass
            case TextStart():
                self._open.add("text")
            case TextDelta(text=t):
                self.text.append(t)
            case TextEnd():
                self._open.discard("text")
            case ThinkingStart():
                self._open.add("thinking")
            case ThinkingDelta(text=t):
                self.thinking.append(t)
            case ThinkingEnd():
                self._open.discard("thinking")
            case ToolCallStart(index=i, call_id=cid, name=name):
                if i in self.calls:
                    raise ProviderProtocolError(f"tool call index {i} started twice")
                self.calls[i] = {"call_id": cid, "name": name, "arguments": None}
                self._open.add(f"tool:{i}")
            case ToolCallDelta(index=i):
                if f"tool:{i}" not in self._open:
                    raise ProviderProtocolError(f"arguments for tool call index {i} that is not open")
            case ToolCallEnd(index=i, arguments=args):
                if f"tool:{i}" not in self._open:
                    raise ProviderProtocolError(f"end of tool call index {i} that is not open")
                self.calls[i]["arguments"] = args
                self._open.discard(f"tool:{i}")
            case Usage():
                if self.usage is not None:
                    raise ProviderProtocolError("usage reported twice")
                self.usage = event
            case Done(reason=reason):
                if self._open:
                    raise ProviderProtocolError(f"done with open blocks: {sorted(self._open)}")
                if reason == "length":
                    raise ProviderError(
                        "The model stopped at its output token limit (length) before finishing.",
                        retryable=True, title="Provider Error", expected=True, kind="length",
                    )
                if reason == "tool_use" and not self.calls:
                    raise ProviderProtocolError("done(tool_use) without tool calls")
                self.done = event
            case _:
                raise ProviderProtocolError(f"unknown event {event!r}")

    def finish(self) -> Done:
        """Call at end of stream: a stream without Done is a failure, never a normal stop."""
        if self.done is None:
            raise ProviderError("The provider's stream ended without a final event (EOF).")
        return self.done
