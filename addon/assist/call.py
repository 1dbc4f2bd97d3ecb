"""The contract between a one-shot service and the transport that answers it.

A service names its RPC (`path`), its request message type, whether it streams, which of the user's
models answers a request (`route_for`; None passes the call to Cursor untouched) and `serve`:

- unary:      `async def serve(request, ctx) -> Message`
- streaming:  `def serve(request, ctx) -> AsyncIterator[Message]` (each message one Connect frame)

Errors are `RunError`s (addon/wire/errors.py): `ProviderError` for the provider's failures, `ProtocolError`
for a request the service cannot use, `ConfigError` for the user's config. The transport turns them into
Connect errors with ErrorDetails (an error end-stream, or a unary error body) and never into an empty
success. Cancellation (the client went away) arrives as `asyncio.CancelledError` inside `serve`: let it
propagate, so the provider request closes at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

import httpx
from google.protobuf.message import Message

from ..providers.config import ModelRoute, ProvidersConfig
from ..providers.io import StreamLimits


@dataclass(frozen=True)
class CallContext:
    """What a service may use for one call."""

    request_id: str
    """The client's `x-request-id`, or one the proxy made; in every log line and the llm_calls row."""
    route: ModelRoute
    """The model that answers (the service's `route_for` chose it)."""
    http: httpx.AsyncClient
    limits: StreamLimits
    store: Any
    """byok.store.AsyncStore: the llm_calls row of every provider call (purpose = the service's feature)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """The client's request headers (lower-case names): client version, `connect-timeout-ms`, ..."""
    user: str | None = None
    """The proxyauth user (team server), or None."""
    deadline_s: float | None = None
    """The client's own deadline (`connect-timeout-ms`), when it sent one."""
    config: ProvidersConfig | None = None
    """The providers file as `route_for` saw it (a service's own table, e.g. `[tab]`'s budgets)."""


UnaryServe = Callable[[Message, CallContext], Awaitable[Message]]
StreamServe = Callable[[Message, CallContext], AsyncIterator[Message]]


@dataclass(frozen=True)
class OneShot:
    path: str
    """The Connect RPC path, e.g. `/aiserver.v1.AiService/StreamCpp`."""
    feature: str
    """`tab`, `commit_message`, `branch_name`, `chat_title`, `terminal`, `cmd_k`: the llm_calls purpose."""
    request_type: type[Message]
    response_type: type[Message]
    streaming: bool
    serve: Union[UnaryServe, StreamServe]
    route_for: Callable[[Message, ProvidersConfig], ModelRoute | None]
    """Which of the user's models answers this request; None: pass it to Cursor byte for byte."""
    may_answer: Callable[[ProvidersConfig], bool]
    """Cheap check at the request headers: False means the call surely passes upstream (it is then
    streamed through, never buffered); True means the body is read and `route_for` decides."""
