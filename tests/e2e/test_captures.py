"""Scenario captures: a fresh run of every scenario (real mitmdump, exported from the proxy's own store)
matches the committed captures/scenarios/*.jsonl, and a difference fails with a readable diff."""

from __future__ import annotations

import json
import shutil

import pytest

from byok.cli import capture as cap
from byok.cli import main
from tests.scenarios import CAPTURES, SCENARIOS

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """`cursor-byok captures regen --dir <tmp>`: every scenario once, into a temporary folder."""
    out = tmp_path_factory.mktemp("fresh-captures")
    assert main(["captures", "regen", "--dir", str(out)]) == 0
    return out


def test_every_scenario_has_a_committed_capture():
    assert sorted(p.stem for p in CAPTURES.glob("*.jsonl")) == sorted(SCENARIOS)
    assert {"text_turn", "provider_error", "thinking_text", "read_tool"} <= set(SCENARIOS)


def test_committed_captures_match_a_fresh_run(fresh, capsys):
    code = main(["captures", "check", "--fresh", str(fresh)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count("ok ") == len(SCENARIOS)


def test_fresh_capture_round_trips_and_holds_the_story(fresh):
    for name in SCENARIOS:
        path = fresh / f"{name}.jsonl"
        loaded = cap.load(path)
        assert loaded.dumps() == path.read_text()
        assert cap.diff(loaded, cap.load(CAPTURES / f"{name}.jsonl")) == ""
    text = cap.load(fresh / "text_turn.jsonl")
    assert text.header["conversation_id"] == "conv-text_turn" and text.header["cursor_version"] is None
    kinds = [r["kind"] for r in text.frames(direction="down")]
    assert kinds[-5:] == ["interaction_update.turn_ended"] + ["conversation_checkpoint_update"] * 3 + ["end_stream"]
    assert [r["t"] for r in text.records if r["t"] in ("llm_call", "provider_request")] == ["llm_call", "provider_request"]
    assert text.of("sse")[-1]["data"] == "[DONE]"
    assert "sk-test-SECRET" not in (fresh / "text_turn.jsonl").read_text()
    assert text.of("provider_request")[0]["headers"]["authorization"] == "<redacted>"
    error = cap.load(fresh / "provider_error.jsonl")
    assert error.of("run")[0]["status"] == "failed" and error.frames(direction="down")[-1]["json"]["error"]["code"] == "unavailable"
    read = cap.load(fresh / "read_tool.jsonl")
    assert any(r["kind"] == "exec_server_message" for r in read.frames(direction="down"))
    assert any("read_result" in json.dumps(r["json"]) for r in read.frames(direction="up"))


def test_check_fails_with_a_readable_diff(fresh, tmp_path, capsys):
    committed = tmp_path / "committed"
    shutil.copytree(CAPTURES, committed)
    path = committed / "text_turn.jsonl"
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        record = json.loads(line)
        if record.get("kind") == "interaction_update.text_delta":
            record["json"]["interaction_update"]["text_delta"]["text"] = "Goodbye"
            lines[i] = cap.dump_line(record)
            break
    path.write_text("\n".join(lines) + "\n")
    code = main(["captures", "check", "--dir", str(committed), "--fresh", str(fresh)])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL text_turn" in out and "1 of 5 scenario(s) differ" in out
    assert "--- committed/text_turn.jsonl" in out and "+++ fresh/text_turn.jsonl" in out
    assert '-r0 down interaction_update.text_delta | json.interaction_update.text_delta.text = "Goodbye"' in out
    assert '+r0 down interaction_update.text_delta | json.interaction_update.text_delta.text = "Hello! How "' in out
    for name in set(SCENARIOS) - {"text_turn"}:
        assert f"ok   {name}" in out
