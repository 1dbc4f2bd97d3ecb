"""Tab (Cursor's code completion, `aiserver.v1.AiService/StreamCpp`) on the `[tab]` model.

    stream_cpp(StreamCppRequest, ctx) -> StreamCppResponse frames

A fill-in-the-middle model (openai_completions, mistral_fim) completes the text at the cursor
(fim.py prompts, tab_trim.py decides where it ends and what may be shown); any other model rewrites
a small window around the cursor (tab_chat.py). Either way the answer is an edit of whole lines
(tab_edit.py), sent in the order the client expects (PROTOCOL 11.1):

    model_info  ->  range_to_replace  ->  text, text, ...  ->  done_stream  ->  end-stream {}

`model_info` comes first in every answer; the range and the first text only once there is text no
rule can take back, so a completion that ends up empty is `model_info, done_stream` (no suggestion)
and a failure before that sends no range at all. Text frames stream as the model writes them: the
first one starts with the cursor line's text before the cursor, the last one ends with the text
after it. A provider failure, a completion cut by the token budget, or the client's deadline
(`connect-timeout-ms`, at most DEADLINE_S) ends the stream with a Connect error with ErrorDetails
(the client drops what it received). `rely_on_filesync` with empty contents is answered with
ErrorDetails FILE_NOT_FOUND, which makes the client send the whole file.

Every call is one llm_calls row (purpose `tab`, written before the request goes out, finished
whatever happens). The client leaving cancels the generator: the provider request closes at once.

The other Tab RPCs (see docs/tab.md) are answered here from nothing when `[tab]` is set: no next
cursor prediction, no Cursor-side context or edit history, fates acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable

from byok.proto import aiserver_pb2 as spb, cpp_pb2 as cpb

from ..providers import adapter_for, openai_completions
from ..providers.base import ModelCycle, ModelRequest, TextDelta
from ..providers.config import FIM_KINDS, TAB_DEFAULT_MAX_LINES, TAB_DEFAULT_MAX_TOKENS, ModelRoute, ProvidersConfig
from ..providers.io import CallMetrics, stream_http
from ..providers.record import call_row, end_row
from ..providers.transcript import TextPart, UserItem
from ..wire.connect import Code, ConnectError
from ..wire.errors import ProviderError, RunError, error_details
from . import fim
from .call import CallContext, OneShot
from .tab_chat import PROMPTS, EditStream, chat_window
from .tab_edit import position_facts, tab_file
from .tab_trim import CompletionFilter, Rules, Truncated

log = logging.getLogger("byok.tab")

AI = "/aiserver.v1.AiService/"
CPP = "/aiserver.v1.CppService/"
STREAM_CPP = AI + "StreamCpp"
DEADLINE_S = 15.0
"""The longest a Tab answer may take, whatever the client's own deadline (PROTOCOL 11.1: ~15 s)."""
PURPOSE = "tab"


class FileNotSynced(RunError):
    """`rely_on_filesync` and no contents: the client resends the whole file on FILE_NOT_FOUND."""

    code = Code.NOT_FOUND

    def to_connect(self) -> ConnectError:
        return ConnectError(self.code, self.message, [error_details(
            spb.ErrorDetails.ERROR_FILE_NOT_FOUND, title="File not synced", detail=self.message, retryable=True)])


class TabDeadline(RunError):
    """The answer was not complete within the client's deadline."""

    code = Code.DEADLINE_EXCEEDED

    def to_connect(self) -> ConnectError:
        return ConnectError(self.code, self.message, [error_details(
            spb.ErrorDetails.ERROR_TIMEOUT, title="Tab timed out", detail=self.message, retryable=True)])


# ---- frames -----------------------------------------------------------------------------------------


def model_info_frame() -> cpb.StreamCppResponse:
    return cpb.StreamCppResponse(model_info=cpb.StreamCppResponse.ModelInfo(
        is_fused_cursor_prediction_model=False, is_multidiff_model=False))


def range_frame(start: int, end: int) -> cpb.StreamCppResponse:
    return cpb.StreamCppResponse(range_to_replace=cpb.LineRange(start_line_number=start, end_line_number_inclusive=end))


def text_frame(text: str) -> cpb.StreamCppResponse:
    return cpb.StreamCppResponse(text=text)


def done_frame() -> cpb.StreamCppResponse:
    return cpb.StreamCppResponse(done_stream=True)


class Answer:
    """The frames of one answer: the range once, before the first text; the cursor line's text
    around the streamed edit; line breaks in the file's own ending."""

    def __init__(self, start: int, end: int, eol: str, before: str = "", after: str = "") -> None:
        self.range = (start, end)
        self.eol = eol
        self.before, self.after = before, after
        self.started = False

    def text(self, piece: str) -> list[cpb.StreamCppResponse]:
        if not piece:
            return []
        piece = piece.replace("\n", self.eol)
        if self.started:
            return [text_frame(piece)]
        self.started = True
        return [range_frame(*self.range), text_frame(self.before + piece)]

    def end(self, piece: str) -> list[cpb.StreamCppResponse]:
        frames = self.text(piece)
        if self.started and self.after:
            frames.append(text_frame(self.after))
        return frames + [done_frame()]


# ---- the llm_calls row ------------------------------------------------------------------------------


class CallRecord:
    """One provider call's llm_calls row: queued before the request goes out, finished whatever happens.
    A store failure is logged and never fails the completion."""

    def __init__(self, ctx: CallContext, route: ModelRoute) -> None:
        self.ctx = ctx
        self.metrics = CallMetrics()
        self.cycle = ModelCycle()
        self._row = asyncio.ensure_future(ctx.store.begin_one_shot_call(call_row(
            route, request_id=ctx.request_id, model_call_id=f"tab-{uuid.uuid4()}", purpose=PURPOSE,
            user_id=ctx.user)))

    async def finish(self, status: str, *, error: str | None = None, finish_reason: str | None = None) -> None:
        try:
            await self.ctx.store.finish_llm_call(await self._row, end_row(
                status, self.cycle, self.metrics, error=error, finish_reason=finish_reason))
        except Exception:
            log.exception("[%s] could not record the Tab call", self.ctx.request_id)


# ---- StreamCpp ------------------------------------------------------------------------------------


def tab_budgets(config: ProvidersConfig | None) -> tuple[int, int]:
    tab = config.tab if config is not None else None
    return (tab.max_tokens, tab.max_lines) if tab is not None else (TAB_DEFAULT_MAX_TOKENS, TAB_DEFAULT_MAX_LINES)


def deadline(ctx: CallContext) -> float:
    client = ctx.deadline_s if ctx.deadline_s and ctx.deadline_s > 0 else DEADLINE_S
    return min(client, DEADLINE_S)


_RECORDING: set[asyncio.Future] = set()


def record_position(store, row: dict) -> None:
    """Queue a `tab_positions` row (cursor-byok verify) on the store thread; a failure is logged."""
    future = asyncio.ensure_future(store.record_tab_position(row))
    _RECORDING.add(future)

    def done(f: asyncio.Future) -> None:
        _RECORDING.discard(f)
        if not f.cancelled() and f.exception() is not None:
            log.warning("[%s] Tab position not recorded: %s", row.get("request_id"), f.exception())

    future.add_done_callback(done)


def position_row(request_id: str, current_file, headers, source: str) -> dict:
    return {**position_facts(current_file), "request_id": request_id, "source": source,
            "ts_ms": time.time_ns() // 1_000_000, "client_version": headers.get("x-cursor-client-version")}


async def stream_cpp(request: cpb.StreamCppRequest, ctx: CallContext) -> AsyncIterator[cpb.StreamCppResponse]:
    current = request.current_file
    if current.rely_on_filesync and not current.contents:
        raise FileNotSynced(f"{current.relative_workspace_path or 'the file'}: no contents (rely_on_filesync); "
                            "send the whole file")
    record_position(ctx.store, position_row(ctx.request_id, current, ctx.headers, "answered"))
    file = tab_file(current)
    route = ctx.route
    route.require_ready()
    until = asyncio.get_running_loop().time() + deadline(ctx)
    yield model_info_frame()
    if route.kind in FIM_KINDS:
        max_tokens, max_lines = tab_budgets(ctx.config)
        rules = Rules.around(file, fim.stop_strings(route), max_lines)
        call = fim.completion_request(route, fim.window(file), max_tokens, single_line=rules.single_line)
        cut = CompletionFilter(rules)
        line = file.range_line(file.cursor_line)
        answer = Answer(line, line, file.eol, before=file.line_before, after=file.line_after)
        http_request, fold = openai_completions.build_request(call), openai_completions.Fold(route.provider)
    else:
        win = chat_window(file, list(request.diff_history))
        adapter = adapter_for(route.kind)
        http_request = adapter.build_request(ModelRequest(
            route=route, system=PROMPTS.system, items=(UserItem((TextPart(win.user),), wire_id="tab:window"),)))
        fold, cut = adapter.new_fold(route.provider), EditStream(win.original)
        answer = Answer(file.range_line(win.first), file.range_line(win.last), file.eol)
    async with contextlib.aclosing(_provider(ctx, http_request, fold, cut, answer, until)) as frames:
        async for batch in frames:
            for frame in batch:
                yield frame


async def _provider(ctx: CallContext, http_request, fold, cut, answer: Answer, until: float
                    ) -> AsyncIterator[list[cpb.StreamCppResponse]]:
    """Stream one provider call through `cut` (CompletionFilter or EditStream) into frames, each
    read from the provider bounded by the deadline `until` (the loop's clock). No yield happens
    inside the timeout: it only ever cancels our own read."""
    route = ctx.route
    record = CallRecord(ctx, route)
    truncated = False
    started = time.monotonic()
    try:
        async with contextlib.aclosing(stream_http(
                ctx.http, http_request, fold, provider=route.provider, model=route.model_id,
                metrics=record.metrics, cycle=record.cycle, limits=ctx.limits)) as events:
            while not cut.stopped:  # a rule ending it: leaving the loop closes the provider request
                try:
                    async with asyncio.timeout_at(until):
                        event = await anext(events)
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    raise TabDeadline(f"no complete Tab answer within {deadline(ctx):g} s from "
                                      f"{route.provider}/{route.model_id}") from None
                except ProviderError as e:
                    if e.kind != "length":
                        raise
                    truncated = True
                    break
                if isinstance(event, TextDelta):
                    frames = answer.text(cut.feed(event.text))
                    if frames:
                        yield frames
        try:
            frames = answer.end(cut.finish(truncated=truncated))
        except Truncated as e:
            raise ProviderError(f"{route.provider}: model {route.model_id!r} reached the Tab token budget "
                                f"([tab] max_tokens) before the completion ended: {e}", retryable=True,
                                kind="length", title="Tab: completion too long") from None
    except RunError as e:
        await record.finish("error", error=getattr(e, "detail", e.message))
        raise
    except (asyncio.CancelledError, GeneratorExit):
        await asyncio.shield(record.finish("canceled"))
        raise
    except BaseException as e:
        await asyncio.shield(record.finish("error", error=f"{type(e).__name__}: {e}"))
        raise
    await record.finish("ok", finish_reason=None if record.cycle.done else "cut")
    log.debug("[%s] Tab answered in %.0f ms by %s/%s", ctx.request_id, (time.monotonic() - started) * 1000,
              route.provider, route.model_id)
    yield frames


# ---- the other Tab RPCs: answered locally while [tab] is set ------------------------------------------


def tab_route(message, config: ProvidersConfig) -> ModelRoute | None:
    return config.tab_route


def tab_on(config: ProvidersConfig) -> bool:
    return config.tab is not None


def _local(answer: Callable[[], object]):
    async def serve(request, ctx: CallContext):
        return answer()
    return serve


async def _record_fate(request: cpb.RecordCppFateRequest, ctx: CallContext) -> cpb.RecordCppFateResponse:
    log.debug("[%s] Tab suggestion %s: %s", ctx.request_id, request.request_id,
              cpb.CppFate.Name(request.fate) if request.fate in cpb.CppFate.values() else request.fate)
    return cpb.RecordCppFateResponse()


async def _no_prediction(request, ctx: CallContext) -> AsyncIterator[cpb.StreamNextCursorPredictionResponse]:
    return
    yield  # an async generator that yields nothing: the stream is just its end


def _service(path: str, request_type, response_type, serve, *, streaming: bool = False) -> OneShot:
    return OneShot(path=path, feature=PURPOSE, request_type=request_type, response_type=response_type,
                   streaming=streaming, serve=serve, route_for=tab_route, may_answer=tab_on)


SERVICES: tuple[OneShot, ...] = (
    _service(STREAM_CPP, cpb.StreamCppRequest, cpb.StreamCppResponse, stream_cpp, streaming=True),
    _service(AI + "StreamNextCursorPrediction", cpb.StreamNextCursorPredictionRequest,
             cpb.StreamNextCursorPredictionResponse, _no_prediction, streaming=True),
    _service(AI + "RefreshTabContext", cpb.RefreshTabContextRequest, cpb.RefreshTabContextResponse,
             _local(cpb.RefreshTabContextResponse)),
    _service(AI + "CppEditHistoryStatus", cpb.CppEditHistoryStatusRequest, cpb.CppEditHistoryStatusResponse,
             _local(lambda: cpb.CppEditHistoryStatusResponse(on=False, only_if_explicit=False))),
    _service(AI + "CppAppend", cpb.CppAppendRequest, cpb.CppAppendResponse,
             _local(lambda: cpb.CppAppendResponse(success=True))),
    _service(AI + "CppEditHistoryAppend", cpb.EditHistoryAppendChangesRequest,
             cpb.EditHistoryAppendChangesResponse, _local(lambda: cpb.EditHistoryAppendChangesResponse(success=True))),
    _service(CPP + "RecordCppFate", cpb.RecordCppFateRequest, cpb.RecordCppFateResponse, _record_fate),
)
"""Tab's one-shot services (byok.assist.SERVICES lists them). CppConfig and CppService/AvailableModels
are the proxy's own (addon/tab_config.py): CppConfig is Cursor's answer with Tab kept on."""
