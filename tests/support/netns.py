"""A throw-away network namespace joined to this one by a veth pair (needs root and `ip`).

    with VethNamespace() as ns:          # names carry the pid: byok<pid>, vb<pid>h / vb<pid>n
        ns.host_ip                       # this side of the pair (bind a server here)
        subprocess.run(ns.exec_args([sys.executable, "-c", "..."]))  # a client "on another machine"

The pair gets a /30 from 198.18.0.0/15 (RFC 2544, reserved for tests), chosen by the pid, or the /30
`network` names (a test that needs a public-looking address: while the namespace exists, this machine
routes that /30 into it, so nothing leaves the machine). Both are removed on exit, also when the body
failed; a half-built set-up is removed before the error is raised.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass


def unavailable_reason() -> str | None:
    """Why a namespace cannot be made here, or None."""
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "creating a network namespace needs root"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=20)


@dataclass
class VethNamespace:
    tag: str = ""
    """Extra name part when one process needs several namespaces at once (one character)."""
    network: str | None = None
    """The /30's network address (e.g. "93.184.215.12"); None: one from 198.18.0.0/15 by pid."""

    def __post_init__(self) -> None:
        pid = os.getpid()
        self.name = f"byok{pid}{self.tag}"
        self.host_if, self.ns_if = f"vb{pid}{self.tag}h", f"vb{pid}{self.tag}n"
        block = (pid * 4 + (ord(self.tag) if self.tag else 0) * 4) % (2 * 65536)
        base = (198 << 24) | (18 << 16) | block  # 198.18.0.0/15, one /30 per pid
        if self.network is not None:
            a, b, c, d = (int(x) for x in self.network.split("."))
            base = ((a << 24) | (b << 16) | (c << 8) | d) & ~3
        self.host_ip = _dotted(base + 1)
        self.ns_ip = _dotted(base + 2)

    def __enter__(self) -> "VethNamespace":
        try:
            _ip("netns", "add", self.name)
            _ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
            _ip("link", "set", self.ns_if, "netns", self.name)
            _ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
            _ip("link", "set", self.host_if, "up")
            _ip("-n", self.name, "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if)
            _ip("-n", self.name, "link", "set", self.ns_if, "up")
            _ip("-n", self.name, "link", "set", "lo", "up")
        except subprocess.CalledProcessError as e:
            self.remove()
            raise RuntimeError(f"could not build namespace {self.name}: {e.stderr.strip()}") from e
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def remove(self) -> None:
        _ip("link", "del", self.host_if, check=False)  # deleting one end removes the pair
        _ip("netns", "del", self.name, check=False)

    def exec_args(self, command: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.name, *command]

    def exists(self) -> bool:
        return self.name in _ip("netns", "list", check=False).stdout.split()


def _dotted(value: int) -> str:
    return ".".join(str((value >> shift) & 255) for shift in (24, 16, 8, 0))
