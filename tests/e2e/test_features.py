"""Cursor's other AI calls on the user's models (issue 23), through a real mitmdump with a scripted
provider and a fake Cursor backend: every RPC in each of its encodings answered (unary `application/proto`
and `application/json`, server streams `application/connect+proto`), provider errors as Connect errors
with ErrorDetails, `default` serving the features left out, everything passing to Cursor byte for byte
when `[features]` names no model, Cmd-K edits, questions and the context-item handshake, the model list's
`supports_cmd_k`, the client's deadline, and IsConnected with Cursor's backend down."""

from __future__ import annotations

import sqlite3
import ssl
import time
from dataclasses import dataclass

import httpx
import pytest
from google.protobuf import json_format
from google.protobuf.message import Message

from byok.proto import agent_pb2 as apb, aiserver_pb2 as spb, features_pb2 as fpb
from byok.wire import connect
from tests.e2e.conftest import ROOT, run
from tests.e2e.harness import Proxy, free_port, model_entry, providers_toml, public_id
from tests.support.scripted_provider import CHAT, Ev, Hang, HttpError, Sse

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

HOST = "https://api2.cursor.sh"
FEATURES = """
[features]
commit_message = "commitp/commit-model"
default = "defaultp/default-model"
"""


@dataclass
class Env:
    proxy: Proxy
    provider: object
    upstream: object
    models: str
    """The providers file without [features]."""
    cmd_k_model: str
    """Public id of a user model (what Cmd-K names)."""


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider, upstream):
    home = tmp_path_factory.mktemp("features")
    entries = [model_entry(provider.base_url, model_id="commit-model", name="commitp"),
               model_entry(provider.base_url, model_id="default-model", name="defaultp")]
    models = providers_toml(entries)
    (home / "providers.toml").write_text(models + FEATURES)
    cursor_model = spb.AvailableModelsResponse.AvailableModel(name="cursor-fast", supports_cmd_k=True)
    upstream.model_list_payloads["/aiserver.v1.AiService/AvailableModels"] = (
        "application/proto", spb.AvailableModelsResponse(models=[cursor_model]).SerializeToString())
    proxy = Proxy(home, extra_scripts=[str(ROOT / "tests/support/redirect_upstream.py")],
                  options={"test_upstream": f"127.0.0.1:{upstream.port}", "ssl_insecure": "true",
                           "byok_upstream_probe_ms": "0"}).start()
    try:
        yield Env(proxy, provider, upstream, models, public_id(entries[1]))
    finally:
        proxy.stop()


@pytest.fixture(autouse=True)
def _fresh(env):
    env.provider.clear()
    yield
    env.provider.clear()


def client(proxy: Proxy) -> httpx.Client:
    return httpx.Client(proxy=proxy.url, verify=ssl.create_default_context(cafile=proxy.ca_file), timeout=30,
                        trust_env=False)


def post_unary(proxy: Proxy, path: str, message: Message, encoding: str, headers: dict | None = None):
    if encoding == "json":
        body, ctype = json_format.MessageToJson(message).encode(), "application/json"
    else:
        body, ctype = message.SerializeToString(), "application/proto"
    with client(proxy) as c:
        return c.post(f"{HOST}{path}", content=body, headers={"content-type": ctype, **(headers or {})})


def unary_answer(response: httpx.Response, message_type: type[Message], encoding: str) -> Message:
    assert response.status_code == 200, response.text
    if encoding == "json":
        assert response.headers["content-type"] == "application/json"
        return json_format.Parse(response.text, message_type())
    assert response.headers["content-type"] == "application/proto"
    return message_type.FromString(response.content)


def post_stream(proxy: Proxy, path: str, message: Message) -> httpx.Response:
    with client(proxy) as c:
        return c.post(f"{HOST}{path}", content=connect.encode_envelope(message.SerializeToString()),
                      headers={"content-type": "application/connect+proto"})


def stream_answer(response: httpx.Response, message_type: type[Message]) -> tuple[list[Message], connect.ConnectError | None]:
    assert response.status_code == 200 and response.headers["content-type"] == "application/connect+proto"
    frames = connect.decode_all(response.content)
    assert frames and frames[-1].end_stream, "no end-stream"
    return [message_type.FromString(f.payload) for f in frames[:-1]], connect.parse_end_stream(frames[-1].payload)


def llm_rows(proxy: Proxy, request_id: str, timeout: float = 10.0) -> list[dict]:
    """The finished llm_calls rows of one request id (written by the proxy's store thread)."""
    deadline = time.monotonic() + timeout
    while True:
        conn = sqlite3.connect(proxy.db)
        conn.row_factory = sqlite3.Row
        try:
            rows = [dict(r) for r in conn.execute("SELECT * FROM llm_calls WHERE request_id = ? ORDER BY id",
                                                   [request_id])]
        finally:
            conn.close()
        if rows and all(r["status"] != "running" for r in rows):
            return rows
        assert time.monotonic() < deadline, f"no finished llm_calls row for {request_id}: {rows}"
        time.sleep(0.05)


# ---- the RPCs ------------------------------------------------------------------------------------------

CONVERSATION = [fpb.ConversationMessage(text="Make the login test stable", type=fpb.ConversationMessage.MESSAGE_TYPE_HUMAN)]


@dataclass(frozen=True)
class Unary:
    name: str
    path: str
    request: Message
    reply: str
    """What the model answers."""
    expected: Message
    model: str
    purpose: str


UNARY = [
    Unary("commit", "/aiserver.v1.AiService/WriteGitCommitMessage",
          fpb.WriteGitCommitMessageRequest(diffs=["+retry()"], previous_commit_messages=["[auth] Add check"]),
          "```\n[test] Retry the login test\n```", fpb.WriteGitCommitMessageResponse(commit_message="[test] Retry the login test"),
          "commit-model", "commit_message"),
    Unary("branch", "/aiserver.v1.AiService/WriteGitBranchName",
          fpb.WriteGitBranchNameRequest(diffs="+retry()", context="stabilise login test"),
          "Fix Login Test", fpb.WriteGitBranchNameResponse(branch_name="fix-login-test"), "default-model", "branch_name"),
    Unary("chat_title", "/aiserver.v1.AiService/GetChatTitle", fpb.GetChatTitleRequest(conversation=CONVERSATION),
          '"Stable login test"', fpb.GetChatTitleResponse(title="Stable login test"), "default-model", "chat_title"),
    Unary("name_tab", "/aiserver.v1.AiService/NameTab", fpb.NameTabRequest(messages=CONVERSATION),
          "Login test", fpb.NameTabResponse(name="Login test"), "default-model", "chat_title"),
    Unary("name_agent", "/aiserver.v1.AiService/NameAgent", fpb.NameAgentRequest(user_message="stabilise login"),
          "Stabilise login", fpb.NameAgentResponse(name="Stabilise login"), "default-model", "chat_title"),
    Unary("name_agent_v1", "/agent.v1.AgentService/NameAgent", apb.NameAgentRequest(user_message="stabilise login"),
          "Stabilise login", apb.NameAgentResponse(name="Stabilise login"), "default-model", "chat_title"),
    Unary("terminal", "/aiserver.v1.AiService/GetTerminalCompletion",
          fpb.GetTerminalCompletionRequest(current_command="git st", user_platform="linux"),
          "$ git status", fpb.GetTerminalCompletionResponse(command="git status"), "default-model", "terminal"),
]


@pytest.mark.parametrize("encoding", ["proto", "json"])
@pytest.mark.parametrize("case", UNARY, ids=lambda c: c.name)
def test_unary_rpcs_answered_in_each_encoding(env, case, encoding):
    env.provider.enqueue("openai_chat", CHAT.text_reply(case.reply))
    request_id = f"{case.name}-{encoding}"
    response = post_unary(env.proxy, case.path, case.request, encoding, {"x-request-id": request_id})
    assert unary_answer(response, type(case.expected), encoding) == case.expected
    assert env.provider.requests[-1].json["model"] == case.model  # `default` serves the rest
    (row,) = llm_rows(env.proxy, request_id)
    assert (row["purpose"], row["status"], row["model"]) == (case.purpose, "ok", case.model)


@pytest.mark.parametrize("encoding", ["proto", "json"])
@pytest.mark.parametrize("case", UNARY, ids=lambda c: c.name)
def test_unary_provider_error_is_a_connect_error_with_error_details(env, case, encoding):
    env.provider.enqueue("openai_chat", HttpError(500, {"error": {"message": "the provider is down"}}))
    response = post_unary(env.proxy, case.path, case.request, encoding)
    assert response.status_code == 503 and response.headers["content-type"] == "application/json"
    error = connect.error_from_json(response.json())
    assert error.code is connect.Code.UNAVAILABLE and "the provider is down" in error.message
    detail = spb.ErrorDetails.FromString(error.details[0].value)
    assert error.details[0].type == "aiserver.v1.ErrorDetails" and detail.error == spb.ErrorDetails.ERROR_PROVIDER_ERROR


def cmd_k_edit(model: str, *, chat: bool = False, hashes: tuple[str, ...] = ()) -> fpb.StreamCmdKRequest:
    def item(**kwargs):
        return fpb.PotentiallyCachedContextItem(context_item=fpb.ContextItem(**kwargs))

    request = fpb.StreamCmdKRequest(session_id="s", cmd_k_options=fpb.CmdKOptions(
        chat_mode=chat, model_details=spb.ModelDetails(model_name=model)), context_items=[
        item(cmd_k_query=fpb.ContextItem.CmdKQuery(query="Say Hi")),
        item(cmd_k_selection=fpb.ContextItem.CmdKSelection(lines=["  return 'Hello';"], start_line_number=7)),
        item(cmd_k_immediate_context=fpb.ContextItem.CmdKImmediateContext(relative_workspace_path="greet.js")),
    ])
    for h in hashes:
        request.context_items.add(context_item_hash=h)
    return request


def terminal_cmd_k(model: str, *, chat: bool = False) -> fpb.StreamTerminalCmdKRequest:
    return fpb.StreamTerminalCmdKRequest(
        cmd_k_options=fpb.TerminalCmdKOptions(chat_mode=chat, model_details=spb.ModelDetails(model_name=model)),
        context_items=[fpb.PotentiallyCachedContextItem(context_item=fpb.ContextItem(
            terminal_cmd_k_query=fpb.ContextItem.TerminalCmdKQuery(query="show disk usage")))])


STREAMS = ["autocomplete", "cmd_k", "terminal_cmd_k"]


def stream_call(env: Env, which: str) -> tuple[str, Message, type[Message]]:
    if which == "autocomplete":
        return ("/aiserver.v1.AiService/StreamTerminalAutocomplete",
                fpb.StreamTerminalAutocompleteRequest(current_command="git st"), fpb.StreamTerminalAutocompleteResponse)
    if which == "cmd_k":
        return "/aiserver.v1.CmdKService/StreamCmdK", cmd_k_edit(env.cmd_k_model), fpb.StreamCmdKResponseContextWrapped
    return ("/aiserver.v1.CmdKService/StreamTerminalCmdK", terminal_cmd_k(env.cmd_k_model),
            fpb.StreamTerminalCmdKResponseContextWrapped)


def test_terminal_autocomplete_streams_the_continuation(env):
    env.provider.enqueue("openai_chat", CHAT.text_reply("git status --short"))
    path, request, response_type = stream_call(env, "autocomplete")
    frames, error = stream_answer(post_stream(env.proxy, path, request), response_type)
    assert error is None and frames == [fpb.StreamTerminalAutocompleteResponse(text="atus --short"),
                                        fpb.StreamTerminalAutocompleteResponse(done_stream=True)]


def test_cmd_k_edit_streams_the_replacement(env):
    env.provider.enqueue("openai_chat", CHAT.text_reply("```js\n  return 'Hi';\n```", pieces=5))
    frames, error = stream_answer(post_stream(env.proxy, "/aiserver.v1.CmdKService/StreamCmdK",
                                              cmd_k_edit(env.cmd_k_model)), fpb.StreamCmdKResponseContextWrapped)
    assert error is None
    kinds = [f.real_response.WhichOneof("response") for f in frames]
    assert kinds[0] == "edit_start" and kinds[-1] == "edit_end" and set(kinds[1:-1]) == {"edit_stream"}
    assert frames[0].real_response.edit_start.start_line_number == 7
    assert frames[-1].real_response.edit_end.end_line_number_exclusive == 8
    assert "".join(f.real_response.edit_stream.text for f in frames[1:-1]) == "  return 'Hi';\n"
    assert env.provider.requests[-1].json["model"] == "default-model"


def test_cmd_k_question_streams_chat(env):
    env.provider.enqueue("openai_chat", CHAT.text_reply("It greets the user."))
    frames, error = stream_answer(post_stream(env.proxy, "/aiserver.v1.CmdKService/StreamCmdK",
                                              cmd_k_edit(env.cmd_k_model, chat=True)), fpb.StreamCmdKResponseContextWrapped)
    assert error is None and {f.real_response.WhichOneof("response") for f in frames} == {"chat"}
    assert "".join(f.real_response.chat.text for f in frames) == "It greets the user."


def test_cmd_k_context_handshake_then_the_edit(env):
    """An item sent as a hash only is asked for (missing_context_items, clean end, no model call); the
    request sent again in full is answered."""
    calls = len(env.provider.requests)
    response = post_stream(env.proxy, "/aiserver.v1.CmdKService/StreamCmdK",
                           cmd_k_edit(env.cmd_k_model, hashes=("h-rule",)))
    frames, error = stream_answer(response, fpb.StreamCmdKResponseContextWrapped)
    assert error is None and frames == [fpb.StreamCmdKResponseContextWrapped(
        missing_context_items=fpb.MissingContextItems(missing_context_item_hashes=["h-rule"]))]
    assert len(env.provider.requests) == calls
    env.provider.enqueue("openai_chat", CHAT.text_reply("  return 'Hi';"))
    frames, error = stream_answer(post_stream(env.proxy, "/aiserver.v1.CmdKService/StreamCmdK",
                                              cmd_k_edit(env.cmd_k_model)), fpb.StreamCmdKResponseContextWrapped)
    assert error is None and frames[-1].real_response.WhichOneof("response") == "edit_end"


@pytest.mark.parametrize("chat", [False, True])
def test_terminal_cmd_k(env, chat):
    env.provider.enqueue("openai_chat", CHAT.text_reply("du -sh ." if not chat else "Use du."))
    frames, error = stream_answer(post_stream(env.proxy, "/aiserver.v1.CmdKService/StreamTerminalCmdK",
                                              terminal_cmd_k(env.cmd_k_model, chat=chat)),
                                  fpb.StreamTerminalCmdKResponseContextWrapped)
    assert error is None
    if chat:
        assert "".join(f.real_response.chat.text for f in frames) == "Use du."
    else:
        assert frames == [fpb.StreamTerminalCmdKResponseContextWrapped(real_response=fpb.StreamTerminalCmdKResponse(
            terminal_command=fpb.StreamTerminalCmdKResponse.TerminalCommand(partial_command="du -sh .")))]


@pytest.mark.parametrize("which", STREAMS)
def test_stream_provider_error_ends_with_an_error_end_stream(env, which):
    env.provider.enqueue("openai_chat", HttpError(500, {"error": {"message": "the provider is down"}}))
    path, request, response_type = stream_call(env, which)
    _, error = stream_answer(post_stream(env.proxy, path, request), response_type)
    assert error is not None and error.code is connect.Code.UNAVAILABLE and "the provider is down" in error.message
    assert error.details[0].type == "aiserver.v1.ErrorDetails"


@pytest.mark.parametrize("which", STREAMS)
def test_streams_keep_their_purpose(env, which):
    env.provider.enqueue("openai_chat", CHAT.text_reply("git status" if which != "cmd_k" else "x"))
    path, request, response_type = stream_call(env, which)
    with client(env.proxy) as c:
        c.post(f"{HOST}{path}", content=connect.encode_envelope(request.SerializeToString()),
               headers={"content-type": "application/connect+proto", "x-request-id": f"stream-{which}"})
    (row,) = llm_rows(env.proxy, f"stream-{which}")
    assert row["purpose"] == ("terminal" if which == "autocomplete" else "cmd_k") and row["status"] == "ok"


# ---- passing through --------------------------------------------------------------------------------------


def test_every_rpc_passes_to_cursor_byte_for_byte_without_a_model(env):
    """Without [features] each feature's RPC goes to Cursor as sent; Cmd-K naming Cursor's own model too.

    Each call gets its own client connection. On one kept-alive client connection the sixth passthrough
    stalls, but only because of the test's own upstream remap: tests/support/redirect_upstream.py rewrites
    the server address in `server_connect`, so mitmproxy (11.0.2 and 12.3 alike, with
    connection_strategy=lazy) never finds an open connection to reuse and opens one per request. Without
    the remap one server connection carries them all (checked by hand on both versions)."""
    calls = len(env.provider.requests)
    config = env.proxy.config
    config.write_text(env.models)  # the same models, no [features]: the file is read again on the next call
    try:
        for case in UNARY:
            for encoding in ("proto", "json"):
                body = case.request.SerializeToString() if encoding == "proto" else \
                    json_format.MessageToJson(case.request).encode()
                ctype = "application/proto" if encoding == "proto" else "application/json"
                with client(env.proxy) as c:  # one connection each: see the note below
                    answer = c.post(f"{HOST}{case.path}", content=body, headers={"content-type": ctype})
                assert answer.content == b"upstream ok", case.name
                assert env.upstream.requests(case.path)[-1].body == body
        path, request, _ = stream_call(env, "autocomplete")
        body = connect.encode_envelope(request.SerializeToString())
        with client(env.proxy) as c:
            assert c.post(f"{HOST}{path}", content=body,
                          headers={"content-type": "application/connect+proto"}).content == b"upstream ok"
        assert env.upstream.requests(path)[-1].body == body
    finally:
        config.write_text(env.models + FEATURES)
    for path, request in (("/aiserver.v1.CmdKService/StreamCmdK", cmd_k_edit("cursor-fast")),
                          ("/aiserver.v1.CmdKService/StreamTerminalCmdK", terminal_cmd_k("cursor-fast"))):
        body = connect.encode_envelope(request.SerializeToString())
        with client(env.proxy) as c:
            assert c.post(f"{HOST}{path}", content=body,
                          headers={"content-type": "application/connect+proto"}).content == b"upstream ok"
        assert env.upstream.requests(path)[-1].body == body
    assert len(env.provider.requests) == calls


# ---- model list, deadline ----------------------------------------------------------------------------------


def test_the_model_list_offers_cmd_k_on_the_users_models(env):
    with client(env.proxy) as c:
        answer = c.post(f"{HOST}/aiserver.v1.AiService/AvailableModels", content=b"",
                        headers={"content-type": "application/proto"})
    models = {m.name: m for m in spb.AvailableModelsResponse.FromString(answer.content).models}
    assert models["cursor-fast"].supports_cmd_k  # Cursor's own entry untouched
    assert models[env.cmd_k_model].supports_cmd_k


def test_a_commit_message_within_the_clients_10_s_deadline(env):
    """PROTOCOL 11.2: the client gives up after about 10 s. A provider that answers in time is answered;
    one that would not is ended before the client's own deadline with deadline_exceeded."""
    script = CHAT.text_reply("Add retry")
    env.provider.enqueue("openai_chat", Sse([Ev(script.items[0], delay_s=0.5), *script.items[1:]]))
    started = time.monotonic()
    response = post_unary(env.proxy, UNARY[0].path, UNARY[0].request, "proto", {"connect-timeout-ms": "10000"})
    took = time.monotonic() - started
    assert unary_answer(response, fpb.WriteGitCommitMessageResponse, "proto").commit_message == "Add retry"
    assert 0.5 <= took < 10
    print(f"commit message with a 0.5 s provider: {took:.3f} s through mitmdump")

    env.provider.enqueue("openai_chat", Hang(30))
    started = time.monotonic()
    response = post_unary(env.proxy, UNARY[0].path, UNARY[0].request, "proto", {"connect-timeout-ms": "3000"})
    took = time.monotonic() - started
    assert response.status_code == 504 and response.json()["code"] == "deadline_exceeded"
    assert 2.0 < took < 3.0, took  # before the client's own deadline
    print(f"commit message with a silent provider and a 3 s deadline: error after {took:.3f} s")


# ---- IsConnected with Cursor's backend down -------------------------------------------------------------


@pytest.fixture(scope="module")
def down(tmp_path_factory, provider):
    """A proxy for which the Cursor backend is 127.0.0.1:<a closed port> (byok_hosts): unreachable, and
    probed (byok_upstream_probe_ms) without any traffic leaving loopback."""
    home = tmp_path_factory.mktemp("down")
    models = providers_toml([model_entry(provider.base_url)])
    (home / "providers.toml").write_text(models)
    proxy = Proxy(home, options={"byok_upstream_probe_ms": "500"},
                  extra_args=["--set", "byok_hosts=api2.cursor.sh", "--set", "byok_hosts=127.0.0.1"]).start()
    try:
        yield proxy, models
    finally:
        proxy.stop()


@pytest.mark.parametrize("ctype", ["application/proto", "application/json", "application/connect+proto"])
def test_is_connected_answers_while_the_upstream_is_down(down, ctype):
    proxy, _ = down
    url = f"https://127.0.0.1:{free_port()}/aiserver.v1.NetworkService/IsConnected"
    body = b"{}" if ctype == "application/json" else b""
    if ctype == "application/connect+proto":
        body = connect.encode_envelope(b"")
    with client(proxy) as c:
        answer = c.post(url, content=body, headers={"content-type": ctype})
    assert answer.status_code == 200 and answer.headers["content-type"] == ctype
    if ctype == "application/connect+proto":
        frames = connect.decode_all(answer.content)
        assert frames[0].payload == b"" and frames[-1].end_stream
    assert "IsConnected answered here" in proxy.log()


def test_is_connected_tells_the_truth_without_local_models(down):
    proxy, models = down
    proxy.config.write_text("")
    try:
        with client(proxy) as c:
            answer = c.post(f"https://127.0.0.1:{free_port()}/aiserver.v1.NetworkService/IsConnected",
                            content=b"", headers={"content-type": "application/proto"})
        assert answer.status_code == 502  # mitmproxy's own: Cursor is unreachable, and nothing is served here
    finally:
        proxy.config.write_text(models)


def test_is_connected_passes_while_cursor_is_up(env):
    with client(env.proxy) as c:
        answer = c.post(f"{HOST}/aiserver.v1.NetworkService/IsConnected", content=b"",
                        headers={"content-type": "application/proto"})
    assert answer.content == b"upstream ok" and env.upstream.requests("/aiserver.v1.NetworkService/IsConnected")


def test_no_tracebacks(env):
    assert "Traceback" not in env.proxy.log()
