"""Issue 14: Cursor's default transport, the HTTP/2 bidi `agent.v1.AgentService/Run`, through a real
mitmdump (CONNECT, TLS with the proxy's CA, ALPN h2, application/connect+proto), answered by the same
engine as RunSSE; a Cursor-model Run relayed to a fake HTTP/2 Cursor backend byte for byte."""

from __future__ import annotations

import pytest

from byok.cli.client import user_turn_request
from tests.e2e.conftest import run, start_proxy
from tests.support.scripted_provider import CHAT, Usage

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider, upstream):
    proxy, ids = start_proxy(tmp_path_factory.mktemp("h2run"), provider, upstream,
                             byok_heartbeat_s="1", byok_upstream_probe_ms="0")
    yield proxy, ids["openai_chat"]
    proxy.stop()


def test_text_turn_over_http2(env, provider):
    proxy, model = env
    provider.enqueue("openai_chat", CHAT.thinking_then_text(
        "Let me think.", "Hello over HTTP/2!", usage=Usage(input_tokens=100, output_tokens=5)))

    async def scenario():
        async with proxy.h2_client() as client:
            result = await client.run(user_turn_request("hello", model_id=model))
            return result, client.responses[result.request_id]

    result, headers = run(scenario())
    assert result.status == 200 and result.end_error is None
    assert result.text() == "Hello over HTTP/2!"
    kinds = result.kinds()
    tail = kinds[kinds.index("interaction_update.turn_ended"):]
    assert tail == ["interaction_update.turn_ended"] + ["conversation_checkpoint_update"] * 3 + ["end_stream"]
    assert dict(headers)["content-type"] == "application/connect+proto"
