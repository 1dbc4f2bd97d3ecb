"""Which package may import what (DESIGN §5, §8, §9): only addon/*.py meets mitmproxy; the wire and the
provider layer stand below both engines; the one-shot services never reach into the agent."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ADDON = Path(__file__).resolve().parents[2] / "addon"

FORBIDDEN = {
    "agent": ("mitmproxy",),
    "providers": ("mitmproxy", "byok.agent"),
    "wire": ("mitmproxy", "byok.agent", "byok.providers"),
    "assist": ("mitmproxy", "byok.agent"),
    "dashboard": ("mitmproxy",),
}


def imports(path: Path, package: str) -> set[str]:
    """Absolute names a module imports (relative imports resolved against its package)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
                found.update(f"{module}.{alias.name}" for alias in node.names)
            else:
                found.add(node.module or "")
    return found


def modules(room: str):
    for path in sorted((ADDON / room).rglob("*.py")):
        package = ".".join(["byok", *path.relative_to(ADDON).parts[:-1]])
        yield path, package


@pytest.mark.parametrize("room", [r for r in FORBIDDEN if (ADDON / r).is_dir()])
def test_a_room_imports_nothing_above_it(room):
    offending = [
        f"{path.relative_to(ADDON)} imports {name}"
        for path, package in modules(room)
        for name in imports(path, package)
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN[room])
    ]
    assert offending == []


def test_the_check_sees_relative_imports():
    assert "byok.agent.run" in imports(ADDON / "agent" / "runtime.py", "byok.agent") or \
        any(n.startswith("byok.agent.") for n in imports(ADDON / "agent" / "runtime.py", "byok.agent"))
