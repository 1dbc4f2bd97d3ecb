"""`cursor-byok smoke` (a subprocess, like a user runs it) against a real mitmdump and the scripted
provider: Write/Read/Shell executed in the workspace, frames printed, failures explained; then `trace`
of the smoke's request from the proxy's database."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import start_proxy
from tests.e2e.harness import API_KEY, model_entry, providers_toml
from tests.support.scripted_provider import CHAT, HttpError, Usage

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]
CLI = str(Path(sys.executable).with_name("cursor-byok"))


PROXY_ONLY_KEY = f"BYOK_E2E_PROXY_ONLY_KEY_{os.getpid()}"
"""Set in mitmdump's environment only: the CLI's shell never has it (doctor must ask the proxy)."""


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider):
    home = tmp_path_factory.mktemp("smoke")
    os.environ[PROXY_ONLY_KEY] = "sk-only-in-the-proxy-environment"
    try:
        proxy, _ = start_proxy(home, provider, byok_route_wait_s="5", byok_config_poll_ms="100")
    finally:
        del os.environ[PROXY_ONLY_KEY]
    yield proxy, home
    proxy.stop()


def cli(home: Path, *args: str, timeout: float = 60, columns: int = 200) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(HOME=str(home / "user-home"), COLUMNS=str(columns),
               CURSOR_BYOK_HOME=str(home / "user-home" / ".cursor-byok"))
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout, env=env)


def smoke_args(proxy, *extra: str) -> list[str]:
    return ["smoke", "--proxy", proxy.url, "--confdir", str(proxy.confdir), "--config", str(proxy.config), *extra]


def test_smoke_runs_write_read_shell_and_prints_frames(env, provider, tmp_path):
    proxy, home = env
    provider.enqueue("openai_chat",
                     CHAT.tool_calls([("call_w", "Write", '{"path": "smoke.txt", "contents": "cursor-byok smoke ok\\n"}')]),
                     CHAT.tool_calls([("call_r", "Read", '{"path": "smoke.txt"}')]),
                     CHAT.tool_calls([("call_s", "Shell", '{"command": "ls"}')]),
                     CHAT.text_reply("The file says: cursor-byok smoke ok", usage=Usage(900, 11)))
    workspace = tmp_path / "ws"
    before = len(provider.requests)
    done = cli(home, *smoke_args(proxy, "--workspace", str(workspace)))
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "↓ interaction_update.text_delta" in out and "↑ run_request" in out
    assert "write_args" in out and "read_args" in out and "shell_stream_args" in out
    assert "interaction_update.turn_ended" in out and "end_stream" in out and "ok {}" in out
    assert "OK: provider config, proxy, CA and the agent turn work" in out
    assert "The file says: cursor-byok smoke ok" in out
    assert re.search(r"smoke: openai_chat-model \(BYOK\) \[[0-9a-f]{8}\] = ", out)  # brackets are not markup
    assert (workspace / "smoke.txt").read_text() == "cursor-byok smoke ok\n"
    # the model saw the real results of Read and Shell
    last = provider.requests[-1].json["messages"]
    tool_results = [m["content"] for m in last if m["role"] == "tool"]
    assert any("cursor-byok smoke ok" in r for r in tool_results) and any("smoke.txt" in r for r in tool_results)
    assert len(provider.requests) - before == 4


def test_smoke_sends_newer_clients_appends_when_asked(env, provider, tmp_path):
    proxy, home = env
    provider.enqueue("openai_chat",
                     CHAT.tool_calls([("call_w", "Write", '{"path": "bin.txt", "contents": "binary appends\\n"}')]),
                     CHAT.text_reply("wrote it with data_binary"))
    done = cli(home, *smoke_args(proxy, "--workspace", str(tmp_path / "ws"), "--append-form", "data_binary",
                                 "--gzip-appends"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "wrote it with data_binary" in done.stdout and "OK: " in done.stdout
    assert (tmp_path / "ws" / "bin.txt").read_text() == "binary appends\n"


def test_smoke_over_http2_runs_the_turn_on_one_run_stream(env, provider, tmp_path):
    """Issue 14: `smoke --http2` drives the turn as Cursor does by default, one AgentService/Run stream."""
    proxy, home = env
    provider.enqueue("openai_chat",
                     CHAT.tool_calls([("call_w", "Write", '{"path": "h2.txt", "contents": "over http/2\\n"}')]),
                     CHAT.text_reply("wrote it over HTTP/2"))
    done = cli(home, *smoke_args(proxy, "--workspace", str(tmp_path / "ws"), "--http2"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "↑ run_request" in done.stdout and "↑ kv_client_message" in done.stdout
    assert "wrote it over HTTP/2" in done.stdout and "OK: " in done.stdout
    assert (tmp_path / "ws" / "h2.txt").read_text() == "over http/2\n"
    assert "POST https://agentn.api5.cursor.sh/agent.v1.AgentService/Run HTTP/2.0" in proxy.log()


def test_smoke_failure_names_the_error_and_trace_tells_the_story(env, provider):
    proxy, home = env
    provider.enqueue("openai_chat", HttpError(401, {"error": {"message": "Incorrect API key provided"}}))
    done = cli(home, *smoke_args(proxy, "--text-only"))
    assert done.returncode == 1
    assert "FAILED" in done.stdout and "Incorrect API key provided" in done.stdout
    request_id = done.stdout.split("cursor-byok trace ")[1].split()[0]
    for _ in range(50):  # the recorder writes frames in batches
        traced = cli(home, "trace", request_id, "--db", str(proxy.db))
        if "end_stream" in traced.stdout:
            break
        time.sleep(0.1)
    assert traced.returncode == 0, traced.stderr
    assert "failed" in traced.stdout and "401" in traced.stdout and "Incorrect API key" in traced.stdout
    assert "run_request" in traced.stdout and "end_stream" in traced.stdout


def test_smoke_explains_a_wrong_ca_and_a_dead_proxy(env, tmp_path):
    from mitmproxy.certs import CertStore

    proxy, home = env
    other = tmp_path / "other-ca"
    CertStore.from_store(other, "mitmproxy", 2048)
    done = cli(home, "smoke", "--proxy", proxy.url, "--confdir", str(other), "--config", str(proxy.config),
               "--text-only")
    assert done.returncode == 1 and "TLS" in done.stderr and "not signed by" in done.stderr
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = cli(home, "smoke", "--proxy", f"http://127.0.0.1:{port}", "--confdir", str(proxy.confdir),
               "--config", str(proxy.config), "--text-only")
    assert done.returncode == 1 and "cannot reach the proxy" in done.stderr and "doctor" in done.stderr


def test_doctor_recognises_the_running_proxy_and_its_ca(env, tmp_path):
    from mitmproxy.certs import CertStore

    proxy, home = env
    common = ["doctor", "--proxy", proxy.url, "--config", str(proxy.config), "--db", str(proxy.db),
              "--cursor-settings", str(tmp_path / "none.json"), "--os", "linux"]
    done = cli(home, *common, "--confdir", str(proxy.confdir))
    assert "ok  proxy" in done.stdout and "is a mitmproxy signing with the CA in the confdir" in done.stdout
    other = tmp_path / "other-ca"
    CertStore.from_store(other, "mitmproxy", 2048)
    done = cli(home, *common, "--confdir", str(other))
    assert "warn  proxy" in done.stdout and "different CA" in done.stdout


def served_models(proxy) -> list[dict]:
    from byok.cli.common import proxy_status

    status = proxy_status(proxy.url, timeout=5)
    assert status is not None, "the proxy does not answer its status"
    return status["config"]["models"]


def wait_for(predicate, what: str, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def restore_config(env):
    proxy, _ = env
    good = proxy.config.read_text()
    yield proxy.config
    proxy.config.write_text(good)
    wait_for(lambda: len(served_models(proxy)) == 1 and proxy_status_error(proxy) is None, "the good config back")


def proxy_status_error(proxy):
    from byok.cli.common import proxy_status

    return proxy_status(proxy.url, timeout=5)["config"]["error"]


def test_smoke_on_a_model_the_running_proxy_does_not_have_says_so(env, provider, tmp_path):
    proxy, home = env
    other = tmp_path / "other.toml"
    other.write_text(providers_toml([model_entry(provider.base_url, model_id="only-in-my-shell",
                                                 display_name="Mock Claude")]))
    before = len(provider.requests)
    done = cli(home, "smoke", "--proxy", proxy.url, "--confdir", str(proxy.confdir), "--config", str(other),
               "--model", "only-in-my-shell", "--text-only")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "the running proxy does not have the model Mock Claude [" in done.stderr
    assert f"--set byok_config={other}" in done.stderr and str(proxy.config) in done.stderr
    assert "openai_chat-model (BYOK) [" in done.stderr  # what it does serve
    done = cli(home, *smoke_args(proxy, "--model", "no-such-model", "--text-only"))
    assert done.returncode == 1 and "the running proxy has no model 'no-such-model'" in done.stderr
    assert len(provider.requests) == before


def test_broken_providers_file_doctor_tells_the_truth_and_smoke_uses_what_is_served(env, provider, restore_config,
                                                                                      tmp_path):
    proxy, home = env
    restore_config.write_text(restore_config.read_text() + "\n[[providers]]\nname = 1\n")
    wait_for(lambda: proxy_status_error(proxy), "the proxy to see the broken file")
    done = cli(home, "doctor", "--proxy", proxy.url, "--config", str(proxy.config), "--db", str(proxy.db),
               "--confdir", str(proxy.confdir), "--cursor-settings", str(tmp_path / "none.json"), "--os", "linux")
    assert "FAIL  providers" in done.stdout and "[[providers]] #2" in done.stdout
    assert "the running proxy keeps serving its last good config: 1 model(s): openai_chat-model (BYOK) [" in done.stdout
    assert "keeps running without user models" not in done.stdout
    provider.enqueue("openai_chat", CHAT.text_reply("served by the last good config", usage=Usage(10, 5)))
    done = cli(home, *smoke_args(proxy, "--text-only"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the running proxy's providers file has an error" in done.stderr
    assert "it keeps serving its last good config" in done.stderr
    assert "served by the last good config" in done.stdout


def test_doctor_asks_the_proxy_about_key_variables(env, provider, restore_config, tmp_path):
    proxy, home = env
    unset = f"BYOK_E2E_UNSET_KEY_{os.getpid()}"
    text = restore_config.read_text()
    for name, var in (("in-proxy", PROXY_ONLY_KEY), ("nowhere", unset)):
        entry = providers_toml([model_entry(provider.base_url, model_id=f"{name}-model", name=name)])
        text += "\n" + entry.replace(f'api_key = "{API_KEY}"', f'api_key_env = "{var}"')
    restore_config.write_text(text)
    wait_for(lambda: len(served_models(proxy)) == 3, "the proxy to load three models")
    by_name = {m["model_id"]: m for m in served_models(proxy)}
    assert by_name["in-proxy-model"]["key_set"] is True and by_name["nowhere-model"]["key_set"] is False
    assert PROXY_ONLY_KEY not in os.environ
    done = cli(home, "doctor", "--proxy", proxy.url, "--config", str(proxy.config), "--db", str(proxy.db),
               "--confdir", str(proxy.confdir), "--cursor-settings", str(tmp_path / "none.json"), "--os", "linux")
    fixes = [ln for ln in done.stdout.splitlines() if "fix:" in ln]
    assert not any("in-proxy-model" in ln or PROXY_ONLY_KEY in ln for ln in fixes)  # mitmdump has it: no warning
    assert f"environment variable {unset} is not set in the running proxy's environment" in done.stdout
    assert PROXY_ONLY_KEY not in done.stdout


def test_provider_404_points_at_base_url_and_model_id_and_trace_keeps_the_status(env, provider):
    proxy, home = env
    provider.enqueue("openai_chat", HttpError(404, {"error": {"message": "No fixture matched"}}))
    done = cli(home, *smoke_args(proxy, "--text-only"))
    assert done.returncode == 1
    assert "No fixture matched" in done.stdout and "check base_url and the model id" in done.stdout
    assert "'openai_chat-model'" in done.stdout and f"{provider.base_url}/chat/completions" in done.stdout
    request_id = done.stdout.split("cursor-byok trace ")[1].split()[0]
    for width in (60, 200):
        traced = wait_for(lambda: _traced(home, proxy, request_id, width), "the frames to be recorded")
        whole_on_a_line(traced, request_id, "No fixture matched", "(HTTP 404)", "openai_chat-model")
        error_line = next(ln for ln in traced.splitlines() if "No fixture matched" in ln and "error" in ln)
        assert "(HTTP 404)" in error_line and "check base_url" in error_line


def _traced(home, proxy, request_id, width):
    traced = cli(home, "trace", request_id, "--db", str(proxy.db), columns=width)
    return traced.stdout if "end_stream" in traced.stdout else None


def whole_on_a_line(text: str, *needles: str) -> None:
    for needle in needles:
        assert any(needle in ln for ln in text.splitlines()), f"{needle!r} is not whole on a line of:\n{text}"
