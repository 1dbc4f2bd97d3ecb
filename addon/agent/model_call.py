"""One provider call of a turn: build the request from history, stream it, turn its events into
Cursor's live updates (thinking, text, tool cards, token count), and keep its llm_calls row.

    ModelCall(turn, call_index)() -> CallResult   (raises ProviderError / ConfigError / cancellation)

The llm_calls row is queued on the store thread before the HTTP request goes out (written while
the request travels) and finished whatever happens. Model output streams at once (PROTOCOL 10.4):
it is not a checkpoint, so it never waits for the initial checkpoint's ACKs. The call's end does:
nothing that follows it (a round's checkpoints, turn_ended, an error end-stream) may overtake the
initial checkpoint, so a failed call still leaves the user turn restorable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from datetime import datetime, timezone

from .cards import Cards
from .clock import Clock
from ..providers.config import redact
from .cursor import updates
from ..wire.errors import ConfigError, ProviderError
from ..providers import adapter_for
from ..providers.base import (
    ModelCycle, ModelRequest, TextDelta, ThinkingDelta, ThinkingEnd, ThinkingStart, ToolCallStart, Usage,
)
from ..providers.io import CallMetrics, stream_http
from ..providers.transcript import AssistantItem, TextPart, ToolCall, UserItem
from .turn_base import CallResult, TurnState

USAGE_KEYS = updates.USAGE_FIELDS
CONTINUE_PROMPT = (
    "<system_reminder>The conversation was resumed after an interruption. Continue from where you "
    "left off; if the task is complete, say so briefly.</system_reminder>"
)


def usage_dict(usage: Usage | None) -> dict | None:
    if usage is None:
        return None
    return {k: getattr(usage, k) for k in USAGE_KEYS if getattr(usage, k) is not None}


def add_usage(totals: dict, usage: Mapping | None) -> None:
    """Sum what providers reported; a field no call reported stays absent (never an invented 0)."""
    for key, value in (usage or {}).items():
        if value is not None:
            totals[key] = totals.get(key, 0) + value


def provider_items(turn: TurnState) -> tuple:
    """The transcript this call sends: history, plus a transient continuation prompt when a resumed
    history ends with the model's own answer (never stored)."""
    items = turn.history.transcript()
    if items and isinstance(items[-1], AssistantItem) and not items[-1].tool_calls:
        items = (*items, UserItem((TextPart(CONTINUE_PROMPT),), wire_id="runtime:continue", transient=True))
    return items


class ModelCall:
    def __init__(self, turn: TurnState, call_index: int) -> None:
        self.turn = turn
        self.call_index = call_index
        self.thinking = ThinkingTimer(turn)

    async def __call__(self) -> CallResult:
        turn = self.turn
        svc, run, route = turn.svc, turn.run, turn.route
        items = provider_items(turn)
        tools = (*turn.tools, *turn.dynamic_tools)
        request = ModelRequest(route=route, system=turn.system_prompt, items=items, tools=tools,
                               cache_key=turn.conversation_id)
        adapter = adapter_for(route.kind)
        model_call_id = svc.ids.new("model-call")
        self.llm_row = asyncio.ensure_future(svc.store.begin_llm_call({
            "request_id": run.request_id, "conversation_id": turn.conversation_id,
            "call_index": self.call_index, "model_call_id": model_call_id, "provider": route.provider,
            "provider_kind": route.kind, "model_public_id": route.public_id, "model": route.model_id,
            "started_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            "message_count": len(items), "tool_count": len(tools),
        }))
        cards = Cards(turn, model_call_id)
        self.metrics, self.cycle = CallMetrics(), ModelCycle()
        self.raw = bytearray() if svc.verbose_llm else None
        try:
            http_request = adapter.build_request(request)
            await run.client_listening()
            if svc.verbose_llm:
                body = json.dumps(http_request.body, ensure_ascii=False, sort_keys=True)
                await svc.store.finish_llm_call(await self.llm_row, {"request_body": redact(body, [route])})
            async with contextlib.aclosing(
                stream_http(svc.http, http_request, adapter.new_fold(route.provider), provider=route.provider,
                            model=route.model_id, metrics=self.metrics, cycle=self.cycle, limits=svc.provider_limits,
                            on_raw=self.raw.extend if self.raw is not None else None)
            ) as events:
                async for event in events:
                    self._on_event(event)
                    cards.on_event(event)
            await turn._initial_checkpoint()
        except (ProviderError, ConfigError) as e:
            await self._finish(status="error", error=e.detail if isinstance(e, ProviderError) else e.message)
            await turn._initial_checkpoint()  # a failed call still leaves the user turn restorable
            raise
        except asyncio.CancelledError:
            await asyncio.shield(self._finish(status="canceled"))
            raise
        finally:
            turn._cancel_initial_publish()
        self.thinking.end()
        usage = usage_dict(self.cycle.usage)
        add_usage(turn.usage_totals, usage)
        run.usage = run.usage or {}
        add_usage(run.usage, usage)  # the whole run (a run may hold several turns: queued.py)
        await self._finish(status="ok")
        cycle = self.cycle
        item = AssistantItem(
            text="".join(cycle.text),
            thinking="".join(cycle.thinking),
            tool_calls=tuple(ToolCall(c.call_id, c.name, c.arguments, c.index) for _, c in sorted(cards.calls.items())),
            replay=cycle.done.replay if cycle.done else None,
        )
        return CallResult(item, cycle.done, usage, self.thinking.total_ms or None, model_call_id, cards)

    def _on_event(self, event) -> None:
        run, thinking = self.turn.run, self.thinking
        if isinstance(event, ThinkingStart):
            thinking.start()
        elif isinstance(event, ThinkingDelta):
            thinking.start()
            run.emit(updates.thinking_delta(event.text))
        elif isinstance(event, ThinkingEnd):
            thinking.end()
        elif isinstance(event, TextDelta):
            thinking.end()  # thinking_completed goes before the first text or tool event
            run.emit(updates.text_delta(event.text))
        elif isinstance(event, ToolCallStart):
            thinking.end()
        elif isinstance(event, Usage):
            if event.output_tokens is not None:
                run.emit(updates.token_delta(event.output_tokens))

    async def _finish(self, *, status: str, error: str | None = None) -> None:
        usage = usage_dict(self.cycle.usage) or {}
        metrics = self.metrics
        row = {
            "status": status, "error": error,
            "finish_reason": self.cycle.done.reason if self.cycle.done else None,
            "ttfb_ms": _ms(metrics.ttfb_s), "ttft_ms": _ms(metrics.ttft_s), "total_ms": _ms(metrics.total_s),
            "request_bytes": metrics.request_bytes, "response_bytes": metrics.response_bytes,
            **{k: usage.get(k) for k in USAGE_KEYS},
        }
        if self.raw is not None:  # verbose mode: the raw SSE, with any echo of the key removed
            row["raw_response"] = redact(bytes(self.raw).decode("utf-8", "replace"), [self.turn.route]).encode()
        await self.turn.svc.store.finish_llm_call(await self.llm_row, row)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


class ThinkingTimer:
    """Measures thinking segments on the turn's clock and sends thinking_completed when one closes."""

    def __init__(self, turn: TurnState) -> None:
        self._turn = turn
        self._clock: Clock = turn.svc.clock
        self._started: float | None = None
        self.total_ms = 0

    def start(self) -> None:
        if self._started is None:
            self._started = self._clock.monotonic()

    def end(self) -> None:
        if self._started is None:
            return
        ms = max(1, round((self._clock.monotonic() - self._started) * 1000))
        self._started = None
        self.total_ms += ms
        self._turn.run.emit(updates.thinking_completed(ms))
