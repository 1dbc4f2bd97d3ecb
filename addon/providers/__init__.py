"""Provider adapters by wire dialect, and the one place that picks one for a route's `kind`.

    adapter = adapter_for(route.kind)
    async with contextlib.aclosing(stream_model(client, adapter, request)) as events: ...

Each adapter is a pure request builder plus a pure stream fold (see base.py); io.py is the only IO.
The fill-in-the-middle kinds (`openai_completions`, `mistral_fim`: Tab only) have their own request
shape and fold in openai_completions.py, streamed by the same io.py.
"""

from __future__ import annotations

from ..wire.errors import ConfigError
from . import anthropic, openai_chat, openai_completions, openai_responses
from .base import Adapter

ADAPTERS: dict[str, Adapter] = {
    m.KIND: Adapter(kind=m.KIND, build_request=m.build_request, new_fold=m.Fold)
    for m in (openai_chat, openai_responses, anthropic)
}


def adapter_for(kind: str) -> Adapter:
    """The chat dialect of a kind; a fill-in-the-middle kind cannot hold a conversation."""
    try:
        return ADAPTERS[kind]
    except KeyError:
        if kind in openai_completions.KINDS:
            raise ConfigError(f"A {kind} model completes code for Tab (fill-in-the-middle); it cannot run the "
                              "agent or write summaries: use a chat model there.") from None
        raise ConfigError(
            f"Unknown provider kind {kind!r}; expected one of: {', '.join(sorted(ADAPTERS))}."
        ) from None


__all__ = ["ADAPTERS", "Adapter", "adapter_for"]
