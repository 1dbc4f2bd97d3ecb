"""One provider call of a one-shot service: a system prompt and one user message in, the answer's
text out, no tools. Its llm_calls row (purpose = the feature) is written before the request goes out
and finished whatever happens.

    text = await answer(Ask("commit_message", system, user), ctx, shape=trim, what="commit message")
    async with contextlib.aclosing(ProviderCall(ask, ctx).deltas()) as deltas:  # streaming services
        async for text in deltas: ...

`answer` keeps the client's deadline (`ctx.deadline_s`, from `connect-timeout-ms`): a call that would
outlast it ends a little before with `DeadlineExceeded`, which the client still reads, instead of the
client giving up on a call that then runs on. A model that answers with a tool call, or with nothing
usable, is a ProviderError like any other provider failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from ..providers import adapter_for
from ..providers.base import ModelCycle, ModelRequest, TextDelta, ToolCallStart
from ..providers.io import CallMetrics, stream_http
from ..providers.record import call_row, end_row
from ..providers.transcript import TextPart, UserItem
from ..wire.errors import ConfigError, DeadlineExceeded, ProviderError
from .call import CallContext


@dataclass(frozen=True)
class Ask:
    """What one call asks of the model."""

    purpose: str
    """The llm_calls purpose: `commit_message`, `branch_name`, `chat_title`, `terminal`, `cmd_k`."""
    system: str
    user: str
    conversation_id: str | None = None
    """The Cursor conversation the call belongs to, when the request names one (its llm_calls row)."""


def deadline_budget(deadline_s: float) -> float:
    """How long a call may take when the client gives up after `deadline_s`: its answer must still
    reach the client, so it ends up to a second early (a tenth of a short deadline)."""
    return max(deadline_s - min(1.0, deadline_s / 10), 0.0)


class ProviderCall:
    def __init__(self, ask: Ask, ctx: CallContext) -> None:
        self.ask = ask
        self.ctx = ctx
        self.row_id: int | None = None
        self.cycle = ModelCycle()
        self.metrics = CallMetrics()

    async def deltas(self) -> AsyncIterator[str]:
        """The answer's text as it streams (thinking is not part of it). Raises ProviderError or
        ConfigError; cancellation closes the provider request."""
        ctx, route = self.ctx, self.ctx.route
        self.row_id = await ctx.store.begin_one_shot_call(call_row(
            route, request_id=ctx.request_id, model_call_id=f"{self.ask.purpose}-{uuid.uuid4()}",
            purpose=self.ask.purpose, conversation_id=self.ask.conversation_id, user_id=ctx.user))
        try:
            route.require_ready()
            adapter = adapter_for(route.kind)
            request = ModelRequest(route=route, system=self.ask.system,
                                   items=(UserItem((TextPart(self.ask.user),), wire_id=f"assist:{self.ask.purpose}"),))
            http_request = adapter.build_request(request)
            async with contextlib.aclosing(stream_http(
                ctx.http, http_request, adapter.new_fold(route.provider), provider=route.provider,
                model=route.model_id, metrics=self.metrics, cycle=self.cycle, limits=ctx.limits,
            )) as events:
                async for event in events:
                    if isinstance(event, ToolCallStart):
                        raise ProviderError(f"{route.provider}: model {route.model_id!r} called a tool "
                                            f"({event.name}); this call offers none", retryable=True)
                    if isinstance(event, TextDelta) and event.text:
                        yield event.text
        except (ProviderError, ConfigError) as e:
            await self.finish("error", e.detail if isinstance(e, ProviderError) else e.message)
            raise
        except (asyncio.CancelledError, GeneratorExit):
            await asyncio.shield(self.finish("canceled"))
            raise
        await self.finish("ok")

    async def finish(self, status: str, error: str | None = None) -> None:
        if self.row_id is not None:
            await self.ctx.store.finish_llm_call(self.row_id, end_row(status, self.cycle, self.metrics, error=error))


async def answer(ask: Ask, ctx: CallContext, *, shape: Callable[[str], str], what: str) -> str:
    """The whole answer, within the client's deadline when it sent one, passed through `shape` (the
    feature's trimming); an answer that shapes to nothing is a ProviderError naming `what`."""
    call = ProviderCall(ask, ctx)
    text = await _collect(call, ask, ctx)
    shaped = shape(text)
    if not shaped:
        error = ProviderError(f"{ctx.route.provider}: model {ctx.route.model_id!r} returned no usable {what}"
                              f" (its answer: {text[:200]!r})", retryable=True, title="Provider Error")
        await call.finish("error", error.message)
        raise error
    return shaped


async def _collect(call: ProviderCall, ask: Ask, ctx: CallContext) -> str:

    async def collect() -> str:
        async with contextlib.aclosing(call.deltas()) as deltas:
            return "".join([text async for text in deltas])

    if ctx.deadline_s is None:
        return await collect()
    try:
        async with asyncio.timeout(deadline_budget(ctx.deadline_s)):
            return await collect()
    except TimeoutError:
        error = DeadlineExceeded(
            f"{ctx.route.provider}: model {ctx.route.model_id!r} did not answer within the client's deadline "
            f"of {ctx.deadline_s:g} s ({ask.purpose}); a faster model for this feature helps ([features] in "
            "the providers file)")
        await call.finish("error", error.message)
        raise error from None
