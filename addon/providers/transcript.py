"""The logical model transcript: what a provider sees and what Cursor's root blobs hold.

Pure values. The store keeps canonical messages (tool results as adjacent assistant(call) ->
tool(result) pairs in completion order); `byok.agent.history.fold` turns them into this transcript,
where each tool round is ONE assistant item (calls in provider index order) followed by its results
in completion order. Provider request builders and the Cursor root projection both read only this.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union


@dataclass(frozen=True)
class TextPart:
    text: str


@dataclass(frozen=True)
class ImagePart:
    mime_type: str
    data_b64: str
    """Standard base64 of the image bytes."""


UserPart = Union[TextPart, ImagePart]


@dataclass(frozen=True)
class UserItem:
    """A user-role message. Ours are runtime-origin (mode reminder, context, time, query)."""

    parts: tuple[UserPart, ...]
    wire_id: str | None = None
    """The root JSON `id`, e.g. `runtime:run-request:<request_id>`; not an identity."""
    transient: bool = False
    """A continuation prompt that exists only in one provider request, never stored."""


@dataclass(frozen=True)
class ToolCall:
    call_id: str
    """Opaque, byte-for-byte as the provider produced it (may contain newlines)."""
    name: str
    arguments: str
    """The arguments JSON text exactly as the model produced it."""
    index: int = 0
    """Position in the provider's output (calls are replayed in this order)."""


@dataclass(frozen=True)
class AssistantItem:
    text: str = ""
    thinking: str = ""
    """Visible reasoning text (for Cursor's UI and the root JSON)."""
    tool_calls: tuple[ToolCall, ...] = ()
    replay: dict | None = None
    """Provider replay state, e.g. {"kind": "anthropic", "content": [...]}; only the adapter whose
    kind matches reads it (reasoning state never crosses providers)."""


@dataclass(frozen=True)
class ToolResultItem:
    call_id: str
    name: str
    content: str
    """Always a string: structured results are serialised to JSON once, at the Cursor boundary."""
    is_error: bool = False
    images: tuple[ImagePart, ...] = ()
    """Images returned with the result (MCP tools); each dialect sends them its own way when the
    model takes images."""


TranscriptItem = Union[UserItem, AssistantItem, ToolResultItem]


@dataclass(frozen=True)
class ToolSpec:
    """A tool offered to the model: name, description, JSON Schema of its parameters."""

    name: str
    description: str
    parameters: dict = field(default_factory=dict)
    strict_parameters: dict | None = None
    """The same schema in strict form (objects closed, every property required, optional ones
    nullable), when it has one: dialects with a strict mode send this with strict on."""
