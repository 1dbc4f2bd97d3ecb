"""The subagent header's name is spelled once (byok.agent.run) and imported wherever it is read or sent."""

from __future__ import annotations

import ast
from pathlib import Path

import byok
from byok.agent.run import PARENT_TOOL_CALL_HEADER


def test_the_parent_tool_call_header_is_spelled_once():
    spelled = []
    for path in sorted(Path(byok.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and node.value.lower() == PARENT_TOOL_CALL_HEADER.lower():
                spelled.append(f"{path.name}:{node.lineno}")
    assert len(spelled) == 1 and spelled[0].startswith("run.py:"), spelled
