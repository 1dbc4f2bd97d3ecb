"""The proxy's own status answer (`http://cursor-byok.invalid/status`): what it serves, whether its
environment holds each key variable (never the key), and only for clients on this machine."""

from __future__ import annotations

import json

from mitmproxy.test import taddons, tflow

from byok.providers.config import ProvidersFile
from byok.cli.common import STATUS_URL
from byok.access import peer_is_loopback as is_loopback
from byok.status import STATUS_HOST, StatusEndpoint

CONFIG = """\
[[providers]]
name = "env"
kind = "openai_chat"
base_url = "https://x.example/v1"
api_key_env = "BYOK_STATUS_TEST_KEY"
[[providers.models]]
id = "m1"
[[providers]]
name = "inline"
kind = "openai_chat"
base_url = "https://y.example/v1"
api_key = "sk-status-secret-0123456789"
[[providers.models]]
id = "m2"
"""


def flow_for(path: str = "/status", peer=("127.0.0.1", 5000)):
    f = tflow.tflow()
    f.request.host, f.request.port, f.request.scheme, f.request.path = STATUS_HOST, 80, "http", path
    f.request.headers["host"] = STATUS_HOST
    f.client_conn.peername = peer
    return f


def test_status_url_is_the_endpoint_host():
    assert STATUS_URL == f"http://{STATUS_HOST}/status"


def test_status_names_models_and_key_presence_never_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("BYOK_STATUS_TEST_KEY", "sk-from-env-abcdef")
    path = tmp_path / "providers.toml"
    path.write_text(CONFIG)
    addon = StatusEndpoint(ProvidersFile(path))
    with taddons.context(addon):
        f = flow_for()
        addon.request(f)
    assert f.response.status_code == 200 and f.metadata["byok"] == "status"
    body = f.response.content.decode()
    assert "sk-from-env" not in body and "sk-status-secret" not in body
    status = json.loads(body)
    assert status["service"] == "cursor-byok" and status["config"]["error"] is None
    assert [(m["model_id"], m["key_set"]) for m in status["config"]["models"]] == [("m1", True), ("m2", True)]
    monkeypatch.delenv("BYOK_STATUS_TEST_KEY")
    addon.request(f2 := flow_for())
    assert json.loads(f2.response.content)["config"]["models"][0]["key_set"] is False


def test_a_broken_edit_is_reported_with_the_last_good_models(tmp_path):
    path = tmp_path / "providers.toml"
    path.write_text(CONFIG)
    providers = ProvidersFile(path)
    path.write_text(CONFIG + "\n[[providers]]\nname = 2\n")
    providers.refresh(force=True)
    addon = StatusEndpoint(providers)
    addon.request(f := flow_for())
    config = json.loads(f.response.content)["config"]
    assert "[[providers]] #3" in config["error"] and config["serving"] == "last good config"
    assert len(config["models"]) == 2


def test_only_loopback_clients_and_only_status(tmp_path):
    addon = StatusEndpoint(ProvidersFile(tmp_path / "missing.toml"))
    addon.request(f := flow_for(peer=("192.0.2.7", 5000)))
    assert f.response.status_code == 403
    addon.request(f := flow_for(path="/other"))
    assert f.response is None  # the host's other pages are the dashboard's
    other = tflow.tflow()
    addon.request(other)
    assert other.response is None  # any other host is not ours
    assert is_loopback(("::1", 1, 0, 0)) and is_loopback(("::ffff:127.0.0.1", 1, 0, 0))
    assert not is_loopback(("10.0.0.1", 1)) and not is_loopback(None)
