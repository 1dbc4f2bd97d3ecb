"""Issue 12, Task and subagents end to end: a real mitmdump, the Cursor-like client acting as Cursor
does for Task (`SubagentRunner`: on `subagent_args` it opens the child's own conversation through the
proxy with `X-Parent-Agent-Tool-Call-Id`, serves it, and replies with the SubagentResult), scripted
providers on all three dialects. Parent and children call the same provider concurrently, so each
script answers only its own conversation (`match`)."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest

from byok.wire import connect
from byok.cli.client import RunResult, user_turn_request
from byok.cli.executor import LocalExecutor
from byok.cli.subagents import SubagentRunner
from byok.agent.subagents import READ_ONLY_TOOLS
from byok.proto import agent_pb2 as apb
from tests.e2e.conftest import run, start_proxy
from tests.e2e.harness import Proxy, ProxyEnv
from tests.support import turns
from tests.support.scripted_provider import KINDS, SCRIPTS, Hang, RecordedRequest, ScriptedProvider

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90), pytest.mark.usefixtures("fresh_provider")]

SUBAGENT_MARK = "working as a **subagent**"


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider):
    proxy, models = start_proxy(tmp_path_factory.mktemp("subagents"), provider, kinds=KINDS)
    yield ProxyEnv(proxy, provider, models)
    proxy.stop()


def is_parent(body) -> bool:
    return SUBAGENT_MARK not in turns.body_text(body)


def is_child(marker: str):
    return lambda body: SUBAGENT_MARK in turns.body_text(body) and marker in turns.body_text(body)


async def until_requested(env: ProxyEnv, match) -> None:
    for _ in range(400):
        if any(r.json and match(r.json) for r in env.provider.requests):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the provider was never asked")


def once_child_called(env: ProxyEnv, marker: str, action: apb.ConversationAction):
    """A `during` hook for parent_turn: once the child `marker` has called the provider (so its Task
    waits), send `action` on the parent's run."""

    async def during(runner, client, request_id):
        await until_requested(env, is_child(marker))
        client.append_soon(request_id, apb.AgentClientMessage(conversation_action=action))

    return during


@dataclass
class Outcome:
    result: RunResult
    runner: SubagentRunner
    request: apb.AgentRunRequest
    blobs: dict[bytes, bytes]

    def completed(self, call_id: str) -> apb.ToolCall:
        [card] = [f.message.interaction_update.tool_call_completed.tool_call
                  for f in self.result.down("interaction_update.tool_call_completed")
                  if f.message.interaction_update.tool_call_completed.call_id == call_id]
        return card

    def child(self, marker: str):
        [found] = [c for c in self.runner.children if marker in c.args.prompt]
        return found


def enqueue(env: ProxyEnv, kind: str, parent: list, children: dict[str, list]) -> None:
    env.provider.enqueue(kind, *parent, match=is_parent)
    for marker, scripts in children.items():
        env.provider.enqueue(kind, *scripts, match=is_child(marker))


def parent_turn(env: ProxyEnv, tmp_path: Path, kind: str, *, text: str = "delegate the work",
                request: apb.AgentRunRequest | None = None, after=None, runner_hook=None, during=None,
                files: dict[str, str] | None = None, proxy: Proxy | None = None, blobs=None,
                expect_clean: bool = True) -> Outcome:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    for name, content in (files or {}).items():
        (workspace / name).write_text(content)
    request = request or user_turn_request(text, model_id=env.models[kind], workspace=str(workspace))
    executor = LocalExecutor(workspace)
    runner = SubagentRunner(executor, request)
    if runner_hook is not None:
        runner_hook(runner)

    proxy = proxy or env.proxy
    request_id = f"req-{request.conversation_id[:8]}-{len(env.provider.requests)}"

    async def scenario():
        async with proxy.client(on_exec=runner.on_exec, blobs=dict(blobs or {})) as client:
            watcher = (asyncio.ensure_future(during(runner, client, request_id))
                       if during is not None else None)
            try:
                result = await runner.run(client, request, request_id=request_id)
            except Exception:
                if expect_clean:
                    raise
                result = None
            if watcher is not None:
                await watcher
            if after is not None:
                await after(runner, client, result)
            await runner.wait_background()
            await executor.aclose()
            return result, dict(client.blobs)

    result, held = run(scenario())
    if expect_clean:
        log = proxy.log()
        assert "Traceback" not in log, log
    return Outcome(result, runner, request, held)


def requests_of(env: ProxyEnv, match) -> list[RecordedRequest]:
    return [r for r in env.provider.requests if r.json and match(r.json)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_foreground_task_runs_its_own_conversation(env, tmp_path, kind):
    s = SCRIPTS[kind]
    marker = f"CHILD-FG-{kind}"
    task = ("call_task_fg", "Task", json.dumps({"description": "Read a", "subagent_type": "explore",
                                                 "prompt": f"{marker}: read a.txt and report what it says"}))
    child_calls = [("call_step", "UpdateCurrentStep", '{"current_step": "Reading a.txt"}'),
                   ("call_read", "Read", '{"path": "a.txt"}')]
    enqueue(env, kind, [s.tool_calls([task]), s.text_reply("The subagent read it.")],
            {marker: [s.tool_calls(child_calls), s.text_reply("a.txt says hello")]})
    before = len(env.provider.requests)
    out = parent_turn(env, tmp_path, kind, text="PARENT-SECRET: have a subagent read a.txt",
                      files={"a.txt": "hello\n"})
    assert out.result.end_error is None, out.result.end_error
    assert env.provider.pending(kind) == 0

    # the exec the parent sent, exactly
    child = out.child(marker)
    conversation = out.request.conversation_id
    assert child.args == apb.SubagentArgs(
        tool_call_id="call_task_fg", subagent_type="explore", model_id=env.models[kind],
        prompt=f"{marker}: read a.txt and report what it says", readonly=True, run_in_background=False,
        parent_conversation_id=conversation, root_parent_conversation_id=conversation)
    [exec_frame] = [f.message.exec_server_message for f in out.result.down("exec_server_message")]
    assert exec_frame.HasField("accept_hook_additional_contexts") and not exec_frame.accept_hook_additional_contexts

    # the child: its own conversation, its own provider calls, isolated from the parent's history
    assert child.ok and child.request.subagent_type_name == "explore"
    child_requests = [r for r in env.provider.requests[before:] if r.json and is_child(marker)(r.json)]
    assert len(child_requests) == 2
    first = turns.body_text(child_requests[0].json)
    assert marker in first and "PARENT-SECRET" not in first
    names = turns.tool_names(kind, child_requests[0].json)
    assert "Read" in names and "UpdateCurrentStep" in names
    assert not {"Write", "StrReplace", "Shell", "Delete", "Task", "CallMcpTool"} & set(names)  # explore: read-only
    # its progress, filed under the parent's Task call in its own checkpoint (field 29)
    progress = child.result.checkpoints()[-1].communicate_update_states_by_parent_tool_call_id["call_task_fg"]
    assert [(h.step, h.message_index) for h in progress.history] == [("Reading a.txt", 1)]

    # the parent: the Task result names the subagent, then its final message
    parent_requests = [r for r in env.provider.requests[before:] if r.json and is_parent(r.json)]
    assert len(parent_requests) == 2
    got = turns.result_of(kind, parent_requests[1].json, "call_task_fg")
    assert got.content == f"Subagent name: Read a\nSubagent ID: {child.agent_id}\n\na.txt says hello"
    card = out.completed("call_task_fg").task_tool_call
    assert card.result.success.agent_id == child.agent_id and not card.result.success.is_background
    assert card.args.agent_id == child.agent_id and card.args.subagent_type.HasField("explore")
    final = out.result.checkpoints()[-1]
    state = final.subagent_runs_by_parent_tool_call_id["call_task_fg"]
    assert (state.subagent_id, state.status, state.title) == (child.agent_id, apb.SUBAGENT_RUN_STATUS_SUCCESS, "Read a")
    assert final.subagent_states[child.agent_id].subagent_type.HasField("explore")
    assert final.subagent_states[child.agent_id].model_id == env.models[kind]  # the parent's model, named
    # the link a resumed parent finds its child by
    db = sqlite3.connect(env.proxy.db)
    row = db.execute("SELECT parent_tool_call_id, parent_conversation_id, subagent_type FROM subagents"
                     " WHERE child_conversation_id = ?", [child.agent_id]).fetchone()
    assert row == ("call_task_fg", conversation, "explore")


@pytest.mark.parametrize("kind", KINDS)
def test_two_parallel_tasks(env, tmp_path, kind):
    s = SCRIPTS[kind]
    tasks = [(f"call_par_{i}", "Task", json.dumps({"description": f"Part {i}", "prompt": f"PAR-{kind}-{i}: do part {i}"}))
             for i in (1, 2)]
    enqueue(env, kind, [s.tool_calls(tasks), s.text_reply("both done")],
            {f"PAR-{kind}-1": [s.text_reply("part 1 done")], f"PAR-{kind}-2": [s.text_reply("part 2 done")]})
    out = parent_turn(env, tmp_path, kind)
    assert out.result.end_error is None, out.result.end_error
    execs = [f.message.exec_server_message for f in out.result.down("exec_server_message")]
    assert sorted(e.subagent_args.tool_call_id for e in execs) == ["call_par_1", "call_par_2"]
    assert len({e.id for e in execs}) == 2  # each its own exec id
    one, two = out.child(f"PAR-{kind}-1"), out.child(f"PAR-{kind}-2")
    assert one.agent_id != two.agent_id and one.ok and two.ok
    # both children ran while both execs were pending: the second exec went out before the first result
    kinds = out.result.kinds()
    completed_at = [i for i, k in enumerate(kinds) if k == "interaction_update.tool_call_completed"]
    exec_at = [i for i, k in enumerate(kinds) if k == "exec_server_message"]
    assert max(exec_at) < min(completed_at)
    body = [r for r in env.provider.requests if r.json and is_parent(r.json)][-1].json
    assert turns.result_of(kind, body, "call_par_1").content.endswith("part 1 done")
    assert turns.result_of(kind, body, "call_par_2").content.endswith("part 2 done")
    final = out.result.checkpoints()[-1]
    assert {k: v.status for k, v in final.subagent_runs_by_parent_tool_call_id.items()} == {
        "call_par_1": apb.SUBAGENT_RUN_STATUS_SUCCESS, "call_par_2": apb.SUBAGENT_RUN_STATUS_SUCCESS}


def run_request(env: ProxyEnv, request: apb.AgentRunRequest, blobs: dict, *, proxy: Proxy | None = None):
    async def scenario():
        async with (proxy or env.proxy).client(blobs=dict(blobs)) as client:
            return await client.run(request), dict(client.blobs)

    return run(scenario())


def stored_events(env: ProxyEnv, conversation: str, prefix: str) -> list[str]:
    db = sqlite3.connect(env.proxy.db)
    try:
        return [e for (e,) in db.execute(
            "SELECT runtime_event_id FROM messages WHERE conversation_id = ? AND runtime_event_id LIKE ?",
            [conversation, prefix + "%"])]
    finally:
        db.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_background_task_is_completed_by_background_task_completion_action(env, tmp_path, kind):
    s = SCRIPTS[kind]
    marker = f"CHILD-BG-{kind}"
    task = ("call_task_bg", "Task", json.dumps({"description": "Count files", "run_in_background": True,
                                                 "prompt": f"{marker}: count the files"}))
    enqueue(env, kind, [s.tool_calls([task]), s.text_reply("It runs in the background.")],
            {marker: [s.text_reply("There are 3 files.")]})
    out = parent_turn(env, tmp_path, kind)
    assert out.result.end_error is None, out.result.end_error
    child = out.child(marker)
    assert child.args.run_in_background and child.ok
    # the parent's turn ended without waiting; the model knew which agent it started
    body = [r for r in env.provider.requests if r.json and is_parent(r.json)][-1].json
    assert turns.result_of(kind, body, "call_task_bg").content == (
        f"Subagent name: Count files\nSubagent ID: {child.agent_id}\n\n"
        "It works in the background; you will be told when it finishes.")
    card = out.completed("call_task_bg").task_tool_call.result.success
    assert card.is_background and card.agent_id == child.agent_id
    state = out.result.checkpoints()[-1]
    assert state.subagent_runs_by_parent_tool_call_id["call_task_bg"].status == apb.SUBAGENT_RUN_STATUS_BACKGROUNDED

    # Cursor opens a new parent run when the child finished
    [completion] = [out.runner.completions.get_nowait()]
    assert (completion.subagent_id, completion.tool_call_id, completion.title, completion.detail) == (
        child.agent_id, "call_task_bg", "Count files", "There are 3 files.")
    env.provider.enqueue(kind, s.text_reply("The count is in: 3 files."), match=is_parent)
    calls = len(env.provider.requests)
    followed, blobs = run_request(env, out.runner.completion_request(state, [completion]), out.blobs)
    assert followed.end_error is None, followed.end_error
    assert followed.text() == "The count is in: 3 files."
    [request] = env.provider.requests[calls:]
    runtime = turns.user_texts(kind, request.json)[-1]
    assert runtime.count("Perform any necessary follow-up actions in response to the subagent completion above.") == 1
    assert f"agent_id: {child.agent_id}" in runtime and "There are 3 files." in runtime
    settled = followed.checkpoints()[-1]
    run_state = settled.subagent_runs_by_parent_tool_call_id["call_task_bg"]
    assert (run_state.status, run_state.detail, run_state.subagent_id) == (
        apb.SUBAGENT_RUN_STATUS_SUCCESS, "There are 3 files.", child.agent_id)
    assert run_state.completion_reason == apb.BACKGROUND_TASK_COMPLETION_REASON_TASK_FINISHED
    # the turn's UserMessage is a simulated one
    turn = apb.ConversationTurnStructure.FromString(blobs[settled.turns[-1]]).agent_conversation_turn
    message = apb.UserMessage.FromString(blobs[turn.user_message])
    assert message.is_simulated_msg and message.simulated_msg_reason == apb.SIMULATED_MSG_REASON_BACKGROUND_TASK_COMPLETION
    assert message.simulated_message_metadata.title == "Count files"

    # the same completion again (a retry from the settled state): added once, no new model call
    again, _ = run_request(env, out.runner.completion_request(settled, [completion]), blobs)
    assert again.end_error is None and len(env.provider.requests) == calls + 1
    # and a retry from the state before it: replayed into that history, still stored once
    env.provider.enqueue(kind, s.text_reply("3 files, as said."), match=is_parent)
    replay, _ = run_request(env, out.runner.completion_request(state, [completion]), out.blobs)
    assert replay.end_error is None
    assert turns.user_texts(kind, env.provider.requests[-1].json)[-1] == runtime
    assert stored_events(env, out.request.conversation_id, "subagent-completed:") == [
        f"subagent-completed:{child.agent_id}"]


@pytest.mark.parametrize("kind", KINDS)
def test_cancel_stops_one_subagent_and_nothing_else(env, tmp_path, kind):
    s = SCRIPTS[kind]
    slow, quick = f"CHILD-SLOW-{kind}", f"CHILD-QUICK-{kind}"
    tasks = [("call_slow", "Task", json.dumps({"description": "Slow", "prompt": f"{slow}: take forever"})),
             ("call_quick", "Task", json.dumps({"description": "Quick", "prompt": f"{quick}: answer"}))]
    enqueue(env, kind, [s.tool_calls(tasks), s.text_reply("One was stopped.")],
            {slow: [Hang(30)], quick: [s.text_reply("quick answer")]})

    cancel = apb.ConversationAction(cancel_subagent_action=apb.CancelSubagentAction(subagent_id="call_slow"))
    out = parent_turn(env, tmp_path, kind, during=once_child_called(env, slow, cancel))
    assert out.result.end_error is None, out.result.end_error
    slow_child, quick_child = out.child(slow), out.child(quick)
    # the slow Task's exec was aborted, its child run canceled; the quick one finished normally
    aborts = [f.message.exec_server_control_message.abort.id for f in out.result.down("exec_server_control_message")]
    assert aborts == [slow_child.exec_id]
    assert slow_child.aborted and slow_child.result.end_error.code.value == "canceled"
    assert quick_child.ok
    body = [r for r in env.provider.requests if r.json and is_parent(r.json)][-1].json
    assert turns.result_of(kind, body, "call_slow").content == (
        f"Subagent name: Slow\nSubagent ID: {slow_child.agent_id}\n\nThe user stopped this subagent before it finished.")
    assert turns.result_of(kind, body, "call_quick").content.endswith("quick answer")
    assert out.result.text() == "One was stopped."
    final = out.result.checkpoints()[-1]
    assert final.subagent_runs_by_parent_tool_call_id["call_slow"].status == apb.SUBAGENT_RUN_STATUS_ABORTED
    assert final.subagent_runs_by_parent_tool_call_id["call_quick"].status == apb.SUBAGENT_RUN_STATUS_SUCCESS


def test_a_waiting_task_moves_to_the_background_on_request(env, tmp_path):
    kind = "openai_chat"
    s = SCRIPTS[kind]
    marker = "CHILD-MOVE"
    task = ("call_move", "Task", json.dumps({"description": "Long job", "prompt": f"{marker}: work long"}))
    enqueue(env, kind, [s.tool_calls([task]), s.text_reply("It continues in the background.")],
            {marker: [Hang(2, then=s.text_reply("long job done"))]})

    move = apb.ConversationAction(background_subagent_action=apb.BackgroundSubagentAction(tool_call_id="call_move"))
    out = parent_turn(env, tmp_path, kind, during=once_child_called(env, marker, move))
    assert out.result.end_error is None, out.result.end_error
    child = out.child(marker)
    card = out.completed("call_move").task_tool_call.result.success
    assert card.is_background and card.background_reason == apb.SUBAGENT_BACKGROUND_REASON_USER_REQUEST
    assert card.agent_id == child.agent_id  # the child had bound: its id is known
    assert out.result.down("exec_server_control_message") == []  # moved, not aborted
    assert child.ok and child.final_message == "long job done"  # it went on after the parent's turn
    assert out.result.text() == "It continues in the background."


def test_a_subagent_success_without_agent_id_ends_the_parent_run_with_a_protocol_error(env, tmp_path):
    kind = "openai_chat"
    s = SCRIPTS[kind]
    marker = "CHILD-NO-ID"
    task = ("call_no_id", "Task", json.dumps({"description": "Anonymous", "prompt": f"{marker}: work"}))
    enqueue(env, kind, [s.tool_calls([task]), s.text_reply("never asked")], {marker: [s.text_reply("done")]})

    def no_agent_id(runner):
        runner.result_of = lambda child: apb.SubagentResult(success=apb.SubagentSuccess(final_message="done"))

    asked = len(requests_of(env, is_parent))
    out = parent_turn(env, tmp_path, kind, runner_hook=no_agent_id)
    assert out.result.end_error is not None and out.result.end_error.code is connect.Code.INVALID_ARGUMENT
    assert "SubagentSuccess carries no agent_id" in out.result.end_error.message
    parent_id = out.request.conversation_id[:8]
    assert re.search(rf"\[req-{parent_id}-\d+\] run ends with invalid_argument: protocol error: "
                     "SubagentSuccess carries no agent_id", env.proxy.log()), env.proxy.log()[-3000:]
    assert len(requests_of(env, is_parent)) == asked + 1  # the model never saw a made-up identity


def test_cancel_subagent_at_run_start_stops_a_background_child(env, tmp_path):
    kind = "openai_chat"
    s = SCRIPTS[kind]
    marker = "CHILD-IDLE-CANCEL"
    task = ("call_idle", "Task", json.dumps({"description": "Idle", "run_in_background": True,
                                              "prompt": f"{marker}: wait"}))
    enqueue(env, kind, [s.tool_calls([task]), s.text_reply("started")], {marker: [Hang(30)]})

    async def cancel_from_a_new_request(runner, client, result):
        await until_requested(env, is_child(marker))
        child = runner.children[0]
        request = apb.AgentRunRequest(conversation_id=runner.parent_request.conversation_id,
                                      requested_model=runner.parent_request.requested_model)
        request.conversation_state.CopyFrom(result.checkpoints()[-1])
        request.action.cancel_subagent_action.subagent_id = child.agent_id
        stopped = await client.run(request)
        assert stopped.end_error is None and stopped.checkpoints() == []

    calls = len(env.provider.requests)
    out = parent_turn(env, tmp_path, kind, after=cancel_from_a_new_request)
    child = out.runner.children[0]
    assert child.result.end_error.code.value == "canceled"
    assert len([r for r in env.provider.requests[calls:] if r.json and is_parent(r.json)]) == 2  # no model call


@pytest.mark.parametrize("kind", KINDS)
def test_kill9_during_a_child_run_neither_reruns_nor_duplicates(tmp_path, kind):
    """Two Tasks; one child finished, the other is waiting on its provider when mitmdump is killed.
    The parent resumes from its staged round: the finished child's result is taken from the store (its
    provider is not called again, no exec is sent), the unfinished one is reported interrupted with its
    id; no child conversation is created twice."""
    with ScriptedProvider() as provider:
        proxy, models = start_proxy(tmp_path / "home", provider, kinds=(kind,))
        env = ProxyEnv(proxy, provider, models)
        s = SCRIPTS[kind]
        done, hanging = f"KILL-DONE-{kind}", f"KILL-HANG-{kind}"
        tasks = [("call_done", "Task", json.dumps({"description": "Done", "prompt": f"{done}: answer"})),
                 ("call_hang", "Task", json.dumps({"description": "Hang", "prompt": f"{hanging}: wait"}))]
        enqueue(env, kind, [s.tool_calls(tasks)], {done: [s.text_reply("done answer")], hanging: [Hang(60)]})
        staged: list = []

        async def kill_when_ready(runner, client, request_id):
            for _ in range(400):
                frames = client.frames(request_id)
                finished = any(f.kind == "interaction_update.tool_call_completed"
                               and f.message.interaction_update.tool_call_completed.call_id == "call_done"
                               for f in frames if f.direction == "down")
                waiting = any(r.json and is_child(hanging)(r.json) for r in provider.requests)
                if finished and waiting:
                    staged.extend(f.message.conversation_checkpoint_update for f in frames
                                  if f.direction == "down" and f.kind == "conversation_checkpoint_update")
                    proxy.kill9()
                    return
                await asyncio.sleep(0.05)
            raise AssertionError("the scenario never reached its kill point")

        try:
            first = parent_turn(env, tmp_path, kind, during=kill_when_ready, proxy=proxy, expect_clean=False)
            state = staged[-1]
            assert len(state.pending_tool_calls) == 1  # the round is staged in the client's checkpoint
            done_child, hang_child = first.child(done), first.child(hanging)
            assert done_child.ok and not hang_child.ok
            done_calls = len([r for r in provider.requests if r.json and is_child(done)(r.json)])

            proxy.start()
            provider.enqueue(kind, s.text_reply("One answered, one was interrupted."), match=is_parent)
            resume = apb.AgentRunRequest(conversation_id=first.request.conversation_id,
                                         requested_model=first.request.requested_model)
            resume.conversation_state.CopyFrom(state)
            resume.action.resume_action.request_context.CopyFrom(first.request.action.user_message_action.request_context)
            again = parent_turn(env, tmp_path, kind, request=resume, proxy=proxy, blobs=first.blobs)
            assert again.result.end_error is None, again.result.end_error
            assert again.result.down("exec_server_message") == [] and again.runner.children == []
            assert len([r for r in provider.requests if r.json and is_child(done)(r.json)]) == done_calls
            body = [r for r in provider.requests if r.json and is_parent(r.json)][-1].json
            assert turns.result_of(kind, body, "call_done").content == (
                f"Subagent name: Done\nSubagent ID: {done_child.agent_id}\n\ndone answer")
            interrupted = turns.result_of(kind, body, "call_hang").content
            assert interrupted.startswith(f"Subagent name: Hang\nSubagent ID: {hang_child.agent_id}\n\n"
                                          "The subagent was interrupted before it finished")
            assert f'resume="{hang_child.agent_id}"' in interrupted
            db = sqlite3.connect(proxy.db)
            children = sorted(r for r in db.execute(
                "SELECT parent_tool_call_id, child_conversation_id FROM subagents WHERE parent_conversation_id = ?",
                [first.request.conversation_id]))
            assert children == sorted([("call_done", done_child.agent_id), ("call_hang", hang_child.agent_id)])
            head = db.execute("SELECT head_revision_id FROM conversations WHERE id = ?",
                              [first.request.conversation_id]).fetchone()[0]
            results = [json.loads(p)["call_id"] for (p,) in db.execute(
                "WITH RECURSIVE chain(id, parent_id, message_id) AS (SELECT id, parent_id, message_id FROM revisions"
                " WHERE id = ? UNION ALL SELECT r.id, r.parent_id, r.message_id FROM revisions r JOIN chain c"
                " ON r.id = c.parent_id) SELECT m.payload FROM chain JOIN messages m ON m.id = chain.message_id"
                " WHERE m.role = 'tool'", [head])]
            assert sorted(results) == ["call_done", "call_hang"]  # the history holds each Task result once
        finally:
            proxy.stop()


@pytest.mark.parametrize("kind", KINDS)
def test_a_second_task_resumes_the_same_subagent(env, tmp_path, kind):
    """Task, then (next turn) Task with resume=<agent id>: Cursor continues that child conversation
    under the new Task call; the child keeps its history and the parent gets its new answer."""
    s = SCRIPTS[kind]
    first_marker, second_marker = f"RES-1-{kind}", f"RES-2-{kind}"
    first_task = ("call_res_1", "Task", json.dumps({"description": "Look", "prompt": f"{first_marker}: find the bug"}))
    enqueue(env, kind, [s.tool_calls([first_task]), s.text_reply("Found it.")],
            {first_marker: [s.text_reply("the bug is in b.py")]})
    first = parent_turn(env, tmp_path, kind)
    assert first.result.end_error is None, first.result.end_error
    agent_id = first.child(first_marker).agent_id

    second_task = ("call_res_2", "Task", json.dumps({"description": "Fix", "resume": agent_id,
                                                     "prompt": f"{second_marker}: now say how to fix it"}))
    enqueue(env, kind, [s.tool_calls([second_task]), s.text_reply("Fixed.")],
            {second_marker: [s.text_reply("change line 3 of b.py")]})
    before = len(env.provider.requests)
    request = user_turn_request("continue with that subagent", model_id=env.models[kind],
                                conversation_id=first.request.conversation_id, state=first.result.checkpoints()[-1],
                                workspace=str(tmp_path / "ws"))
    second = parent_turn(env, tmp_path, kind, request=request, blobs=first.blobs,
                         runner_hook=lambda runner: runner.states.update(first.runner.states))
    assert second.result.end_error is None, second.result.end_error
    assert env.provider.pending(kind) == 0
    resumed = second.child(second_marker)
    assert resumed.args.resume_agent_id == agent_id and resumed.agent_id == agent_id and resumed.ok
    # the child continued its own conversation: its first task and answer are in its history
    [child_request] = [r for r in env.provider.requests[before:] if r.json and is_child(second_marker)(r.json)]
    child_text = turns.body_text(child_request.json)
    assert first_marker in child_text and "the bug is in b.py" in child_text
    body = [r for r in env.provider.requests if r.json and is_parent(r.json)][-1].json
    assert turns.result_of(kind, body, "call_res_2").content == "change line 3 of b.py"
    final = second.result.checkpoints()[-1]
    run_state = final.subagent_runs_by_parent_tool_call_id["call_res_2"]
    assert (run_state.status, run_state.subagent_id) == (apb.SUBAGENT_RUN_STATUS_SUCCESS, agent_id)
    db = sqlite3.connect(env.proxy.db)
    bound = sorted(r for r in db.execute(
        "SELECT parent_tool_call_id, parent_conversation_id FROM subagents WHERE child_conversation_id = ?", [agent_id]))
    assert bound == [("call_res_1", first.request.conversation_id), ("call_res_2", first.request.conversation_id)]


def bind_late(runner: SubagentRunner, ended: dict[str, asyncio.Event]) -> None:
    """Make every background child start only after the run that launched it has ended: its binding
    then comes after the Task exec returned (as it may with Cursor). `ended`: the gates by request
    id; set the top parent's when its run is over."""
    original = runner._run_child

    async def late(client, child):
        if child.args.run_in_background:
            await ended.setdefault(child.parent_request_id, asyncio.Event()).wait()
        try:
            await original(client, child)
        finally:
            ended.setdefault(child.request_id, asyncio.Event()).set()

    runner._run_child = late


def test_a_background_child_binding_after_its_exec_returned_keeps_what_the_task_asked(env, tmp_path):
    """readonly=true of a background Task reaches a child that binds after the parent's turn ended;
    so do its depth (its own background subagent gets no Task) and its parent conversation."""
    kind = "openai_chat"
    s = SCRIPTS[kind]
    ro, nest, grand = "LATE-RO", "LATE-NEST", "LATE-GRAND"
    tasks = [("call_late_ro", "Task", json.dumps({"description": "Look", "readonly": True, "run_in_background": True,
                                                  "prompt": f"{ro}: look around"})),
             ("call_late_nest", "Task", json.dumps({"description": "Nest", "run_in_background": True,
                                                    "prompt": f"{nest}: delegate further"}))]
    grand_task = ("call_late_grand", "Task", json.dumps({"description": "Grand", "run_in_background": True,
                                                         "prompt": f"{grand}: the deepest part"}))
    env.provider.enqueue(kind, s.tool_calls(tasks), s.text_reply("Both run in the background."), match=is_parent)
    env.provider.enqueue(kind, s.text_reply("looked"), match=is_child(ro))
    env.provider.enqueue(kind, s.tool_calls([grand_task]), s.text_reply("delegated"), match=is_child(nest))
    env.provider.enqueue(kind, s.text_reply("deepest done"),
                         match=lambda body: is_child(grand)(body) and nest not in turns.body_text(body))
    gates: dict[str, asyncio.Event] = {}

    async def release(runner, client, result):
        gates.setdefault(runner.children[0].parent_request_id, asyncio.Event()).set()
        for _ in range(400):
            if len(runner.children) == 3 and all(c.result is not None or c.error for c in runner.children):
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the subagents never finished")

    before = len(env.provider.requests)
    out = parent_turn(env, tmp_path, kind, runner_hook=lambda runner: bind_late(runner, gates), after=release)
    assert out.result.end_error is None, out.result.end_error
    assert env.provider.pending(kind) == 0
    late = [r for r in env.provider.requests[before:] if r.json]
    [ro_request] = [r for r in late if is_child(ro)(r.json)]
    assert set(turns.tool_names(kind, ro_request.json)) <= READ_ONLY_TOOLS  # no edits, no shell, no Task
    assert "Read" in turns.tool_names(kind, ro_request.json)
    nest_request = [r for r in late if is_child(nest)(r.json)][0]
    assert "Task" in turns.tool_names(kind, nest_request.json) and "Write" in turns.tool_names(kind, nest_request.json)
    [grand_request] = [r for r in late if is_child(grand)(r.json) and nest not in turns.body_text(r.json)]
    assert "Task" not in turns.tool_names(kind, grand_request.json)  # a subagent's subagent
    assert "Write" in turns.tool_names(kind, grand_request.json)
    nest_child, grand_child = out.child(nest), out.child(grand)
    assert nest_child.ok and grand_child.ok and out.child(ro).ok
    db = sqlite3.connect(env.proxy.db)
    parents = dict(db.execute("SELECT child_conversation_id, parent_conversation_id FROM subagents"
                              " WHERE child_conversation_id IN (?, ?, ?)",
                              [out.child(ro).agent_id, nest_child.agent_id, grand_child.agent_id]))
    assert parents == {out.child(ro).agent_id: out.request.conversation_id,
                       nest_child.agent_id: out.request.conversation_id, grand_child.agent_id: nest_child.agent_id}


def test_cancel_names_a_call_of_its_own_conversation_only(env, tmp_path):
    """Two conversations whose background subagents run under the same Task call id: cancelling that
    call in the first stops its child; the second conversation's child goes on and finishes."""
    kind = "openai_chat"
    s = SCRIPTS[kind]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    requests, markers = {}, {}
    for name in ("A", "B"):
        markers[name] = f"SAME-CALL-{name}"
        requests[name] = user_turn_request(f"conversation {name}: start it", model_id=env.models[kind],
                                           workspace=str(workspace))
        task = ("call_same", "Task", json.dumps({"description": name, "run_in_background": True,
                                                 "prompt": f"{markers[name]}: keep working"}))
        env.provider.enqueue(kind, s.tool_calls([task]), s.text_reply(f"{name} started"),
                             match=lambda body, name=name: is_parent(body) and f"conversation {name}:" in turns.body_text(body))
    env.provider.enqueue(kind, Hang(30), match=is_child(markers["A"]))
    env.provider.enqueue(kind, Hang(4, then=s.text_reply("B finished")), match=is_child(markers["B"]))

    async def scenario():
        runners = {name: SubagentRunner(LocalExecutor(workspace), requests[name]) for name in requests}
        async with env.proxy.client(on_exec=runners["A"].on_exec) as a, env.proxy.client(on_exec=runners["B"].on_exec) as b:
            first = await runners["A"].run(a, requests["A"])
            await until_requested(env, is_child(markers["A"]))  # A's child binds first, then B's
            await runners["B"].run(b, requests["B"])
            await until_requested(env, is_child(markers["B"]))
            cancel = apb.AgentRunRequest(conversation_id=requests["A"].conversation_id,
                                         requested_model=requests["A"].requested_model)
            cancel.conversation_state.CopyFrom(first.checkpoints()[-1])
            cancel.action.cancel_subagent_action.subagent_id = "call_same"
            stopped = await a.run(cancel)
            assert stopped.end_error is None, stopped.end_error
            child_a, child_b = runners["A"].children[0], runners["B"].children[0]
            await asyncio.wait_for(asyncio.shield(child_a.task), 15)  # it stops (not B's)
            await runners["B"].wait_background()
            for runner in runners.values():
                await runner.root.aclose()
            return child_a, child_b

    child_a, child_b = run(scenario())
    assert child_a.result.end_error.code.value == "canceled"
    assert child_b.ok and child_b.final_message == "B finished"


def test_custom_subagent_types_from_the_request_context(env, tmp_path):
    """A custom subagent of the request context: its instructions reach the child's runtime message
    and its tool list narrows the child's tools. A type whose tools are no tool names here keeps the
    default tool set (and the log says why)."""
    kind = "openai_chat"
    s = SCRIPTS[kind]
    review, odd = "CUSTOM-REVIEW", "CUSTOM-ODD"
    request = user_turn_request("delegate to my own subagents", model_id=env.models[kind],
                                workspace=str(tmp_path / "ws"))
    context = request.action.user_message_action.request_context
    context.custom_subagents.extend([
        apb.CustomSubagent(name="bug-reviewer", description="Finds bugs", tools=["Read", "Grep"],
                           prompt="REVIEWER-RULES: report only real bugs, with file and line."),
        apb.CustomSubagent(name="oddball", description="Uses other tool names", tools=["read_file", "run_terminal_cmd"]),
    ])
    tasks = [("call_review", "Task", json.dumps({"description": "Review", "subagent_type": "bug-reviewer",
                                                 "prompt": f"{review}: review a.txt"})),
             ("call_odd", "Task", json.dumps({"description": "Odd", "subagent_type": "oddball",
                                              "prompt": f"{odd}: do it"}))]
    enqueue(env, kind, [s.tool_calls(tasks), s.text_reply("Both reported.")],
            {review: [s.text_reply("no bugs")], odd: [s.text_reply("done")]})
    before = len(env.provider.requests)
    out = parent_turn(env, tmp_path, kind, request=request, files={"a.txt": "a\n"})
    assert out.result.end_error is None, out.result.end_error
    assert out.child(review).request.subagent_type_name == "bug-reviewer"
    assert out.child(review).ok and out.child(odd).ok
    [review_request] = [r for r in env.provider.requests[before:] if r.json and is_child(review)(r.json)]
    assert sorted(turns.tool_names(kind, review_request.json)) == ["Grep", "Read", "UpdateCurrentStep"]
    runtime = turns.user_texts(kind, review_request.json)[-1]
    assert "REVIEWER-RULES: report only real bugs, with file and line." in runtime and review in runtime
    [odd_request] = [r for r in env.provider.requests[before:] if r.json and is_child(odd)(r.json)]
    assert {"Read", "Write", "Shell", "Task", "UpdateCurrentStep"} <= set(turns.tool_names(kind, odd_request.json))
    assert "subagent type oddball lists tools that are not tool names here: read_file, run_terminal_cmd; " \
           "it keeps the default tool set" in env.proxy.log()
