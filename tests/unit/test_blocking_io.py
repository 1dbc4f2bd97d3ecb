"""Issue 24.3: small blocking reads leave the event loop. The CA file of a relayed Run is read in a
worker thread (once per change, not per Run); the providers and team file polls stat and parse in a
worker thread."""

from __future__ import annotations

import asyncio
import os
import ssl
import threading

import pytest

from byok.agent.team import TeamFile
from byok.providers.config import ProvidersFile
from byok.transports.run_h2 import TrustedCa

CONFIG = """\
[[providers]]
name = "p"
kind = "openai_chat"
base_url = "https://x.example/v1"
api_key = "sk-x-0123456789"
[[providers.models]]
id = "m1"
"""


@pytest.fixture
def ca_file(tmp_path):
    from mitmproxy.certs import CertStore

    CertStore.create_store(tmp_path, "mitmproxy", 2048)
    return str(tmp_path / "mitmproxy-ca-cert.pem")


def test_the_ca_is_read_off_the_loop_once_per_change(ca_file, monkeypatch):
    reads: list[str] = []
    real = ssl.create_default_context

    def counting(*args, **kwargs):
        reads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counting)

    async def scenario():
        tls = TrustedCa()
        first = await tls.context(ca_file)
        again = await tls.context(ca_file)
        st = os.stat(ca_file)
        os.utime(ca_file, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a new CA in place
        changed = await tls.context(ca_file)
        return first, again, changed, threading.current_thread().name

    first, again, changed, loop_thread = asyncio.run(scenario())
    assert again is first and changed is not first
    assert len(reads) == 2 and loop_thread not in reads


class ThreadsSeen:
    """Records the thread of every reload of a WatchedFile."""

    def __init__(self, watched, monkeypatch) -> None:
        self.threads: list[str] = []
        self.reloaded = threading.Event()
        real = watched._reload

        def reload(force):
            self.threads.append(threading.current_thread().name)
            try:
                return real(force)
            finally:
                self.reloaded.set()

        monkeypatch.setattr(watched, "_reload", reload)


@pytest.mark.parametrize("kind, good, broken", [
    (ProvidersFile, CONFIG, "[[providers]]\nname = 2\n"),
    (TeamFile, '[defaults]\nmodels = ["*"]\n', "[defaults]\nmodels = 3\n"),
])
def test_the_polls_read_in_a_worker_thread(tmp_path, monkeypatch, kind, good, broken):
    path = tmp_path / "file.toml"
    path.write_text(good)
    watched = kind(path)
    assert watched.last_error is None
    seen = ThreadsSeen(watched, monkeypatch)

    async def scenario():
        watcher = asyncio.ensure_future(watched.watch(0.01))
        try:
            path.write_text(broken)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while watched.last_error is None and loop.time() < deadline:
                await asyncio.to_thread(seen.reloaded.wait, 0.5)
                seen.reloaded.clear()
        finally:
            watcher.cancel()
        return threading.current_thread().name

    loop_thread = asyncio.run(scenario())
    assert watched.last_error is not None  # the broken edit was noticed by the poll alone
    assert seen.threads and loop_thread not in seen.threads


def test_an_access_during_a_poll_keeps_the_config_it_has(tmp_path):
    path = tmp_path / "providers.toml"
    path.write_text(CONFIG)
    providers = ProvidersFile(path)
    path.write_text(CONFIG.replace("m1", "m2"))
    with providers._reloading:  # the poller is reloading right now
        assert [m.model_id for m in providers.models] == ["m1"]
    assert [m.model_id for m in providers.models] == ["m2"]
