"""What the services of Cursor's other AI calls share: which model answers a feature, and how request
text is cut to a size small fast models take (a huge diff would make a 10 s call slow, or not fit)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from google.protobuf.message import Message

from ..providers.config import ModelRoute, ProvidersConfig
from byok.proto import features_pb2 as fpb


def configured(feature: str) -> dict[str, Callable]:
    """`route_for` and `may_answer` (OneShot keywords) of a feature that `[features]` names a model
    for (DESIGN §9): its own entry or `default`; none passes the call to Cursor byte for byte."""

    def route_for(_request: Message, config: ProvidersConfig) -> ModelRoute | None:
        return config.feature_route(feature)

    def may_answer(config: ProvidersConfig) -> bool:
        return config.feature_route(feature) is not None

    return {"route_for": route_for, "may_answer": may_answer}


def clip(text: str, limit: int, what: str = "characters") -> str:
    """`text` cut to `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit} more {what} left out]"


def clip_all(texts: Iterable[str], limit: int, *, separator: str = "\n") -> str:
    """Texts joined until `limit` characters; the rest is counted, not sent."""
    out: list[str] = []
    used = 0
    items = [t for t in texts if t.strip()]
    for i, text in enumerate(items):
        room = limit - used
        if room <= 0:
            out.append(f"[... {len(items) - i} more left out]")
            break
        piece = clip(text, room)
        out.append(piece)
        used += len(piece) + len(separator)
    return separator.join(out)


def explicit_context(context: fpb.ExplicitContext, limit: int = 4_000) -> str:
    """The user's rules for AI (Cursor's explicit context and its always-applied rules), cut to size."""
    parts = [context.context, context.repo_context]
    parts += [rule.body for rule in context.rules if rule.body and (rule.always_apply or not rule.description)]
    return clip_all(parts, limit, separator="\n\n")
