"""Issue 11, compaction, through a real mitmdump on all three dialects: a conversation that compacts
before a call and then continues, resumes and edits; compaction at a tool boundary; /summarize; a
provider overflow that is compacted and retried, and one that ends ERROR_CONVERSATION_TOO_LONG;
summary_model."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from byok.wire import connect
from byok.cli.client import user_turn_request
from byok.proto import agent_pb2 as apb, aiserver_pb2 as spb
from tests.e2e.conftest import run
from tests.e2e.harness import Proxy, model_entry, providers_toml, public_id, run_with_executor
from tests.support.scripted_provider import CHAT, KINDS, SCRIPTS, HttpError, Usage

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

WINDOW = 20000  # limit 16000 (anthropic: 20000 - 4096 = 15904)
OVER = Usage(input_tokens=16500, output_tokens=20)  # a reported prompt past every model's threshold
SMALL = Usage(input_tokens=3000, output_tokens=10)
FILLER = "The quick brown fox jumps over the lazy dog. " * 450  # ~20k characters, ~5.5k tokens
SUMMARY_PROMPT_MARK = "You keep the memory of a long working session"
OVERFLOW = {
    "openai_chat": HttpError(400, {"error": {
        "message": "This model's maximum context length is 20000 tokens. However, your messages resulted in "
                   "21000 tokens.", "type": "invalid_request_error", "param": "messages",
        "code": "context_length_exceeded"}}),
    "openai_responses": HttpError(400, {"error": {
        "message": "Your input exceeds the context window of this model.", "type": "invalid_request_error",
        "param": "input", "code": "context_length_exceeded"}}),
    "anthropic": HttpError(400, {"type": "error", "error": {
        "type": "invalid_request_error", "message": "prompt is too long: 21000 tokens > 20000 maximum"}}),
}


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider):
    entries = {}
    for kind in KINDS:
        extra = {"max_output_tokens": 4096} if kind == "anthropic" else {}
        entries[kind] = model_entry(provider.base_url, kind=kind, model_id=f"{kind}-model", name=f"p-{kind}",
                                    context_tokens=WINDOW, extra=extra)
    # no context_tokens: never compacted ahead of time, only after the provider reports an overflow
    windowless = {kind: model_entry(provider.base_url, kind=kind, model_id=f"{kind}-open", name=f"open-{kind}",
                                    context_tokens=None, extra={"max_output_tokens": 4096} if kind == "anthropic" else {})
                  for kind in KINDS}
    # summaries written by another model (of the same provider)
    delegating = model_entry(provider.base_url, model_id="delegating", name="delegating", context_tokens=WINDOW,
                             extra={"summary_model": '"summarizer"'})
    home = tmp_path_factory.mktemp("compaction")
    text = providers_toml([*entries.values(), *windowless.values(), delegating])
    text += '[[providers.models]]\nid = "summarizer"\ncontext_tokens = 200000\n'  # a second model of "delegating"
    (home / "providers.toml").write_text(text)
    proxy = Proxy(home).start()
    ids = {kind: public_id(e) for kind, e in entries.items()}
    ids |= {f"{kind}-open": public_id(e) for kind, e in windowless.items()}
    ids["delegating"] = public_id(delegating)
    yield proxy, ids
    proxy.stop()


@dataclass
class Turn:
    request: apb.AgentRunRequest
    result: object
    blobs: dict


def send(proxy, request, *, blobs=None) -> Turn:
    async def scenario():
        async with proxy.client(blobs=dict(blobs or {})) as client:
            result = await client.run(request)
            return Turn(request, result, dict(client.blobs))

    return run(scenario())


def user(proxy, model, text, *, after: Turn | None = None, message_id=None, state=None) -> Turn:
    request = user_turn_request(text, model_id=model, message_id=message_id,
                                conversation_id=after.request.conversation_id if after else None,
                                state=state if state is not None else after.result.checkpoints()[-1] if after else None)
    return send(proxy, request, blobs=after.blobs if after else None)


def action(after: Turn, which: str, state=None) -> apb.AgentRunRequest:
    request = apb.AgentRunRequest(conversation_id=after.request.conversation_id,
                                  requested_model=after.request.requested_model)
    request.conversation_state.CopyFrom(state if state is not None else after.result.checkpoints()[-1])
    getattr(request.action, which).SetInParent()
    return request


def body(request) -> str:
    return json.dumps(request.json, ensure_ascii=False)


def summary_frames(result) -> list[str]:
    return [k for k in result.kinds() if k.startswith("interaction_update.summary")]


def root_json(turn: Turn, state) -> list[dict]:
    return [json.loads(turn.blobs[r]) for r in state.root_prompt_messages_json]


@pytest.mark.parametrize("kind", KINDS)
def test_compacts_before_a_call_then_continues_resumes_and_edits(env, provider, kind):
    proxy, ids = env
    model, script = ids[kind], SCRIPTS[kind]
    provider.enqueue(kind, script.text_reply("answer one", usage=OVER))
    first = user(proxy, model, "one: " + FILLER, message_id="m1")
    assert first.result.end_error is None, first.result.end_error

    provider.enqueue(kind, script.text_reply("SUMMARY: the user asked about a fox."),
                     script.text_reply("answer two", usage=SMALL))
    n = len(provider.requests)
    second = user(proxy, model, "two", after=first, message_id="m2")
    assert second.result.end_error is None, second.result.end_error
    summary_request, call = provider.requests[n], provider.requests[n + 1]
    assert len(provider.requests) == n + 2
    assert "tools" not in summary_request.json and SUMMARY_PROMPT_MARK in body(summary_request)
    assert "The quick brown fox" in body(summary_request)
    assert "SUMMARY: the user asked about a fox." in body(call) and "The quick brown fox" not in body(call)
    assert "two" in body(call) and call.json.get("tools")

    kinds = second.result.kinds()
    assert summary_frames(second.result) == ["interaction_update.summary_started", "interaction_update.summary",
                                             "interaction_update.summary_completed"]
    started, completed = kinds.index("interaction_update.summary_started"), \
        kinds.index("interaction_update.summary_completed")
    assert "conversation_checkpoint_update" in kinds[started:completed]  # compacted state published first
    assert kinds.index("interaction_update.text_delta") > completed and second.result.text() == "answer two"
    [update] = [f for f in second.result.down("interaction_update.summary") if f.kind == "interaction_update.summary"]
    assert update.message.interaction_update.summary.summary == "SUMMARY: the user asked about a fox."
    [ended] = [f.message.interaction_update.turn_ended for f in second.result.down("interaction_update.turn_ended")]
    assert ended.input_tokens == 100 + 3000  # the summary call is paid for too

    state = second.result.checkpoints()[-1]
    assert state.self_summary_count == 1 and len(state.turns) == 2  # Cursor's history keeps both turns
    assert apb.ConversationSummary.FromString(second.blobs[state.summary]).summary.startswith("SUMMARY")
    archive = apb.ConversationSummaryArchive.FromString(second.blobs[state.summary_archive])
    at_compaction = [s for s in second.result.checkpoints() if s.self_summary_count][0]
    roots = list(at_compaction.root_prompt_messages_json)  # [system, summary, kept tail...]
    assert archive.summary_message == roots[1] and archive.window_tail == len(roots) - 2
    assert list(archive.summarized_messages) and not set(archive.summarized_messages) & set(roots)
    assert all(r in first.blobs for r in archive.summarized_messages)
    assert "The quick brown fox" not in json.dumps(root_json(second, state))
    categories = {c.id: c.estimated_tokens for c in state.token_details.breakdown.categories}
    assert categories["summarized_conversation"] > 0
    db = sqlite3.connect(proxy.db)
    purposes = db.execute("SELECT purpose, count(*) FROM llm_calls WHERE request_id = ? GROUP BY purpose",
                          [second.result.request_id]).fetchall()
    assert dict(purposes) == {"summary": 1, None: 1}

    # continue: no second compaction, and the compacted prompt is a stable prefix
    provider.enqueue(kind, script.text_reply("answer three", usage=SMALL))
    third = user(proxy, model, "three", after=second, message_id="m3")
    assert third.result.end_error is None and not summary_frames(third.result)
    key = "input" if kind == "openai_responses" else "messages"
    before, now = call.json[key], provider.requests[-1].json[key]
    # Anthropic's cache_control breakpoints move forward each round (test_prompt_cache checks them)
    assert strip_cache_control(now[: len(before)]) == strip_cache_control(before)

    # resume from the compacted checkpoint published before the answer (the stream dropped there)
    compacted = [s for s in second.result.checkpoints() if s.self_summary_count][0]
    provider.enqueue(kind, script.text_reply("answer two, again", usage=SMALL))
    resumed = send(proxy, action(second, "resume_action", state=compacted), blobs=second.blobs)
    assert resumed.result.end_error is None, resumed.result.end_error
    assert resumed.result.text() == "answer two, again" and not summary_frames(resumed.result)
    assert "SUMMARY" in body(provider.requests[-1]) and "The quick brown fox" not in body(provider.requests[-1])

    # edit the first message: back before the compaction, the summary is gone
    provider.enqueue(kind, script.text_reply("answer one, edited", usage=SMALL))
    edited = user(proxy, model, "one, edited", after=third, message_id="m1")
    assert edited.result.end_error is None, edited.result.end_error
    sent = body(provider.requests[-1])
    assert "one, edited" in sent and "SUMMARY" not in sent and "answer two" not in sent
    state = edited.result.checkpoints()[-1]
    assert len(state.turns) == 1 and not state.summary and not state.self_summary_count


@pytest.mark.parametrize("kind", KINDS)
def test_compaction_at_a_tool_boundary_keeps_the_current_request(env, provider, tmp_path, kind):
    proxy, ids = env
    script = SCRIPTS[kind]
    (tmp_path / "big.txt").write_text(FILLER)
    read = json.dumps({"path": str(tmp_path / "big.txt")})
    provider.enqueue(kind, script.tool_calls([("call_big", "Read", read)], usage=OVER),
                     script.text_reply("SUMMARY: read big.txt, it is about a fox."),
                     script.text_reply("big.txt is about a fox.", usage=SMALL))
    n = len(provider.requests)

    request = user_turn_request("what is in big.txt?", model_id=ids[kind], workspace=str(tmp_path))
    result, _ = run_with_executor(proxy, request, tmp_path)
    assert result.end_error is None, result.end_error
    assert len(provider.requests) == n + 3
    summary_request, call = provider.requests[n + 1], provider.requests[n + 2]
    assert "The quick brown fox" in body(summary_request) and "tools" not in summary_request.json
    sent = body(call)
    assert "what is in big.txt?" in sent and "SUMMARY: read big.txt" in sent and "The quick brown fox" not in sent
    kinds = result.kinds()
    assert kinds.index("interaction_update.tool_call_completed") < kinds.index("interaction_update.summary_started")
    state = result.checkpoints()[-1]
    assert state.self_summary_count == 1 and len(state.turns) == 1
    steps = apb.ConversationTurnStructure.FromString(
        run_blobs(proxy, state.turns[0])).agent_conversation_turn.steps
    assert len(steps) == 2  # the Read card and the answer: the UI keeps everything


def run_blobs(proxy, blob_id: bytes) -> bytes:
    return sqlite3.connect(proxy.db).execute("SELECT data FROM blobs WHERE id = ?", [blob_id]).fetchone()[0]


@pytest.mark.parametrize("kind", KINDS)
def test_summarize_action_compacts_on_demand_and_ends_the_run(env, provider, kind):
    proxy, ids = env
    script = SCRIPTS[kind]
    provider.enqueue(kind, script.text_reply("a fox answer"))
    first = user(proxy, ids[kind], "tell me about the fox: " + FILLER[:2000])
    provider.enqueue(kind, script.text_reply("SUMMARY: fox talk.", usage=Usage(900, 40)))
    n = len(provider.requests)
    summarized = send(proxy, action(first, "summarize_action"), blobs=first.blobs)
    result = summarized.result
    assert result.end_error is None, result.end_error
    assert len(provider.requests) == n + 1 and "tools" not in provider.requests[n].json
    assert [k for k in result.kinds() if not k.startswith("kv_")] == [
        "interaction_update.summary_started", "interaction_update.summary", "conversation_checkpoint_update",
        "interaction_update.summary_completed", "interaction_update.turn_ended",
        "conversation_checkpoint_update", "conversation_checkpoint_update", "end_stream",
    ]
    [ended] = [f.message.interaction_update.turn_ended for f in result.down("interaction_update.turn_ended")]
    assert ended.input_tokens == 900 and ended.output_tokens == 40
    states = result.checkpoints()
    assert states[0] == states[1] == states[2]
    state = states[-1]
    assert len(state.root_prompt_messages_json) == 2  # system + summary: nothing else is kept
    assert list(state.turns) == list(first.result.checkpoints()[-1].turns) and state.self_summary_count == 1

    provider.enqueue(kind, script.text_reply("fresh start"))
    after = user(proxy, ids[kind], "go on", after=summarized)
    assert after.result.end_error is None
    sent = body(provider.requests[-1])
    assert "SUMMARY: fox talk." in sent and "tell me about the fox" not in sent and "go on" in sent


@pytest.mark.parametrize("kind", KINDS)
def test_overflow_is_compacted_once_and_retried(env, provider, kind):
    proxy, ids = env
    model, script = ids[f"{kind}-open"], SCRIPTS[kind]
    provider.enqueue(kind, script.text_reply("answer one"))
    first = user(proxy, model, "one: " + FILLER)
    provider.enqueue(kind, OVERFLOW[kind], script.text_reply("SUMMARY: one was about a fox."),
                     script.text_reply("answer two"))
    n = len(provider.requests)
    second = user(proxy, model, "two", after=first)
    assert second.result.end_error is None, second.result.end_error
    assert len(provider.requests) == n + 3
    overflowed, summary_request, retry = provider.requests[n:n + 3]
    assert "The quick brown fox" in body(overflowed) and "tools" not in summary_request.json
    assert "SUMMARY: one was about a fox." in body(retry) and "The quick brown fox" not in body(retry)
    assert second.result.text() == "answer two" and second.result.checkpoints()[-1].self_summary_count == 1


@pytest.mark.parametrize("kind", KINDS)
def test_overflow_that_compaction_cannot_fix_ends_conversation_too_long(env, provider, kind):
    proxy, ids = env
    model, script = ids[f"{kind}-open"], SCRIPTS[kind]
    # a first message that alone overflows: nothing to summarize, no summary call
    provider.enqueue(kind, OVERFLOW[kind])
    n = len(provider.requests)
    alone = user(proxy, model, "huge: " + FILLER)
    assert_too_long(alone.result)
    assert len(provider.requests) == n + 1 and not summary_frames(alone.result)

    # compacted once, and the retry overflows again: no second compaction
    provider.enqueue(kind, script.text_reply("answer one"))
    first = user(proxy, model, "one: " + FILLER)
    provider.enqueue(kind, OVERFLOW[kind], script.text_reply("SUMMARY: still too much."), OVERFLOW[kind])
    n = len(provider.requests)
    second = user(proxy, model, "two", after=first)
    assert_too_long(second.result)
    assert len(provider.requests) == n + 3
    assert summary_frames(second.result)[-1] == "interaction_update.summary_completed"


def assert_too_long(result) -> None:
    assert result.end_error is not None and result.end_error.code is connect.Code.UNAVAILABLE
    details = spb.ErrorDetails.FromString(result.end_error.details[0].value)
    assert details.error == spb.ErrorDetails.ERROR_CONVERSATION_TOO_LONG
    assert "interaction_update.turn_ended" not in result.kinds()


def test_summary_model_writes_the_summary(env, provider):
    proxy, ids = env
    provider.enqueue("openai_chat", CHAT.text_reply("answer one", usage=OVER))
    first = user(proxy, ids["delegating"], "one: " + FILLER)
    provider.enqueue("openai_chat", CHAT.text_reply("SUMMARY by the summarizer"),
                     CHAT.text_reply("answer two", usage=SMALL))
    n = len(provider.requests)
    second = user(proxy, ids["delegating"], "two", after=first)
    assert second.result.end_error is None, second.result.end_error
    assert provider.requests[n].json["model"] == "summarizer"
    assert provider.requests[n + 1].json["model"] == "delegating"
    db = sqlite3.connect(proxy.db)
    rows = db.execute("SELECT model, purpose FROM llm_calls WHERE request_id = ? ORDER BY call_index",
                      [second.result.request_id]).fetchall()
    assert rows == [("summarizer", "summary"), ("delegating", None)]
    cli = str(Path(sys.executable).with_name("cursor-byok"))
    shown = subprocess.run([cli, "trace", second.result.request_id, "--db", str(proxy.db), "--json"],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    [story] = json.loads(shown.stdout)["runs"]
    calls = story["provider_calls"]
    assert [(c["model"], c["purpose"]) for c in calls] == [("summarizer", "summary"), ("delegating", None)]
    text = subprocess.run([cli, "trace", second.result.request_id, "--db", str(proxy.db), "--frames", "none"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
    assert "stop (summary)" in text.stdout, text.stdout


def test_a_compacted_conversation_continues_after_the_database_is_lost(tmp_path, provider):
    """The client's compacted checkpoint is all that is left: it is imported (its summary root is an
    ordinary user message then), its compaction fields are echoed, and the conversation goes on."""
    entry = model_entry(provider.base_url, model_id="lost-db-model", name="lost-db", context_tokens=WINDOW)
    home = tmp_path / "home"
    home.mkdir()
    (home / "providers.toml").write_text(providers_toml([entry]))
    proxy = Proxy(home).start()
    model = public_id(entry)
    try:
        provider.enqueue("openai_chat", CHAT.text_reply("answer one", usage=OVER))
        first = user(proxy, model, "one: " + FILLER)
        provider.enqueue("openai_chat", CHAT.text_reply("SUMMARY: a fox, once."), CHAT.text_reply("answer two",
                                                                                                  usage=SMALL))
        second = user(proxy, model, "two", after=first)
        compacted = second.result.checkpoints()[-1]
        assert compacted.self_summary_count == 1
        proxy.stop()
        for suffix in ("", "-wal", "-shm"):
            (proxy.db.parent / (proxy.db.name + suffix)).unlink(missing_ok=True)
        proxy.start()
        provider.enqueue("openai_chat", CHAT.text_reply("answer three", usage=SMALL))
        third = user(proxy, model, "three", after=second)
        assert third.result.end_error is None, third.result.end_error
        assert not summary_frames(third.result)
        sent = body(provider.requests[-1])
        assert "SUMMARY: a fox, once." in sent and "The quick brown fox" not in sent and "three" in sent
        state = third.result.checkpoints()[-1]
        assert list(state.root_prompt_messages_json[:len(compacted.root_prompt_messages_json)]) == \
            list(compacted.root_prompt_messages_json)
        assert (state.summary, state.summary_archive, state.self_summary_count) == \
            (compacted.summary, compacted.summary_archive, 1)
    finally:
        proxy.stop()


def strip_cache_control(value):
    if isinstance(value, dict):
        return {k: strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_cache_control(v) for v in value]
    return value
