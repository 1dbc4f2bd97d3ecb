"""Issue 10 point 2 through a real mitmdump: a provider that sends headers (or nothing) and then goes
quiet ends the run with a retryable provider error naming the model and the silence; Cursor gets
heartbeats until then; the provider sees its connection closed. Keep-alives keep a stream alive."""

from __future__ import annotations

import pytest

from byok.wire import connect
from byok.cli.client import user_turn_request
from byok.proto import aiserver_pb2 as spb
from tests.e2e.conftest import run, start_proxy
from tests.support.scripted_provider import ANTHROPIC, CHAT, Ev, Hang, Sse

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

KINDS = ("openai_chat", "anthropic")
IDLE_S = "2"


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider):
    proxy, ids = start_proxy(tmp_path_factory.mktemp("stalls"), provider, kinds=KINDS, byok_heartbeat_s="0.3",
                             byok_provider_idle_s=IDLE_S, byok_provider_headers_s=IDLE_S)
    yield proxy, ids
    proxy.stop()


def turn(proxy, model, text="hello"):
    async def scenario():
        async with proxy.client() as client:
            return await client.run(user_turn_request(text, model_id=model))

    return run(scenario())


def assert_stall_error(result, model_id: str, what: str):
    error = result.end_error
    assert error is not None and error.code is connect.Code.UNAVAILABLE
    assert f"'{model_id}'" in error.message and what in error.message
    [detail] = error.details
    details = spb.ErrorDetails.FromString(detail.value)
    assert details.error == spb.ErrorDetails.ERROR_PROVIDER_ERROR
    assert details.details.is_retryable and details.details.title == "Provider stalled"
    assert result.kinds()[-1] == "end_stream" and "interaction_update.turn_ended" not in result.kinds()


def test_headers_then_silence_ends_with_a_stall_error_heartbeats_until_then(env, provider):
    proxy, ids = env
    items = CHAT.text_reply("half an answer", pieces=2).items
    # role chunk + first text piece, then 10 minutes of nothing
    provider.enqueue("openai_chat", Sse(items[:2] + [Ev(items[2], delay_s=600)] + items[3:]))
    index = len(provider.requests)
    result = turn(proxy, ids["openai_chat"])

    assert_stall_error(result, "openai_chat-model", f"sent nothing for {IDLE_S} s")
    kinds = result.kinds(skip_heartbeats=False)
    last_text = len(kinds) - 1 - kinds[::-1].index("interaction_update.text_delta")
    assert kinds[last_text + 1:].count("interaction_update.heartbeat") >= 2  # ~6 at 0.3 s over 2 s
    assert result.text() == "half an"  # what streamed before the silence stays on screen, nothing more
    assert provider.wait_closed(index + 1, timeout=10).closed_early


def test_no_response_headers_ends_with_its_own_stall_error(env, provider):
    proxy, ids = env
    provider.enqueue("anthropic", Hang(600))
    index = len(provider.requests)
    result = turn(proxy, ids["anthropic"])

    assert_stall_error(result, "anthropic-model", f"no response headers within {IDLE_S} s")
    kinds = result.kinds(skip_heartbeats=False)
    assert kinds[kinds.index("conversation_checkpoint_update"):].count("interaction_update.heartbeat") >= 2
    assert provider.wait_closed(index + 1, timeout=10).closed_early


def test_keep_alives_hold_a_slow_stream_open_past_the_idle_bound(env, provider):
    proxy, ids = env
    items = ANTHROPIC.text_reply("worth the wait").items
    pings = [Ev({"type": "ping"}, event="ping", delay_s=0.5) for _ in range(6)]  # 3 s > the 2 s bound
    provider.enqueue("anthropic", Sse(items[:1] + pings + items[1:]))
    result = turn(proxy, ids["anthropic"])
    assert result.end_error is None, result.end_error
    assert result.text() == "worth the wait"

    items = CHAT.text_reply("also worth it").items
    comments = [Ev(b": keep-alive\n\n", delay_s=0.5) for _ in range(6)]
    provider.enqueue("openai_chat", Sse(items[:1] + comments + items[1:]))
    result = turn(proxy, ids["openai_chat"])
    assert result.end_error is None, result.end_error
    assert result.text() == "also worth it"
