"""docs/tools.md stays true: every registry tool has a row whose transport, ToolCall variant and modes
match the code, and every test the page names exists (collected by pytest, parametrized ids included)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from byok.agent.cursor.tools.registry import REGISTRY

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "tools.md"
MODES = ("agent", "ask", "plan", "debug", "multitask", "subagent")
TEST_ID = re.compile(r"`(tests/[^`\s]+\.py::[^`\s]+)`")


def _cells(line: str) -> list[str]:
    """The cells of one Markdown table row (`\\|` inside a cell is not a separator)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def tool_rows() -> dict[str, dict[str, str]]:
    lines = DOC.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| Tool | Transport |"))
    header = _cells(lines[start])
    rows: dict[str, dict[str, str]] = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = _cells(line)
        assert len(cells) == len(header), f"malformed row: {line}"
        row = dict(zip(header, cells))
        assert row["Tool"] not in rows, f"{row['Tool']} listed twice"
        rows[row["Tool"]] = row
    return rows


def manifests() -> dict[str, list[str]]:
    return {m: json.loads((ROOT / "prompt" / "modes" / f"{m}.json").read_text()) for m in MODES}


def test_every_registry_tool_has_one_row():
    assert sorted(tool_rows()) == sorted(REGISTRY)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_row_matches_the_code(name):
    row, tool = tool_rows()[name], REGISTRY[name]
    assert row["Transport"].split()[0].rstrip(",") == tool.transport
    assert row["Cursor `ToolCall` variant"] == f"`{tool.variant}`"
    offered = [m for m, tools in manifests().items() if name in tools]
    assert [m.strip() for m in row["Modes"].split(",")] == offered
    assert TEST_ID.findall(row["Tests"]), f"{name}: no test named"


def test_every_named_test_exists():
    named = sorted(set(TEST_ID.findall(DOC.read_text())))
    assert named
    files = sorted({n.split("::", 1)[0] for n in named})
    for f in files:
        assert (ROOT / f).is_file(), f"{f} does not exist"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    collected = {line.strip() for line in out.stdout.splitlines() if "::" in line}
    assert collected, out.stdout + out.stderr
    missing = [n for n in named if n not in collected]
    assert not missing, f"docs/tools.md names tests that do not exist: {missing}"
