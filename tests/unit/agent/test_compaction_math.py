"""Compaction: the threshold arithmetic, the prompt estimate, which messages a summary replaces,
and the provider view and checkpoint projection of a history with summaries."""

import itertools
import json
from dataclasses import dataclass

import pytest

from byok.agent import history
from byok.agent.capabilities import compaction
from byok.agent.capabilities.compaction import Threshold, plan, prompt_tokens
from byok.agent.cursor.tokens import reported_prompt
from byok.providers.config import ModelRoute
from byok.agent.cursor import projection as proj
from byok.agent.cursor import tokens
from byok.providers.transcript import AssistantItem, TextPart, ToolCall, ToolResultItem, ToolSpec, UserItem
from byok.proto import agent_pb2 as apb

_ids = itertools.count(1)


@dataclass(frozen=True)
class M:
    payload: dict
    role: str = "user"
    id: int = 0


def msg(payload, role="user") -> M:
    return M(payload, role, next(_ids))


CTX = proj.ProjectionContext(
    system_prompt="You are a test.", tools=(ToolSpec("Read", "read a file", {"type": "object"}),),
    base_state=apb.ConversationStateStructure().SerializeToString(), mode=apb.AGENT_MODE_AGENT, max_tokens=100000,
)


def runtime(n, text=None):
    um = apb.UserMessage(text=f"q{n}", message_id=f"m{n}").SerializeToString()
    return msg(history.runtime_user_payload(
        [TextPart(text or f"<user_query>\nq{n}\n</user_query>")], wire_id=f"runtime:run-request:r{n}",
        turn={"request_id": f"r{n}", "user_message_blob": history.b64(um)}))


def assistant(text, usage=None, replay=None, call="mc"):
    return msg(history.assistant_payload(AssistantItem(text=text, replay=replay), thinking_ms=None, usage=usage,
                                         model_call_id=call), "assistant")


def tool_round(rid, result="x" * 40, usage=None, call="mc-round"):
    item = AssistantItem(text="", tool_calls=(ToolCall(f"c-{rid}", "Read", '{"path": "a"}', 0),))
    tc = apb.ToolCall(read_tool_call=apb.ReadToolCall(args=apb.ReadToolArgs(path="a")))
    return [
        msg(history.assistant_payload(item, thinking_ms=None, usage=usage, model_call_id=call,
                                      tool_round_id=rid, round_size=1), "assistant"),
        msg(history.tool_payload(ToolResultItem(f"c-{rid}", "Read", result), tool_round_id=rid, call_index=0,
                                 tool_call_pb=tc.SerializeToString()), "tool"),
    ]


def summary(split, text="SUMMARY", replaced=(), window_tail=0):
    parts = [TextPart(compaction.PROMPTS.summary.render(SUMMARY=text).strip())]
    return msg(history.summary_payload(
        parts, wire_id=f"runtime:summary:mc-{next(_ids)}", summary=text,
        context_id=split.context.id if split.context is not None else None,
        tail_from=split.tail[0].id if split.tail else None,
        summarized_roots=replaced, window_tail=window_tail, model_call_id="mc-s"))


# ---- threshold arithmetic ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "context, compact_at, max_out, limit",
    [
        (128000, 0.8, None, 102400),
        (128000, 0.8, 8192, 102400),      # room for the answer already
        (200000, 0.8, 64000, 136000),     # a prompt over 136000 would leave less than max_out
        (1000000, 0.8, None, 800000),     # a 1M window compacts in proportion, not at a fixed number
        (1000000, 0.95, 32000, 950000),
        (None, 0.8, 8192, None),          # no window: never ahead of time
    ],
)
def test_threshold_limit(context, compact_at, max_out, limit):
    t = Threshold(context, compact_at, max_out)
    assert t.limit == limit
    if limit is None:
        assert not t.exceeded(10**9)
    else:
        assert not t.exceeded(limit) and t.exceeded(limit + 1)


def test_threshold_of_a_route_and_the_tail_budget():
    route = ModelRoute("id", "p", "openai_chat", "http://x", "m", "M", context_tokens=1_000_000, compact_at=0.9)
    t = Threshold.of(route)
    assert t.limit == 900000 and t.tail_budget(950000) == 225000
    assert Threshold(None).tail_budget(40000) == 10000  # overflow without a window: a share of the prompt


def test_reported_prompt_counts_anthropic_cache_apart():
    usage = {"input_tokens": 20, "output_tokens": 5, "cache_read_tokens": 9000, "cache_write_tokens": 300}
    assert reported_prompt(usage, {"kind": "anthropic", "content": []}) == 9320
    assert reported_prompt(usage, {"kind": "openai_responses", "output": []}) == 20  # OpenAI includes cached input
    assert reported_prompt(usage, None) == 20
    assert reported_prompt({"output_tokens": 5}, None) is None


def test_prompt_tokens_is_the_last_report_plus_an_estimate_of_what_came_since():
    first = [runtime(1), assistant("a1", usage={"input_tokens": 50000, "output_tokens": 100}, call="c1")]
    assert prompt_tokens(first, system_prompt="s", tools=()) == 50100
    big = "y" * 40000  # ~10920 tokens at 0.273 per ASCII character
    later = first + [runtime(2)] + tool_round("R", result=big, usage={"input_tokens": 60000, "output_tokens": 7},
                                              call="c2")
    # the round's own assistant is the call's output (counted in output_tokens); its result is new
    assert prompt_tokens(later, system_prompt="s", tools=()) == 60007 + tokens.estimate_tokens(big)[0]


def test_prompt_tokens_after_a_summary_estimates_everything():
    h = [runtime(1, "q" * 4000), assistant("a1", usage={"input_tokens": 90000, "output_tokens": 10})]
    split = plan(history.view(h), tail_budget=0)
    h.append(summary(split, "short summary"))
    size = prompt_tokens(h, system_prompt="sys", tools=())
    expected = tokens.prompt_estimate("sys", (), history.transcript(h))
    assert size == expected and size < 2000


# ---- what a compaction replaces -----------------------------------------------------------------------


def test_plan_keeps_the_current_turn_and_a_recent_tail_of_whole_rounds():
    old = [runtime(1, "w" * 20000), assistant("a1" * 3000)]
    current = runtime(2)
    rounds = tool_round("R1", "r" * 8000) + tool_round("R2", "s" * 400)
    seen = old + [current] + rounds
    split = plan(seen, tail_budget=500)
    assert split.tail == rounds[2:]  # R2 fits, R1 does not; a round is never split
    assert split.context is current and split.summarized == old + [current] + rounds[:2]
    roomy = plan(seen, tail_budget=10**6)
    assert roomy.summarized == old[:1] and roomy.context is None  # never everything; current stays in place


def test_plan_never_keeps_an_earlier_summary_and_may_find_nothing():
    h = [runtime(1), assistant("a1")]
    split = plan(h, tail_budget=0, keep_context=False)  # as /summarize does
    h.append(summary(split))
    assert history.view(h) == h[-1:]
    assert plan(history.view(h), tail_budget=0, keep_context=False) is None  # only a summary: nothing to do
    h.append(runtime(2))
    assert plan(history.view(h), tail_budget=10**6) is None  # the summary and the current turn: nothing
    h.append(assistant("a2"))
    later = plan(history.view(h), tail_budget=10**6)
    assert later.summarized[0].payload["kind"] == "summary"  # an earlier summary is folded into the next
    assert plan([runtime(9)], tail_budget=0) is None


# ---- the view and the checkpoint -------------------------------------------------------------------------


def compacted_history():
    old = [runtime(1, "first question " * 50), assistant("first answer", usage={"input_tokens": 900,
                                                                                 "output_tokens": 10})]
    current = runtime(2)
    rounds = tool_round("R1") + tool_round("R2", usage={"input_tokens": 80000, "output_tokens": 20}, call="c2")
    before = old + [current] + rounds
    split = plan(before, tail_budget=30)
    assert split.tail == rounds[2:] and split.context is current
    return before, split


def test_view_puts_context_summary_and_tail_first_then_what_follows():
    before, split = compacted_history()
    s = summary(split)
    after = [*before, s]
    assert history.view(after) == [split.context, s, *split.tail]
    more = [*after, *tool_round("R3"), assistant("done")]
    assert history.view(more) == [split.context, s, *split.tail, *more[len(after):]]
    items = history.transcript(more)
    assert isinstance(items[1], UserItem) and "SUMMARY" in items[1].parts[0].text
    assert "first question" not in json.dumps([str(i) for i in items])


def test_projection_with_a_summary():
    before, split = compacted_history()
    pre = proj.project(before, CTX)
    s = summary(split, "the gist", replaced=list(pre.state.root_prompt_messages_json)[1:3], window_tail=2)
    after = [*before, s]
    p = proj.project(after, CTX)
    roots = list(p.state.root_prompt_messages_json)
    assert len(roots) == 5  # system, the current turn, the summary, the kept round (assistant + tool)
    assert roots[1] == pre.state.root_prompt_messages_json[3]  # the current turn's root, unchanged
    assert json.loads(p.blobs[roots[2]])["id"].startswith("runtime:summary:")
    assert list(p.state.turns[:1]) == list(pre.state.turns[:1]) and len(p.state.turns) == 2  # UI history kept
    assert apb.ConversationSummary.FromString(p.blobs[p.state.summary]).summary == "the gist"
    archive = apb.ConversationSummaryArchive.FromString(p.blobs[p.state.summary_archive])
    assert archive.summary == "the gist" and archive.window_tail == 2 and archive.summary_message == roots[2]
    assert list(archive.summarized_messages) == list(pre.state.root_prompt_messages_json[1:3])
    assert p.state.self_summary_count == 1 and not p.state.summary_archives
    assert {p.state.summary, p.state.summary_archive} <= set(p.top_level_ids())
    details = p.state.token_details
    assert details.used_tokens < 80020  # estimated until the provider measures the compacted prompt
    categories = {c.id: c for c in details.breakdown.categories}
    assert categories["summarized_conversation"].estimated_tokens > 0
    assert sum(c.estimated_tokens for c in details.breakdown.categories) == details.used_tokens
    # from here on the prefix is stable again
    grown = proj.project([*after, *tool_round("R3"), assistant("done", usage={"input_tokens": 3000,
                                                                              "output_tokens": 5})], CTX)
    assert list(grown.state.root_prompt_messages_json[:5]) == roots
    assert grown.state.token_details.used_tokens == 3005
    assert proj.project(after, CTX).state_bytes() == p.state_bytes()


def test_a_second_summary_archives_the_first():
    before, split = compacted_history()
    h = [*before, summary(split, "one")]
    h += [runtime(3), assistant("a3")]
    split2 = plan(history.view(h), tail_budget=0)
    h.append(summary(split2, "two"))
    p = proj.project(h, CTX)
    assert p.state.self_summary_count == 2 and len(p.state.summary_archives) == 1
    assert apb.ConversationSummary.FromString(p.blobs[p.state.summary]).summary == "two"
    first = apb.ConversationSummaryArchive.FromString(p.blobs[p.state.summary_archives[0]])
    assert first.summary == "one"
    assert len(p.state.root_prompt_messages_json) == 3  # system, the current turn (3), "two"


def test_a_branch_before_the_compaction_clears_the_summary_fields():
    before, split = compacted_history()
    compacted = proj.project([*before, summary(split)], CTX)
    ctx = proj.ProjectionContext(CTX.system_prompt, CTX.tools, compacted.state_bytes(), CTX.mode, CTX.max_tokens)
    branch = proj.project(before[:2], ctx)  # e.g. an edit of the second message
    assert not branch.state.summary and not branch.state.summary_archive and not branch.state.self_summary_count
