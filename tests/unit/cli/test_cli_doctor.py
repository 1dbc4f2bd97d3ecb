"""`cursor-byok doctor`: each check finds its problem and names the fix; paths all under tmp_path."""

from __future__ import annotations

import json
import socket
import time

import pytest

from byok.cli import main
from byok.cli.doctor import check_cursor_settings, cursor_settings_path, parse_jsonc
from byok.store import Store

GOOD_TOML = """
[[providers]]
name = "deepseek"
kind = "openai_chat"
base_url = "https://api.deepseek.com/v1"
api_key = "sk-doctor-test-0123456789"
[[providers.models]]
id = "deepseek-chat"
display_name = "DeepSeek (BYOK)"
"""


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def listener():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()


def settings_file(path, proxy, **overrides):
    values = {"http.proxy": proxy, "http.proxySupport": "on", "cursor.general.disableHttp2": True, **overrides}
    body = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in values.items() if v is not None)
    # JSONC as Cursor writes it: comments and a trailing comma
    path.write_text("// Cursor settings\n{\n  /* proxy for cursor-byok */\n" + body + ",\n}\n")
    return path


def args(tmp_path, proxy, **paths):
    base = {"--confdir": tmp_path / "mitm", "--config": tmp_path / "providers.toml", "--db": tmp_path / "byok.db",
            "--cursor-settings": tmp_path / "settings.json", "--system-ca-bundle": tmp_path / "bundle.pem"}
    base.update({f"--{k.replace('_', '-')}": v for k, v in paths.items()})
    out = ["doctor", "--os", "linux", "--proxy", proxy, "--timeout", "0.3"]
    for k, v in base.items():
        out += [k, str(v)]
    return out


def test_missing_ca_and_bad_config_fail_with_fixes(tmp_path, capsys):
    (tmp_path / "mitm").mkdir()
    (tmp_path / "providers.toml").write_text('[[providers]]\nname = "x"\nkind = "openai_chat"\nbase_url = \n')
    code = main(args(tmp_path, f"http://127.0.0.1:{closed_port()}"))
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL  CA" in out and "no mitmproxy-ca-cert.pem in" in out and "mitmproxy creates its CA" in out
    assert "FAIL  providers" in out and "providers.toml:4" in out and "fix the line named above" in out
    assert "FAIL  proxy" in out and "nothing listens on 127.0.0.1" in out
    assert "warn  database" in out and "does not exist yet" in out
    assert "warn  Cursor settings" in out
    # no run ever reached us: the step-by-step story
    assert "No agent request reached the proxy?" in out
    assert "1. FAIL The proxy runs" in out and "byok_http2=bidi-off" in out
    assert "failed" in out.splitlines()[-1]


def test_healthy_setup_is_all_ok(tmp_path, capsys, listener):
    from mitmproxy.certs import CertStore

    CertStore.from_store(tmp_path / "mitm", "mitmproxy", 2048)
    (tmp_path / "bundle.pem").write_bytes(b"# system bundle\n" + (tmp_path / "mitm" / "mitmproxy-ca-cert.pem").read_bytes())
    (tmp_path / "providers.toml").write_text(GOOD_TOML)
    store = Store.open(tmp_path / "byok.db")
    store.record_frames([{"request_id": "r", "conversation_id": None, "seq": 0, "direction": "down",
                          "ts_ms": int(time.time() * 1000) - 60_000, "kind": "end_stream", "flags": 2, "data": b"{}"}])
    store.close()
    settings_file(tmp_path / "settings.json", listener.replace("127.0.0.1", "localhost"))
    code = main(args(tmp_path, listener))
    out = capsys.readouterr().out
    assert code == 0, out
    for name in ("CA", "CA trust", "providers", "database", "proxy", "traffic", "http.proxy", "http.proxySupport",
                 "transport"):
        assert f"   ok  {name} " in out, name
    assert "DeepSeek (BYOK)" in out and "No agent request reached" not in out
    assert "0 failed, 0 warnings" in out


def test_untrusted_ca_and_stale_traffic_warn(tmp_path, capsys, listener):
    from mitmproxy.certs import CertStore

    CertStore.from_store(tmp_path / "mitm", "mitmproxy", 2048)
    (tmp_path / "bundle.pem").write_text("")
    (tmp_path / "providers.toml").write_text(GOOD_TOML)
    Store.open(tmp_path / "byok.db").close()
    settings_file(tmp_path / "settings.json", listener)
    assert main(args(tmp_path, listener)) == 0
    out = capsys.readouterr().out
    assert "warn  CA trust" in out and "update-ca-certificates" in out and "NODE_EXTRA_CA_CERTS" in out
    assert "warn  traffic" in out and "No agent request reached the proxy?" in out


@pytest.mark.parametrize("overrides, name, status, words", [
    ({"cursor.general.disableHttp2": None}, "transport", "ok", "HTTP/2: the agent runs as AgentService/Run"),
    ({"cursor.general.disableHttp2": True}, "transport", "ok", "no longer needed"),
    ({"http.proxySupport": "off"}, "http.proxySupport", "fail", "ignored"),
    ({"http.proxySupport": None}, "http.proxySupport", "warn", "use on"),
    ({"http.proxy": "http://127.0.0.1:9999"}, "http.proxy", "warn", "not http://127.0.0.1:8080"),
    ({"http.proxy": None}, "http.proxy", "fail", "directly"),
    ({"http.proxyStrictSSL": False}, "http.proxyStrictSSL", "warn", "any certificate"),
])
def test_cursor_settings_findings(tmp_path, overrides, name, status, words):
    path = settings_file(tmp_path / "settings.json", "http://127.0.0.1:8080", **overrides)
    checks = {c.name: c for c in check_cursor_settings(path, "http://127.0.0.1:8080")}
    assert checks[name].status == status and words in checks[name].message


def test_settings_paths_per_os(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("APPDATA", str(tmp_path / "Roaming"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    assert cursor_settings_path("macos") == tmp_path / "Library/Application Support/Cursor/User/settings.json"
    assert cursor_settings_path("linux") == tmp_path / ".config/Cursor/User/settings.json"
    assert cursor_settings_path("windows") == tmp_path / "Roaming/Cursor/User/settings.json"


def test_jsonc_keeps_slashes_inside_strings():
    text = '{\n // comment\n "http.proxy": "http://127.0.0.1:8080", /* block */ "a": [1, 2,], "b": "x\\"//y",\n}'
    assert parse_jsonc(text) == {"http.proxy": "http://127.0.0.1:8080", "a": [1, 2], "b": 'x"//y'}
