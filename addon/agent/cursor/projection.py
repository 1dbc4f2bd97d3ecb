"""History -> Cursor checkpoint: the conversation state graph, kept up to date turn by turn.

    ConversationStateStructure (inline in the checkpoint update)
     ├ root_prompt_messages_json[] -> JSON blobs: system, runtime user, assistant, tool (AI-SDK style)
     ├ pending_tool_calls[]           the complete pending assistant JSON while a round is staged
     ├ turns[] -> ConversationTurnStructure{agent_conversation_turn{user_message, steps[], request_id}}
     └ token_details, mode            (every other field is echoed from the client's state)

A `Projector` folds stored messages in one at a time and renders a checkpoint of the history as it
stands (`checkpoint(ctx, pending)`): a warm conversation adds only its new messages, so a turn does
not redo the work of the turns before it. Folding a history in any number of steps gives the same
checkpoint, byte for byte, as folding it at once (`project()`, the cold path). It never touches the
store: the same messages and context give the same blob bytes and ids. A checkpoint names the
blobs the client may lack (`Projection.missing`, children first); the run SETs them and waits for
their ACKs before publishing the state.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field

from byok.proto import agent_pb2 as apb

from . import subagent_state
from .tokens import (
    SECTION_TAGS, PromptSize, breakdown_from_counts, prompt_estimate, section, text_counts, usage_total,
)
from ...wire.errors import ProtocolError
from ..history import Entry, Fold, unb64
from ...providers.transcript import (
    AssistantItem, ImagePart, TextPart, ToolCall, ToolResultItem, ToolSpec, UserItem,
)

Refs = list[tuple[str, int, bytes]]
"""A blob's reference edges: (referencing field, ordinal, child id)."""

SUMMARY_WIRE_PREFIX = "runtime:summary:"
def dumps(obj: object) -> bytes:
    """The one JSON encoding of root blobs: compact, UTF-8, key order as built."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def roots_digest(root_ids: Sequence[bytes]) -> str:
    """Identity of a history as the client holds it: all roots but the system root (which a new
    mode or model may replace without changing the history)."""
    return hashlib.sha256(b"".join(root_ids[1:])).hexdigest()


@dataclass(frozen=True)
class ProjectionContext:
    system_prompt: str
    tools: tuple[ToolSpec, ...]
    base_state: bytes
    """The client's inbound ConversationStateStructure (serialized): fields we do not own are echoed."""
    mode: int
    """agent.v1.AgentMode of this run."""
    max_tokens: int | None = None
    """Context size to report when the client's state has none."""
    dynamic_tools: tuple[ToolSpec, ...] = ()
    """Tools offered after the mode's (MCP tools offered directly): the `mcp` category."""
    parent_tool_call_id: str | None = None
    """A subagent's run: the parent's Task call its progress is filed under (subagent_state.py)."""


@dataclass(frozen=True)
class Pending:
    """The assistant of a staged checkpoint: not in the stable roots yet."""

    item: AssistantItem
    thinking_ms: int | None = None
    usage: dict | None = None
    started_at_ms: int | None = None
    """Set for a tool round: providerOptions.cursor.pendingToolCallStartedAtMs."""
    model_call_id: str | None = None


def pending_json(pending: Pending) -> dict:
    """The inline pending assistant of a staged checkpoint. Besides the assistant itself it carries
    what a resume needs to finish the round exactly as it began (thinking time, usage, the raw
    argument text of each call), under providerOptions.cursorByok."""
    msg = assistant_json(pending.item, pending_started_at_ms=pending.started_at_ms)
    extra: dict = {}
    if pending.thinking_ms:
        extra["thinkingMs"] = pending.thinking_ms
    if pending.usage:
        extra["usage"] = pending.usage
    if pending.model_call_id:
        extra["modelCallId"] = pending.model_call_id
    if pending.item.tool_calls:
        extra["calls"] = [{"index": c.index, "arguments": c.arguments} for c in pending.item.tool_calls]
    if extra:
        msg.setdefault("providerOptions", {}).setdefault("cursorByok", {}).update(extra)
    return msg


def parse_pending(text: str) -> Pending:
    """Read back a pending assistant (ours, or one written by Cursor's backend)."""
    try:
        msg = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProtocolError(f"pending tool call JSON is not valid: {e}") from e
    if not isinstance(msg, dict) or msg.get("role") != "assistant":
        raise ProtocolError("pending tool call JSON is not an assistant message")
    from ..history import parse_root_json

    [item] = parse_root_json(text.encode("utf-8"))
    options = msg.get("providerOptions") or {}
    byok = options.get("cursorByok") or {}
    saved = byok.get("calls") or []
    if saved and len(saved) != len(item.tool_calls):
        raise ProtocolError("pending tool call JSON: call metadata does not match its tool calls")
    calls = tuple(
        ToolCall(c.call_id, c.name, saved[i]["arguments"] if saved else c.arguments,
                 saved[i]["index"] if saved else i)
        for i, c in enumerate(item.tool_calls)
    )
    item = AssistantItem(text=item.text, thinking=item.thinking, tool_calls=calls, replay=byok.get("replay"))
    return Pending(
        item=item,
        thinking_ms=byok.get("thinkingMs"),
        usage=byok.get("usage"),
        started_at_ms=(options.get("cursor") or {}).get("pendingToolCallStartedAtMs"),
        model_call_id=byok.get("modelCallId"),
    )


@dataclass(frozen=True)
class NewBlob:
    """A blob a checkpoint references that the client may not hold yet."""

    blob_id: bytes
    data: bytes | None
    """None: not in memory; the store holds it (a state snapshot stored with its message)."""
    refs: Refs = ()


@dataclass
class Projection:
    """One checkpoint of a history: its state, and the graph of blobs the state references."""

    state: apb.ConversationStateStructure
    roots_digest: str
    last_turn_steps: int
    """Steps in the current (last) turn: the base of UpdateCurrentStep's message_index."""
    graph: "_Graph"

    def top_level_ids(self) -> list[bytes]:
        """The blobs the state references directly: the store's GC roots for this checkpoint (the
        rest is reachable through the blob reference edges). From the lists the checkpoint was built
        from: reading them back out of the message would copy every id."""
        state, graph = self.state, self.graph
        ids = [*graph.roots, *graph.imported_turns, *(t[0] for t in graph.turns), *graph.extra]
        if not graph.summaries:  # the summary fields are the client's, echoed
            ids += [*state.summary_archives, *(b for b in (state.summary, state.summary_archive) if b)]
        if graph.todos_echoed:
            ids += state.todos
        if graph.plan_echoed and state.plan:
            ids.append(state.plan)
        return ids

    def state_bytes(self) -> bytes:
        return self.state.SerializeToString(deterministic=True)

    def missing(self, held: Container[bytes]) -> list[NewBlob]:
        """The blobs of this checkpoint `held` lacks, children before parents. A blob the client
        holds brings its children (it got them first), so a held turn is not looked into."""
        return self.graph.walk(held)

    def blob_ids(self) -> set[bytes]:
        """Every blob this checkpoint names (the client holds them all once it holds the state)."""
        return self.graph.ids()

    @property
    def blobs(self) -> dict[bytes, bytes | None]:
        """Every blob of the checkpoint, children first, with its bytes where they are in memory."""
        return {b.blob_id: b.data for b in self.missing(())}

    def refs_of(self, blob_id: bytes) -> Refs:
        return next((list(b.refs) for b in self.missing(()) if b.blob_id == blob_id), [])


# ---- root JSON -----------------------------------------------------------------------------------


def system_root(system_prompt: str) -> bytes:
    return dumps({"role": "system", "content": system_prompt})


def user_root(item: UserItem) -> bytes:
    content = []
    for part in item.parts:
        if isinstance(part, TextPart):
            content.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            content.append({"type": "image", "mimeType": part.mime_type, "data": part.data_b64})
    msg: dict = {"role": "user"}
    if item.wire_id:
        msg["id"] = item.wire_id
    msg["content"] = content
    return dumps(msg)


def _tool_input(arguments: str) -> object:
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return arguments


def assistant_json(item: AssistantItem, *, pending_started_at_ms: int | None = None) -> dict:
    """AI-SDK-style assistant message. Every assistant root's wire id is "1" (captured)."""
    content: list[dict] = []
    if item.thinking:
        content.append({"type": "reasoning", "text": item.thinking})
    if item.text:
        content.append({"type": "text", "text": item.text})
    for call in item.tool_calls:
        content.append(
            {"type": "tool-call", "toolCallId": call.call_id, "toolName": call.name,
             "input": _tool_input(call.arguments)}
        )
    msg: dict = {"role": "assistant", "id": "1", "content": content}
    options: dict = {}
    if pending_started_at_ms is not None:
        options["cursor"] = {"pendingToolCallStartedAtMs": pending_started_at_ms}
    if item.replay is not None:
        options["cursorByok"] = {"replay": item.replay}
    if options:
        msg["providerOptions"] = options
    return msg


def _tool_output(r: ToolResultItem) -> dict:
    """AI SDK tool output: text (or error-text); a successful result with images is `content`."""
    if r.images and not r.is_error:
        return {"type": "content", "value": [{"type": "text", "text": r.content}] + [
            {"type": "media", "data": i.data_b64, "mediaType": i.mime_type} for i in r.images]}
    return {"type": "error-text" if r.is_error else "text", "value": r.content}


def tool_root(results: Sequence[ToolResultItem]) -> bytes:
    first = results[0]
    return dumps(
        {
            "role": "tool",
            "id": first.call_id,
            "content": [
                {"type": "tool-result", "toolCallId": r.call_id, "toolName": r.name, "output": _tool_output(r)}
                for r in results
            ],
        }
    )


# ---- steps and turns -------------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Turn:
    """One Cursor turn as history builds it: its user message, its steps (blob ids, in order)."""

    user_message_id: bytes
    request_id: str | None
    state_id: bytes | None = None
    """The state snapshot the turn started from (its UserMessage's conversation_state_blob_id)."""
    steps: list[bytes] = field(default_factory=list)
    imported_id: bytes | None = None
    """An imported turn we did not write: kept as it is while nothing is added to it."""
    imported_steps: int = 0
    """How many steps it had when imported."""
    shell: tuple[bytes, bytes] | None = None
    """A user shell command turn: the ShellCommand and ShellOutput blob ids (no user message, no steps)."""
    rendered: tuple[int, bytes, bytes] | None = None
    """(steps, id, bytes) of its last rendered blob: a turn changes only while it is the last."""

    def children(self, steps: Sequence[bytes]) -> list[bytes]:
        """The blobs under this turn, children first (what its blob and its user message point at)."""
        if self.shell is not None:
            return list(self.shell)
        own = [] if self.imported_id is not None else [self.user_message_id]
        return [*([self.state_id] if self.state_id else ()), *own, *steps]


def _step(message: apb.ConversationStep) -> bytes:
    return message.SerializeToString(deterministic=True)


def _thinking_step(text: str, duration_ms: int | None) -> bytes:
    msg = apb.ThinkingMessage(text=text)
    if duration_ms:
        msg.duration_ms = duration_ms
    return _step(apb.ConversationStep(thinking_message=msg))


def _text_step(text: str) -> bytes:
    return _step(apb.ConversationStep(assistant_message=apb.AssistantMessage(text=text)))


def _assistant_steps(thinking: str, thinking_ms: int | None, text: str) -> list[bytes]:
    """The step blobs of an assistant message's thinking and text."""
    return [*([_thinking_step(thinking, thinking_ms)] if thinking else ()), *([_text_step(text)] if text else ())]


def _turn_refs(turn: _Turn, steps: Sequence[bytes]) -> Refs:
    if turn.shell is not None:
        return [("shell_command", 0, turn.shell[0]), ("shell_output", 0, turn.shell[1])]
    return [("user_message", 0, turn.user_message_id)] + [("steps", i, s) for i, s in enumerate(steps)]


def _turn_blob(turn: _Turn, steps: Sequence[bytes]) -> bytes:
    if turn.shell is not None:
        shell = apb.ShellConversationTurnStructure(shell_command=turn.shell[0], shell_output=turn.shell[1])
        return apb.ConversationTurnStructure(shell_conversation_turn=shell).SerializeToString(deterministic=True)
    inner = apb.AgentConversationTurnStructure(user_message=turn.user_message_id, steps=steps)
    if turn.request_id:
        inner.request_id = turn.request_id
    return apb.ConversationTurnStructure(agent_conversation_turn=inner).SerializeToString(deterministic=True)


# ---- the projection ---------------------------------------------------------------------------------


@dataclass
class _Graph:
    """The blobs one checkpoint references, in the order they are SET (children before parents):
    the system root, the roots, every turn's children, the turn blobs, then the summary, todo and
    plan blobs. Bytes come from the checkpoint's own blobs, else the projector's (made since the run
    began), else nowhere (None: the store has them)."""

    roots: list[bytes]
    turns: list[tuple[bytes, _Turn, Sequence[bytes], bytes]]
    """(turn blob id, turn, its steps, its blob) in order; an imported turn kept as is is not here."""
    extra: list[bytes]
    """The summary, todo and plan blobs (after their children: this checkpoint's own blobs)."""
    own: dict[bytes, tuple[bytes, Refs]]
    """The blobs this checkpoint rendered itself (system root, turn blobs, summaries, todos, plan)."""
    made: Mapping[bytes, tuple[bytes | None, Refs]]
    """The projector's blobs made since its run began."""
    foreign: Container[bytes]
    """Blobs of an imported client checkpoint: the client's own, never SET back."""
    imported_turns: Sequence[bytes] = ()
    summaries: bool = False
    """The history has summaries (else the state's summary fields are echoed from the client's)."""
    todos_echoed: bool = False
    """No TodoWrite in history: the state's todos are the client's, echoed."""
    plan_echoed: bool = False

    def _blob(self, blob_id: bytes) -> NewBlob:
        found = self.own.get(blob_id) or self.made.get(blob_id)
        return NewBlob(blob_id, *found) if found is not None else NewBlob(blob_id, None)


    def walk(self, held: Container[bytes]) -> list[NewBlob]:
        out: dict[bytes, NewBlob] = {}

        def visit(blob_id: bytes) -> None:
            if blob_id not in held and blob_id not in out and blob_id not in self.foreign:
                out[blob_id] = self._blob(blob_id)

        for root in self.roots:
            visit(root)
        for turn_id, turn, steps, _ in self.turns:
            if turn_id not in held:
                for child in turn.children(steps):
                    visit(child)
        for turn_id, turn, steps, data in self.turns:
            if turn_id not in held and turn_id not in out:
                out[turn_id] = NewBlob(turn_id, data, _turn_refs(turn, steps))
        for blob_id in self.extra:
            for child in _children(self.own.get(blob_id)):
                visit(child)
            visit(blob_id)
        return list(out.values())

    def ids(self) -> set[bytes]:
        out = set(self.roots)
        for turn_id, turn, steps, _ in self.turns:
            out.add(turn_id)
            out.update(turn.children(steps))
        for blob_id in self.extra:
            out.update(_children(self.own.get(blob_id)))
            out.add(blob_id)
        return {b for b in out if b not in self.foreign}


def _children(rendered: tuple[bytes, Refs] | None) -> list[bytes]:
    """The children of one of a checkpoint's own blobs that the checkpoint renders too (a summary
    archive's summary message; the roots it replaced are the client's already)."""
    return [child for name, _, child in rendered[1] if name == "summary_message"] if rendered else []


@dataclass
class _Counts:
    """What the provider view adds to the token breakdown, as (ASCII characters, UTF-16 units)
    sums, so that adding a message adds to them (estimate_tokens of a concatenation is the
    estimate of the summed counts)."""

    sections: dict[str, tuple[int, int]] = field(default_factory=lambda: {k: (0, 0) for k in SECTION_TAGS})
    conversation_chars: int = 0

    def add(self, other: "_Counts") -> None:
        for key, (a, u) in other.sections.items():
            a0, u0 = self.sections[key]
            self.sections[key] = (a0 + a, u0 + u)
        self.conversation_chars += other.conversation_chars


def _entry_counts(entry: Entry) -> _Counts:
    counts = _Counts()
    for f in entry.items():
        item = f.item
        if isinstance(item, UserItem):
            text = "".join(p.text for p in item.parts if isinstance(p, TextPart))
            if entry.kind == "runtime":
                counts.sections = {key: text_counts(section(text, tag)) for key, tag in SECTION_TAGS.items()}
            if (item.wire_id or "").startswith(SUMMARY_WIRE_PREFIX):
                continue  # counted as summarized_conversation
        else:
            text = getattr(item, "text", "") + getattr(item, "thinking", "") + getattr(item, "content", "")
        counts.conversation_chars += len(text.encode("utf-16-le")) // 2
    return counts


class Projector:
    """A conversation's checkpoint, kept up to date as its history grows (`add`): the provider view
    (history.Fold), the turns and their steps, the todo, plan, summary and subagent state, and the
    running sums of the token breakdown. `checkpoint(ctx, pending)` renders the state; only what
    changed since the last checkpoint is rendered and hashed again."""

    def __init__(self, blobs: Mapping[bytes, bytes] | None = None) -> None:
        self.blobs = dict(blobs or {})
        """Bytes of imported roots and turns (an import message names them)."""
        self.fold = Fold(self.blobs)
        self.count = 0
        """Messages folded in."""
        self.size = 0
        """Bytes of stored JSON folded in: what the warm cache counts this conversation as."""
        self.made: dict[bytes, tuple[bytes | None, Refs]] = {}
        """Blobs made from messages since the run began (`release` forgets them): the only ones a
        checkpoint can reference that the client may lack."""
        self.turns: list[_Turn] = []
        self.imported_turns: list[bytes] = []
        self.imported = False
        self.foreign: set[bytes] = set()
        """The blobs imported checkpoints named: the client's (its roots, the open turn's steps)."""
        self._round_sizes: dict[str, int | None] = {}
        self._round_calls: dict[str, list[tuple[int, apb.ToolCall]]] = {}
        self.last_usage: Mapping | None = None
        self.summaries: list[Mapping] = []
        self.todos: list[apb.TodoItem] | None = None
        """The todo list as the last successful TodoWrite left it (None: no TodoWrite yet)."""
        self.plan: str | None = None
        self.read_paths: dict[str, None] = {}
        self.subagents = subagent_state.Subagents()
        self.event_ids: set[str] = set()
        """Runtime event ids (idempotency keys) in history."""
        self.context_digest: str | None = None
        """The request-context digest the history showed last (user_input.py)."""
        self.answered = False
        """History ends with the model's final answer (a settled text reply)."""
        self.prompt = PromptSize()
        self.recorded: set[bytes] = set()
        """Top-level blob ids recorded as published (the store's GC roots) by this projector."""
        self._roots: list[bytes] = []
        """Rendered roots of the view's first `len(self._roots_of)` entries."""
        self._roots_of = 0
        self._counts = _Counts()
        self._counted = 0
        self._closed: list[tuple] = []
        """_turn_blobs of every turn but the last (of the turn list `_closed_of`)."""
        self._closed_of: list[_Turn] = self.turns
        self._generation = 0
        self._base: tuple[bytes, apb.ConversationStateStructure, apb.ConversationStateStructure] | None = None

    # ---- folding messages in -----------------------------------------------------------------------

    def extend(self, messages: Sequence, known: Mapping[bytes, bytes] | None = None) -> "Projector":
        """Fold messages in, oldest first. `known`: bytes of blobs the messages name that are not
        in them (a state snapshot the run just stored), else the store holds them."""
        for msg in messages:
            self.add(msg, known or {})
        return self

    def add(self, msg, known: Mapping[bytes, bytes] | None = None) -> None:
        p = msg.payload
        kind = p["kind"]
        self.fold.add(msg)
        self.count += 1
        self.size += getattr(msg, "size", 0)
        self.prompt.add(msg, self.blobs)
        if kind != "tool":
            self.subagents.add(p)
        event_id = getattr(msg, "runtime_event_id", None)
        if event_id:
            self.event_ids.add(event_id)
        if p.get("context_digest"):
            self.context_digest = p["context_digest"]
        self.answered = kind == "assistant" and not p.get("tool_round_id")
        current = self.turns[-1] if self.turns else None
        if kind == "summary":
            self.last_usage = None  # the provider has not measured the compacted prompt yet
            self.summaries.append(p)
        elif kind == "runtime":
            self._runtime(p, known or {})
        elif kind == "assistant":
            if p.get("usage"):
                self.last_usage = p["usage"]
            rid = p.get("tool_round_id")
            if rid is None or rid not in self._round_sizes:
                if rid is not None:
                    self._round_sizes[rid] = p["round_size"]
                self._steps(current, _assistant_steps(p["thinking"], p.get("thinking_ms"), p["text"]))
        elif kind == "tool":
            self._tool(p, current)
        elif kind == "import":
            self.imported = True
            self.foreign.update(bytes.fromhex(h) for h in p["roots"])
            self.imported_turns = [bytes.fromhex(t) for t in p["turns"]]
            self.turns = []
            last = p.get("open_turn")
            if last:  # the last imported turn, decoded so later steps can extend it
                self.imported_turns = self.imported_turns[:-1]
                steps = [bytes.fromhex(s) for s in last["steps"]]
                self.foreign.update(steps)
                self.turns.append(_Turn(bytes.fromhex(last["user_message"]), last.get("request_id"), steps=steps,
                                        imported_id=bytes.fromhex(last["id"]), imported_steps=len(steps)))

    def _runtime(self, p: Mapping, known: Mapping[bytes, bytes]) -> None:
        if p.get("turn"):
            refs = p.get("blob_refs") or ()
            state_id = bytes.fromhex(refs[1]) if len(refs) == 2 else None
            um_refs: Refs = []
            if state_id is not None:
                self.made.setdefault(state_id, (known.get(state_id), []))
                um_refs = [("conversation_state_blob_id", 0, state_id)]
            um_id = self._made(unb64(p["turn"]["user_message_blob"]), um_refs)
            self.turns.append(_Turn(um_id, p["turn"]["request_id"], state_id))
        elif p.get("shell_turn"):
            shell = (self._made(unb64(p["shell_turn"]["command"])), self._made(unb64(p["shell_turn"]["output"])))
            self.turns.append(_Turn(b"", None, shell=shell))

    def _tool(self, p: Mapping, current: _Turn | None) -> None:
        rid = p["tool_round_id"]
        call = apb.ToolCall.FromString(unb64(p["tool_call"]))
        calls = self._round_calls.setdefault(rid, [])
        calls.append((p["call_index"], call))
        if len(calls) == self._round_sizes[rid]:
            del self._round_calls[rid]
            if current is not None and current.shell is None:
                for _, done in sorted(calls, key=lambda c: c[0]):
                    current.steps.append(self._made(_step(apb.ConversationStep(tool_call=done))))
        self.subagents.add(p, call)
        if not p.get("is_error"):
            self._tool_state(call)

    def _tool_state(self, call: apb.ToolCall) -> None:
        """Todos, the plan and read paths come from completed tool calls, never stored twice."""
        variant = call.WhichOneof("tool")
        if variant == "update_todos_tool_call" and call.update_todos_tool_call.result.HasField("success"):
            self.todos = list(call.update_todos_tool_call.result.success.todos)
        elif variant == "create_plan_tool_call" and call.create_plan_tool_call.result.HasField("success"):
            self.plan = call.create_plan_tool_call.args.plan
        elif variant == "read_tool_call" and call.read_tool_call.result.HasField("success"):
            if call.read_tool_call.args.path:
                self.read_paths.setdefault(call.read_tool_call.args.path)

    def _steps(self, turn: _Turn | None, steps: Sequence[bytes]) -> None:
        if turn is None or turn.shell is not None:
            return
        turn.steps += [self._made(s) for s in steps]

    def _made(self, data: bytes, refs: Refs = ()) -> bytes:
        blob_id = sha256(data)
        self.made.setdefault(blob_id, (data, list(refs)))
        return blob_id

    def release(self) -> None:
        """The client holds everything the history named so far (a run's base): forget the bytes."""
        self.made = {}

    # ---- the checkpoint ----------------------------------------------------------------------------

    def checkpoint(self, ctx: ProjectionContext, pending: Pending | None = None) -> Projection:
        """The checkpoint of the history folded in so far (plus a staged assistant, `pending`)."""
        own: dict[bytes, tuple[bytes, Refs]] = {}

        def blob(data: bytes, refs: Refs = ()) -> bytes:
            blob_id = sha256(data)
            own.setdefault(blob_id, (data, list(refs)))
            return blob_id

        base, state = self._base_state(ctx)
        system = blob(system_root(ctx.system_prompt))
        roots = [system, *self._view_roots()]
        last_steps: list[bytes] = []
        if pending is not None and self.turns and self.turns[-1].shell is None:
            last_steps = [blob(s) for s in _assistant_steps(pending.item.thinking, pending.thinking_ms,
                                                           pending.item.text)]
        turns = self._turn_blobs(last_steps)
        state.root_prompt_messages_json.extend(roots)
        state.turns.extend([*self.imported_turns, *(t[0] for t in turns)])
        if pending is not None:
            state.pending_tool_calls.append(dumps(pending_json(pending)).decode())
        usage = pending.usage if pending is not None and pending.usage else self.last_usage
        self._token_details(state, base, ctx, usage)
        extra = self._summary_state(state, blob) + self._tool_state_fields(state, blob)
        self.subagents.apply(state, ctx.parent_tool_call_id)
        graph = _Graph(roots, [t for t in turns if t[1] is not None], extra, own, self.made, self.foreign,
                       [*self.imported_turns, *(t[0] for t in turns if t[1] is None)], bool(self.summaries),
                       self.todos is None, self.plan is None)
        last = self.turns[-1] if self.turns else None
        return Projection(state, roots_digest(roots), len(last.steps) + len(last_steps) if last else 0, graph)

    def _base_state(self, ctx: ProjectionContext) -> tuple[apb.ConversationStateStructure,
                                                          apb.ConversationStateStructure]:
        """(the client's state, its echoed fields: the state without what the history makes)."""
        if self._base is None or self._base[0] is not ctx.base_state:
            base = apb.ConversationStateStructure.FromString(ctx.base_state)
            echo = apb.ConversationStateStructure()
            echo.CopyFrom(base)
            for name in ("root_prompt_messages_json", "turns", "pending_tool_calls", "token_details"):
                echo.ClearField(name)
            self._base = (ctx.base_state, base, echo)
        state = apb.ConversationStateStructure()
        state.CopyFrom(self._base[2])
        state.mode = ctx.mode
        return self._base[1], state

    def _view_roots(self) -> list[bytes]:
        """The view's roots: rendered once per message (a round's once it is complete)."""
        entries = self.fold.entries
        if self._generation != self.fold.generation:  # a summary rebuilt the view: count it again
            self._generation, self._roots, self._roots_of = self.fold.generation, [], 0
            self._counts, self._counted = _Counts(), 0
        while self._roots_of < len(entries) and entries[self._roots_of].round is None:
            self._roots += self._render(entries[self._roots_of])
            self._roots_of += 1
        return self._roots + [r for e in entries[self._roots_of:] for r in self._render(e)]

    def _render(self, entry: Entry) -> list[bytes]:
        if entry.rendered is not None:
            return entry.rendered
        roots = []
        folded = entry.items()  # raises for a round without all its results
        i = 0
        while i < len(folded):
            f = folded[i]
            if f.imported_root is not None:
                roots.append(f.imported_root)
                while i < len(folded) and folded[i].root_group == f.root_group and folded[i].imported_root:
                    i += 1
                continue
            roots.append(self._made(_root(f.item)))
            i += 1
        if entry.round is None:
            entry.rendered = roots
        return roots

    def _turn_blobs(self, last_steps: list[bytes]) -> list[tuple]:
        """(id, turn, steps, blob bytes) of each turn (turn None: an imported one kept as it was).
        Only the last turn grows: the others' are kept from when they were rendered last."""
        if self._closed_of is not self.turns:  # an import began a new turn list
            self._closed, self._closed_of = [], self.turns
        while len(self._closed) < len(self.turns) - 1:
            turn = self.turns[len(self._closed)]
            self._closed.append(self._turn_record(turn, turn.steps, []))  # closed: its steps are final
        # the last turn still grows: a checkpoint keeps a copy of the steps it had
        last = self.turns[-1] if self.turns else None
        return self._closed + ([self._turn_record(last, [*last.steps, *last_steps], last_steps)] if last else [])

    def _turn_record(self, turn: _Turn, steps: list[bytes], pending_steps: list[bytes]) -> tuple:
        if turn.imported_id is not None and len(steps) == turn.imported_steps:
            return turn.imported_id, None, steps, b""  # unchanged: the client's own blob
        if turn.rendered is not None and turn.rendered[0] == len(steps) and not pending_steps:
            _, turn_id, data = turn.rendered
        else:
            grown = turn.imported_id is not None and turn.imported_id in self.blobs
            data = self._imported_turn(turn, steps) if grown else _turn_blob(turn, steps)
            turn_id = sha256(data)
            if not pending_steps:
                turn.rendered = (len(steps), turn_id, data)
        return turn_id, turn, steps, data

    def _imported_turn(self, turn: _Turn, steps: Sequence[bytes]) -> bytes:
        """An imported turn that grew: every field it had, with the steps replaced."""
        original = apb.ConversationTurnStructure.FromString(self.blobs[turn.imported_id])
        del original.agent_conversation_turn.steps[:]
        original.agent_conversation_turn.steps.extend(steps)
        return original.SerializeToString(deterministic=True)

    def _token_details(self, state: apb.ConversationStateStructure, base: apb.ConversationStateStructure,
                       ctx: ProjectionContext, usage: Mapping | None) -> None:
        used = usage_total(usage)
        max_tokens = base.token_details.max_tokens or ctx.max_tokens or 0
        if used is None and self.summaries:  # after a compaction, until the provider measures it again
            used = prompt_estimate(ctx.system_prompt, ctx.tools, self.fold.transcript())
        if used is None:
            if base.HasField("token_details"):
                state.token_details.CopyFrom(base.token_details)
            return
        entries = self.fold.entries
        while self._counted < len(entries):
            self._counts.add(_entry_counts(entries[self._counted]))
            self._counted += 1
        summary_text = self.summaries[-1]["summary"] if self.summaries else ""  # the latest is always in view
        state.token_details.used_tokens = used
        state.token_details.max_tokens = max_tokens
        state.token_details.breakdown.CopyFrom(breakdown_from_counts(
            used, max_tokens, ctx.system_prompt, ctx.tools, self._counts.sections, self._counts.conversation_chars,
            summary_text, ctx.dynamic_tools))

    def _summary_state(self, state: apb.ConversationStateStructure, blob: Callable) -> list[bytes]:
        """summary (6), summary_archive (11), summary_archives (13), self_summary_count (17), from the
        summary messages in history. A history with none clears them, unless it holds an imported
        checkpoint (whose own compaction state is echoed)."""
        if not self.summaries:
            if not self.imported:
                for name in ("summary", "summary_archive", "summary_archives", "self_summary_count"):
                    state.ClearField(name)
            return []
        archives = []
        for p in self.summaries:
            summary_root = blob(user_root(UserItem(
                tuple(TextPart(part["text"]) for part in p["parts"] if part["type"] == "text"), wire_id=p["wire_id"])))
            replaced = [bytes.fromhex(h) for h in p["summarized_roots"]]
            archive = apb.ConversationSummaryArchive(
                summarized_messages=replaced, summary=p["summary"], window_tail=p["window_tail"],
                summary_message=summary_root)
            archives.append(blob(archive.SerializeToString(deterministic=True),
                                 [("summary_message", 0, summary_root)]
                                 + [("summarized_messages", i, r) for i, r in enumerate(replaced)]))
        latest = self.summaries[-1]["summary"]
        state.summary = blob(apb.ConversationSummary(summary=latest).SerializeToString(deterministic=True))
        state.summary_archive = archives[-1]
        del state.summary_archives[:]
        state.summary_archives.extend(archives[:-1])
        state.self_summary_count = len(self.summaries)
        return [*archives, state.summary]

    def _tool_state_fields(self, state: apb.ConversationStateStructure, blob: Callable) -> list[bytes]:
        """todos, plan and read paths. Without any TodoWrite in history the client's todos are
        echoed; read paths extend the client's."""
        extra = []
        if self.todos is not None:
            # Each todo is a blob holding one agent.v1.TodoItem (the field is repeated blob ids).
            state.ClearField("todos")
            state.todos.extend(blob(t.SerializeToString(deterministic=True)) for t in self.todos)
            extra += state.todos
        if self.plan is not None:  # the current plan: a blob holding agent.v1.ConversationPlan
            state.plan = blob(apb.ConversationPlan(plan=self.plan).SerializeToString(deterministic=True))
            extra.append(state.plan)
        if self.read_paths:
            client = list(state.read_paths)
            known = set(client)
            del state.read_paths[:]
            state.read_paths.extend(client + [p for p in self.read_paths if p not in known])
        return extra

    # ---- what the turn asks between checkpoints ------------------------------------------------------

    def unrendered(self) -> int:
        """View messages a checkpoint would render now (all of them after a cold fold)."""
        done = self._roots_of if self._generation == self.fold.generation else 0
        return len(self.fold.entries) - done

    def transcript(self) -> tuple:
        """What the provider sees (compactions applied)."""
        return self.fold.transcript()

    def roots_with_summary(self, summary: Mapping) -> tuple[list[bytes], list[bytes]]:
        """(the view's roots now, its roots if `summary` were appended), system root left out."""
        return self._view_roots(), [r for e in self.fold.with_summary(summary) for r in self._render(e)]

    def prompt_tokens(self, system_prompt: str, tools: Sequence[ToolSpec]) -> int:
        """The next prompt's size (compaction.py): reported and estimated (`PromptSize`)."""
        return self.prompt.tokens(system_prompt, tools, self.transcript)

    def current_todos(self) -> list[apb.TodoItem]:
        return list(self.todos or ())


def _root(item) -> bytes:
    if isinstance(item, UserItem):
        return user_root(item)
    if isinstance(item, AssistantItem):
        return dumps(assistant_json(item))
    return tool_root([item])


def project(messages: Sequence, ctx: ProjectionContext, *, blobs: Mapping[bytes, bytes] | None = None,
            pending: Pending | None = None) -> Projection:
    """The cold path: the checkpoint of a whole history, folded at once. `blobs` supplies the bytes
    of imported roots and turns (they are referenced, never re-rendered)."""
    return Projector(blobs).extend(messages).checkpoint(ctx, pending)


def current_todos(messages: Sequence) -> list[apb.TodoItem]:
    """The todo list as the last successful TodoWrite in history left it."""
    return Projector().extend(messages).current_todos()
