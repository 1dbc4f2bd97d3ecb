"""Every ConversationAction branch at run start, end to end through a real mitmdump: the handled ones
do their job (plan start -> execute, the user's own shell command, late question answers, cancel,
resume), every other branch ends the run with an `unimplemented` error whose message is the plain
words of docs/protocol-coverage.md, and nothing reaches the provider."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from byok.agent import actions
from byok.wire import connect
from byok.cli.client import user_turn_request
from byok.cli.executor import LocalExecutor, ScriptedQueries
from byok.proto import agent_pb2 as apb
from byok.proto import aiserver_pb2 as spb
from tests.e2e.conftest import run, start_proxy
from tests.e2e.harness import ROOT, mode_tools
from tests.support.scripted_provider import CHAT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60), pytest.mark.usefixtures("fresh_provider")]

FACTS = json.loads((ROOT / "proto" / "facts" / "agent.v1.json").read_text())
BRANCHES = [f["name"] for f in FACTS["messages"]["agent.v1.ConversationAction"]["fields"] if f.get("oneof") == "action"]
DEDICATED = {  # handled branches whose behaviour has a test of its own below (or in test_modes.py)
    "user_message_action", "shell_command_action", "start_plan_action", "execute_plan_action",
    "async_ask_question_completion_action",
    "summarize_action",  # tests/e2e/test_compaction.py
    "cancel_subagent_action", "background_task_completion_action",  # tests/e2e/test_subagents.py
}


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider):
    proxy, models = start_proxy(tmp_path_factory.mktemp("actions"), provider)
    yield proxy, models["openai_chat"]
    proxy.stop()


def action_request(model: str, conversation_id: str, state: apb.ConversationStateStructure | None = None,
                   **action) -> apb.AgentRunRequest:
    request = apb.AgentRunRequest(conversation_id=conversation_id, requested_model=apb.RequestedModel(model_id=model))
    if state is not None:
        request.conversation_state.CopyFrom(state)
    else:
        request.conversation_state.SetInParent()
    request.action.CopyFrom(apb.ConversationAction(**action))
    return request


def sample_action(branch: str) -> dict:
    """A minimal, well-formed action of each branch (what Cursor would send)."""
    samples = {
        "resume_action": apb.ResumeAction(),
        "cancel_action": apb.CancelAction(reason="user pressed stop"),
        "summarize_action": apb.SummarizeAction(),
        "cancel_subagent_action": apb.CancelSubagentAction(subagent_id="sub-1"),
        "background_task_completion_action": apb.BackgroundTaskCompletionAction(
            completions=[apb.BackgroundTaskCompletion(task_id="t-1", title="done")]),
        "background_shell_action": apb.BackgroundShellAction(tool_call_id="call-1"),
        "background_subagent_action": apb.BackgroundSubagentAction(tool_call_id="call-2"),
        "subscription_notification_action": apb.SubscriptionNotificationAction(
            notifications=[apb.UserMessage(text="PR #1 was merged", message_id="n-1")]),
        "goal_continuation_action": apb.GoalContinuationAction(),
        "inject_context_action": apb.InjectContextAction(
            injection_id="inj-1", system_context=apb.SystemContextInjection(producer="hook", content="x")),
    }
    return {branch: samples[branch]}


def first_turn(proxy, provider, model, conversation_id, text="first", mode=apb.AGENT_MODE_AGENT, workspace=None):
    provider.enqueue("openai_chat", CHAT.text_reply("first answer"))

    async def scenario():
        async with proxy.client() as client:
            result = await client.run(user_turn_request(text, model_id=model, conversation_id=conversation_id,
                                                        mode=mode, workspace=workspace))
            return result, dict(client.blobs)

    result, blobs = run(scenario())
    assert result.end_error is None
    return result.checkpoints()[-1], blobs


def run_with(proxy, request, *, blobs=None, executor=None, queries=None):
    async def scenario():
        async with proxy.client(on_exec=executor.on_exec if executor else None,
                                on_query=(queries or ScriptedQueries()).on_query) as client:
            client.blobs.update(blobs or {})
            try:
                return await client.run(request, on_frame=executor.on_frame if executor else None), dict(client.blobs)
            finally:
                if executor is not None:
                    await executor.aclose()

    return run(scenario())


@pytest.mark.parametrize("branch", [b for b in BRANCHES if b not in DEDICATED])
def test_every_action_at_run_start(env, provider, branch):
    proxy, model = env
    conversation = f"conv-action-{branch}"
    state, blobs = first_turn(proxy, provider, model, conversation)
    calls = len(provider.requests)
    if branch not in actions.RUN_ACTIONS:  # refused, in the words of docs/protocol-coverage.md
        result, _ = run_with(proxy, action_request(model, conversation, state, **sample_action(branch)), blobs=blobs)
        error = result.end_error
        assert error is not None and error.code is connect.Code.UNIMPLEMENTED
        assert error.message == actions.refusal(branch)
        details = spb.ErrorDetails.FromString(error.details[0].value)
        assert details.details.detail == actions.refusal(branch) and details.details.should_show_immediate_error
        assert len(provider.requests) == calls and result.checkpoints() == []
        assert f"run ends with unimplemented: {actions.refusal(branch)}" in proxy.log()
    elif branch == "cancel_action":
        result, _ = run_with(proxy, action_request(model, conversation, state, **sample_action(branch)), blobs=blobs)
        assert result.end_error is None and result.checkpoints() == []
        assert len(provider.requests) == calls
    elif branch == "resume_action":  # nothing staged: the model continues from the settled history
        provider.enqueue("openai_chat", CHAT.text_reply("continued"))
        result, _ = run_with(proxy, action_request(model, conversation, state, **sample_action(branch)), blobs=blobs)
        assert result.end_error is None and result.text() == "continued"
        assert len(provider.requests) == calls + 1
        assert "first answer" in json.dumps(provider.requests[-1].json["messages"])
    else:
        pytest.fail(f"{branch} is handled now: give it a scenario here and a row in docs/protocol-coverage.md")


def test_plan_start_then_execute(env, provider):
    """Start plan -> Plan mode turn with CreatePlan; execute plan -> Agent mode turn that gets the
    plan's text, in the same conversation."""
    proxy, model = env
    conversation = "conv-plan-start-execute"
    start = apb.StartPlanAction(user_message=apb.UserMessage(text="plan the cache layer", message_id="m-plan"))
    start.request_context.env.time_zone = "UTC"
    plan_args = {"name": "Cache layer", "overview": "Add an LRU cache", "plan": "1. add cache.py\n2. wire it",
                 "todos": [{"id": "t1", "content": "add cache.py"}]}
    provider.enqueue("openai_chat", CHAT.tool_calls([("call_plan", "CreatePlan", json.dumps(plan_args))]),
                     CHAT.text_reply("Here is the plan."))
    before = len(provider.requests)
    queries = ScriptedQueries()
    planned, blobs = run_with(proxy, action_request(model, conversation, start_plan_action=start), queries=queries)
    assert planned.end_error is None and planned.text().endswith("Here is the plan.")
    plan_requests = provider.requests[before:]
    assert [[t["function"]["name"] for t in r.json["tools"]] for r in plan_requests] == [mode_tools("plan")] * 2
    assert "Plan mode is active." in json.dumps(plan_requests[0].json["messages"][-1])
    assert [q.WhichOneof("query") for q in queries.log] == ["create_plan_request_query"]
    state = planned.checkpoints()[-1]
    assert state.mode == apb.AGENT_MODE_PLAN

    execute = apb.ExecutePlanAction(plan_file_content="# Cache layer\n1. add cache.py\n2. wire it",
                                    plan_file_path="/ws/.cursor/plans/cache.plan.md", plan_id="plan-7",
                                    kickoff_message_id="m-kickoff")
    provider.enqueue("openai_chat", CHAT.text_reply("Implementing."))
    executed, blobs = run_with(proxy, action_request(model, conversation, state, execute_plan_action=execute),
                               blobs=blobs)
    assert executed.end_error is None and executed.text() == "Implementing."
    sent = provider.requests[-1].json
    assert [t["function"]["name"] for t in sent["tools"]] == mode_tools("agent")
    runtime = sent["messages"][-1]["content"]
    runtime = runtime if isinstance(runtime, str) else "".join(p.get("text", "") for p in runtime)
    assert "You are still in **Agent Mode**" in runtime
    assert '<execute_plan plan_id="plan-7">' in runtime
    assert '<plan path="/ws/.cursor/plans/cache.plan.md">\n# Cache layer\n1. add cache.py\n2. wire it\n</plan>' in runtime
    assert runtime.endswith("<user_query>\nCarry out the approved plan.\n</user_query>")
    assert "plan the cache layer" in json.dumps(sent["messages"])  # the planning turn is history
    final = executed.checkpoints()[-1]
    assert final.mode == apb.AGENT_MODE_AGENT and len(final.turns) == 2
    turn = apb.ConversationTurnStructure.FromString(blobs[final.turns[-1]])
    message = apb.UserMessage.FromString(blobs[turn.agent_conversation_turn.user_message])
    assert message.message_id == "m-kickoff" and message.is_simulated_msg
    assert message.simulated_msg_reason == apb.SIMULATED_MSG_REASON_PLAN_EXECUTION
    assert message.execute_plan_info.plan_id == "plan-7"


def test_user_shell_command(env, provider, tmp_path: Path):
    """The user's own command runs in their terminal (no model call), its output streams into the
    chat, the checkpoint gets a shell turn, and the next message's model sees command and output."""
    proxy, model = env
    conversation = "conv-user-shell"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    state, blobs = first_turn(proxy, provider, model, conversation, workspace=str(workspace))
    calls = len(provider.requests)
    action = apb.ShellCommandAction(shell_command=apb.ShellCommand(command="echo hello-from-user; echo oops >&2"),
                                    exec_id="user-exec-1")
    executor = LocalExecutor(workspace)
    result, blobs = run_with(proxy, action_request(model, conversation, state, shell_command_action=action),
                             blobs=blobs, executor=executor)
    assert result.end_error is None
    assert len(provider.requests) == calls  # no model call
    [sent] = executor.log
    assert sent.exec_id == "user-exec-1" and sent.shell_stream_args.command == action.shell_command.command
    deltas = [f.message.interaction_update.shell_output_delta for f in result.down("interaction_update.shell_output_delta")]
    assert [d.WhichOneof("event") for d in deltas][0] == "start" and deltas[-1].WhichOneof("event") == "exit"
    assert "".join(d.stdout.data for d in deltas) == "hello-from-user\n"
    assert "".join(d.stderr.data for d in deltas) == "oops\n"
    assert deltas[-1].exit.code == 0
    final = result.checkpoints()[-1]
    assert len(final.turns) == 2
    shell_turn = apb.ConversationTurnStructure.FromString(blobs[final.turns[-1]]).shell_conversation_turn
    assert apb.ShellCommand.FromString(blobs[shell_turn.shell_command]).command == action.shell_command.command
    output = apb.ShellOutput.FromString(blobs[shell_turn.shell_output])
    assert (output.stdout, output.stderr, output.exit_code) == ("hello-from-user\n", "oops\n", 0)

    provider.enqueue("openai_chat", CHAT.text_reply("I see the output."))

    async def next_message():
        async with proxy.client() as client:
            client.blobs.update(blobs)
            return await client.run(user_turn_request("what did my command print?", model_id=model,
                                                      conversation_id=conversation, state=final))

    after = run(next_message())
    assert after.end_error is None
    messages = provider.requests[-1].json["messages"]
    shell_note = json.dumps(messages[-2])
    assert "<user_shell_command>" in shell_note and "hello-from-user" in shell_note and "echo oops" in shell_note
    assert messages[-2]["role"] == "user" and "what did my command print?" in json.dumps(messages[-1])
    assert len(after.checkpoints()[-1].turns) == 3


def test_late_question_answers_start_a_turn(env, provider):
    """An AskQuestion answered after its run ended: the answers reach the model as one turn, in the
    conversation's mode (there is no user message to name one)."""
    proxy, model = env
    conversation = "conv-late-answers"
    state, blobs = first_turn(proxy, provider, model, conversation, mode=apb.AGENT_MODE_ASK)
    assert state.mode == apb.AGENT_MODE_ASK
    question = apb.AskQuestionArgs(title="Setup", questions=[apb.AskQuestionArgs.Question(
        id="db", prompt="Which database?", options=[apb.AskQuestionArgs.Option(id="pg", label="PostgreSQL"),
                                                    apb.AskQuestionArgs.Option(id="sq", label="SQLite")])])
    answer = apb.AskQuestionResult(success=apb.AskQuestionSuccess(
        answers=[apb.AskQuestionSuccess.Answer(question_id="db", selected_option_ids=["sq"])]))
    done = apb.AsyncAskQuestionCompletionAction(original_tool_call_id="call_q", original_args=question, result=answer)
    provider.enqueue("openai_chat", CHAT.text_reply("SQLite it is."))
    result, _ = run_with(proxy, action_request(model, conversation, state, async_ask_question_completion_action=done),
                         blobs=blobs)
    assert result.end_error is None and result.text() == "SQLite it is."
    sent = provider.requests[-1].json
    assert [t["function"]["name"] for t in sent["tools"]] == mode_tools("ask")
    runtime = sent["messages"][-1]["content"]
    runtime = runtime if isinstance(runtime, str) else "".join(p.get("text", "") for p in runtime)
    assert '<question_answers tool_call_id="call_q">' in runtime and '"selected":["SQLite"]' in runtime
    assert "Ask mode is active." in runtime
