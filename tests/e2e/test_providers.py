"""Issue 4/5 through a real mitmdump: one tool turn per provider dialect with reasoning replay and the
prefix property, cancellation before response headers, config errors, and no key anywhere."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from byok.wire import connect
from byok.cli.client import user_turn_request
from byok.proto import agent_pb2 as apb, aiserver_pb2 as spb
from tests.e2e.conftest import run, start_proxy
from tests.e2e.harness import API_KEY, model_entry, providers_toml, public_id, run_with_executor
from tests.support.waiting import until
from tests.support.scripted_provider import CHAT, KINDS, SCRIPTS, Hang, Usage

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider):
    proxy, ids = start_proxy(tmp_path_factory.mktemp("providers"), provider, kinds=KINDS,
                             byok_verbose_llm="true")
    yield proxy, ids
    proxy.stop()


def tool_turn(proxy, model, workspace):
    request = user_turn_request("read notes.txt", model_id=model, workspace=str(workspace))
    return run_with_executor(proxy, request, workspace)[0]


@pytest.mark.parametrize("kind", KINDS)
def test_tool_turn_replays_reasoning_per_dialect(env, provider, tmp_path, kind):
    proxy, ids = env
    (tmp_path / "notes.txt").write_text("alpha\nbeta\n")
    script = SCRIPTS[kind]
    path = str(tmp_path / "notes.txt")
    provider.enqueue(kind, script.tool_calls([("call_read_1", "Read", json.dumps({"path": path}))],
                                             reasoning="I should read the file first."),
                     script.text_reply("The file says alpha and beta.", usage=Usage(300, 9)))
    first_index = len(provider.requests)
    result = tool_turn(proxy, ids[kind], tmp_path)
    assert result.end_error is None, result.end_error
    assert result.text() == "The file says alpha and beta."
    first, second = provider.requests[first_index].json, provider.requests[first_index + 1].json

    if kind == "openai_chat":
        assert second["messages"][: len(first["messages"])] == first["messages"]
        assistant, tool = second["messages"][len(first["messages"]):]
        assert assistant["reasoning_content"] == "I should read the file first."
        assert [c["id"] for c in assistant["tool_calls"]] == ["call_read_1"]
        assert assistant["tool_calls"][0]["function"]["arguments"] == json.dumps({"path": path})
        assert tool["role"] == "tool" and tool["tool_call_id"] == "call_read_1"
        assert isinstance(tool["content"], str) and "alpha" in tool["content"]
    elif kind == "openai_responses":
        assert second["input"][: len(first["input"])] == first["input"]
        added = second["input"][len(first["input"]):]
        reasoning = [i for i in added if i["type"] == "reasoning"]
        assert reasoning and reasoning[0]["encrypted_content"] == "gAAAA-scripted-reasoning=="
        [call] = [i for i in added if i["type"] == "function_call"]
        [output] = [i for i in added if i["type"] == "function_call_output"]
        assert call["call_id"] == output["call_id"] == "call_read_1"
        assert isinstance(output["output"], str) and "alpha" in output["output"]
        assert added.index(reasoning[0]) < added.index(call) < added.index(output)
        assert "previous_response_id" not in second
    else:
        assert second["messages"][: len(first["messages"])] == first["messages"]
        assistant, user = second["messages"][len(first["messages"]):]
        kinds = [b["type"] for b in assistant["content"]]
        assert kinds[0] == "thinking" and "tool_use" in kinds
        assert assistant["content"][0]["signature"] == "EqQBscripted-signature"
        assert assistant["content"][0]["thinking"] == "I should read the file first."
        [result_block] = user["content"]
        assert result_block["type"] == "tool_result" and result_block["tool_use_id"] == "call_read_1"
        assert "alpha" in json.dumps(result_block["content"])
        assert second["max_tokens"] == 4096
    # requests carry only what the model config sets
    for body in (first, second):
        for knob in ("temperature", "max_completion_tokens", "reasoning_effort", "top_p"):
            assert knob not in body
    [ended] = [f.message.interaction_update.turn_ended for f in result.down("interaction_update.turn_ended")]
    assert ended.input_tokens == 100 + 300 and ended.output_tokens == 20 + 9  # summed over the two calls
    assert len(result.down("interaction_update.token_delta")) == 2


def test_cancel_while_the_provider_has_not_sent_headers(env, provider):
    proxy, ids = env
    provider.enqueue("openai_chat", Hang(60))
    hung_index = len(provider.requests) + 1

    async def scenario():
        async with proxy.client() as client:
            request_id = "req-cancel-headers"

            async def on_frame(frame):
                if frame.kind == "conversation_checkpoint_update":  # the provider call is waiting for headers:
                    await until(lambda: len(provider.requests) >= hung_index, "the hung provider request")
                    client.append_soon(request_id, apb.AgentClientMessage(conversation_action=apb.ConversationAction(
                        cancel_action=apb.CancelAction())))

            t0 = time.monotonic()
            result = await client.run(user_turn_request("hang", model_id=ids["openai_chat"]),
                                      request_id=request_id, on_frame=on_frame)
            return result, time.monotonic() - t0

    result, took = run(scenario())
    assert result.end_error.code is connect.Code.CANCELED
    assert took < 5
    assert provider.wait_closed(hung_index, timeout=5).closed_early


def test_missing_key_is_a_config_error(tmp_path, provider):
    entry = model_entry(provider.base_url, model_id="keyless")
    home = tmp_path / "home"
    home.mkdir()
    text = providers_toml([entry]).replace(f'api_key = "{API_KEY}"', 'api_key_env = "BYOK_TEST_UNSET_KEY"')
    (home / "providers.toml").write_text(text)
    from tests.e2e.harness import Proxy

    proxy = Proxy(home).start()
    try:
        async def scenario():
            async with proxy.client() as client:
                return await client.run(user_turn_request("hi", model_id=public_id(entry)))

        result = run(scenario())
        assert result.end_error.code is connect.Code.FAILED_PRECONDITION
        assert "BYOK_TEST_UNSET_KEY" in result.end_error.message
        details = spb.ErrorDetails.FromString(result.end_error.details[0].value)
        assert details.error == spb.ErrorDetails.ERROR_BAD_USER_API_KEY
        assert details.details.should_show_immediate_error and not details.details.is_retryable
    finally:
        proxy.stop()


def test_api_key_is_nowhere(env, provider, tmp_path):
    """After full runs (tool turn, text turn, errors) with verbose LLM logging on, the key appears
    in no database row, no log line and no capture file."""
    proxy, ids = env
    provider.enqueue("openai_chat", CHAT.text_reply("keys stay secret"))

    async def scenario():
        async with proxy.client() as client:
            return await client.run(user_turn_request("please do not leak", model_id=ids["openai_chat"]))

    assert run(scenario()).end_error is None
    secret = API_KEY.encode()
    db = sqlite3.connect(proxy.db)
    tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    stored = 0
    for table in tables:
        for row in db.execute(f"SELECT * FROM {table}"):
            for value in row:
                blob = value if isinstance(value, bytes) else str(value).encode()
                assert secret not in blob, f"API key found in table {table}"
                stored += 1
    assert stored > 0
    assert db.execute("SELECT count(*) FROM llm_calls WHERE request_body IS NOT NULL").fetchone()[0] > 0
    assert API_KEY not in proxy.log()
    for capture in (Path(__file__).resolve().parents[2] / "captures").rglob("*"):
        if capture.is_file():
            assert secret not in capture.read_bytes(), f"API key in capture {capture}"
    # the provider did receive it (so the check above is meaningful)
    assert any(API_KEY in json.dumps(r.headers) for r in provider.requests)
