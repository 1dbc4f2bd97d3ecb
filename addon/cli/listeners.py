"""Which local addresses a TCP port listens on (read-only, no traffic): /proc on Linux, lsof on macOS.

`doctor` uses it to flag a proxy that other machines can reach.
"""

from __future__ import annotations

import ipaddress
import re
import shutil
import subprocess
import sys
from pathlib import Path

LISTEN = "0A"


def parse_proc_net_tcp(text: str, port: int) -> list[str]:
    """Local addresses in LISTEN state on `port` from /proc/net/tcp or /proc/net/tcp6 text."""
    hosts = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != LISTEN or ":" not in fields[1]:
            continue
        address, port_hex = fields[1].rsplit(":", 1)
        if int(port_hex, 16) != port:
            continue
        raw = bytes.fromhex(address)
        # the kernel prints each 32-bit word in host (little-endian) order
        words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
        hosts.append(str(ipaddress.ip_address(words)))
    return hosts


def parse_lsof(text: str) -> list[str]:
    """Local addresses from `lsof -nP -iTCP:PORT -sTCP:LISTEN` lines (`TCP 127.0.0.1:8080 (LISTEN)`)."""
    hosts = []
    for match in re.finditer(r"TCP (\*|\[[^\]]+\]|[^\s:]+):\d+ \(LISTEN\)", text):
        host = match.group(1).strip("[]")
        hosts.append("0.0.0.0" if host == "*" else host)
    return hosts


def listening_hosts(port: int) -> list[str] | None:
    """The addresses listening on TCP `port` on this machine, or None when this OS cannot say."""
    tables = [Path("/proc/net/tcp"), Path("/proc/net/tcp6")]
    if sys.platform.startswith("linux") and tables[0].exists():
        return [h for t in tables if t.exists() for h in parse_proc_net_tcp(t.read_text(), port)]
    if shutil.which("lsof"):
        try:
            out = subprocess.run(["lsof", "-nP", f"-iTCP:{port}", "-sTCP:LISTEN"], capture_output=True,
                                 text=True, timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired):
            return None
        return parse_lsof(out)
    return None
