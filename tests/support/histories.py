"""Random conversation histories for property tests of the checkpoint projection: user turns, final
answers, tool rounds (results committed in any order; reads, todos, plans, Tasks, progress calls,
errors), messages delivered mid-run, background completions, user shell commands, compactions
(placed the way compaction.plan places them) and imported client checkpoints.

`Steps` is a hypothesis strategy of history-building steps; `History.run(steps)` plays them and
returns the stored messages, grouped the way a run appends them (a checkpoint may follow any group).
With a `sink`, each message is stored as it is made (its id is the store's: summaries name them).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import strategies as st

from byok.agent import history
from byok.agent.cursor import projection as proj
from byok.agent.cursor import subagent_state
from byok.agent.cursor.tools import task as task_codec
from byok.proto import agent_pb2 as apb
from byok.providers.transcript import AssistantItem, TextPart, ToolCall, ToolResultItem, ToolSpec
from byok.store import StoredMessage


def text_of(i: int) -> str:
    return f"text {i} " + "é" * (i % 3) + ("<rules>r</rules>" if i % 4 == 0 else "")


def _tool_call(name: str, call_id: str, i: int) -> tuple[apb.ToolCall, bool, dict]:
    """The typed ToolCall a tool of this name completes with, whether it is an error, its marks."""
    if name == "Read":
        return apb.ToolCall(read_tool_call=apb.ReadToolCall(
            args=apb.ReadToolArgs(path=f"/w/f{i % 5}.txt"),
            result=apb.ReadToolResult(success=apb.ReadToolSuccess(path=f"/w/f{i % 5}.txt")))), False, {}
    if name == "TodoWrite":
        todos = [apb.TodoItem(id=f"t{k}", content=f"do {k} of {i}") for k in range(i % 3 + 1)]
        return apb.ToolCall(update_todos_tool_call=apb.UpdateTodosToolCall(
            result=apb.UpdateTodosResult(success=apb.UpdateTodosSuccess(todos=todos)))), False, {}
    if name == "CreatePlan":
        return apb.ToolCall(create_plan_tool_call=apb.CreatePlanToolCall(
            args=apb.CreatePlanArgs(plan=f"plan {i}"),
            result=apb.CreatePlanResult(success=apb.CreatePlanSuccess()))), False, {}
    if name == "Task":
        task = apb.TaskToolCall(args=apb.TaskArgs(description=f"task {i}"))
        if i % 3 == 0:
            task.result.error.error = task_codec.USER_STOPPED
            return apb.ToolCall(task_tool_call=task), True, {task_codec.USER_STOPPED_MARK: True}
        task.result.success.agent_id = f"agent-{i}"
        task.result.success.is_background = i % 2 == 0
        call = apb.ToolCall(task_tool_call=task, started_at_ms=1000 + i, completed_at_ms=2000 + i)
        return call, False, {}
    if name == "UpdateCurrentStep":
        update = apb.CommunicateUpdateToolCall(args=apb.CommunicateUpdateArgs(current_step=f"step {i}"))
        update.result.success.message_index = i
        return apb.ToolCall(communicate_update_tool_call=update), False, {}
    return apb.ToolCall(read_tool_call=apb.ReadToolCall(args=apb.ReadToolArgs(path="/missing"))), True, {}


TOOLS = ("Read", "TodoWrite", "CreatePlan", "Task", "UpdateCurrentStep", "Broken")


def replay(i: int) -> dict | None:
    """A provider's replay state as it arrives: keys in the provider's order, not sorted (the store
    keeps canonical JSON; what a turn folds in must read as what the store gives back)."""
    if i % 3:
        return None
    return {"kind": "anthropic", "content": [{"type": "thinking", "thinking": "t", "signature": f"sig{i}"}]}


@dataclass
class History:
    """Builds stored messages the way the turn and its capabilities write them."""

    inline_state: bool = False
    """Also keep each turn's state snapshot inline in its message (the form before migration m013)."""
    messages: list[StoredMessage] = field(default_factory=list)
    groups: list[list[StoredMessage]] = field(default_factory=list)
    blobs: dict[bytes, bytes] = field(default_factory=dict)
    """Imported roots and turns, and every state snapshot (by id)."""
    n: int = 0
    step: int = 0
    sink: Callable[[str, str, dict, str | None], StoredMessage] | None = None
    """(role, origin, payload, runtime event id) -> the message as stored."""

    def _add(self, role: str, payload: dict, event_id: str | None = None) -> StoredMessage:
        self.n += 1
        origin = {"user": "runtime", "import": "imported"}.get(role, role)
        if self.sink is not None:
            msg = self.sink(role, origin, payload, event_id)
        else:
            msg = StoredMessage(self.n, role, origin, payload, event_id, f"r{self.n}", self.n)
        self.messages.append(msg)
        return msg

    def group(self, *messages: StoredMessage) -> None:
        self.groups.append(list(messages))

    def turn(self, i: int, *, completion: bool = False) -> None:
        state = apb.ConversationStateStructure(root_prompt_messages_json=[proj.sha256(b"root %d" % i)])
        state_blob = state.SerializeToString(deterministic=True)
        rendered = proj.sha256(state_blob)
        self.blobs[rendered] = state_blob
        shown = apb.UserMessage(text=f"q{i}", message_id=f"m{i}", conversation_state_blob_id=rendered)
        um = shown.SerializeToString(deterministic=True)
        payload = history.runtime_user_payload(
            [TextPart(text_of(i))], wire_id=f"runtime:run-request:r{i}",
            turn={"request_id": f"r{i}", "user_message_blob": history.b64(um)},
            blob_refs=[proj.sha256(um), rendered], context_digest=f"digest-{i % 2}")
        if self.inline_state:
            payload["turn"]["state_blob"] = history.b64(state_blob)
        if completion:
            payload[subagent_state.COMPLETION_KEY] = {
                "kind": apb.BACKGROUND_TASK_KIND_SUBAGENT, "status": apb.BACKGROUND_TASK_STATUS_SUCCESS,
                "tool_call_id": f"call-{i - 1}-0", "subagent_id": f"agent-{i}", "title": f"done {i}",
                "completed_at_ms": 5000 + i}
        self.group(self._add("user", payload, f"run-request:r{i}"))

    def context(self, i: int) -> None:
        payload = history.runtime_user_payload([TextPart(f"<system_reminder>{text_of(i)}</system_reminder>")],
                                               wire_id=f"runtime:injection:{i}", context_digest=f"digest-{i}")
        self.group(self._add("user", payload, f"injection:{i}"))

    def shell(self, i: int) -> None:
        command = apb.ShellCommand(command=f"ls {i}").SerializeToString(deterministic=True)
        output = apb.ShellOutput(stdout=f"out {i}").SerializeToString(deterministic=True)
        payload = history.runtime_user_payload([TextPart(f"<user_shell_command>{i}</user_shell_command>")],
                                               wire_id=f"runtime:run-request:s{i}",
                                               blob_refs=[proj.sha256(command), proj.sha256(output)])
        payload["shell_turn"] = {"command": history.b64(command), "output": history.b64(output)}
        self.group(self._add("user", payload, f"run-request:s{i}"))

    def answer(self, i: int, *, usage: bool) -> None:
        item = AssistantItem(text=f"answer {i}", thinking="thought" if i % 2 else "", replay=replay(i))
        self.group(self._add("assistant", history.assistant_payload(
            item, thinking_ms=7 if i % 2 else None, model_call_id=f"mc{i}",
            usage={"input_tokens": 100 + i, "output_tokens": 5} if usage else None)))

    def round(self, i: int, names: list[str], order: list[int]) -> None:
        """A tool round of len(names) calls whose results are committed in `order` (each pair is
        appended on its own, as tool_round.py does)."""
        rid = f"round-{i}"
        for n, index in enumerate(order):
            call_id = f"call-{i}-{index}"
            name = names[index]
            first = n == 0
            item = AssistantItem(text=f"round {i}" if first else "", thinking="plan" if first else "",
                                 tool_calls=(ToolCall(call_id, name, json.dumps({"n": index}), index),),
                                 replay=replay(i) if first else None)
            a = self._add("assistant", history.assistant_payload(
                item, thinking_ms=3 if first else None, model_call_id=f"mc{i}", tool_round_id=rid,
                round_size=len(names), usage={"input_tokens": 50 + i, "output_tokens": 2} if first else None))
            call, is_error, marks = _tool_call(name, call_id, i * 10 + index)
            t = self._add("tool", history.tool_payload(
                ToolResultItem(call_id, name, f"result {i}.{index}", is_error), tool_round_id=rid,
                call_index=index, tool_call_pb=call.SerializeToString(deterministic=True), marks=marks))
            self.group(a, t)

    def summary(self, i: int, tail_budget: int) -> None:
        from byok.agent.capabilities.compaction import plan

        split = plan(history.view(self.messages), tail_budget=tail_budget, keep_context=bool(i % 2))
        if split is None:
            return
        payload = history.summary_payload(
            [TextPart(f"summary {i}")], wire_id=f"{proj.SUMMARY_WIRE_PREFIX}mc-s{i}", summary=f"gist {i}",
            context_id=split.context.id if split.context is not None else None,
            tail_from=split.tail[0].id if split.tail else None,
            summarized_roots=[proj.sha256(b"gone %d" % i)], window_tail=len(split.tail), model_call_id=f"mc-s{i}")
        self.group(self._add("user", payload))

    def imported(self, i: int) -> None:
        roots = [proj.dumps({"role": "user", "id": f"imp-{i}", "content": [{"type": "text", "text": f"old {i}"}]}),
                 proj.dumps({"role": "assistant", "id": "1", "content": [{"type": "text", "text": f"reply {i}"}]})]
        step = apb.ConversationStep(assistant_message=apb.AssistantMessage(text=f"reply {i}"))
        step_blob = step.SerializeToString(deterministic=True)
        turn = apb.ConversationTurnStructure(agent_conversation_turn=apb.AgentConversationTurnStructure(
            user_message=proj.sha256(b"um"), steps=[proj.sha256(step_blob)], request_id=f"imp-{i}"))
        turn_blob = turn.SerializeToString(deterministic=True)
        for data in (*roots, turn_blob):
            self.blobs[proj.sha256(data)] = data
        payload = history.import_payload(roots=[proj.sha256(r) for r in roots],
                                         turns=[proj.sha256(b"older turn"), proj.sha256(turn_blob)],
                                         source="client checkpoint")
        payload["open_turn"] = {"id": proj.sha256(turn_blob).hex(), "user_message": proj.sha256(b"um").hex(),
                                "steps": [proj.sha256(step_blob).hex()], "request_id": f"imp-{i}"}
        self.group(self._add("import", payload))

    def run(self, steps: list[tuple]) -> "History":
        """Play steps (more of them continue the history); it always starts with a user turn (an
        import may come first)."""
        started = bool(self.messages)
        for kind, *args in steps:
            self.step += 1
            i = self.step
            if kind == "import" and not self.messages:
                self.imported(i)
            elif kind == "turn" or not started:
                self.turn(i, completion=bool(args and args[0]))
            elif kind == "answer":
                self.answer(i, usage=args[0])
            elif kind == "round":
                names, order = args
                self.round(i, names, order)
            elif kind == "context":
                self.context(i)
            elif kind == "shell":
                self.shell(i)
            elif kind == "summary":
                self.summary(i, args[0])
            started = started or kind != "import"
        return self


@st.composite
def _round(draw) -> tuple:
    names = draw(st.lists(st.sampled_from(TOOLS), min_size=1, max_size=3))
    order = draw(st.permutations(range(len(names))))
    return ("round", names, list(order))


STEP = st.one_of(
    st.tuples(st.just("turn"), st.booleans()),
    st.tuples(st.just("answer"), st.booleans()),
    _round(),
    _round(),
    st.tuples(st.just("context")),
    st.tuples(st.just("shell")),
    st.tuples(st.just("summary"), st.integers(0, 400)),
)
Steps = st.one_of(st.lists(STEP, min_size=1, max_size=30),
                  st.lists(STEP, min_size=1, max_size=20).map(lambda s: [("import",), *s]))
"""Histories of up to 30 steps; some begin with an imported client checkpoint."""


# ---- warm against cold ---------------------------------------------------------------------------

CTX = proj.ProjectionContext(
    system_prompt="You are a test.", tools=(ToolSpec("Read", "read a file", {"type": "object"}),),
    base_state=apb.ConversationStateStructure(read_paths=["/w/f1.txt", "/client"]).SerializeToString(),
    mode=apb.AGENT_MODE_AGENT, max_tokens=128000, parent_tool_call_id="call-parent")
PENDING = st.none() | st.just(proj.Pending(AssistantItem(text="staged", thinking="t"), 4,
                                           {"input_tokens": 9, "output_tokens": 1}))


def outcome(projector: proj.Projector, pending):
    """The checkpoint, or the error it raised (a round still missing results raises the same on both)."""
    try:
        return projector.checkpoint(CTX, pending)
    except Exception as e:  # noqa: BLE001 - compared by type
        return type(e)


def same(warm, cold, held: set[bytes], stored: dict[bytes, bytes]) -> None:
    """`warm` and `cold` are one checkpoint: the same state bytes, GC roots, and the same blobs to
    SET to a client holding `held`; `warm` has the bytes of each (or the store has them)."""
    if isinstance(cold, type) or isinstance(warm, type):
        assert warm == cold
        return
    assert warm.state_bytes() == cold.state_bytes()
    assert warm.roots_digest == cold.roots_digest and warm.last_turn_steps == cold.last_turn_steps
    assert set(warm.top_level_ids()) == set(cold.top_level_ids())
    missing = warm.missing(held)
    assert [b.blob_id for b in missing] == [b.blob_id for b in cold.missing(held)]
    for blob in missing:
        data = blob.data if blob.data is not None else stored.get(blob.blob_id)
        assert data is not None and proj.sha256(data) == blob.blob_id


CHOICES = st.lists(st.tuples(st.booleans(), PENDING, st.booleans()), min_size=40, max_size=40)
"""After each group of messages: (take a checkpoint?, with this pending assistant, then a new run?)."""


def warm_against_cold(steps: list[tuple], choices: list[tuple]) -> None:
    """One projector extended group by group across runs (a run's base: the client holds what the
    last published checkpoint names, and the projector forgets the bytes), against the whole
    history folded at once at every checkpoint."""
    h = History().run(steps)
    warm = proj.Projector(h.blobs)
    held: set[bytes] = set()
    done = 0
    for group, (check, pending, next_run) in zip(h.groups, [*choices, *[(True, None, False)] * len(h.groups)]):
        warm.extend(group, known=h.blobs)
        done += len(group)
        if not check:
            continue
        checkpoint = outcome(warm, pending)
        same(checkpoint, outcome(proj.Projector(h.blobs).extend(h.messages[:done]), pending), held, h.blobs)
        if isinstance(checkpoint, type):
            continue
        held.update(b.blob_id for b in checkpoint.missing(held))  # published: the client holds it now
        if pending is None and next_run:
            held |= checkpoint.blob_ids()
            warm.release()
