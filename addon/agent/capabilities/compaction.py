"""Context compaction: a long conversation is summarized before it outgrows the model's window.

    before a provider call:  prompt estimate > threshold            -> compact, then call
    a call fails:            the provider says the context is full  -> compact once, call again
    summarize_action (/summarize)                                    -> compact everything, end the run

The estimate is the provider's last reported prompt (input tokens, plus cache reads and writes on
Anthropic, which reports them apart) and its output, plus a per-character estimate of what history
gained since. The threshold is `compact_at` x `context_tokens`, and never more than the window minus
`max_output_tokens` (the provider refuses a prompt that leaves no room for the answer). A model
without `context_tokens` is only compacted when the provider reports an overflow.

Compacting: one tool-less call to the model (or its `summary_model`) with the older part of the
provider view written out as a transcript, and the reply stored as a new `summary` message. History
stays append-only: from then on the provider sees [system, the current user turn's runtime message,
the summary, the recent tail verbatim, whatever follows] (`history.view`), a stable prefix again.
The client sees summary_started, summary (the whole text, once), the compacted checkpoint (summary,
summary_archive, self_summary_count), then summary_completed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import jinja2

from byok.prompt.assets import ROOT as PROMPT_ROOT
from byok.proto import agent_pb2 as apb
from byok.store import NewMessage

from .. import history
from ...providers.config import ModelRoute
from ..cursor import projection as proj
from ..cursor import updates
from ...wire.errors import ConfigError, ProviderError, RunError
from ..model_call import USAGE_KEYS, add_usage, usage_dict
from ...providers import adapter_for
from ...providers.base import ModelCycle, ModelRequest
from ...providers.io import CallMetrics, stream_http
from ...providers.transcript import AssistantItem, ImagePart, TextPart, ToolResultItem, UserItem
from ..cursor.tokens import message_estimate
from ..turn_base import TurnHooks, TurnState

log = logging.getLogger("byok.compaction")

TAIL_SHARE = 0.25
"""How much of the threshold the recent messages kept verbatim may take (estimated tokens)."""
RESULT_CHARS = 6000
"""A tool result longer than this reaches the summary request as its head and tail only."""
TEXT_CHARS = 20000
"""The same for any other single message text."""


# ---- prompts ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prompts:
    system: str
    request: jinja2.Template
    summary: jinja2.Template

    @classmethod
    def load(cls) -> "Prompts":
        """prompt/compaction/: loaded once at import, so a broken file stops start-up, named."""
        folder = PROMPT_ROOT / "compaction"
        env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False,
                                 trim_blocks=True, lstrip_blocks=True, autoescape=False)
        system = (folder / "prompt.md").read_text(encoding="utf-8").strip()
        request = env.from_string((folder / "request.md.j2").read_text(encoding="utf-8"))
        summary = env.from_string((folder / "summary.md.j2").read_text(encoding="utf-8"))
        if "{{" in system:
            raise ValueError(f"{folder / 'prompt.md'}: the summary system prompt takes no placeholders")
        for name, template, probe in (("request.md.j2", request, {"TRANSCRIPT": "\0T", "KEPT": ""}),
                                      ("summary.md.j2", summary, {"SUMMARY": "\0S"})):
            if "\0" not in template.render(**probe):
                raise ValueError(f"{folder / name}: the template must show {', '.join(probe)}")
        return cls(system, request, summary)


PROMPTS = Prompts.load()


# ---- how full is the context --------------------------------------------------------------------


@dataclass(frozen=True)
class Threshold:
    """When a prompt is too big to send as it is."""

    context_tokens: int | None
    compact_at: float = 0.8
    max_output_tokens: int | None = None

    @classmethod
    def of(cls, route: ModelRoute) -> "Threshold":
        return cls(route.context_tokens, route.compact_at, route.max_output_tokens)

    @property
    def limit(self) -> int | None:
        """Largest prompt sent without compacting first; None = never compact ahead of time."""
        if not self.context_tokens:
            return None
        limit = int(self.context_tokens * self.compact_at)
        if self.max_output_tokens and self.max_output_tokens < self.context_tokens:
            limit = min(limit, self.context_tokens - self.max_output_tokens)
        return limit

    def exceeded(self, prompt_tokens: int) -> bool:
        limit = self.limit
        return limit is not None and prompt_tokens > limit

    def tail_budget(self, prompt_tokens: int) -> int:
        """Estimated tokens of recent history kept verbatim by a compaction."""
        return int(TAIL_SHARE * (self.limit if self.limit is not None else prompt_tokens))


def prompt_tokens(messages: Sequence, *, system_prompt: str, tools: Sequence, blobs=None) -> int:
    """The next prompt's size after a whole history (a turn asks its warm history: Projector.prompt_tokens)."""
    return proj.Projector(blobs).extend(messages).prompt_tokens(system_prompt, tools)


# ---- what to keep, what to summarize --------------------------------------------------------------


def units(messages: Sequence) -> list[list]:
    """Messages in groups that must stay together: a tool round's pairs form one group."""
    out: list[list] = []
    for m in messages:
        rid = m.payload.get("tool_round_id")
        if rid is not None and out and out[-1][0].payload.get("tool_round_id") == rid:
            out[-1].append(m)
        else:
            out.append([m])
    return out


@dataclass(frozen=True)
class Plan:
    context: object | None
    """The current user turn's runtime message, kept verbatim before the summary (None = none)."""
    summarized: list
    """The messages the summary replaces, in view order (the context among them, if it was)."""
    tail: list
    """The recent messages kept verbatim after the summary."""


def plan(seen: Sequence, *, tail_budget: int, keep_context: bool = True, blobs=None) -> Plan | None:
    """Split the provider view. The tail is the longest run of whole groups at the end that fits
    the budget, never an earlier summary, and never everything; None = nothing worth summarizing."""
    groups = units(seen)
    context = None
    if keep_context:
        context = next((m for m in reversed(seen) if m.payload["kind"] == "runtime" and m.payload.get("turn")), None)
    kept, budget = 0, tail_budget
    for group in reversed(groups):
        cost = sum(message_estimate(m, blobs) for m in group)
        if cost > budget or any(m.payload["kind"] == "summary" for m in group):
            break
        kept, budget = kept + 1, budget - cost

    def worth(summarized: list) -> bool:
        return any(m is not context and m.payload["kind"] != "summary" for m in summarized)

    while True:
        summarized = [m for g in groups[:len(groups) - kept] for m in g]
        if worth(summarized) or kept == 0:
            break
        kept -= 1
    if not worth(summarized):
        return None
    tail = [m for g in groups[len(groups) - kept:] for m in g] if kept else []
    if context is not None and context not in summarized:
        context = None  # it is in the tail, where it stays in place
    return Plan(context, summarized, tail)


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 3
    return f"{text[:head]}\n[... {len(text) - head - tail} characters left out ...]\n{text[-tail:]}"


def render_transcript(items: Sequence) -> str:
    """The summarized part as plain text: dialect-neutral (any summary_model can read it), without
    provider replay state, with very long tool output clipped."""
    out: list[str] = []
    for item in items:
        if isinstance(item, UserItem):
            text = "".join(p.text for p in item.parts if isinstance(p, TextPart))
            images = sum(1 for p in item.parts if isinstance(p, ImagePart))
            note = f"\n[{images} image(s) attached]" if images else ""
            out.append(f"[user]\n{_clip(text, TEXT_CHARS)}{note}")
        elif isinstance(item, AssistantItem):
            lines = [f"[assistant]\n{_clip(item.text, TEXT_CHARS)}" if item.text else "[assistant]"]
            lines += [f"[tool call {c.name} id={c.call_id}] {_clip(c.arguments, TEXT_CHARS)}" for c in item.tool_calls]
            out.append("\n".join(lines))
        elif isinstance(item, ToolResultItem):
            label = "tool error" if item.is_error else "tool result"
            out.append(f"[{label} {item.name} id={item.call_id}]\n{_clip(item.content, RESULT_CHARS)}")
    return "\n\n".join(out)


# ---- the capability ---------------------------------------------------------------------------------


class Compaction(TurnHooks):
    """One turn's compaction: ahead of a call that would not fit, and once after an overflow."""

    def __init__(self, turn: TurnState) -> None:
        self.turn = turn
        self.retried_overflow = False

    async def before_model_call(self, turn: TurnState) -> None:
        threshold = Threshold.of(turn.route)
        if threshold.limit is None:
            return
        size = turn.history.prompt_tokens(turn.system_prompt, turn.tools)
        if threshold.exceeded(size):
            log.info("[%s] prompt ~%d tokens > %d (%g of %d): compacting", turn.run.request_id, size,
                     threshold.limit, threshold.compact_at, threshold.context_tokens)
            await self.compact(tail_budget=threshold.tail_budget(size))

    async def on_call_failed(self, turn: TurnState, error: RunError) -> bool:
        if not isinstance(error, ProviderError) or error.kind != "context_length" or self.retried_overflow:
            return False
        self.retried_overflow = True
        size = turn.history.prompt_tokens(turn.system_prompt, turn.tools)
        log.info("[%s] the provider reports the context is full: compacting once and retrying",
                 turn.run.request_id)
        return await self.compact(tail_budget=Threshold.of(turn.route).tail_budget(size))

    async def after_round(self, turn: TurnState) -> None:
        self.retried_overflow = False  # a call went through: a later overflow gets its own retry

    async def after_turn(self, turn: TurnState) -> bool:
        self.retried_overflow = False
        return False

    async def summarize(self, turn: TurnState) -> bool:
        """`summarize_action` (Cursor's /summarize): compact the whole provider view now, and end the
        run like a turn without a model answer: turn_ended (the summary call's usage), then the
        compacted checkpoint twice. No new turn, no text, no token_delta."""
        await self.compact(tail_budget=0, keep_context=False)
        turn.run.emit(updates.turn_ended(turn.usage_totals))
        settled = await turn._project()
        await turn._publish(settled, revision=turn.revision)
        turn.run.emit(updates.checkpoint(settled.state))
        return True

    run_actions = {"summarize_action": summarize}

    async def compact(self, *, tail_budget: int, keep_context: bool = True) -> bool:
        """Summarize the older part of the provider view; False when there is nothing to summarize."""
        turn = self.turn
        seen = history.view(await turn.svc.store.messages(turn.revision))  # read once per compaction
        blobs = turn.history.blobs
        split = plan(seen, tail_budget=tail_budget, keep_context=keep_context, blobs=blobs)
        if split is None:
            log.info("[%s] nothing to compact", turn.run.request_id)
            return False
        await turn._initial_checkpoint()  # summary frames follow the run's initial checkpoint
        turn.run.emit(updates.interaction(apb.InteractionUpdate(summary_started=apb.SummaryStartedUpdate())))
        kept = ("The user's current request and the most recent messages stay visible word for word after "
                "your summary; summarize what leads up to them.") if (split.context or split.tail) else ""
        text = PROMPTS.request.render(TRANSCRIPT=render_transcript(history.transcript(split.summarized, blobs)),
                                      KEPT=kept)
        summary, model_call_id = await SummaryCall(turn)(text)
        turn.run.emit(updates.interaction(apb.InteractionUpdate(summary=apb.SummaryUpdate(summary=summary))))
        await self._store(split, summary, model_call_id)
        settled = await turn._project()
        await turn._publish(settled, revision=turn.revision)
        turn.run.emit(updates.interaction(apb.InteractionUpdate(summary_completed=apb.SummaryCompletedUpdate())))
        log.info("[%s] compacted %d messages into a summary of %d characters; %d kept verbatim",
                 turn.run.request_id, len(split.summarized), len(summary), len(split.tail))
        return True

    async def _store(self, split: Plan, summary: str, model_call_id: str) -> None:
        """Append the summary message, with the archive facts of the checkpoint it makes: the root
        blob ids it replaced and how many roots follow it."""
        turn = self.turn
        parts = [TextPart(PROMPTS.summary.render(SUMMARY=summary).strip())]

        def payload(replaced: Sequence[bytes], window_tail: int) -> dict:
            return history.summary_payload(
                parts, wire_id=f"{proj.SUMMARY_WIRE_PREFIX}{model_call_id}", summary=summary,
                context_id=split.context.id if split.context is not None else None,
                tail_from=split.tail[0].id if split.tail else None,
                summarized_roots=replaced, window_tail=window_tail, model_call_id=model_call_id)

        draft = payload((), 0)
        before, roots_after = turn.history.roots_with_summary(draft)
        summary_root = proj.sha256(proj.user_root(UserItem(tuple(parts), wire_id=draft["wire_id"])))
        kept = set(roots_after)
        replaced = [r for r in before if r not in kept]
        window_tail = len(roots_after) - roots_after.index(summary_root) - 1
        await turn._append([NewMessage("user", "runtime", payload(replaced, window_tail),
                                       request_id=turn.run.request_id)])


class SummaryCall:
    """The one provider call that writes a summary: no tools, nothing streamed to the client, its
    own llm_calls row (purpose "summary"), its usage counted in the run's totals."""

    def __init__(self, turn: TurnState) -> None:
        self.turn = turn

    def route(self) -> ModelRoute:
        route = self.turn.route
        if route.summary_model is None:
            return route
        target = self.turn.svc.lookup_model(route.summary_model)
        if target is None:
            raise ConfigError(f"{route.where}: its summary_model is no longer in the providers file")
        return target

    async def __call__(self, text: str) -> tuple[str, str]:
        turn = self.turn
        svc, run = turn.svc, turn.run
        route = self.route()
        route.require_ready()
        request = ModelRequest(route=route, system=PROMPTS.system,
                               items=(UserItem((TextPart(text),), wire_id="compaction:request", transient=True),))
        adapter = adapter_for(route.kind)
        turn.call_index += 1
        model_call_id = svc.ids.new("model-call")
        llm_id = await svc.store.begin_llm_call({
            "request_id": run.request_id, "conversation_id": turn.conversation_id,
            "call_index": turn.call_index, "model_call_id": model_call_id, "provider": route.provider,
            "provider_kind": route.kind, "model_public_id": route.public_id, "model": route.model_id,
            "started_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            "message_count": 1, "tool_count": 0, "purpose": "summary",
        })
        metrics, cycle = CallMetrics(), ModelCycle()

        async def finish(status: str, error: str | None = None) -> None:
            usage = usage_dict(cycle.usage) or {}
            await svc.store.finish_llm_call(llm_id, {
                "status": status, "error": error, "finish_reason": cycle.done.reason if cycle.done else None,
                "ttfb_ms": _ms(metrics.ttfb_s), "ttft_ms": _ms(metrics.ttft_s), "total_ms": _ms(metrics.total_s),
                "request_bytes": metrics.request_bytes, "response_bytes": metrics.response_bytes,
                **{k: usage.get(k) for k in USAGE_KEYS},
            })

        try:
            http_request = adapter.build_request(request)
            async with contextlib.aclosing(
                stream_http(svc.http, http_request, adapter.new_fold(route.provider), provider=route.provider,
                            model=route.model_id, metrics=metrics, cycle=cycle, limits=svc.provider_limits)
            ) as events:
                async for _ in events:
                    pass
        except (ProviderError, ConfigError) as e:
            await finish("error", e.message)
            raise
        except asyncio.CancelledError:
            await asyncio.shield(finish("canceled"))
            raise
        usage = usage_dict(cycle.usage)
        add_usage(turn.usage_totals, usage)
        run.usage = run.usage or {}
        add_usage(run.usage, usage)
        summary = "".join(cycle.text).strip()
        if not summary:
            await finish("error", "empty summary")
            raise ProviderError(f"{route.provider}: the summary call returned no text", title="Provider Error")
        await finish("ok")
        return summary, model_call_id


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)
