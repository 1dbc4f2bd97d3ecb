"""The services of Cursor's other AI calls (addon/assist/), called directly (no proxy) against a scripted
provider of each dialect and a real store: what the model is asked, what Cursor gets back, the llm_calls
row with its purpose, and every failure as a typed error (never an empty success or a hang)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time

import pytest

from byok.assist import cmdk, commit, names, terminal, titles
from byok.assist.call import CallContext
from byok.proto import agent_pb2 as apb, features_pb2 as fpb
from byok.providers.config import parse_providers
from byok.providers.io import StreamLimits, make_client
from byok.store import AsyncStore
from byok.wire.errors import DeadlineExceeded, ProtocolError, ProviderError
from tests.support.scripted_provider import CHAT, KINDS, SCRIPTS, Ev, Hang, HttpError, ScriptedProvider, Sse

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def provider():
    with ScriptedProvider() as p:
        yield p


def config_for(provider: ScriptedProvider, kind: str = "openai_chat"):
    config, _ = parse_providers(f"""
[[providers]]
name = "scripted"
kind = "{kind}"
base_url = "{provider.base_url}"
api_key = "sk-test"
[[providers.models]]
id = "small-model"
max_output_tokens = 512
""")
    return config


@contextlib.asynccontextmanager
async def call_context(tmp_path, provider, kind="openai_chat", *, deadline_s=None, request_id="req-1"):
    store = await AsyncStore.open(tmp_path / "byok.db")
    http = make_client()
    try:
        yield CallContext(request_id=request_id, route=config_for(provider, kind).models[0], http=http,
                          limits=StreamLimits(headers_s=10, idle_s=10), store=store, deadline_s=deadline_s)
    finally:
        await http.aclose()
        await store.close()


def rows(tmp_path) -> list[dict]:
    conn = sqlite3.connect(tmp_path / "byok.db")
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM llm_calls ORDER BY id")]
    finally:
        conn.close()


def serve(service_module, request, tmp_path, provider, kind="openai_chat", **kwargs):
    """Run a unary service's serve in a fresh context; returns its answer."""
    (service,) = [s for s in service_module.SERVICES if s.request_type is type(request)]

    async def scenario():
        async with call_context(tmp_path, provider, kind, **kwargs) as ctx:
            return await service.serve(request, ctx)

    return asyncio.run(scenario())


def frames(service_module, request, tmp_path, provider, kind="openai_chat", **kwargs) -> list:
    (service,) = [s for s in service_module.SERVICES if s.request_type is type(request)]

    async def scenario():
        async with call_context(tmp_path, provider, kind, **kwargs) as ctx:
            return [m async for m in service.serve(request, ctx)]

    return asyncio.run(scenario())


COMMIT = fpb.WriteGitCommitMessageRequest(
    diffs=["diff --git a/app.py b/app.py\n+def login():\n+    return True\n"],
    previous_commit_messages=["[auth] Add password check", "[ui] Fix button colour"],
    explicit_context=fpb.ExplicitContext(context="Always mention the module in brackets."),
)


# ---- commit messages --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_commit_message_in_every_dialect(kind, provider, tmp_path):
    provider.enqueue(kind, SCRIPTS[kind].text_reply("Here is the commit message:\n```\n[auth] Add login\n```"))
    answer = serve(commit, COMMIT, tmp_path, provider, kind)
    assert answer == fpb.WriteGitCommitMessageResponse(commit_message="[auth] Add login")
    sent = provider.wait_for_request(1).json
    text = str(sent)
    assert "+def login():" in text and "[auth] Add password check" in text and "module in brackets" in text
    assert "tools" not in sent or not sent["tools"]
    (row,) = rows(tmp_path)
    assert (row["purpose"], row["status"], row["request_id"], row["call_index"], row["model"]) == (
        "commit_message", "ok", "req-1", 0, "small-model")
    assert row["input_tokens"] == 100 and row["output_tokens"] == 20 and row["total_ms"] is not None


def test_a_reused_request_id_gets_the_next_call_index(provider, tmp_path):
    provider.enqueue("openai_chat", CHAT.text_reply("one"), CHAT.text_reply("two"))
    serve(commit, COMMIT, tmp_path, provider)
    serve(commit, COMMIT, tmp_path, provider)
    assert [r["call_index"] for r in rows(tmp_path)] == [0, 1]


def test_a_commit_request_without_a_diff_is_refused_before_any_model_call(provider, tmp_path):
    with pytest.raises(ProtocolError, match="without a diff"):
        serve(commit, fpb.WriteGitCommitMessageRequest(diffs=["  "]), tmp_path, provider)
    assert provider.requests == [] and rows(tmp_path) == []


def test_a_huge_diff_is_cut_to_size(provider, tmp_path):
    provider.enqueue("openai_chat", CHAT.text_reply("Add data"))
    serve(commit, fpb.WriteGitCommitMessageRequest(diffs=["+x\n" * 50_000]), tmp_path, provider)
    user = provider.wait_for_request(1).json["messages"][-1]["content"]
    assert len(user) < commit.DIFF_CHARS + 1_000 and "more characters left out" in user


@pytest.mark.parametrize("kind", KINDS)
def test_a_provider_error_is_a_provider_error_and_the_row_says_so(kind, provider, tmp_path):
    provider.enqueue(kind, HttpError(500, {"error": {"message": "upstream exploded"}}))
    with pytest.raises(ProviderError, match="upstream exploded") as info:
        serve(commit, COMMIT, tmp_path, provider, kind)
    assert info.value.to_connect().details[0].type == "aiserver.v1.ErrorDetails"
    (row,) = rows(tmp_path)
    assert row["status"] == "error" and "upstream exploded" in row["error"] and row["purpose"] == "commit_message"


def test_a_broken_stream_is_a_provider_error(provider, tmp_path):
    provider.enqueue("openai_chat", CHAT.error_event("overloaded"))
    with pytest.raises(ProviderError, match="overloaded"):
        serve(commit, COMMIT, tmp_path, provider)


def test_a_cut_off_answer_is_an_error_not_a_partial_message(provider, tmp_path):
    provider.enqueue("openai_chat", CHAT.length_cutoff("feat: add lo"))
    with pytest.raises(ProviderError, match="output token limit"):
        serve(commit, COMMIT, tmp_path, provider)


def test_an_answer_with_nothing_usable_is_an_error(provider, tmp_path):
    provider.enqueue("openai_chat", CHAT.text_reply("<think>hmm"))
    with pytest.raises(ProviderError, match="no usable commit message"):
        serve(commit, COMMIT, tmp_path, provider)
    assert rows(tmp_path)[0]["status"] == "error"


def test_a_tool_call_is_an_error(provider, tmp_path):
    provider.enqueue("openai_chat", CHAT.tool_calls([("call_1", "Read", '{"path": "a"}')]))
    with pytest.raises(ProviderError, match="called a tool"):
        serve(commit, COMMIT, tmp_path, provider)


def test_the_client_deadline_ends_a_slow_call_before_the_client_gives_up(provider, tmp_path):
    provider.enqueue("openai_chat", Hang(30))
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded, match="deadline of 1.5 s") as info:
        serve(commit, COMMIT, tmp_path, provider, deadline_s=1.5)
    elapsed = time.monotonic() - started
    assert 1.2 < elapsed < 1.5  # the answer must reach the client before its own deadline
    assert info.value.to_connect().code.value == "deadline_exceeded"
    assert provider.wait_closed(1).closed_early  # the provider request is closed, not left running
    (row,) = rows(tmp_path)
    assert row["status"] == "error" and "deadline" in row["error"]


def test_a_call_within_the_deadline_answers(provider, tmp_path):
    provider.enqueue("openai_chat", Sse([Ev({"choices": []}, delay_s=0.3)] + CHAT.text_reply("Fix it").items))
    assert serve(commit, COMMIT, tmp_path, provider, deadline_s=10).commit_message == "Fix it"


def test_a_missing_api_key_is_a_config_error_with_its_row(provider, tmp_path, monkeypatch):
    from byok.wire.errors import ConfigError

    async def scenario():
        async with call_context(tmp_path, provider) as ctx:
            import dataclasses
            ctx = dataclasses.replace(ctx, route=dataclasses.replace(ctx.route, api_key=None,
                                                                      api_key_env="BYOK_TEST_UNSET_KEY"))
            await commit.serve(COMMIT, ctx)

    monkeypatch.delenv("BYOK_TEST_UNSET_KEY", raising=False)
    with pytest.raises(ConfigError, match="BYOK_TEST_UNSET_KEY"):
        asyncio.run(scenario())
    assert provider.requests == [] and rows(tmp_path)[0]["status"] == "error"


# ---- branch names, titles ---------------------------------------------------------------------------


def test_a_branch_name_follows_gits_rules_and_keeps_the_conversation(provider, tmp_path):
    provider.enqueue("openai_chat", CHAT.text_reply("Branch name: `Fix Login Redirect..`"))
    request = fpb.WriteGitBranchNameRequest(diffs="+redirect()", context="login redirects loop",
                                            conversation_id="conv-7")
    assert serve(names, request, tmp_path, provider).branch_name == "fix-login-redirect"
    assert "login redirects loop" in str(provider.wait_for_request(1).json)
    (row,) = rows(tmp_path)
    assert (row["purpose"], row["conversation_id"]) == ("branch_name", "conv-7")


def test_a_branch_name_answer_with_no_usable_name_is_an_error(provider, tmp_path):
    provider.enqueue("openai_chat", CHAT.text_reply("~~^^::"))
    with pytest.raises(ProviderError, match="no usable branch name"):
        serve(names, fpb.WriteGitBranchNameRequest(diffs="+x"), tmp_path, provider)


CONVERSATION = [
    fpb.ConversationMessage(text="Why does the login test fail on CI?", type=fpb.ConversationMessage.MESSAGE_TYPE_HUMAN),
    fpb.ConversationMessage(text="It depends on the clock.", type=fpb.ConversationMessage.MESSAGE_TYPE_AI),
]


def test_chat_titles_tab_names_and_agent_names(provider, tmp_path):
    provider.enqueue("openai_chat", CHAT.text_reply('"Fix flaky login test."'), CHAT.text_reply("Login test on CI"),
                     CHAT.text_reply("Title: Dark mode"), CHAT.text_reply("Dark mode toggle"))
    assert serve(titles, fpb.GetChatTitleRequest(conversation=CONVERSATION), tmp_path, provider).title == \
        "Fix flaky login test"
    assert "User: Why does the login test fail" in str(provider.wait_for_request(1).json)
    assert "Assistant: It depends on the clock." in str(provider.wait_for_request(1).json)
    assert serve(titles, fpb.NameTabRequest(messages=CONVERSATION), tmp_path, provider) == \
        fpb.NameTabResponse(name="Login test on CI")
    assert serve(titles, fpb.NameAgentRequest(user_message="add a dark mode"), tmp_path, provider).name == "Dark mode"
    assert serve(titles, apb.NameAgentRequest(user_message="add a dark mode toggle"), tmp_path, provider) == \
        apb.NameAgentResponse(name="Dark mode toggle")
    assert {r["purpose"] for r in rows(tmp_path)} == {"chat_title"}


def test_a_title_request_without_text_is_refused(provider, tmp_path):
    with pytest.raises(ProtocolError):
        serve(titles, fpb.GetChatTitleRequest(), tmp_path, provider)
    assert provider.requests == []


# ---- terminal ---------------------------------------------------------------------------------------


def test_autocomplete_sends_what_follows_the_typed_text(provider, tmp_path):
    provider.enqueue("openai_chat", CHAT.text_reply("```bash\n$ git log --oneline -5\n```"))
    request = fpb.StreamTerminalAutocompleteRequest(current_command="git lo", command_history=["git status"],
                                                   git_diff="+x", commit_history=["Add x"])
    assert frames(terminal, request, tmp_path, provider) == [
        fpb.StreamTerminalAutocompleteResponse(text="g --oneline -5"),
        fpb.StreamTerminalAutocompleteResponse(done_stream=True),
    ]
    sent = str(provider.wait_for_request(1).json)
    assert "git lo" in sent and "git status" in sent and "Add x" in sent
    assert rows(tmp_path)[0]["purpose"] == "terminal"


def test_autocomplete_that_does_not_continue_the_input_is_no_suggestion(provider, tmp_path):
    provider.enqueue("openai_chat", CHAT.text_reply("ls -la"))
    request = fpb.StreamTerminalAutocompleteRequest(current_command="git lo")
    assert frames(terminal, request, tmp_path, provider) == [fpb.StreamTerminalAutocompleteResponse(done_stream=True)]


def test_a_terminal_completion_is_a_whole_command(provider, tmp_path):
    provider.enqueue("openai_chat", CHAT.text_reply("npm run test -- --watch"))
    request = fpb.GetTerminalCompletionRequest(
        current_command="npm run t", user_platform="linux", current_folder="/work/app",
        current_folder_structure=[fpb.CurrentFolderFileOrFolder(name="src", is_folder=True),
                                  fpb.CurrentFolderFileOrFolder(name="package.json")],
        relevant_files=[fpb.File(relative_workspace_path="package.json", contents='{"scripts": {"test": "jest"}}')])
    assert serve(terminal, request, tmp_path, provider).command == "npm run test -- --watch"
    sent = str(provider.wait_for_request(1).json)
    assert "src/ package.json" in sent and "Platform: linux" in sent and "jest" in sent


# ---- Cmd-K ------------------------------------------------------------------------------------------


def item(**kwargs) -> fpb.PotentiallyCachedContextItem:
    return fpb.PotentiallyCachedContextItem(context_item=fpb.ContextItem(**kwargs))


def cmd_k_request(*, chat=False, selection=True, extra=()) -> fpb.StreamCmdKRequest:
    items = [item(cmd_k_query=fpb.ContextItem.CmdKQuery(query="Replace Hello with Hi"))]
    if selection:
        items.append(item(cmd_k_selection=fpb.ContextItem.CmdKSelection(lines=["  return 'Hello';"],
                                                                        start_line_number=7)))
    items.append(item(cmd_k_immediate_context=fpb.ContextItem.CmdKImmediateContext(
        relative_workspace_path="greet.js", total_number_of_lines_in_file=12,
        lines=[fpb.ContextItem.CmdKImmediateContext.Line(line="function greet() {", line_number=6),
               fpb.ContextItem.CmdKImmediateContext.Line(line="  return 'Hello';", line_number=7),
               fpb.ContextItem.CmdKImmediateContext.Line(line="}", line_number=8)])))
    items.extend(extra)
    return fpb.StreamCmdKRequest(
        context_items=items, session_id="s-1",
        cmd_k_options=fpb.CmdKOptions(chat_mode=chat, model_details={"model_name": "abcd1234"}))


def real(frame):
    return getattr(frame.real_response, frame.real_response.WhichOneof("response"))


@pytest.mark.parametrize("kind", KINDS)
def test_a_cmd_k_edit_streams_the_replacement_of_the_selection(kind, provider, tmp_path):
    provider.enqueue(kind, SCRIPTS[kind].text_reply("```js\n  return 'Hi';\n```", pieces=4))
    rule = item(project_rule=fpb.CursorRule(name="style", body="Keep semicolons"))
    out = frames(cmdk, cmd_k_request(extra=[rule]), tmp_path, provider, kind)
    start, *streams, end = [real(f) for f in out]
    assert start == fpb.StreamCmdKResponse.EditStart(start_line_number=7, edit_id=1, max_end_line_number_exclusive=8,
                                                     file_path="greet.js")
    assert "".join(s.text for s in streams) == "  return 'Hi';\n"
    assert all(s.edit_id == 1 and s.file_path == "greet.js" for s in streams)
    assert end == fpb.StreamCmdKResponse.EditEnd(end_line_number_exclusive=8, edit_id=1, file_path="greet.js")
    sent = str(provider.wait_for_request(1).json)
    for expected in ("Replace Hello with Hi", "return 'Hello';", "greet.js", "function greet() {", "Keep semicolons"):
        assert expected in sent
    assert rows(tmp_path)[0]["purpose"] == "cmd_k"


def test_a_cmd_k_question_streams_chat(provider, tmp_path):
    provider.enqueue("openai_chat", CHAT.text_reply("It returns a greeting.", pieces=3))
    out = [real(f) for f in frames(cmdk, cmd_k_request(chat=True), tmp_path, provider)]
    assert all(isinstance(f, fpb.StreamCmdKResponse.Chat) for f in out)
    assert "".join(f.text for f in out) == "It returns a greeting."


def test_cmd_k_without_a_selection_is_answered_as_a_question(provider, tmp_path):
    provider.enqueue("openai_chat", CHAT.text_reply("Use a template literal."))
    out = [real(f) for f in frames(cmdk, cmd_k_request(selection=False), tmp_path, provider)]
    assert "".join(f.text for f in out) == "Use a template literal."


def test_cmd_k_asks_for_the_items_it_was_sent_only_as_hashes(provider, tmp_path):
    request = cmd_k_request()
    request.context_items.add(context_item_hash="cached-rule")
    request.context_items.add(context_item_hash="cached-file")
    assert frames(cmdk, request, tmp_path, provider) == [fpb.StreamCmdKResponseContextWrapped(
        missing_context_items=fpb.MissingContextItems(missing_context_item_hashes=["cached-rule", "cached-file"]))]
    assert provider.requests == [] and rows(tmp_path) == []


def test_cmd_k_without_a_query_is_refused(provider, tmp_path):
    request = fpb.StreamCmdKRequest(cmd_k_options=fpb.CmdKOptions(model_details={"model_name": "x"}))
    with pytest.raises(ProtocolError, match="cmd_k_query"):
        frames(cmdk, request, tmp_path, provider)


def test_a_silent_model_gets_heartbeat_frames(provider, tmp_path, monkeypatch):
    monkeypatch.setattr(cmdk, "HEARTBEAT_S", 0.05)
    script = CHAT.text_reply("  return 'Hi';", pieces=1)
    provider.enqueue("openai_chat", Sse([Ev(script.items[0], delay_s=0.4), *script.items[1:]]))
    out = [real(f) for f in frames(cmdk, cmd_k_request(), tmp_path, provider)]
    heartbeats = [f for f in out if isinstance(f, fpb.StreamCmdKResponse.EditStream) and not f.text]
    assert isinstance(out[0], fpb.StreamCmdKResponse.EditStart) and len(heartbeats) >= 3
    assert "".join(f.text for f in out[1:-1]) == "  return 'Hi';"


def test_a_provider_failure_mid_edit_raises_after_the_edit_started(provider, tmp_path):
    provider.enqueue("openai_chat", CHAT.error_event("overloaded", partial_text="  return"))
    seen = []

    async def scenario():
        async with call_context(tmp_path, provider) as ctx:
            async for frame in cmdk.stream_cmd_k(cmd_k_request(), ctx):
                seen.append(real(frame))

    with pytest.raises(ProviderError, match="overloaded"):
        asyncio.run(scenario())
    assert isinstance(seen[0], fpb.StreamCmdKResponse.EditStart)
    assert not any(isinstance(f, fpb.StreamCmdKResponse.EditEnd) for f in seen)


def test_a_client_that_leaves_mid_edit_closes_the_provider_request(provider, tmp_path):
    script = CHAT.text_reply("  return 'Hi';", pieces=1)
    provider.enqueue("openai_chat", Sse([script.items[0], Ev(script.items[1], delay_s=30), *script.items[2:]]))

    async def scenario():
        async with call_context(tmp_path, provider) as ctx:
            seen = []

            async def consume():
                async for frame in cmdk.stream_cmd_k(cmd_k_request(), ctx):
                    seen.append(real(frame))

            task = asyncio.ensure_future(consume())
            async with asyncio.timeout(10):  # until the edit has started
                while not seen:
                    await asyncio.sleep(0.01)
            await asyncio.to_thread(provider.wait_for_request, 1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return seen

    seen = asyncio.run(scenario())
    assert isinstance(seen[0], fpb.StreamCmdKResponse.EditStart)
    assert provider.wait_closed(1).closed_early
    assert rows(tmp_path)[0]["status"] == "canceled"


def terminal_request(*, chat=False) -> fpb.StreamTerminalCmdKRequest:
    return fpb.StreamTerminalCmdKRequest(
        context_items=[item(terminal_cmd_k_query=fpb.ContextItem.TerminalCmdKQuery(query="list big files")),
                       item(terminal_history=fpb.ContextItem.TerminalHistory(history="$ ls\nsrc", cwd_full="/w"))],
        cmd_k_options=fpb.TerminalCmdKOptions(chat_mode=chat, model_details={"model_name": "abcd1234"}))


def test_terminal_cmd_k_answers_one_command(provider, tmp_path):
    provider.enqueue("openai_chat", CHAT.text_reply("```sh\nfind . -size +10M\n```"))
    out = frames(cmdk, terminal_request(), tmp_path, provider)
    assert out == [fpb.StreamTerminalCmdKResponseContextWrapped(real_response=fpb.StreamTerminalCmdKResponse(
        terminal_command=fpb.StreamTerminalCmdKResponse.TerminalCommand(partial_command="find . -size +10M")))]
    sent = str(provider.wait_for_request(1).json)
    assert "list big files" in sent and "working directory: /w" in sent


def test_terminal_cmd_k_chat(provider, tmp_path):
    provider.enqueue("openai_chat", CHAT.text_reply("The ls output shows one folder."))
    out = frames(cmdk, terminal_request(chat=True), tmp_path, provider)
    assert "".join(f.real_response.chat.text for f in out) == "The ls output shows one folder."


def test_cmd_k_routes_by_the_model_it_names(provider):
    config = config_for(provider)
    mine = config.models[0].public_id
    (edit, term) = cmdk.SERVICES
    assert edit.route_for(fpb.StreamCmdKRequest(cmd_k_options={"model_details": {"model_name": mine}}), config) \
        is config.models[0]
    assert edit.route_for(fpb.StreamCmdKRequest(cmd_k_options={"model_details": {"model_name": "gpt-5"}}),
                          config) is None
    assert term.route_for(fpb.StreamTerminalCmdKRequest(), config) is None
    assert edit.may_answer(config)
