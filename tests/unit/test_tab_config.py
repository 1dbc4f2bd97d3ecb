"""CppConfig kept on for [tab]: the wire rewrite keeps every other byte, moves StreamCpp off hosts the
proxy does not intercept, and the local answers decode."""

from __future__ import annotations

import json

from byok.proto import cpp_pb2 as cpb
from byok.providers.config import ModelRoute
from byok.tab_config import (
    LOCAL_CPP_URL, encode, foreign_url, local_cpp_config, local_cpp_models, rewrite_cpp_config, rewrite_cpp_config_json,
)

HOSTS = ("*.cursor.sh",)


def upstream(**fields) -> bytes:
    message = cpb.CppConfigResponse(above_radius=3, is_on=False, is_ghost_text=True, cpp_url="https://api4.cursor.sh",
                                    heuristics=[1, 2], client_debounce_duration_millis=55, **fields)
    return message.SerializeToString() + b"\xd0\x3e\x07"  # field 999 (varint 7): a newer server's field


def test_tab_forced_on_and_every_other_byte_kept():
    before = upstream()
    after = rewrite_cpp_config(before, HOSTS)
    parsed = cpb.CppConfigResponse.FromString(after)
    assert parsed.is_on and parsed.should_let_user_enable_cpp_even_if_not_pro
    assert parsed.cpp_url == "https://api4.cursor.sh" and list(parsed.heuristics) == [1, 2]
    assert b"\xd0\x3e\x07" in after and len(after) == len(before) + 2  # is_on replaced in place, field 7 added
    unchanged = cpb.CppConfigResponse.FromString(before)
    unchanged.is_on = True
    unchanged.should_let_user_enable_cpp_even_if_not_pro = True
    assert parsed == unchanged


def test_a_cpp_url_outside_the_intercepted_hosts_is_moved():
    after = cpb.CppConfigResponse.FromString(rewrite_cpp_config(
        upstream(geo_cpp_backend_url="https://tab.example.com/x"), HOSTS))
    assert after.geo_cpp_backend_url == LOCAL_CPP_URL and after.cpp_url == "https://api4.cursor.sh"
    assert foreign_url("https://us-only.cursor.com", HOSTS) and not foreign_url("", HOSTS)


def test_json_codec():
    body = json.dumps({"isOn": False, "is_on": False, "cppUrl": "https://x.example", "aboveRadius": 3}).encode()
    doc = json.loads(rewrite_cpp_config_json(body, HOSTS))
    assert doc == {"isOn": True, "shouldLetUserEnableCppEvenIfNotPro": True, "cppUrl": LOCAL_CPP_URL, "aboveRadius": 3}


def test_local_answers_in_each_codec():
    config = local_cpp_config()
    assert config.is_on and config.cpp_url.endswith(".cursor.sh")
    route = ModelRoute(public_id="0", provider="ollama", kind="openai_completions", base_url="http://x",
                       model_id="qwen2.5-coder:1.5b", display_name="q")
    models = local_cpp_models(route)
    assert list(models.models) == ["ollama/qwen2.5-coder:1.5b"] and models.default_model == models.models[0]
    body, ctype = encode(config, "application/json")
    assert ctype == "application/json" and json.loads(body)["isOn"] is True
    body, ctype = encode(config, "application/connect+proto")
    assert ctype == "application/connect+proto" and cpb.CppConfigResponse.FromString(body[5:]) == config
    assert encode(config, "")[1] == "application/proto"
