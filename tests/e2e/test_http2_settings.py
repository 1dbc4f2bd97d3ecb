"""Issue 14: GetServerConfig under the user's control, and the Cursor CLI's model lists, through a
real mitmdump in front of a fake Cursor backend that answers a realistic GetServerConfig."""

from __future__ import annotations

import pytest

from byok.proto import agent_pb2 as apb, aiserver_pb2 as spb
from byok.wire.protowire import replace_field
from tests.e2e.conftest import run, start_proxy
from tests.support.fake_cursor import FakeCursor
from tests.support.server_config import server_config

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

CONFIG_PATH = "/aiserver.v1.ServerConfigService/GetServerConfig"
LISTENER = "https://127.0.0.1:8443"


@pytest.fixture(scope="module")
def upstream():
    with FakeCursor() as fake:
        fake.model_list_payloads.update({
            CONFIG_PATH: ("application/proto", server_config()),
            "/agent.v1.AgentService/GetUsableModels": ("application/proto", apb.GetUsableModelsResponse(
                models=[apb.ModelDetails(model_id="gpt-5", display_name="GPT-5")]).SerializeToString()),
            "/aiserver.v1.AiService/AvailableModels": ("application/proto", spb.AvailableModelsResponse(
                models=[spb.AvailableModelsResponse.AvailableModel(name="gpt-5")]).SerializeToString()),
            "/aiserver.v1.AiService/GetDefaultModelForCli": ("application/proto", spb.GetDefaultModelForCliResponse(
                model=spb.ModelDetails(model_name="auto")).SerializeToString()),
        })
        yield fake


async def post(proxy, path: str, host: str = "api2.cursor.sh") -> bytes:
    async with proxy.client() as client:
        response = await client._http.post(f"https://{host}{path}", content=b"",
                                           headers={"content-type": "application/proto"})
        assert response.status_code == 200
        return response.content


@pytest.mark.parametrize("options,http2,agent_url", [
    ({}, spb.HTTP2_CONFIG_FORCE_ALL_ENABLED, "https://agentn.api5.cursor.sh"),
    ({"byok_http2": "bidi-off"}, spb.HTTP2_CONFIG_FORCE_BIDI_DISABLED, "https://agentn.api5.cursor.sh"),
    ({"byok_http2": "off", "byok_agent_url": LISTENER}, spb.HTTP2_CONFIG_FORCE_ALL_DISABLED, LISTENER),
], ids=["keep", "bidi-off", "off+agent-url"])
def test_byok_http2_modes_rewrite_a_recorded_server_config(tmp_path, provider, upstream, options, http2, agent_url):
    proxy, _ = start_proxy(tmp_path, provider, upstream, **options)
    try:
        body = run(post(proxy, CONFIG_PATH))
    finally:
        proxy.stop()
    config = spb.GetServerConfigResponse.FromString(body)
    assert config.http2_config == http2 and config.agent_url_config.agentn_url == agent_url
    if not options:
        assert body == server_config()
    original = server_config()
    for number in (7, 27) if "byok_agent_url" in options else (7,):
        body, original = replace_field(body, number, None), replace_field(original, number, None)
    assert body == original  # every other upstream byte, unknown fields included
    assert "GetServerConfig from api2.cursor.sh: http2_config=HTTP2_CONFIG_FORCE_ALL_ENABLED" in proxy.log()


def test_cli_model_lists_include_the_users_models(tmp_path, provider, upstream):
    proxy, models = start_proxy(tmp_path, provider, upstream, byok_cli_default_model="openai_chat-model",
                                byok_upstream_probe_ms="0")  # api2.cursor.sh is the fake, not DNS
    ours = models["openai_chat"]
    try:
        usable, available, default = (run(post(proxy, path)) for path in (
            "/agent.v1.AgentService/GetUsableModels", "/aiserver.v1.AiService/AvailableModels",
            "/aiserver.v1.AiService/GetDefaultModelForCli"))
    finally:
        proxy.stop()
    assert [m.model_id for m in apb.GetUsableModelsResponse.FromString(usable).models] == ["gpt-5", ours]
    assert [m.name for m in spb.AvailableModelsResponse.FromString(available).models] == ["gpt-5", ours]
    assert spb.GetDefaultModelForCliResponse.FromString(default).model.model_name == ours
