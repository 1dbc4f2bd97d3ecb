"""The supported stack: the mitmproxy version gate (addon/duplex.py) against a real mitmdump, and the
promise that CI proves every version the gate accepts."""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from mitmproxy import version

from byok import duplex
from tests.e2e.harness import MITMDUMP, ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]


def test_the_installed_mitmproxy_is_accepted_and_the_shim_installs():
    assert duplex.refusal() is None, duplex.refusal()
    duplex.install()
    duplex.install()  # idempotent
    from mitmproxy.proxy.layers.http import HttpStream

    assert getattr(HttpStream.send_response, "_byok_full_duplex_patch", False)


@pytest.mark.parametrize("other", ["11.0.2", "12.2.3", "12.4.0", "13.0.0"])
def test_refusal_names_the_version_and_the_install_command(other):
    message = duplex.refusal(other)
    assert message is not None and f"mitmproxy {other}" in message
    assert duplex.INSTALL_HINT in message and all(v in message for v in duplex.ACCEPTED)
    with pytest.raises(duplex.UnsupportedMitmproxy):
        _install_as(other)


def _install_as(pretend: str) -> None:
    real = version.VERSION
    version.VERSION = pretend
    try:
        duplex.install()
    finally:
        version.VERSION = real


def test_ci_runs_the_suite_on_every_accepted_version():
    """Each accepted version is proven by the suite (test_h2_findings among it) on one CI pair."""
    ci = (ROOT / ".ci" / "run").read_text()
    pairs = re.findall(r"^run_pair \S+ \"\$(\w+)\" ([\d.]+)$", ci, re.M)
    assert sorted(v for _, v in pairs) == sorted(duplex.ACCEPTED)
    assert {python for python, _ in pairs} == {"newest", "oldest"}
    assert version.VERSION in duplex.ACCEPTED


def test_mitmdump_refuses_to_start_on_an_unproven_version(tmp_path):
    """Loudly, at start, with the message: never a proxy that starts and then hangs HTTP/2 runs."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["BYOK_PRETEND_MITMPROXY"] = "12.9.0"
    done = subprocess.run(
        [MITMDUMP, "-s", str(ROOT / "tests/support/pretend_mitmproxy_version.py"),
         "-s", str(ROOT / "addon/cursor_byok.py"), "--listen-host", "127.0.0.1", "--listen-port", "0",
         "--set", f"confdir={tmp_path / 'mitm'}", "--set", f"byok_db={tmp_path / 'byok.db'}",
         "--set", f"byok_config={tmp_path / 'providers.toml'}"],
        capture_output=True, text=True, timeout=45, env=env)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "cursor-byok does not support mitmproxy 12.9.0" in output
    assert duplex.INSTALL_HINT in output
    assert "cursor-byok ready" not in output
