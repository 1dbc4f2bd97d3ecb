"""Cmd-K on the user's models: `CmdKService/StreamCmdK` (the editor) and `StreamTerminalCmdK` (the
terminal), answered here when `cmd_k_options.model_details.model_name` names one of the user's models
(they are offered with `supports_cmd_k = true`, addon/models.py). PROTOCOL 11.2.

    StreamCmdKRequest{context_items=1 repeated PotentiallyCachedContextItem, cmd_k_options=2, ...}
      -> stream StreamCmdKResponseContextWrapped{real_response=1 | context_status_update=2 | missing_context_items=3}

The frames (FF facts; the order and line numbers as a peer's tests and Cursor's client code use them):
- an item sent only as `context_item_hash` is one this process never saw (it keeps no context cache):
  the answer is `missing_context_items` with those hashes and a clean end-stream, no model call; the
  client is expected to send the request again with the items in full;
- an edit of the selection: `edit_start{start_line_number, edit_id, max_end_line_number_exclusive,
  file_path}` at once, then `edit_stream{text}` with whole lines of the replacement as the model writes
  them (fences and lead-ins trimmed, trim.FenceFilter), then `edit_end{end_line_number_exclusive}`;
  lines are 1-based, the end is the selection's start plus its line count;
- a question (`chat_mode`, or no selection at all): `chat{text}` frames;
- the terminal: one `terminal_command{partial_command}` with the whole command line, or `chat{text}`
  frames in chat mode.
While the model is silent, an empty `edit_stream` / `chat` frame goes out every `HEARTBEAT_S` (one peer
saw the client drop an idle Cmd-K stream after about 10 s). A provider failure ends the stream with a
Connect error carrying ErrorDetails, never a silent end.

Not confirmed against a real Cursor (docs/features.md): the hash handshake, whether a request with no
`cmd_k_selection` item means a question or an insertion at the cursor (answered as a question here),
whether `partial_command` is cumulative or a delta (one frame holds the whole command, right either
way), and the status frames' effect on the client (none is sent).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from dataclasses import dataclass

from byok.proto import features_pb2 as fpb

from ..providers.config import ModelRoute, ProvidersConfig
from ..wire.errors import ProtocolError
from . import trim
from .call import CallContext, OneShot
from .llm import Ask, ProviderCall, answer
from .prompts import PROMPTS
from .shared import clip, clip_all, explicit_context

EDIT_ID = 1
HEARTBEAT_S = 5.0
CONTEXT_CHARS = 12_000
AROUND_CHARS = 8_000
TERMINAL_CHARS = 6_000
ITEM_CHARS = 3_000

Item = fpb.ContextItem


# ---- reading the request -------------------------------------------------------------------------


def missing_hashes(items: Iterable[fpb.PotentiallyCachedContextItem]) -> list[str]:
    """The items the client sent as a hash only: this process keeps no cache, so it lacks them all."""
    return [i.context_item_hash for i in items if i.WhichOneof("item") == "context_item_hash"]


def full_items(items: Iterable[fpb.PotentiallyCachedContextItem]) -> list[Item]:
    return [i.context_item for i in items if i.WhichOneof("item") == "context_item"]


def _queries(history: Item.CmdKQueryHistory | Item.TerminalCmdKQueryHistory, limit: int = 8) -> list[str]:
    """Earlier instructions of the session, oldest first (each history item nests the one before)."""
    out: list[str] = []
    while history.query.query and len(out) < limit:
        out.append(history.query.query.strip())
        if not history.HasField("query_history"):
            break
        history = history.query_history
    return out[::-1]


def _item_text(item: Item) -> str | None:
    """Context worth showing the model, per item kind; None for kinds read elsewhere or not used."""
    kind = item.WhichOneof("item")
    value = getattr(item, kind) if kind else None
    match kind:
        case "file_chunk":
            return f"{value.relative_workspace_path} (from line {value.start_line_number}):\n{value.chunk_contents}"
        case "outline_chunk":
            return f"Outline of {value.relative_workspace_path}:\n{value.contents}"
        case "go_to_definition_result":
            chunk = value.definition_chunk
            return f"Definition of `{value.line.strip()}` in {chunk.relative_workspace_path}:\n{chunk.chunk_contents}"
        case "documentation_chunk":
            return f"Documentation {value.doc_name} ({value.page_url}):\n{value.documentation_chunk}"
        case "lints":
            problems = "\n".join(f"- {lint.message}" for lint in value.lints)
            return f"Problems reported in {value.relative_workspace_path}:\n{problems}" if problems else None
        case "custom_instructions":
            return f"Instructions: {value.instructions}" if value.instructions.strip() else None
        case "project_rule":
            return f"Rule {value.name}:\n{value.body}" if value.body.strip() else None
        case "chat_history":
            return f"Earlier chat:\nUser: {value.user_message}\nAssistant: {value.assistant_response}"
        case "commit_note_chunk":
            return f"Commit note: {value.note}" if value.note.strip() else None
        case "notebook_cell_output":
            return f"Output of cell {value.cell_number} in {value.relative_workspace_path}:\n{value.cell_output}"
        case "cmd_k_query_history" | "terminal_cmd_k_query_history":
            earlier = _queries(value)
            return "Earlier instructions in this session:\n" + "\n".join(f"- {q}" for q in earlier) if earlier else None
    return None


def context_text(request: fpb.StreamCmdKRequest | fpb.StreamTerminalCmdKRequest, items: list[Item]) -> str:
    parts = [explicit_context(request.legacy_context.explicit_context)]
    if isinstance(request, fpb.StreamCmdKRequest):
        parts += [f"Rule {rule.name}:\n{rule.body}" for rule in request.rules if rule.body.strip()]
    parts += [clip(text, ITEM_CHARS) for text in map(_item_text, items) if text]
    return clip_all(parts, CONTEXT_CHARS, separator="\n\n")


@dataclass(frozen=True)
class EditorAsk:
    """What a StreamCmdK request asks, read from its context items."""

    query: str
    file: str
    selection: tuple[str, ...] | None
    """The selected lines; None when the request carries no selection item."""
    start_line: int
    """1-based line of the first selected line (of the insertion point, for an empty selection)."""
    before: str
    after: str
    context: str
    chat: bool

    @property
    def end_line_exclusive(self) -> int:
        return self.start_line + len(self.selection or ())


def read_editor(request: fpb.StreamCmdKRequest) -> EditorAsk:
    items = full_items(request.context_items)
    query = next((i.cmd_k_query.query.strip() for i in reversed(items) if i.WhichOneof("item") == "cmd_k_query"), "")
    if not query:
        raise ProtocolError("StreamCmdK without a cmd_k_query context item: there is no instruction to follow")
    selection = next((i.cmd_k_selection for i in reversed(items) if i.WhichOneof("item") == "cmd_k_selection"), None)
    immediate = next((i.cmd_k_immediate_context for i in reversed(items)
                      if i.WhichOneof("item") == "cmd_k_immediate_context"), None)
    start = max(selection.start_line_number, 1) if selection is not None else 1
    lines = tuple(selection.lines) if selection is not None else None
    end = start + len(lines or ())
    around = sorted(immediate.lines, key=lambda line: line.line_number) if immediate is not None else []
    before = "\n".join(line.line for line in around if line.line_number < start)
    after = "\n".join(line.line for line in around if line.line_number >= end)
    return EditorAsk(
        query=query,
        file=(immediate.relative_workspace_path if immediate is not None else "") or "(file name not sent)",
        selection=lines, start_line=start,
        before=before[-AROUND_CHARS:], after=after[:AROUND_CHARS],
        context=context_text(request, items),
        chat=request.cmd_k_options.chat_mode or lines is None,
    )


def editor_prompt(editor: EditorAsk) -> Ask:
    selection = "\n".join(editor.selection or ())
    if editor.chat:
        where = f"Selected in {editor.file}" if selection else "Code"
        system, user = PROMPTS["cmd_k_chat"].render(
            QUERY=editor.query, WHERE=where, SELECTION=selection or editor.before[-AROUND_CHARS // 2:],
            CONTEXT=editor.context)
    else:
        system, user = PROMPTS["cmd_k_edit"].render(
            QUERY=editor.query, FILE=editor.file, BEFORE=editor.before, SELECTION=selection, AFTER=editor.after,
            CONTEXT=editor.context)
    return Ask("cmd_k", system, user)


@dataclass(frozen=True)
class TerminalAsk:
    query: str
    terminal: str
    context: str
    chat: bool


def read_terminal(request: fpb.StreamTerminalCmdKRequest) -> TerminalAsk:
    items = full_items(request.context_items)
    query = next((i.terminal_cmd_k_query.query.strip() for i in reversed(items)
                  if i.WhichOneof("item") == "terminal_cmd_k_query"), "")
    if not query:
        raise ProtocolError("StreamTerminalCmdK without a terminal_cmd_k_query context item: there is nothing to do")
    shown = []
    for item in items:
        if item.WhichOneof("item") == "terminal_history":
            history = item.terminal_history
            cwd = history.cwd_full or history.cwd_relative_workspace_path
            shown.append((f"(working directory: {cwd})\n" if cwd else "") + history.history)
    terminal = "\n".join(shown)
    return TerminalAsk(query=query, terminal=terminal[-TERMINAL_CHARS:], context=context_text(request, items),
                       chat=request.cmd_k_options.chat_mode)


def terminal_prompt(terminal: TerminalAsk) -> Ask:
    if terminal.chat:
        system, user = PROMPTS["cmd_k_chat"].render(QUERY=terminal.query, WHERE="The terminal",
                                                    SELECTION=terminal.terminal, CONTEXT=terminal.context)
    else:
        system, user = PROMPTS["terminal_cmd_k"].render(QUERY=terminal.query, TERMINAL=terminal.terminal,
                                                        CONTEXT=terminal.context)
    return Ask("cmd_k", system, user)


# ---- answering ------------------------------------------------------------------------------------


def _edit(**response) -> fpb.StreamCmdKResponseContextWrapped:
    return fpb.StreamCmdKResponseContextWrapped(real_response=fpb.StreamCmdKResponse(**response))


def _terminal(**response) -> fpb.StreamTerminalCmdKResponseContextWrapped:
    return fpb.StreamTerminalCmdKResponseContextWrapped(real_response=fpb.StreamTerminalCmdKResponse(**response))


async def with_heartbeats(deltas: AsyncGenerator[str, None], every_s: float) -> AsyncIterator[str | None]:
    """The texts of `deltas`, and None each time `every_s` pass without one."""
    pending: asyncio.Future | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(deltas))
            done, _ = await asyncio.wait({pending}, timeout=every_s)
            if not done:
                yield None
                continue
            step, pending = pending, None
            try:
                text = step.result()
            except StopAsyncIteration:
                return
            yield text
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending
        await deltas.aclose()  # a consumer that stopped early closes the provider call now, not at GC


def _missing(request: fpb.StreamCmdKRequest | fpb.StreamTerminalCmdKRequest, wrapped: type):
    """The answer asking for the items sent only as hashes, or None when every item came in full."""
    missing = missing_hashes(request.context_items)
    return wrapped(missing_context_items=fpb.MissingContextItems(missing_context_item_hashes=missing)) \
        if missing else None


async def _chat(call: ProviderCall, frame) -> AsyncIterator:
    """The model's answer as chat frames as it streams (an empty one while the model is silent)."""
    async with contextlib.aclosing(with_heartbeats(call.deltas(), HEARTBEAT_S)) as texts:
        async for text in texts:
            yield frame(text or "")


async def stream_cmd_k(request: fpb.StreamCmdKRequest,
                       ctx: CallContext) -> AsyncIterator[fpb.StreamCmdKResponseContextWrapped]:
    if (ask_again := _missing(request, fpb.StreamCmdKResponseContextWrapped)) is not None:
        yield ask_again
        return
    editor = read_editor(request)
    call = ProviderCall(editor_prompt(editor), ctx)
    if editor.chat:
        async for frame in _chat(call, lambda text: _edit(chat=fpb.StreamCmdKResponse.Chat(text=text))):
            yield frame
        return
    file_path, end = editor.file, editor.end_line_exclusive

    def stream(text: str) -> fpb.StreamCmdKResponseContextWrapped:
        return _edit(edit_stream=fpb.StreamCmdKResponse.EditStream(text=text, edit_id=EDIT_ID, file_path=file_path))

    yield _edit(edit_start=fpb.StreamCmdKResponse.EditStart(
        start_line_number=editor.start_line, edit_id=EDIT_ID, max_end_line_number_exclusive=end, file_path=file_path))
    lines = trim.FenceFilter()
    async with contextlib.aclosing(with_heartbeats(call.deltas(), HEARTBEAT_S)) as texts:
        async for text in texts:
            out = lines.feed(text) if text is not None else ""
            if out or text is None:
                yield stream(out)
    if rest := lines.finish():
        yield stream(rest)
    yield _edit(edit_end=fpb.StreamCmdKResponse.EditEnd(end_line_number_exclusive=end, edit_id=EDIT_ID,
                                                        file_path=file_path))


async def stream_terminal_cmd_k(request: fpb.StreamTerminalCmdKRequest,
                                ctx: CallContext) -> AsyncIterator[fpb.StreamTerminalCmdKResponseContextWrapped]:
    if (ask_again := _missing(request, fpb.StreamTerminalCmdKResponseContextWrapped)) is not None:
        yield ask_again
        return
    terminal = read_terminal(request)
    if terminal.chat:
        call = ProviderCall(terminal_prompt(terminal), ctx)
        async for frame in _chat(call, lambda text: _terminal(chat=fpb.StreamTerminalCmdKResponse.Chat(text=text))):
            yield frame
        return
    command = await answer(terminal_prompt(terminal), ctx, shape=trim.command, what="command")
    yield _terminal(terminal_command=fpb.StreamTerminalCmdKResponse.TerminalCommand(partial_command=command))


# ---- which calls are ours -------------------------------------------------------------------------


def named_model(request: fpb.StreamCmdKRequest | fpb.StreamTerminalCmdKRequest,
                config: ProvidersConfig) -> ModelRoute | None:
    """The user's model the request names (by the public id the model list gave it), or None: Cmd-K
    on Cursor's own models passes to Cursor byte for byte."""
    name = request.cmd_k_options.model_details.model_name
    return config.lookup(name) if name else None


def any_user_model(config: ProvidersConfig) -> bool:
    return bool(config.models)


SERVICES = (
    OneShot(path="/aiserver.v1.CmdKService/StreamCmdK", feature="cmd_k", request_type=fpb.StreamCmdKRequest,
            response_type=fpb.StreamCmdKResponseContextWrapped, streaming=True, serve=stream_cmd_k,
            route_for=named_model, may_answer=any_user_model),
    OneShot(path="/aiserver.v1.CmdKService/StreamTerminalCmdK", feature="cmd_k",
            request_type=fpb.StreamTerminalCmdKRequest, response_type=fpb.StreamTerminalCmdKResponseContextWrapped,
            streaming=True, serve=stream_terminal_cmd_k, route_for=named_model, may_answer=any_user_model),
)
