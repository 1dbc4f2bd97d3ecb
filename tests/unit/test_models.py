import asyncio
import gzip
import socket
from collections.abc import Sequence
from pathlib import Path

import pytest
from mitmproxy import http
from mitmproxy.connection import ConnectionState
from mitmproxy.proxy.server_hooks import ServerConnectionHookData
from mitmproxy.test import taddons, tflow

from byok import models as m
from byok.providers.config import ModelRoute, ProvidersFile, load_providers
from byok.wire.connect import decode_all, encode_end_stream, encode_envelope
from byok.wire.errors import ConfigError
from byok.proto import agent_pb2, aiserver_pb2
from byok.options import Options
from byok.providers_file import ProvidersFileAddon
from tests.support.waiting import until

AM = aiserver_pb2.AvailableModelsResponse

CONFIG = """\
[[providers]]
name = "deepseek"
kind = "openai_chat"
base_url = "https://api.deepseek.com/v1"
api_key_env = "BYOK_TEST_UNSET_KEY_VAR"
[[providers.models]]
id = "deepseek-reasoner"
display_name = "DeepSeek R1 (BYOK)"
context_tokens = 128000
max_output_tokens = 8192
reasoning_effort = "high"
[[providers.models]]
id = "deepseek-chat"
display_name = "DeepSeek V3"

[[providers]]
name = "anthropic"
kind = "anthropic"
base_url = "https://api.anthropic.com"
api_key = "sk-ant-secret-key-never-on-the-wire"
[[providers.models]]
id = "claude-sonnet-4-5"
max_output_tokens = 16000
thinking_budget_tokens = 4000
supports_images = true
"""

# raw wire bytes of fields no schema version knows: field 1000 varint 7, field 1001 bytes "future"
UNKNOWN = b"\xc0\x3e\x07" + b"\xca\x3e\x06future"


@pytest.fixture
def routes(tmp_path, monkeypatch) -> tuple[ModelRoute, ...]:
    monkeypatch.delenv("BYOK_TEST_UNSET_KEY_VAR", raising=False)
    path = tmp_path / "providers.toml"
    path.write_text(CONFIG)
    return load_providers(path).models


def upstream_available() -> bytes:
    """A realistic AvailableModelsResponse with nested and top-level unknown fields."""
    gpt = AM.AvailableModel(
        name="gpt-5", default_on=True, supports_agent=True, supports_thinking=True, context_token_limit=272000,
        client_display_name="GPT-5", server_model_name="gpt-5", supports_max_mode=True,
        tooltip_data=AM.TooltipData(primary_text="GPT-5", icon="openai"),
        variants=[AM.ModelVariantConfig(display_name="GPT-5 High", is_max_mode=False)],
        vendor=AM.ModelVendor(id=AM.MODEL_VENDOR_ID_OPENAI, display_name="OpenAI"),
    )
    claude = AM.AvailableModel(name="claude-4.5-sonnet", default_on=True, supports_images=True)
    claude_bytes = claude.SerializeToString() + UNKNOWN  # a nested entry carrying unknown fields
    head = AM(
        model_names=["gpt-5", "claude-4.5-sonnet"],
        models=[gpt],
        composer_model_config=AM.FeatureModelConfig(default_model="gpt-5", fallback_models=["claude-4.5-sonnet"]),
        use_model_parameters=True,
        disable_unused_models_after_n_hours=48,
    ).SerializeToString()
    nested = b"\x12" + bytes([len(claude_bytes)]) + claude_bytes  # models (2), length-delimited
    return head + nested + UNKNOWN


def upstream_usable(service: str) -> bytes:
    if service == "aiserver":
        msg = aiserver_pb2.GetUsableModelsResponse(
            models=[aiserver_pb2.ModelDetails(model_name="gpt-5", max_mode=False, enable_slow_pool=True)])
    else:
        msg = agent_pb2.GetUsableModelsResponse(models=[agent_pb2.ModelDetails(
            model_id="gpt-5", display_name="GPT-5", display_name_short="GPT-5", aliases=["gpt5"])])
    return msg.SerializeToString() + UNKNOWN


# ---- pure injection -----------------------------------------------------------------------------


def test_available_models_keep_every_upstream_byte_and_add_exactly_ours(routes):
    upstream = upstream_available()
    out = m.append_available_models(upstream, routes)
    assert out.startswith(upstream)
    tail = AM.FromString(out[len(upstream):])
    assert [x.name for x in tail.models] == [r.public_id for r in routes]
    assert list(tail.model_names) == [r.public_id for r in routes]
    assert tail.ListFields()[0][0].name == "model_names" and len(tail.ListFields()) == 2  # nothing else

    merged = AM.FromString(out)
    assert [x.name for x in merged.models] == ["gpt-5", "claude-4.5-sonnet"] + [r.public_id for r in routes]
    assert list(merged.model_names)[:2] == ["gpt-5", "claude-4.5-sonnet"]
    assert merged.composer_model_config.default_model == "gpt-5" and merged.use_model_parameters
    assert merged.SerializeToString().count(b"future") == 2  # both unknown fields survive a parse too


def test_available_model_fields(routes):
    r1, v3, claude = (AM.FromString(m.append_available_models(b"", routes))).models
    assert r1.name == r1.server_model_name == "41062f21"
    assert r1.client_display_name == "DeepSeek R1 (BYOK)"  # already marked: not twice
    assert v3.client_display_name == "DeepSeek V3 (BYOK)" and v3.inputbox_short_model_name == "DeepSeek V3"
    assert claude.client_display_name == "claude-sonnet-4-5 (BYOK)"
    for x in (r1, v3, claude):
        assert x.default_on and x.supports_agent and x.supports_plan_mode and x.supports_non_max_mode
        assert x.HasField("supports_max_mode") and not x.supports_max_mode
        assert x.supports_cmd_k  # Cmd-K on these models is answered locally (assist/cmdk.py)
    assert r1.supports_thinking and not r1.supports_images and r1.context_token_limit == 128000
    assert not v3.supports_thinking and not v3.HasField("context_token_limit")
    assert claude.supports_thinking and claude.supports_images
    assert "deepseek / deepseek-reasoner" in r1.tooltip_data.secondary_text


@pytest.mark.parametrize("service", ["aiserver", "agent"])
def test_usable_models_keep_every_upstream_byte_and_add_exactly_ours(routes, service):
    upstream = upstream_usable(service)
    out = m.append_usable_models(upstream, routes, service=service)
    assert out.startswith(upstream)
    cls = aiserver_pb2.GetUsableModelsResponse if service == "aiserver" else agent_pb2.GetUsableModelsResponse
    tail = cls.FromString(out[len(upstream):])
    merged = cls.FromString(out)
    ids = [r.public_id for r in routes]
    if service == "aiserver":
        assert [x.model_name for x in tail.models] == ids
        assert [x.model_name for x in merged.models] == ["gpt-5"] + ids
        assert all(x.ListFields() == [(aiserver_pb2.ModelDetails.DESCRIPTOR.fields_by_name["model_name"],
                                       x.model_name)] for x in tail.models)
    else:
        assert [x.model_id for x in tail.models] == ids
        assert [x.model_id for x in merged.models] == ["gpt-5"] + ids
        r1, v3, claude = tail.models
        assert r1.display_name == "DeepSeek R1 (BYOK)" and v3.display_name == "DeepSeek V3 (BYOK)"
        assert r1.HasField("thinking_details") and not v3.HasField("thinking_details")
        assert all(x.WhichOneof("credentials") is None for x in tail.models)
    assert b"sk-ant-secret" not in out


def test_enveloped_plain_and_compressed(routes):
    upstream = upstream_available()
    tail = m.model_list_tail(m.ModelList.AVAILABLE, routes)
    for compress in (False, True):
        body = encode_envelope(upstream, compress=compress) + encode_end_stream()
        out = m.inject_body(m.ModelList.AVAILABLE, body, routes, enveloped=True)
        frames = decode_all(out)
        assert [f.flags for f in frames] == [0x01 if compress else 0x00, 0x02]
        assert frames[0].payload == upstream + tail
        assert out.endswith(encode_end_stream())


def test_enveloped_edge_cases(routes):
    tail = m.model_list_tail(m.ModelList.USABLE_AGENT, routes)
    # no data message before a successful end-stream: one is inserted
    out = m.append_to_first_message(encode_end_stream(), tail)
    assert [f.payload for f in decode_all(out)] == [tail, b"{}"]
    # an upstream error end-stream is passed through
    from byok.wire.connect import Code, ConnectError
    err = encode_end_stream(ConnectError(Code.UNAUTHENTICATED, "log in"))
    assert m.append_to_first_message(err, tail) == err
    with pytest.raises(ValueError):
        m.append_to_first_message(encode_envelope(b"abc")[:-1], tail)


def test_local_bodies_hold_only_user_models(routes):
    unary = m.local_body(m.ModelList.AVAILABLE, routes, enveloped=False)
    assert [x.name for x in AM.FromString(unary).models] == [r.public_id for r in routes]
    frames = decode_all(m.local_body(m.ModelList.USABLE_AISERVER, routes, enveloped=True))
    assert frames[1].payload == b"{}"
    assert len(aiserver_pb2.GetUsableModelsResponse.FromString(frames[0].payload).models) == 3


def test_paths():
    assert m.model_list_kind("/aiserver.v1.AiService/AvailableModels") is m.ModelList.AVAILABLE
    assert m.model_list_kind("/agent.v1.AgentService/AvailableModels?connect=v1&message=x") is m.ModelList.AVAILABLE
    assert m.model_list_kind("/aiserver.v1.AiService/GetUsableModels") is m.ModelList.USABLE_AISERVER
    assert m.model_list_kind("/agent.v1.AgentService/GetUsableModels") is m.ModelList.USABLE_AGENT
    assert m.model_list_kind("/aiserver.v1.AiService/GetDefaultModel") is None


def test_picked_model_resolves_and_a_missing_key_is_the_config_error(routes):
    config_routes = {r.public_id: r for r in routes}
    picked = AM.FromString(m.append_available_models(b"", routes)).models[0].name
    route = config_routes[picked]  # what the router does with requested_model.model_id
    with pytest.raises(ConfigError) as info:
        route.require_ready()
    assert "BYOK_TEST_UNSET_KEY_VAR" in info.value.message and info.value.bad_key


# ---- the addon ----------------------------------------------------------------------------------

PATHS = {
    "/aiserver.v1.AiService/AvailableModels": (AM, upstream_available),
    "/agent.v1.AgentService/AvailableModels": (AM, upstream_available),
    "/aiserver.v1.AiService/GetUsableModels": (aiserver_pb2.GetUsableModelsResponse,
                                               lambda: upstream_usable("aiserver")),
    "/agent.v1.AgentService/GetUsableModels": (agent_pb2.GetUsableModelsResponse,
                                              lambda: upstream_usable("agent")),
}


def make_flow(path: str, *, host: str = "api2.cursor.sh", port: int = 443, body: bytes | None = None,
              ctype: str = "application/proto", headers: dict | None = None, status: int = 200):
    req = http.Request.make("POST", f"https://{host}:{port}{path}", b"", {"content-type": ctype})
    resp = None
    if body is not None:
        resp = http.Response.make(status, b"", {"content-type": ctype, **(headers or {})})
        resp.content = body
    return tflow.tflow(req=req, resp=resp or False)


class StubProbe(m.UpstreamProbe):
    def __init__(self, ok: bool) -> None:
        super().__init__()
        self.ok = ok
        self.calls: list[tuple[str, int]] = []

    async def reachable(self, host, port, timeout_s):
        self.calls.append((host, port))
        return self.ok, "" if self.ok else "stub: refused"


def ids_of(msg) -> list[str]:
    return [getattr(x, "name", None) or getattr(x, "model_name", None) or x.model_id for x in msg.models]


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("path", list(PATHS))
def test_hook_injects_on_each_path(routes, path):
    cls, upstream = PATHS[path]

    async def go():
        addon = m.ModelListInjector(lambda: routes, probe=StubProbe(True))
        with taddons.context(addon) as tctx:
            f = make_flow(path, body=upstream())
            tctx.master.addons.invoke_addon_sync(addon, _hook("requestheaders", f))
            await addon.request(f)
            assert f.metadata[m.METADATA_KEY] and f.response.status_code == 200
            addon.response(f)
            return f

    f = run(go())
    out = f.response.content
    assert out.startswith(upstream())
    assert ids_of(cls.FromString(out))[-3:] == [r.public_id for r in routes]
    assert f.response.headers["content-length"] == str(len(out))


def _hook(name, flow):
    from mitmproxy.proxy.layers.http import HttpRequestHeadersHook
    assert name == "requestheaders"
    return HttpRequestHeadersHook(flow)


def test_hook_leaves_other_hosts_paths_and_errors_alone(routes):
    async def go():
        addon = m.ModelListInjector(lambda: routes, probe=StubProbe(False))
        with taddons.context(addon):
            cases = [
                make_flow("/aiserver.v1.AiService/AvailableModels", host="example.com", body=b"\x0a\x01x"),
                make_flow("/aiserver.v1.AiService/GetDefaultModel", body=b"\x0a\x01x"),
                make_flow("/aiserver.v1.AiService/AvailableModels", body=b'{"code":"unauthenticated"}',
                          ctype="application/json", status=401),
                make_flow("/aiserver.v1.AiService/AvailableModels", body=b'{"models":[]}', ctype="application/json"),
            ]
            before = [f.response.raw_content for f in cases]
            for f in cases:
                await addon.request(f)
                addon.response(f)
            return before, cases

    before, cases = run(go())
    assert [f.response.raw_content for f in cases] == before
    assert m.METADATA_KEY not in cases[0].metadata and m.METADATA_KEY not in cases[1].metadata


def test_hook_without_user_models_touches_nothing():
    async def go():
        probe = StubProbe(False)
        addon = m.ModelListInjector(lambda: (), probe=probe)
        with taddons.context(addon):
            f = make_flow("/aiserver.v1.AiService/AvailableModels", body=upstream_available())
            await addon.request(f)
            addon.response(f)
            return f, probe

    f, probe = run(go())
    assert f.response.content == upstream_available() and probe.calls == []


def test_hook_keeps_gzip_content_encoding(routes):
    upstream = upstream_available()

    async def go():
        addon = m.ModelListInjector(lambda: routes, probe=StubProbe(True))
        with taddons.context(addon):
            f = make_flow("/aiserver.v1.AiService/AvailableModels", body=upstream,
                          headers={"content-encoding": "gzip"})
            assert f.response.raw_content[:2] == b"\x1f\x8b"
            addon.response(f)
            return f

    f = run(go())
    assert f.response.headers["content-encoding"] == "gzip"
    raw = f.response.raw_content
    assert gzip.decompress(raw).startswith(upstream) and f.response.headers["content-length"] == str(len(raw))
    assert len(AM.FromString(gzip.decompress(raw)).models) == 2 + len(routes)


def test_hook_enveloped_response(routes):
    upstream = upstream_usable("agent")

    async def go():
        addon = m.ModelListInjector(lambda: routes, probe=StubProbe(True))
        with taddons.context(addon):
            body = encode_envelope(upstream, compress=True) + encode_end_stream()
            f = make_flow("/agent.v1.AgentService/GetUsableModels", body=body, ctype="application/connect+proto")
            addon.response(f)
            return f

    frames = decode_all(run(go()).response.content)
    assert frames[0].payload.startswith(upstream) and frames[1].end_stream
    assert len(agent_pb2.GetUsableModelsResponse.FromString(frames[0].payload).models) == 1 + len(routes)


def test_responseheaders_turns_streaming_off_for_model_lists(routes):
    async def go():
        addon = m.ModelListInjector(lambda: routes, probe=StubProbe(True))
        with taddons.context(addon):
            f = make_flow("/aiserver.v1.AiService/GetUsableModels", body=b"")
            g = make_flow("/aiserver.v1.AiService/Other", body=b"")
            for flow in (f, g):
                await addon.request(flow)
                flow.response.stream = True
                addon.responseheaders(flow)
            return f, g

    f, g = run(go())
    assert f.response.stream is False and g.response.stream is True


def test_observe_mode_changes_nothing(routes):
    async def go():
        addon = m.ModelListInjector(lambda: routes, probe=StubProbe(False))
        with taddons.context(addon) as tctx:
            tctx.options.add_option("byok_mode", str, "intercept", "mode")
            tctx.options.byok_mode = "observe"
            f = make_flow("/aiserver.v1.AiService/AvailableModels", body=b"\x0a\x01x")
            await addon.request(f)
            addon.response(f)
            return f

    assert run(go()).response.content == b"\x0a\x01x"


# ---- unreachable upstream -----------------------------------------------------------------------


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize("ctype", ["application/proto", "application/connect+proto"])
def test_unreachable_upstream_is_answered_with_user_models_alone(routes, ctype):
    port = closed_port()

    async def go():
        addon = m.ModelListInjector(lambda: routes)  # the real TCP probe
        with taddons.context(addon) as tctx:
            tctx.options.add_option("byok_hosts", Sequence[str], ["api2.cursor.sh"], "hosts")
            tctx.options.byok_hosts = ["api2.cursor.sh", "127.0.0.1"]
            f = make_flow("/aiserver.v1.AiService/AvailableModels", host="127.0.0.1", port=port, ctype=ctype)
            await addon.request(f)
            addon.response(f)  # mitmproxy still calls it for a response set in `request`
            g = make_flow("/agent.v1.AgentService/GetUsableModels", host="127.0.0.1", port=port, ctype=ctype)
            await addon.request(g)  # cached: no second probe needed, still local
            return f, g

    f, g = run(go())
    assert f.response.status_code == 200 and f.response.headers["content-type"] == ctype
    payload = f.response.content
    if ctype == "application/connect+proto":
        frames = decode_all(payload)
        assert frames[1].payload == b"{}"
        payload = frames[0].payload
    assert ids_of(AM.FromString(payload)) == [r.public_id for r in routes]
    assert g.response is not None


def test_reachable_upstream_is_probed_once_and_open_connections_not_at_all(routes):
    async def go():
        probe = StubProbe(True)
        addon = m.ModelListInjector(lambda: routes, probe=probe)
        with taddons.context(addon):
            f = make_flow("/aiserver.v1.AiService/AvailableModels")
            await addon.request(f)
            h = make_flow("/aiserver.v1.AiService/AvailableModels")
            h.server_conn.state = ConnectionState.OPEN
            await addon.request(h)
            return f, h, probe

    f, h, probe = run(go())
    assert f.response is None and h.response is None and probe.calls == [("api2.cursor.sh", 443)]


def test_gateway_page_is_replaced_and_a_failed_connection_marks_the_host_down(routes):
    async def go():
        probe = m.UpstreamProbe()
        addon = m.ModelListInjector(lambda: routes, probe=probe)
        with taddons.context(addon) as tctx:
            f = make_flow("/aiserver.v1.AiService/GetUsableModels", body=b"<html>502</html>",
                          ctype="text/html", status=502)
            addon.response(f)
            tctx.options.byok_upstream_probe_ms = 0  # known failures still count without probing
            data = ServerConnectionHookData(server=tflow.tserver_conn(), client=tflow.tclient_conn())
            data.server.address = ("api2.cursor.sh", 443)
            data.server.error = "Connect call failed"
            addon.server_connect_error(data)
            e = make_flow("/aiserver.v1.AiService/GetUsableModels")
            await addon.request(e)
            assert e.response is not None and e.response.status_code == 200
            return f, probe

    f, probe = run(go())
    assert f.response.status_code == 200
    assert len(aiserver_pb2.GetUsableModelsResponse.FromString(f.response.content).models) == 3
    assert probe.cached("api2.cursor.sh", 443) == (False, "Connect call failed")


def test_probe_cache_expires():
    now = [0.0]
    probe = m.UpstreamProbe(down_ttl_s=10, clock=lambda: now[0])
    probe.mark_down("h", 1, "x")
    assert probe.cached("h", 1) == (False, "x")
    now[0] = 11
    assert probe.cached("h", 1) is None


# ---- wiring with the providers file addon ---------------------------------------------------------


def test_providers_file_addon_feeds_the_injector_and_reloads(tmp_path, monkeypatch):
    path = tmp_path / "p.toml"
    path.write_text(CONFIG)

    async def go():
        providers = ProvidersFile()
        cfg = ProvidersFileAddon(providers)
        inj = m.ModelListInjector(providers, probe=StubProbe(True))
        with taddons.context(Options(), cfg, inj) as tctx:
            tctx.configure(cfg, byok_config=str(path), byok_config_poll_ms=10)
            await cfg.running()
            f = make_flow("/aiserver.v1.AiService/GetUsableModels", body=b"")
            inj.response(f)
            first = len(aiserver_pb2.GetUsableModelsResponse.FromString(f.response.content).models)
            path.write_text(CONFIG.split("[[providers]]\nname = \"anthropic\"")[0])
            import os
            st = path.stat()
            os.utime(path, ns=(st.st_mtime_ns + 10**9, st.st_mtime_ns + 10**9))
            gen = providers.generation
            await until(lambda: providers.generation != gen, "the poll to reload the file")
            await cfg.done()
            return first, providers._config, cfg._task

    first, config, task = run(go())
    assert first == 3 and len(config.models) == 2 and task is None


def test_providers_file_follows_the_byok_config_option(tmp_path):
    async def go():
        cfg = ProvidersFileAddon()
        with taddons.context(Options(), cfg) as tctx:
            cfg.configure({"byok_config"})  # what mitmproxy's script loader does after loading
            default = cfg.providers.path
            tctx.configure(cfg, byok_config=str(tmp_path / "x.toml"))
            return default, cfg.providers.path

    default, now = run(go())
    assert default == Path("~/.cursor-byok/providers.toml").expanduser() and now == tmp_path / "x.toml"


def test_cursor_hosts_are_fnmatch_patterns_from_the_options():
    async def go():
        inj = m.ModelListInjector(lambda: ())
        with taddons.context(inj) as tctx:
            before = m.is_cursor_host("api2.cursor.sh"), m.is_cursor_host("api3.cursor.sh")
            tctx.master.addons.add(Options())
            return before, m.is_cursor_host("API3.cursor.sh"), m.is_cursor_host("cursor.sh.evil.com")

    assert run(go()) == ((True, False), True, False)


# ---- the Cursor CLI's lists (issue 14) -------------------------------------------------------------


def upstream_cli_default() -> bytes:
    return aiserver_pb2.GetDefaultModelForCliResponse(
        model=aiserver_pb2.ModelDetails(model_name="auto", max_mode=False)).SerializeToString() + UNKNOWN


def cpp_models() -> bytes:
    """Tab's list as peers see it: AvailableCppModelsResponse{models=1 repeated string, default_model=2 string}."""
    from byok.wire.protowire import encode_len
    return encode_len(1, b"fast-cpp") + encode_len(1, b"tab-2") + encode_len(2, b"fast-cpp")


def test_cli_default_model_is_replaced_only_when_named(routes):
    body = upstream_cli_default()
    assert m.inject_body(m.ModelList.CLI_DEFAULT, body, routes, enveloped=False) == body
    chosen = m.pick_cli_default(routes, "deepseek-chat")
    out = m.inject_body(m.ModelList.CLI_DEFAULT, body, routes, enveloped=False, cli_default=chosen)
    assert aiserver_pb2.GetDefaultModelForCliResponse.FromString(out).model.model_name == chosen.public_id
    assert out.endswith(UNKNOWN)  # the rest of the upstream answer is kept byte for byte
    assert m.pick_cli_default(routes, chosen.public_id) is chosen
    assert m.pick_cli_default(routes, "DeepSeek R1 (BYOK)").model_id == "deepseek-reasoner"
    assert m.pick_cli_default(routes, "nope") is None and m.pick_cli_default(routes, "") is None
    enveloped = encode_envelope(body) + encode_end_stream()
    out = m.inject_body(m.ModelList.CLI_DEFAULT, enveloped, routes, enveloped=True, cli_default=chosen)
    assert aiserver_pb2.GetDefaultModelForCliResponse.FromString(decode_all(out)[0].payload).model.model_name \
        == chosen.public_id


def test_cpp_service_list_is_left_alone_unless_it_has_the_available_models_shape(routes):
    assert not m.has_available_models_shape(cpp_models())
    assert m.inject_body(m.ModelList.CPP_AVAILABLE, cpp_models(), routes, enveloped=False) == cpp_models()
    shaped = upstream_available()
    assert m.has_available_models_shape(shaped)
    out = m.inject_body(m.ModelList.CPP_AVAILABLE, shaped, routes, enveloped=False)
    assert out.startswith(shaped) and ids_of(AM.FromString(out))[-3:] == [r.public_id for r in routes]
    assert not m.has_available_models_shape(b"") and not m.has_available_models_shape(b"\x12\x02\x0a\x00")


def test_cli_hooks(routes):
    async def go():
        addon = m.ModelListInjector(lambda: routes, probe=StubProbe(True))
        with taddons.context(addon) as tctx:
            plain = make_flow("/aiserver.v1.AiService/GetDefaultModelForCli", body=upstream_cli_default())
            cpp = make_flow("/aiserver.v1.CppService/AvailableModels", body=cpp_models())
            for f in (plain, cpp):
                await addon.request(f)
                addon.response(f)
            tctx.configure(addon, byok_cli_default_model="claude-sonnet-4-5")
            chosen = make_flow("/aiserver.v1.AiService/GetDefaultModelForCli", body=upstream_cli_default())
            addon.response(chosen)
            return plain, cpp, chosen

    plain, cpp, chosen = run(go())
    assert plain.response.content == upstream_cli_default() and cpp.response.content == cpp_models()
    model = aiserver_pb2.GetDefaultModelForCliResponse.FromString(chosen.response.content).model
    assert model.model_name == next(r.public_id for r in routes if r.model_id == "claude-sonnet-4-5")


def test_unreachable_upstream_cli_default_is_ours_and_tab_list_is_never_made_up(routes):
    async def go():
        addon = m.ModelListInjector(lambda: routes, probe=StubProbe(False))
        with taddons.context(addon):
            cli = make_flow("/aiserver.v1.AiService/GetDefaultModelForCli")
            cpp = make_flow("/aiserver.v1.CppService/AvailableModels")
            for f in (cli, cpp):
                addon.requestheaders(f)
                await addon.request(f)
            return cli, cpp

    cli, cpp = run(go())
    assert aiserver_pb2.GetDefaultModelForCliResponse.FromString(cli.response.content).model.model_name \
        == routes[0].public_id
    assert cpp.response is None
