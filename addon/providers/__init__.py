"""Provider adapters by wire dialect, and the one place that picks one for a route's `kind`.

    adapter = adapter_for(route.kind)
    async with contextlib.aclosing(stream_model(client, adapter, request)) as events: ...

Each adapter is a pure request builder plus a pure stream fold (see base.py); io.py is the only IO.
"""

from __future__ import annotations

from ..wire.errors import ConfigError
from . import anthropic, openai_chat, openai_responses
from .base import Adapter

ADAPTERS: dict[str, Adapter] = {
    m.KIND: Adapter(kind=m.KIND, build_request=m.build_request, new_fold=m.Fold)
    for m in (openai_chat, openai_responses, anthropic)
}


def adapter_for(kind: str) -> Adapter:
    try:
        return ADAPTERS[kind]
    except KeyError:
        raise ConfigError(
            f"Unknown provider kind {kind!r}; expected one of: {', '.join(sorted(ADAPTERS))}."
        ) from None


__all__ = ["ADAPTERS", "Adapter", "adapter_for"]
