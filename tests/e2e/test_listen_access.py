"""Issue 10.1: closed to the network by default.

- Started without --listen-host, mitmdump binds loopback only (checked with `ss`), and says so.
- Bound to another address (a veth pair into a namespace made by the test, "another machine"), a
  client from there gets no local run and no user models unless it passed mitmproxy's proxyauth;
  with proxyauth it gets its turn. Nothing of a refused client reaches the provider.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from byok.providers.config import public_model_id
from byok.cli.doctor import check_listener
from tests.e2e.harness import ROOT, Proxy, model_entry, providers_toml
from tests.support.netns import VethNamespace, unavailable_reason
from tests.support.scripted_provider import CHAT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

OFFICIAL = "official-model"


def official_models() -> bytes:
    from byok.proto import aiserver_pb2 as spb

    return spb.AvailableModelsResponse(model_names=[OFFICIAL]).SerializeToString()


def start(home, provider, upstream, **proxy_kwargs) -> tuple[Proxy, str]:
    entry = model_entry(provider.base_url, model_id="access-model")
    home.mkdir(parents=True, exist_ok=True)
    (home / "providers.toml").write_text(providers_toml([entry]))
    options = {"test_upstream": f"127.0.0.1:{upstream.port}", "ssl_insecure": "true",
               "byok_upstream_probe_ms": "0", "byok_route_wait_s": "5", **proxy_kwargs.pop("options", {})}
    proxy = Proxy(home, options=options, extra_scripts=[str(ROOT / "tests" / "support" / "redirect_upstream.py")],
                  **proxy_kwargs).start()
    return proxy, public_model_id(entry["base_url"], entry["kind"], entry["model_id"])


def listening(port: int) -> list[str]:
    out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    return [line.split()[3].rsplit(":", 1)[0] for line in out.splitlines() if line.strip()]


@pytest.fixture(scope="module", autouse=True)
def official_model_list(upstream):
    upstream.model_list_payloads["/aiserver.v1.AiService/AvailableModels"] = ("application/proto", official_models())


@pytest.mark.skipif(shutil.which("ss") is None, reason="`ss` (iproute2) is not installed")
def test_without_listen_host_only_loopback_is_bound_and_a_local_turn_runs(tmp_path, provider, upstream):
    from tests.e2e.conftest import run
    from byok.cli.client import user_turn_request

    proxy, model = start(tmp_path / "default", provider, upstream, listen_host=None)
    try:
        assert listening(proxy.port) == ["127.0.0.1"]
        assert "only this machine can reach it" in proxy.log()
        doctor = check_listener(proxy.url)
        assert doctor.status == "ok" and "other machines cannot reach it" in doctor.message
        provider.enqueue("openai_chat", CHAT.text_reply("local hello"))

        async def turn():
            async with proxy.client() as client:
                return await client.run(user_turn_request("hi", model_id=model))

        result = run(turn())
        assert result.end_error is None and result.text() == "local hello"
    finally:
        proxy.stop()


# ---- another machine: a client in a network namespace ------------------------------------------------


@pytest.fixture(scope="module")
def namespace():
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"no network namespace for the remote client: {reason}")
    try:
        ns = VethNamespace().__enter__()
    except RuntimeError as e:  # e.g. a container without CAP_NET_ADMIN
        pytest.skip(f"no network namespace for the remote client: {e}")
    try:
        yield ns
    finally:
        ns.remove()
    assert not ns.exists()


def remote(ns: VethNamespace, proxy: Proxy, model: str, credentials: str = "") -> dict:
    url = f"http://{credentials + '@' if credentials else ''}{proxy.host}:{proxy.port}"
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        ns.exec_args([sys.executable, "-m", "tests.support.remote_client", "--proxy", url, "--ca", proxy.ca_file,
                      "--model", model]),
        capture_output=True, text=True, timeout=90, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_an_exposed_listener_without_proxyauth_serves_no_other_machine(tmp_path, namespace, provider, upstream):
    proxy, model = start(tmp_path / "open", provider, upstream, listen_host=namespace.host_ip)
    try:
        assert listening(proxy.port) == [namespace.host_ip]
        assert "OTHER MACHINES CAN REACH IT" in proxy.log()
        doctor = check_listener(proxy.url)
        assert doctor.status == "warn" and namespace.host_ip in doctor.message and "proxyauth" in doctor.message
        before = len(provider.requests)
        seen = remote(namespace, proxy, model)
        # Cursor's own list passes as it is; the user's model is not added
        assert seen["models"] == {"status": 200, "names": [OFFICIAL]}
        turn = seen["turn"]
        assert turn["status"] == 200 and turn["text"] == ""
        assert turn["end_error"]["code"] == "permission_denied"
        assert "proxyauth" in turn["end_error"]["message"] and namespace.ns_ip in turn["end_error"]["message"]
        assert seen["turn_h2"]["end_error"]["code"] == "permission_denied"  # the HTTP/2 Run likewise
        assert "proxyauth" in seen["turn_h2"]["end_error"]["message"]
        assert len(provider.requests) == before  # nothing reached the provider
        assert "refused" in proxy.log()
    finally:
        proxy.stop()


def test_with_proxyauth_only_an_authenticated_remote_client_gets_its_turn(tmp_path, namespace, provider, upstream):
    proxy, model = start(tmp_path / "auth", provider, upstream, listen_host=namespace.host_ip,
                         options={"proxyauth": "alice:s3cret"})
    try:
        before = len(provider.requests)
        anonymous = remote(namespace, proxy, model)
        assert "407" in anonymous["models"]["error"] and "407" in anonymous["turn"]["error"]
        assert "407" in anonymous["turn_h2"]["error"]
        wrong = remote(namespace, proxy, model, "alice:guess")
        assert "407" in wrong["turn"]["error"]
        assert len(provider.requests) == before

        provider.enqueue("openai_chat", CHAT.text_reply("hello, alice"), CHAT.text_reply("h2, alice"))
        alice = remote(namespace, proxy, model, "alice:s3cret")
        assert alice["models"]["status"] == 200 and alice["models"]["names"] == [OFFICIAL, model]
        assert alice["turn"] == {"status": 200, "text": "hello, alice", "end_error": None}
        assert alice["turn_h2"] == {"status": 200, "text": "h2, alice", "end_error": None}
        assert len(provider.requests) == before + 2
    finally:
        proxy.stop()
