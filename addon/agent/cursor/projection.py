"""History -> Cursor checkpoint: the conversation state graph, as a pure function.

    ConversationStateStructure (inline in the checkpoint update)
     ├ root_prompt_messages_json[] -> JSON blobs: system, runtime user, assistant, tool (AI-SDK style)
     ├ pending_tool_calls[]           the complete pending assistant JSON while a round is staged
     ├ turns[] -> ConversationTurnStructure{agent_conversation_turn{user_message, steps[], request_id}}
     └ token_details, mode            (every other field is echoed from the client's state)

`project()` never touches the store and never mutates anything: the same messages and context give
the same blob bytes and ids. It returns every blob it renders (children first); the run SETs those
the client does not hold yet and waits for their ACKs before publishing the state.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from byok.proto import agent_pb2 as apb

from . import subagent_state
from ...wire.errors import ProtocolError
from ..history import FoldedItem, fold, summaries, unb64, view
from ...providers.transcript import (
    AssistantItem, ImagePart, TextPart, ToolCall, ToolResultItem, ToolSpec, UserItem,
)

Refs = list[tuple[str, int, bytes]] | Callable[[], list[tuple[str, int, bytes]]]
"""A blob's reference edges, or how to compute them when they are needed."""

SUMMARY_WIRE_PREFIX = "runtime:summary:"
SECTION_TAGS = {"rules": "rules", "skills": "agent_skills", "subagents": "subagents", "mcp": "mcp_meta_tools"}
BREAKDOWN_LABELS = [
    ("system_prompt", "System prompt"),
    ("tools", "Tool definitions"),
    ("rules", "Rules"),
    ("skills", "Skills"),
    ("mcp", "MCP & dynamic tools"),
    ("subagents", "Subagent definitions"),
    ("summarized_conversation", "Summarized conversation"),
    ("conversation", "Conversation"),
]


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


@dataclass
class Projection:
    state: apb.ConversationStateStructure
    blobs: Mapping[bytes, bytes] = field(default_factory=dict)
    """Every blob this projection renders, children before parents (a BlobMap: some decoded on read)."""
    refs: dict[bytes, Refs] = field(default_factory=dict)
    """blob id -> (referencing field, ordinal, child id) edges, for the store's blob graph; some
    computed only when asked for (`refs_of`)."""
    roots_digest: str = ""
    last_turn_steps: int = 0
    """Steps in the current (last) turn: the base of UpdateCurrentStep's message_index."""

    def top_level_ids(self) -> list[bytes]:
        """The blobs the state references directly: the store's GC roots for this checkpoint (the
        rest is reachable through the blob reference edges)."""
        state = self.state
        ids = [*state.root_prompt_messages_json, *state.turns, *state.todos, *state.summary_archives]
        ids += [b for b in (state.plan, state.summary, state.summary_archive) if b]
        return ids

    def state_bytes(self) -> bytes:
        return self.state.SerializeToString(deterministic=True)

    def refs_of(self, blob_id: bytes) -> list[tuple[str, int, bytes]]:
        refs = self.refs.get(blob_id, ())
        return refs() if callable(refs) else list(refs)


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


@dataclass
class _Turn:
    user_message: bytes | None
    """Blob bytes of the UserMessage (ours) ..."""
    user_message_id: bytes
    request_id: str | None
    steps: list[bytes] = field(default_factory=list)
    """Step blob ids, in order."""
    imported_id: bytes | None = None
    """... or the id of a turn blob we did not write (kept as is while nothing is added)."""
    shell: tuple[bytes, bytes] | None = None
    """A user shell command turn: the ShellCommand and ShellOutput blob ids (no user message, no steps)."""


def _step(message: apb.ConversationStep) -> bytes:
    return message.SerializeToString(deterministic=True)


def _thinking_step(text: str, duration_ms: int | None) -> bytes:
    msg = apb.ThinkingMessage(text=text)
    if duration_ms:
        msg.duration_ms = duration_ms
    return _step(apb.ConversationStep(thinking_message=msg))


def _text_step(text: str) -> bytes:
    return _step(apb.ConversationStep(assistant_message=apb.AssistantMessage(text=text)))


class BlobMap(Mapping):
    """blob id -> bytes, where some bytes are decoded only when read: a projection names every blob
    of the conversation, but a run only reads the few the client does not hold yet."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes | Callable[[], bytes]] = {}

    def put(self, blob_id: bytes, data: bytes | Callable[[], bytes]) -> None:
        self._data.setdefault(blob_id, data)

    def __getitem__(self, blob_id: bytes) -> bytes:
        data = self._data[blob_id]
        if callable(data):
            data = self._data[blob_id] = data()
        return data

    def __contains__(self, blob_id: object) -> bool:
        return blob_id in self._data

    def __iter__(self):
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


class _Builder:
    def __init__(self) -> None:
        self.blobs = BlobMap()
        self.refs: dict[bytes, Refs] = {}

    def blob(self, data: bytes, refs: Refs | None = None) -> bytes:
        bid = sha256(data)
        self.blobs.put(bid, data)
        if refs:
            self.refs.setdefault(bid, refs)
        return bid

    def known_blob(self, blob_id: bytes, data: Callable[[], bytes], refs: Refs | None = None) -> bytes:
        """A blob whose id was computed when it was stored: its bytes are decoded on first read."""
        self.blobs.put(blob_id, data)
        if refs:
            self.refs.setdefault(blob_id, refs)
        return blob_id


def _assistant_steps(b: _Builder, turn: _Turn | None, thinking: str, thinking_ms: int | None, text: str) -> None:
    if turn is None or turn.shell is not None:
        return
    if thinking:
        turn.steps.append(b.blob(_thinking_step(thinking, thinking_ms)))
    if text:
        turn.steps.append(b.blob(_text_step(text)))


def _turn_refs(turn: _Turn) -> list[tuple[str, int, bytes]]:
    if turn.shell is not None:
        return [("shell_command", 0, turn.shell[0]), ("shell_output", 0, turn.shell[1])]
    return [("user_message", 0, turn.user_message_id)] + [("steps", i, s) for i, s in enumerate(turn.steps)]


def _state_blob(b: _Builder, payload: Mapping) -> bytes:
    """The state snapshot a stored turn points at. Every turn projects the whole history, and each
    earlier turn carries a snapshot as long as the history was then: decoding, hashing and walking
    them all made a turn O(turns²). The id stored with the turn stands in for hashing, and the bytes
    and edges are decoded only for a blob the client does not hold (see `turn_payload`)."""
    encoded = payload["turn"]["state_blob"]
    stored = payload.get("blob_refs") or ()
    if len(stored) != 2:  # written before turns stored [user message id, state id]
        data = unb64(encoded)
        return b.blob(data, _state_refs(apb.ConversationStateStructure.FromString(data)))
    state_id = bytes.fromhex(stored[1])
    return b.known_blob(state_id, lambda: unb64(encoded),
                        lambda: _state_refs(apb.ConversationStateStructure.FromString(b.blobs[state_id])))


def _state_refs(state: apb.ConversationStateStructure) -> list[tuple[str, int, bytes]]:
    return ([("root_prompt_messages_json", i, r) for i, r in enumerate(state.root_prompt_messages_json)]
            + [("turns", i, t) for i, t in enumerate(state.turns)]
            + [("todos", i, t) for i, t in enumerate(state.todos)])


def _turn_blob(turn: _Turn) -> bytes:
    if turn.shell is not None:
        shell = apb.ShellConversationTurnStructure(shell_command=turn.shell[0], shell_output=turn.shell[1])
        return apb.ConversationTurnStructure(shell_conversation_turn=shell).SerializeToString(deterministic=True)
    inner = apb.AgentConversationTurnStructure(user_message=turn.user_message_id, steps=turn.steps)
    if turn.request_id:
        inner.request_id = turn.request_id
    return apb.ConversationTurnStructure(agent_conversation_turn=inner).SerializeToString(deterministic=True)


# ---- token details ---------------------------------------------------------------------------------


def estimate_tokens(text: str) -> tuple[int, int]:
    """(estimated tokens, UTF-16 code units): 0.273 per ASCII char, 0.55 per other code unit."""
    ascii_chars = len(text.encode("ascii", "ignore"))  # counted in C: a Python loop cost ~10 ms per 40k chars
    units = len(text.encode("utf-16-le")) // 2
    return round(ascii_chars * 0.273 + (units - ascii_chars) * 0.55), units


def _section(text: str, tag: str) -> str:
    start, end = f"<{tag}>", f"</{tag}>"
    out = []
    pos = 0
    while (i := text.find(start, pos)) >= 0:
        j = text.find(end, i)
        if j < 0:
            break
        out.append(text[i : j + len(end)])
        pos = j + len(end)
    return "".join(out)


def breakdown(used: int, max_tokens: int, system_prompt: str, tools: Sequence[ToolSpec],
              runtime_texts: Sequence[str], conversation_chars: int,
              summary_text: str = "", dynamic_tools: Sequence[ToolSpec] = ()) -> apb.PromptTokenBreakdownSnapshot:
    """The 8 categories; `conversation` takes the remainder so they sum exactly to `used`.
    `dynamic_tools` (MCP tools offered directly) count as `mcp` with the runtime MCP section."""
    estimates: dict[str, tuple[int, int]] = {
        "system_prompt": estimate_tokens(system_prompt),
        "tools": estimate_tokens(_tools_text(tools)),
    }
    for key, tag in SECTION_TAGS.items():
        text = "".join(_section(t, tag) for t in runtime_texts)
        if key == "mcp" and dynamic_tools:
            text += _tools_text(dynamic_tools)
        estimates[key] = estimate_tokens(text)
    estimates["summarized_conversation"] = estimate_tokens(summary_text)
    fixed_keys = [k for k, _ in BREAKDOWN_LABELS if k != "conversation"]
    fixed_total = sum(estimates[k][0] for k in fixed_keys)
    if fixed_total > used:  # shrink with the largest-remainder method, never below zero
        exact = {k: estimates[k][0] * used / fixed_total for k in fixed_keys}
        floors = {k: int(v) for k, v in exact.items()}
        leftover = used - sum(floors.values())
        for k in sorted(fixed_keys, key=lambda k: exact[k] - floors[k], reverse=True)[:leftover]:
            floors[k] += 1
        estimates.update({k: (floors[k], estimates[k][1]) for k in fixed_keys})
        fixed_total = used
    estimates["conversation"] = (used - fixed_total, conversation_chars)
    snapshot = apb.PromptTokenBreakdownSnapshot(total_used_tokens=used, max_tokens=max_tokens)
    for key, label in BREAKDOWN_LABELS:
        tokens, chars = estimates[key]
        snapshot.categories.add(id=key, label=label, estimated_tokens=tokens, character_count=chars)
    return snapshot


def _tools_text(tools: Sequence[ToolSpec]) -> str:
    return json.dumps([[t.name, t.description, t.parameters] for t in tools])


def _usage_total(usage: Mapping | None) -> int | None:
    if not usage or usage.get("input_tokens") is None or usage.get("output_tokens") is None:
        return None
    return int(usage["input_tokens"]) + int(usage["output_tokens"])


# ---- the projection ---------------------------------------------------------------------------------


def project(
    messages: Sequence,
    ctx: ProjectionContext,
    *,
    blobs: Mapping[bytes, bytes] | None = None,
    pending: Pending | None = None,
) -> Projection:
    """Project stored messages (+ an optional pending assistant) to a checkpoint state.

    `blobs` supplies the bytes of imported roots (they are referenced, never re-rendered).
    """
    b = _Builder()
    state = apb.ConversationStateStructure.FromString(ctx.base_state)
    for name in ("root_prompt_messages_json", "turns", "pending_tool_calls"):
        state.ClearField(name)
    state.ClearField("token_details")
    state.mode = ctx.mode

    roots = [b.blob(system_root(ctx.system_prompt))]
    seen = view(messages)  # what the provider sees: compactions applied
    folded = fold(seen, blobs)
    _append_roots(b, roots, folded)

    turns: list[_Turn] = []
    imported_turns: list[bytes] = []
    round_sizes = {
        m.payload["tool_round_id"]: m.payload["round_size"]
        for m in messages
        if m.payload["kind"] == "assistant" and m.payload.get("tool_round_id")
    }
    round_first_seen: set[str] = set()
    round_tools: dict[str, list[tuple[int, bytes]]] = {}
    last_usage: Mapping | None = None
    runtime_texts = ["".join(part.get("text", "") for part in m.payload["parts"])
                     for m in seen if m.payload["kind"] == "runtime"]
    for msg in messages:
        p = msg.payload
        kind = p["kind"]
        current = turns[-1] if turns else None
        if kind == "summary":
            last_usage = None  # the provider has not measured the compacted prompt yet
        elif kind == "runtime":
            if p.get("turn"):
                um = unb64(p["turn"]["user_message_blob"])
                um_refs = None
                if p["turn"].get("state_blob"):
                    state_id = _state_blob(b, p)
                    um_refs = [("conversation_state_blob_id", 0, state_id)]
                turns.append(_Turn(um, b.blob(um, um_refs), p["turn"]["request_id"]))
            elif p.get("shell_turn"):
                shell = (b.blob(unb64(p["shell_turn"]["command"])), b.blob(unb64(p["shell_turn"]["output"])))
                turns.append(_Turn(None, b"", None, shell=shell))
        elif kind == "assistant":
            if p.get("usage"):
                last_usage = p["usage"]
            rid = p.get("tool_round_id")
            if rid is None or rid not in round_first_seen:
                if rid is not None:
                    round_first_seen.add(rid)
                _assistant_steps(b, current, p["thinking"], p.get("thinking_ms"), p["text"])
        elif kind == "tool":
            rid = p["tool_round_id"]
            round_tools.setdefault(rid, []).append((p["call_index"], unb64(p["tool_call"])))
            if len(round_tools[rid]) == round_sizes[rid] and current is not None and current.shell is None:
                for _, pb in sorted(round_tools[rid]):
                    current.steps.append(b.blob(_step(apb.ConversationStep(tool_call=apb.ToolCall.FromString(pb)))))
        elif kind == "import":
            imported_turns = [bytes.fromhex(t) for t in p["turns"]]
            turns = []
            last = p.get("open_turn")
            if last:  # the last imported turn, decoded so later steps can extend it
                imported_turns = imported_turns[:-1]
                turns.append(
                    _Turn(None, bytes.fromhex(last["user_message"]), last.get("request_id"),
                          [bytes.fromhex(s) for s in last["steps"]], imported_id=bytes.fromhex(last["id"]))
                )

    if pending is not None:
        _assistant_steps(b, turns[-1] if turns else None, pending.item.thinking, pending.thinking_ms,
                         pending.item.text)
        if pending.usage:
            last_usage = pending.usage
        state.pending_tool_calls.append(
            dumps(pending_json(pending)).decode()
        )

    turn_ids = list(imported_turns)
    for turn in turns:
        if turn.imported_id is not None and turn.user_message is None and _unchanged_import(turn, messages):
            turn_ids.append(turn.imported_id)
        elif turn.imported_id is not None and blobs is not None and turn.imported_id in blobs:
            # an imported turn that grew: keep every field it had, replace only the steps
            original = apb.ConversationTurnStructure.FromString(blobs[turn.imported_id])
            del original.agent_conversation_turn.steps[:]
            original.agent_conversation_turn.steps.extend(turn.steps)
            turn_ids.append(b.blob(original.SerializeToString(deterministic=True), _turn_refs(turn)))
        else:
            turn_ids.append(b.blob(_turn_blob(turn), _turn_refs(turn)))
    state.root_prompt_messages_json.extend(roots)
    state.turns.extend(turn_ids)
    compacted = summaries(messages)
    summary_text = compacted[-1].payload["summary"] if compacted else ""  # the latest is always in view
    _token_details(state, ctx, last_usage, runtime_texts, folded, compacted=bool(compacted),
                   summary_text=summary_text)
    _summary_state(b, state, messages, compacted)
    _fold_tool_state(b, state, messages)
    subagent_state.fold(state, messages, ctx.parent_tool_call_id)
    return Projection(state=state, blobs=b.blobs, refs=b.refs, roots_digest=roots_digest(roots),
                      last_turn_steps=len(turns[-1].steps) if turns else 0)


def _summary_state(b: _Builder, state: apb.ConversationStateStructure, messages: Sequence,
                   compacted: Sequence) -> None:
    """summary (6), summary_archive (11), summary_archives (13), self_summary_count (17), from the
    summary messages in history. A history with none clears them, unless it holds an imported
    checkpoint (whose own compaction state is echoed)."""
    if not compacted:
        if not any(m.payload["kind"] == "import" for m in messages):
            for name in ("summary", "summary_archive", "summary_archives", "self_summary_count"):
                state.ClearField(name)
        return
    archives = []
    for msg in compacted:
        p = msg.payload
        summary_root = b.blob(user_root(UserItem(
            tuple(TextPart(part["text"]) for part in p["parts"] if part["type"] == "text"), wire_id=p["wire_id"])))
        replaced = [bytes.fromhex(h) for h in p["summarized_roots"]]
        archive = apb.ConversationSummaryArchive(
            summarized_messages=replaced, summary=p["summary"], window_tail=p["window_tail"],
            summary_message=summary_root)
        archives.append(b.blob(archive.SerializeToString(deterministic=True),
                               [("summary_message", 0, summary_root)]
                               + [("summarized_messages", i, r) for i, r in enumerate(replaced)]))
    latest = compacted[-1].payload["summary"]
    state.summary = b.blob(apb.ConversationSummary(summary=latest).SerializeToString(deterministic=True))
    state.summary_archive = archives[-1]
    del state.summary_archives[:]
    state.summary_archives.extend(archives[:-1])
    state.self_summary_count = len(compacted)


def _fold_tool_state(b: _Builder, state: apb.ConversationStateStructure, messages: Sequence) -> None:
    """Todos, the plan and read paths are derived from the completed tool calls in history, never
    stored twice.
    Without any TodoWrite in history the client's todos are echoed; read paths extend the client's."""
    todos: list[apb.TodoItem] | None = None
    plan: str | None = None
    read_paths = list(state.read_paths)
    seen = set(read_paths)
    for msg in messages:
        p = msg.payload
        if p["kind"] != "tool" or p.get("is_error"):
            continue
        call = apb.ToolCall.FromString(unb64(p["tool_call"]))
        variant = call.WhichOneof("tool")
        if variant == "update_todos_tool_call" and call.update_todos_tool_call.result.HasField("success"):
            todos = list(call.update_todos_tool_call.result.success.todos)
        elif variant == "create_plan_tool_call" and call.create_plan_tool_call.result.HasField("success"):
            plan = call.create_plan_tool_call.args.plan
        elif variant == "read_tool_call" and call.read_tool_call.result.HasField("success"):
            path = call.read_tool_call.args.path
            if path and path not in seen:
                seen.add(path)
                read_paths.append(path)
    if todos is not None:
        # Each todo is a blob holding one agent.v1.TodoItem (the field is repeated blob ids).
        state.ClearField("todos")
        state.todos.extend(b.blob(t.SerializeToString(deterministic=True)) for t in todos)
    if plan is not None:  # the current plan: a blob holding agent.v1.ConversationPlan
        state.plan = b.blob(apb.ConversationPlan(plan=plan).SerializeToString(deterministic=True))
    del state.read_paths[:]
    state.read_paths.extend(read_paths)


def current_todos(messages: Sequence) -> list[apb.TodoItem]:
    """The todo list as the last successful TodoWrite in history left it."""
    todos: list[apb.TodoItem] = []
    for msg in messages:
        p = msg.payload
        if p["kind"] == "tool" and not p.get("is_error") and p["name"] == "TodoWrite":
            call = apb.ToolCall.FromString(unb64(p["tool_call"]))
            if call.update_todos_tool_call.result.HasField("success"):
                todos = list(call.update_todos_tool_call.result.success.todos)
    return todos


def _unchanged_import(turn: _Turn, messages: Sequence) -> bool:
    for msg in reversed(messages):
        if msg.payload["kind"] == "import":
            return len(turn.steps) == len(msg.payload["open_turn"]["steps"])
    return True


def _append_roots(b: _Builder, roots: list[bytes], folded: Sequence[FoldedItem]) -> None:
    i = 0
    while i < len(folded):
        f = folded[i]
        if f.imported_root is not None:
            roots.append(f.imported_root)
            while i < len(folded) and folded[i].root_group == f.root_group and folded[i].imported_root:
                i += 1
            continue
        item = f.item
        if isinstance(item, UserItem):
            roots.append(b.blob(user_root(item)))
        elif isinstance(item, AssistantItem):
            roots.append(b.blob(dumps(assistant_json(item))))
        elif isinstance(item, ToolResultItem):
            roots.append(b.blob(tool_root([item])))
        i += 1


def _item_text(item) -> str:
    if isinstance(item, UserItem):
        return "".join(p.text for p in item.parts if isinstance(p, TextPart))
    if isinstance(item, AssistantItem):
        return item.text + item.thinking + "".join(c.name + c.arguments for c in item.tool_calls)
    return item.content


def prompt_estimate(system_prompt: str, tools: Sequence[ToolSpec], items: Sequence) -> int:
    """Estimated prompt tokens of a request nobody has measured yet (part 7's per-character rule)."""
    text = system_prompt + json.dumps([[t.name, t.description, t.parameters] for t in tools])
    return estimate_tokens(text + "".join(_item_text(i) for i in items))[0]


def _token_details(state: apb.ConversationStateStructure, ctx: ProjectionContext, usage: Mapping | None,
                   runtime_texts: Sequence[str], folded: Sequence[FoldedItem], *, compacted: bool = False,
                   summary_text: str = "") -> None:
    base = apb.ConversationStateStructure.FromString(ctx.base_state)
    used = _usage_total(usage)
    max_tokens = base.token_details.max_tokens or ctx.max_tokens or 0
    if used is None and compacted:  # after a compaction, until the provider measures it again
        used = prompt_estimate(ctx.system_prompt, ctx.tools, [f.item for f in folded])
    if used is None:
        if base.HasField("token_details"):
            state.token_details.CopyFrom(base.token_details)
        return
    conversation_chars = 0
    for f in folded:
        item = f.item
        if isinstance(item, UserItem) and (item.wire_id or "").startswith(SUMMARY_WIRE_PREFIX):
            continue  # counted as summarized_conversation
        if isinstance(item, UserItem):
            text = "".join(p.text for p in item.parts if isinstance(p, TextPart))
        else:
            text = getattr(item, "text", "") + getattr(item, "thinking", "") + getattr(item, "content", "")
        conversation_chars += len(text.encode("utf-16-le")) // 2
    state.token_details.used_tokens = used
    state.token_details.max_tokens = max_tokens
    state.token_details.breakdown.CopyFrom(
        breakdown(used, max_tokens, ctx.system_prompt, ctx.tools, runtime_texts, conversation_chars, summary_text,
                  ctx.dynamic_tools)
    )
