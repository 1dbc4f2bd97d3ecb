"""byok_http2 and byok_agent_url acting on a realistic GetServerConfig: only the chosen fields change."""

import json

import pytest
from mitmproxy import exceptions, http
from mitmproxy.test import taddons, tflow

from mitmproxy.contentviews import Metadata
from byok import server_config as sc
from byok.wire.connect import decode_all, encode_end_stream, encode_envelope
from byok.contentview import CursorAgentView
from byok.options import Options
from byok.proto import aiserver_pb2 as spb
from byok.wire.protowire import encode_len, iter_fields, replace_field
from tests.support.server_config import AGENTN_URL, server_config

PATH = "/aiserver.v1.ServerConfigService/GetServerConfig"
LISTENER = "https://127.0.0.1:8443"


def without(payload: bytes, *numbers: int) -> bytes:
    for n in numbers:
        payload = replace_field(payload, n, None)
    return payload


@pytest.mark.parametrize("mode,value", [("bidi-off", spb.HTTP2_CONFIG_FORCE_BIDI_DISABLED),
                                        ("off", spb.HTTP2_CONFIG_FORCE_ALL_DISABLED)])
@pytest.mark.parametrize("upstream_sets_it", [True, False])
def test_http2_modes_change_only_http2_config(mode, value, upstream_sets_it):
    before = server_config(http2_config=spb.HTTP2_CONFIG_FORCE_ALL_ENABLED if upstream_sets_it else None)
    after = sc.rewrite_payload(before, sc.Rewrite(http2_config=sc.HTTP2_MODES[mode]))
    assert spb.GetServerConfigResponse.FromString(after).http2_config == value
    assert without(after, 7) == without(before, 7)
    assert [f.number for f in iter_fields(after)].count(7) == 1
    if upstream_sets_it:  # rewritten in place, not moved
        assert len(after) == len(before) and after.index(b"\x38") == before.index(b"\x38\x02")
    else:  # added after every upstream byte
        assert after == before + bytes([0x38, value])


def test_keep_is_no_rewrite():
    assert sc.Rewrite(http2_config=sc.HTTP2_MODES["keep"]).empty


def test_agent_url_rewrite_keeps_unknown_inner_fields_and_everything_else():
    extra_inner = encode_len(9, b"inner field from a newer server")
    before = server_config(agent_urls=False) + encode_len(27, encode_len(1, b"https://agent.api5.cursor.sh")
                                                          + encode_len(2, AGENTN_URL.encode()) + extra_inner)
    after = sc.rewrite_payload(before, sc.Rewrite(agent_url=LISTENER))
    config = spb.GetServerConfigResponse.FromString(after)
    urls = config.agent_url_config
    assert (urls.agent_url, urls.agentn_url) == (LISTENER, LISTENER)
    assert extra_inner in after
    assert without(after, 27) == without(before, 27)
    both = sc.rewrite_payload(server_config(agent_urls=False), sc.Rewrite(http2_config=3, agent_url=LISTENER))
    assert spb.GetServerConfigResponse.FromString(both).agent_url_config.agentn_url == LISTENER
    assert "agentn_url=https://agentn.api5.cursor.sh" in sc.describe(server_config())
    assert "FORCE_BIDI_DISABLED" in sc.describe(both)


def test_json_codec_is_rewritten_with_connect_json_names():
    body = json.dumps({"configVersion": "v", "http2Config": "HTTP2_CONFIG_FORCE_ALL_ENABLED",
                       "agentUrlConfig": {"agentUrl": "https://agent.api5.cursor.sh", "extra": 1}}).encode()
    doc = json.loads(sc.rewrite_json(body, sc.Rewrite(http2_config=3, agent_url=LISTENER)))
    assert doc == {"configVersion": "v", "http2Config": "HTTP2_CONFIG_FORCE_BIDI_DISABLED",
                   "agentUrlConfig": {"extra": 1, "agentUrl": LISTENER, "agentnUrl": LISTENER}}


@pytest.mark.parametrize("url", ["127.0.0.1:8443", "ftp://x:1", "https://h:1/path", "https://h:99999", "https://"])
def test_bad_agent_urls_are_refused(url):
    with pytest.raises(ValueError):
        sc.check_agent_url(url)
    with taddons.context(Options(), sc.ServerConfigRewriter()) as tctx:
        with pytest.raises(exceptions.OptionsError):
            tctx.options.update(byok_agent_url=url)


def flow(body: bytes, ctype: str = "application/proto", path: str = PATH, host: str = "api2.cursor.sh",
         encoding: str | None = None):
    req = http.Request.make("POST", f"https://{host}{path}", b"", {"content-type": ctype})
    resp = http.Response.make(200, b"", {"content-type": ctype, **({"content-encoding": encoding} if encoding else {})})
    resp.content = body
    return tflow.tflow(req=req, resp=resp)


def test_hook_applies_the_options_and_observe_mode_changes_nothing():
    addon = sc.ServerConfigRewriter()
    with taddons.context(Options(), addon) as tctx:
        f = flow(server_config())
        addon.response(f)
        assert f.response.content == server_config()  # keep
        tctx.configure(addon, byok_http2="bidi-off", byok_agent_url=LISTENER)
        f = flow(server_config(), encoding="gzip")
        addon.responseheaders(f)
        addon.response(f)
        config = spb.GetServerConfigResponse.FromString(f.response.content)
        assert config.http2_config == spb.HTTP2_CONFIG_FORCE_BIDI_DISABLED
        assert config.agent_url_config.agentn_url == LISTENER
        assert f.response.raw_content[:2] == b"\x1f\x8b"  # re-encoded as upstream sent it
        env = flow(encode_envelope(server_config(), compress=True) + encode_end_stream(), "application/connect+proto")
        addon.response(env)
        frames = decode_all(env.response.content)
        assert spb.GetServerConfigResponse.FromString(frames[0].payload).http2_config == 3
        assert frames[1].end_stream
        other = flow(server_config(), host="example.com")
        garbage = flow(b"\x0f\x01")
        for f in (other, garbage):
            addon.response(f)
        assert other.response.content == server_config() and garbage.response.content == b"\x0f\x01"
        tctx.configure(addon, byok_mode="observe")
        f = flow(server_config())
        addon.response(f)
        assert f.response.content == server_config()


def test_content_view_decodes_server_config_with_unknown_fields():
    f = flow(server_config())
    title, lines = CursorAgentView().render(f.response.content, content_type="application/proto", flow=f,
                                     http_message=f.response)
    text = "\n".join("".join(t for _, t in line) for line in lines)
    assert "GetServerConfig response" in title
    assert "HTTP2_CONFIG_FORCE_ALL_ENABLED" in text and AGENTN_URL in text
    assert "unknown fields: #90, #91, #36" in text
    assert CursorAgentView().render_priority(b"", Metadata(content_type="application/proto", flow=f,
                                                           http_message=f.response)) > 2
