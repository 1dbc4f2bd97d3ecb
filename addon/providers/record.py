"""The llm_calls row of one provider call, as pure dicts: what is known before the request goes out,
and what its end adds (status, timings, bytes, usage as the provider reported it).

    store.begin_llm_call(call_row(route, request_id=..., purpose="commit_message", ...))
    store.finish_llm_call(row_id, end_row("ok", cycle, metrics))
"""

from __future__ import annotations

from datetime import datetime, timezone

from .base import ModelCycle, Usage
from .config import ModelRoute
from .io import CallMetrics

USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")


def usage_dict(usage: Usage | None) -> dict | None:
    """The fields the provider reported; one it did not report is absent (never an invented 0)."""
    if usage is None:
        return None
    return {k: getattr(usage, k) for k in USAGE_KEYS if getattr(usage, k) is not None}


def call_row(route: ModelRoute, *, request_id: str, model_call_id: str, purpose: str | None,
             call_index: int | None = None, conversation_id: str | None = None, message_count: int = 1,
             tool_count: int = 0, user_id: str | None = None) -> dict:
    """`call_index` None: the store numbers it (`begin_one_shot_call`). `user_id`: a one-shot call's
    proxyauth user (an agent call's user is its run's)."""
    index = {} if call_index is None else {"call_index": call_index}
    user = {} if user_id is None else {"user_id": user_id}
    return {
        "request_id": request_id, "conversation_id": conversation_id, **index,
        "model_call_id": model_call_id, "provider": route.provider, "provider_kind": route.kind,
        "model_public_id": route.public_id, "model": route.model_id,
        "started_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        "message_count": message_count, "tool_count": tool_count, "purpose": purpose, **user,
    }


def end_row(status: str, cycle: ModelCycle, metrics: CallMetrics, *, error: str | None = None,
            finish_reason: str | None = None) -> dict:
    usage = usage_dict(cycle.usage) or {}
    return {
        "status": status, "error": error,
        "finish_reason": finish_reason or (cycle.done.reason if cycle.done else None),
        "ttfb_ms": ms(metrics.ttfb_s), "ttft_ms": ms(metrics.ttft_s), "total_ms": ms(metrics.total_s),
        "request_bytes": metrics.request_bytes, "response_bytes": metrics.response_bytes,
        **{k: usage.get(k) for k in USAGE_KEYS},
    }


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)
