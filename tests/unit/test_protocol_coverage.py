"""docs/protocol-coverage.md stays true: one row per `ConversationAction` branch of the schema facts
(so a branch a newer schema adds shows up as missing), each saying what the code really does at
run start and while a run is going, and naming tests that exist."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from byok.agent import actions, capabilities

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "protocol-coverage.md"
FACTS = json.loads((ROOT / "proto" / "facts" / "agent.v1.json").read_text())
TEST_ID = re.compile(r"`(tests/[^`\s]+\.py::[^`\s]+)`")


def branches() -> dict[str, int]:
    fields = FACTS["messages"]["agent.v1.ConversationAction"]["fields"]
    return {f["name"]: f["number"] for f in fields if f.get("oneof") == "action"}


def rows() -> dict[str, dict[str, str]]:
    lines = DOC.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| Branch |"))
    header = [c.strip() for c in lines[start].strip().strip("|").split("|")]
    out: dict[str, dict[str, str]] = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == len(header), f"malformed row: {line}"
        row = dict(zip(header, cells))
        name = row["Branch"].strip("`")
        assert name not in out, f"{name} listed twice"
        out[name] = row
    return out


def test_every_branch_of_the_schema_has_one_row():
    table = rows()
    missing = sorted(set(branches()) - set(table))
    assert not missing, f"docs/protocol-coverage.md has no row for {missing}"
    assert sorted(table) == sorted(branches())
    for name, number in branches().items():
        assert table[name]["Field"] == str(number)


def test_run_start_column_says_what_the_code_does():
    for name, row in rows().items():
        cell = row["At run start"]
        if name in capabilities.RUN_ACTIONS:
            assert cell.startswith("handled: "), f"{name} is handled at run start; the doc says {cell!r}"
        else:
            assert cell == f"refused: {actions.refusal(name)}", f"{name}: the doc must quote the refusal"


def test_mid_run_column_says_what_the_code_does():
    for name, row in rows().items():
        cell = row["While a run is going"]
        handled = name in capabilities.MID_RUN_ACTIONS or name == "cancel_action"  # cancel: run.py
        assert cell.startswith("handled" if handled else "refused"), f"{name}: {cell!r}"


def test_every_named_test_exists():
    named = sorted({t for row in rows().values() for t in TEST_ID.findall(row["Tests"])})
    assert all(TEST_ID.findall(row["Tests"]) for row in rows().values()), "every row names a test"
    files = sorted({n.split("::", 1)[0] for n in named})
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    collected = {line.strip() for line in out.stdout.splitlines() if "::" in line}
    missing = [n for n in named if n not in collected]
    assert not missing, f"docs/protocol-coverage.md names tests that do not exist: {missing}"
