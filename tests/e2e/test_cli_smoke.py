"""`cursor-byok smoke` (a subprocess, like a user runs it) against a real mitmdump and the scripted
provider: Write/Read/Shell executed in the workspace, frames printed, failures explained; then `trace`
of the smoke's request from the proxy's database."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import start_proxy
from tests.support.scripted_provider import CHAT, HttpError, Usage

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]
CLI = str(Path(sys.executable).with_name("cursor-byok"))


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider):
    home = tmp_path_factory.mktemp("smoke")
    proxy, _ = start_proxy(home, provider, byok_route_wait_s="5")
    yield proxy, home
    proxy.stop()


def cli(home: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(HOME=str(home / "user-home"), COLUMNS="200", CURSOR_BYOK_HOME=str(home / "user-home" / ".cursor-byok"))
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
    assert (workspace / "smoke.txt").read_text() == "cursor-byok smoke ok\n"
    # the model saw the real results of Read and Shell
    last = provider.requests[-1].json["messages"]
    tool_results = [m["content"] for m in last if m["role"] == "tool"]
    assert any("cursor-byok smoke ok" in r for r in tool_results) and any("smoke.txt" in r for r in tool_results)
    assert len(provider.requests) - before == 4


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
