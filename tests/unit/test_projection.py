"""Checkpoint projection: pure, deterministic, prefix-stable; the fold merges tool rounds."""

import json
from dataclasses import dataclass

from hypothesis import given, settings, strategies as st

from byok.agent import history, user_input
from byok.agent.cursor import projection as proj
from byok.agent.cursor import tokens
from byok.providers.transcript import AssistantItem, TextPart, ToolCall, ToolResultItem, ToolSpec
from byok.proto import agent_pb2 as apb


@dataclass(frozen=True)
class M:
    payload: dict
    role: str = "user"


CTX = proj.ProjectionContext(
    system_prompt="You are a test.", tools=(ToolSpec("Read", "read a file", {"type": "object"}),),
    base_state=apb.ConversationStateStructure(token_details=apb.ConversationTokenDetails(max_tokens=1000))
    .SerializeToString(),
    mode=apb.AGENT_MODE_AGENT, max_tokens=128000,
)


def runtime(n, turn=True):
    um = apb.UserMessage(text=f"q{n}", message_id=f"m{n}").SerializeToString()
    return M(history.runtime_user_payload(
        [TextPart(f"<user_query>\nq{n}\n</user_query>")], wire_id=f"runtime:run-request:r{n}",
        turn={"request_id": f"r{n}", "user_message_blob": history.b64(um)} if turn else None))


def assistant(text, usage=None, thinking=""):
    return M(history.assistant_payload(AssistantItem(text=text, thinking=thinking), thinking_ms=5 if thinking else None,
                                       usage=usage, model_call_id="mc"), "assistant")


def round_pairs(round_id, calls, order):
    """calls: [(index, call_id)], results committed in `order` (indexes)."""
    out = []
    for n, index in enumerate(order):
        call_id = dict(calls)[index]
        item = AssistantItem(text="look" if n == 0 else "", thinking="hmm" if n == 0 else "",
                             tool_calls=(ToolCall(call_id, "Read", json.dumps({"path": call_id}), index),))
        out.append(M(history.assistant_payload(item, thinking_ms=3 if n == 0 else None, usage=None,
                                               model_call_id="mc", tool_round_id=round_id, round_size=len(calls)),
                     "assistant"))
        tc = apb.ToolCall(read_tool_call=apb.ReadToolCall(
            args=apb.ReadToolArgs(path=call_id),
            result=apb.ReadToolResult(success=apb.ReadToolSuccess(path=call_id))))
        out.append(M(history.tool_payload(ToolResultItem(call_id, "Read", f"content of {call_id}"),
                                          tool_round_id=round_id, call_index=index,
                                          tool_call_pb=tc.SerializeToString()), "tool"))
    return out


def test_fold_merges_a_round_calls_by_index_results_by_completion():
    msgs = [runtime(1), *round_pairs("R", [(0, "a"), (1, "b"), (2, "c")], [2, 0, 1]), assistant("done")]
    items = history.transcript(msgs)
    merged = items[1]
    assert isinstance(merged, AssistantItem)
    assert [c.call_id for c in merged.tool_calls] == ["a", "b", "c"]
    assert merged.text == "look" and merged.thinking == "hmm"
    assert [i.call_id for i in items[2:5]] == ["c", "a", "b"]
    assert items[5].text == "done"


def test_incomplete_round_never_reaches_the_model():
    msgs = [runtime(1), *round_pairs("R", [(0, "a"), (1, "b")], [1])]
    try:
        history.transcript(msgs)
    except history.IncompleteRound:
        return
    raise AssertionError("a dangling call was projected")


def test_projection_is_deterministic_and_pure():
    msgs = [runtime(1), assistant("hi", usage={"input_tokens": 100, "output_tokens": 5})]
    before = json.dumps([m.payload for m in msgs], sort_keys=True)
    a, b = proj.project(msgs, CTX), proj.project(msgs, CTX)
    assert a.state_bytes() == b.state_bytes() and a.blobs == b.blobs
    assert json.dumps([m.payload for m in msgs], sort_keys=True) == before
    for bid, data in a.blobs.items():
        assert proj.sha256(data) == bid


def test_staged_and_settled_share_the_turn_and_roots_grow_by_one():
    base = [runtime(1)]
    final = AssistantItem(text="hello")
    usage = {"input_tokens": 20000, "output_tokens": 8}
    staged = proj.project(base, CTX, pending=proj.Pending(final, None, usage))
    settled = proj.project(base + [M(history.assistant_payload(final, thinking_ms=None, usage=usage,
                                                                model_call_id="mc"), "assistant")], CTX)
    assert list(staged.state.turns) == list(settled.state.turns)
    assert len(settled.state.root_prompt_messages_json) == len(staged.state.root_prompt_messages_json) + 1
    pending = json.loads(staged.state.pending_tool_calls[0])
    assert pending["content"] == [{"type": "text", "text": "hello"}] and pending["id"] == "1"
    assert not settled.state.pending_tool_calls
    details = settled.state.token_details
    assert details.used_tokens == 20008 and details.max_tokens == 1000
    assert len(details.breakdown.categories) == 8
    assert sum(c.estimated_tokens for c in details.breakdown.categories) == 20008


def test_breakdown_shrinks_fixed_categories_when_usage_is_tiny():
    snap = tokens.breakdown(3, 100, "x" * 1000, (), ["<rules>" + "r" * 500 + "</rules>"], 10)
    assert sum(c.estimated_tokens for c in snap.categories) == 3
    assert all(c.estimated_tokens >= 0 for c in snap.categories)


def test_mcp_tools_offered_directly_count_in_the_mcp_category():
    section = "<mcp_meta_tools>\nserver Docs: search, fetch\n</mcp_meta_tools>"
    direct = (ToolSpec("mcp_user-docs__search", "Search the docs", {"type": "object", "properties": {"q": {"type": "string"}}}),
              ToolSpec("mcp_user-docs__fetch", "Fetch a page", {"type": "object"}))
    without = {c.id: (c.estimated_tokens, c.character_count)
               for c in tokens.breakdown(100_000, 200_000, "sys", (), [section], 10).categories}
    with_direct = {c.id: (c.estimated_tokens, c.character_count)
                   for c in tokens.breakdown(100_000, 200_000, "sys", (), [section], 10, dynamic_tools=direct).categories}
    definitions = json.dumps([[t.name, t.description, t.parameters] for t in direct])
    assert without["mcp"][1] > 0  # the runtime message's MCP section alone
    assert with_direct["mcp"][1] == without["mcp"][1] + len(definitions)  # plus every definition
    added = with_direct["mcp"][0] - without["mcp"][0]
    assert abs(added - tokens.estimate_tokens(definitions)[0]) <= 1
    assert with_direct["tools"] == without["tools"]  # not counted twice


def test_round_steps_thinking_text_then_calls_in_index_order():
    msgs = [runtime(1), *round_pairs("R", [(0, "a"), (1, "b")], [1, 0])]
    p = proj.project(msgs, CTX)
    turn = apb.ConversationTurnStructure.FromString(p.blobs[p.state.turns[-1]]).agent_conversation_turn
    steps = [apb.ConversationStep.FromString(p.blobs[s]) for s in turn.steps]
    kinds = [s.WhichOneof("message") for s in steps]
    assert kinds == ["thinking_message", "assistant_message", "tool_call", "tool_call"]
    assert [s.tool_call.read_tool_call.args.path for s in steps[2:]] == ["a", "b"]
    assert p.last_turn_steps == 4
    assert list(p.state.read_paths) == ["b", "a"]


histories = st.lists(
    st.one_of(
        st.builds(lambda n: ("rt", n), st.integers(0, 5)),
        st.builds(lambda t: ("as", t), st.text(max_size=30)),
        st.builds(lambda order: ("round", order), st.permutations([0, 1, 2])),
    ),
    max_size=8,
)


def build(spec, tag=""):
    out, rounds = [runtime(0)], 0
    for kind, value in spec:
        if kind == "rt":
            out.append(runtime(value + 10 * len(out)))
        elif kind == "as":
            out.append(assistant(value))
        else:
            rounds += 1
            r = f"{tag}{rounds}"
            out += round_pairs(f"R{r}", [(0, f"a{r}"), (1, f"b{r}"), (2, f"c{r}")], list(value))
    return out


@settings(max_examples=60, deadline=None)
@given(histories, histories)
def test_prefix_property_across_appends(first, second):
    a = build(first)
    b = a + build(second, "x")[1:]
    pa, pb = proj.project(a, CTX), proj.project(b, CTX)
    ra, rb = list(pa.state.root_prompt_messages_json), list(pb.state.root_prompt_messages_json)
    assert rb[: len(ra)] == ra
    ta, tb = history.transcript(a), history.transcript(b)
    assert tb[: len(ta)] == ta
    again = proj.project(b, CTX)
    assert again.state_bytes() == pb.state_bytes()


@given(st.text())
def test_estimate_tokens_follows_the_per_character_rule(text):
    ascii_chars = sum(1 for ch in text if ord(ch) < 128)
    units = sum(2 if ord(ch) > 0xFFFF else 1 for ch in text)
    assert tokens.estimate_tokens(text) == (round(ascii_chars * 0.273 + (units - ascii_chars) * 0.55), units)


def turn_with_state(n, state: apb.ConversationStateStructure):
    """A runtime turn as the engine stores it (`turn_payload`): the user message points at the
    state before it, which is stored beside the message (`user_input.snapshot`), not in it."""
    state_blob = state.SerializeToString(deterministic=True)
    payload, _ = user_input.turn_payload(
        user_input.Rendered([TextPart(f"q{n}")], "digest"), apb.UserMessage(text=f"q{n}", message_id=f"m{n}"),
        event_id=f"run-request:r{n}", request_id=f"r{n}", state_blob=state_blob)
    return M(payload), state_blob


def test_a_turns_state_snapshot_is_named_by_its_message_not_carried_in_it():
    first = proj.project([runtime(1), assistant("a1")], CTX)
    msg, state_blob = turn_with_state(2, first.state)
    state_id = proj.sha256(state_blob)
    assert state_blob.hex() not in json.dumps(msg.payload) and history.b64(state_blob) not in json.dumps(msg.payload)
    assert msg.payload["blob_refs"][1] == state_id.hex()
    history_ = [runtime(1), assistant("a1"), msg, assistant("a2")]
    p = proj.project(history_, CTX)
    assert p.blobs[state_id] is None  # named, its bytes in the store (stored with the message)
    um_id = apb.ConversationTurnStructure.FromString(p.blobs[p.state.turns[1]]).agent_conversation_turn.user_message
    assert apb.UserMessage.FromString(p.blobs[um_id]).conversation_state_blob_id == state_id
    assert p.refs_of(um_id) == [("conversation_state_blob_id", 0, state_id)]
    assert list(p.blobs).index(state_id) < list(p.blobs).index(um_id)  # SET children first
    run = proj.Projector().extend(history_, known={state_id: state_blob})  # the run that stored it has it
    assert run.checkpoint(CTX).blobs[state_id] == state_blob
    assert user_input.snapshot(state_blob) == (state_id, state_blob, [])  # no edges: O(history) rows a turn
