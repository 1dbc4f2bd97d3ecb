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


def module_level_imports(path: Path, package: str) -> set[str]:
    """Like `imports`, without what a function imports when it runs or TYPE_CHECKING imports."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= imports_of(node, package)
    return found


def imports_of(node: ast.Import | ast.ImportFrom, package: str) -> set[str]:
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    if not node.level:
        return {node.module or ""}
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    module = ".".join(base + ([node.module] if node.module else []))
    return {f"{module}.{alias.name}" for alias in node.names} | {module}


def agent_graph() -> dict[str, set[str]]:
    """byok.agent module -> the byok.agent modules it imports at module level."""
    names: dict[str, Path] = {}
    for path, package in modules("agent"):
        name = package if path.name == "__init__.py" else f"{package}.{path.stem}"
        names[name] = path
    graph = {}
    for name, path in names.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = {n for n in module_level_imports(path, package) if n in names and n != name}
    return graph


def test_the_agent_has_no_import_circle():
    graph = agent_graph()
    done: set[str] = set()
    circles: list[list[str]] = []

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            circles.append(path[path.index(name):] + [name])
            return
        if name in done:
            return
        for child in sorted(graph[name]):
            visit(child, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert circles == []


def test_capabilities_stand_side_by_side_under_the_loop():
    """A capability imports neither the loop, the action table's users, nor another capability:
    capabilities/__init__.py alone names them all, in order."""
    graph = agent_graph()
    package = "byok.agent.capabilities"
    members = {n for n in graph if n.startswith(package + ".")}
    assert members, "no capability modules found"
    for name in members:
        above = {n for n in graph[name] if n in members or n in (package, "byok.agent.loop", "byok.agent.actions")}
        assert above == set(), f"{name} imports {sorted(above)}"
    assert "byok.agent.capabilities" in graph["byok.agent.loop"]
