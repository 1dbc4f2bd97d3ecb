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


# ---- what each committed capture must contain (issue 24.5) ----------------------------------------------
# `captures regen` and `captures check` run the same code, so a change that breaks a scenario could be
# regenerated into the goldens and still "match". These read the committed files with expectations taken
# from the scenario definitions (tests/scenarios.py), not from any capture.


def _down_text(capture, kind: str = "text_delta", run: int | None = None) -> str:
    return "".join(r["json"]["interaction_update"][kind]["text"] for r in capture.frames(direction="down")
                   if r["kind"] == f"interaction_update.{kind}" and (run is None or r["run"] == run))


def _committed(name: str):
    return cap.load(CAPTURES / f"{name}.jsonl")


def test_committed_text_turn_holds_the_answer_usage_and_no_key():
    text = _committed("text_turn")
    assert _down_text(text) == "Hello! How can I help you today?"
    [run] = text.of("run")
    assert run["status"] == "completed" and run["usage"] == {"input_tokens": 1200, "output_tokens": 9}
    assert text.of("provider_request")[0]["headers"]["authorization"] == "<redacted>"
    assert "sk-test-SECRET" not in (CAPTURES / "text_turn.jsonl").read_text()
    assert text.frames(direction="down")[-1]["kind"] == "end_stream" and not text.frames(direction="down")[-1]["json"]


def test_committed_provider_error_ends_unavailable_with_the_providers_message():
    error = _committed("provider_error")
    [run] = error.of("run")
    assert (run["status"], run["error_code"]) == ("failed", "unavailable") and "upstream exploded" in run["error_message"]
    end = error.frames(direction="down")[-1]
    assert end["kind"] == "end_stream" and end["json"]["error"]["code"] == "unavailable"
    assert end["json"]["error"]["details"][0]["type"] == "aiserver.v1.ErrorDetails"
    assert _down_text(error) == "" and [c["status"] for c in error.of("llm_call")] == ["error"]


def test_committed_thinking_text_streams_the_thinking_before_the_text():
    thinking = _committed("thinking_text")
    assert _down_text(thinking, "thinking_delta") == "The user greets me; answer briefly."
    assert _down_text(thinking) == "Hi! What shall we build?"
    kinds = [r["kind"] for r in thinking.frames(direction="down")]
    assert kinds.index("interaction_update.thinking_completed") < kinds.index("interaction_update.text_delta")
    request = thinking.of("provider_request")[0]
    assert request["headers"]["x-api-key"] == "<redacted>" and request["json"]["max_tokens"] == 4096
    assert thinking.of("run")[0]["usage"]["cache_read_tokens"] == 1000


def test_committed_read_tool_round_trips_the_file_through_the_client():
    read = _committed("read_tool")
    execs = [r["json"]["exec_server_message"] for r in read.frames(direction="down") if r["kind"] == "exec_server_message"]
    assert [e["read_args"]["path"] for e in execs] == ["/workspace/hello.txt"]
    results = [r["json"]["exec_client_message"]["read_result"] for r in read.frames(direction="up")
               if "read_result" in r["json"].get("exec_client_message", {})]
    assert [r["success"]["content"] for r in results] == ["hello from the workspace\n"]
    tool_messages = [m for m in read.of("provider_request")[1]["json"]["messages"] if m["role"] == "tool"]
    assert tool_messages == [{"content": "     1|hello from the workspace", "role": "tool", "tool_call_id": "call_read_1"}]
    assert _down_text(read).endswith("It says: hello from the workspace.")


def test_committed_two_turns_resume_the_second_run_from_the_first_checkpoint():
    two = _committed("two_turns")
    assert [(r["request_id"], r["status"]) for r in two.of("run")] == [
        ("req-two_turns-1", "completed"), ("req-two_turns-2", "completed")]
    assert (_down_text(two, run=0), _down_text(two, run=1)) == ("4", "12")
    states = {r["run"]: r["json"]["run_request"]["conversation_state"] for r in two.frames(direction="up")
              if r["kind"] == "run_request"}
    assert states[0] == {} and states[1]["root_prompt_messages_json"]  # the second carries the first's state


def test_every_committed_capture_has_assertions_of_its_own():
    """A new scenario needs a test_committed_<name>_... above, not only the regen comparison."""
    mine = [name for name in globals() if name.startswith("test_committed_")]
    assert [s for s in SCENARIOS if not any(n.startswith(f"test_committed_{s}_") for n in mine)] == []
