"""Tab calls in `trace` and `usage`: one-shot llm_calls rows (purpose tab) without a run."""

from __future__ import annotations

import json

from byok.cli import main
from byok.cli.common import open_db
from byok.dashboard.queries import usage_rows
from byok.store import Store
from tests.support.cli_store import DAY2

TAB_REQUEST = "0f3c6a2e-tab-request"


def add_tab_call(db) -> None:
    store = Store.open(db)
    row = store.begin_llm_call({
        "request_id": TAB_REQUEST, "call_index": 0, "model_call_id": "tab-1", "provider": "ollama",
        "provider_kind": "openai_completions", "model_public_id": "0a0b0c0d", "model": "qwen2.5-coder:1.5b",
        "started_at": f"{DAY2}T11:00:00.000+00:00", "message_count": 1, "tool_count": 0, "purpose": "tab"})
    store.finish_llm_call(row, {"status": "ok", "ttfb_ms": 40.0, "ttft_ms": 55.5, "total_ms": 180.0,
                                "input_tokens": 900, "output_tokens": 12})
    store.close()


def test_usage_by_purpose_and_by_model(built, capsys):
    add_tab_call(built.db)
    rows = usage_rows(open_db(built.db), by="purpose")
    assert {(r.day, r.model, r.calls) for r in rows} >= {(DAY2, "tab", 1), (DAY2, "agent", 1)}
    assert main(["usage", "--db", str(built.db), "--by", "purpose", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    tab = next(r for r in doc["rows"] if r["purpose"] == "tab")
    assert (tab["input_tokens"], tab["output_tokens"]) == (900, 12) and doc["by"] == "purpose"
    assert main(["usage", "--db", str(built.db)]) == 0
    assert "ollama/qwen2.5-coder:1.5b" in capsys.readouterr().out


def test_trace_finds_a_tab_call_by_its_request_id(built, capsys):
    add_tab_call(built.db)
    assert main(["trace", TAB_REQUEST, "--db", str(built.db)]) == 0
    out = capsys.readouterr().out
    assert "one-shot tab: no run" in out and "qwen2.5-coder:1.5b" in out and "(tab)" in out
    assert main(["trace", TAB_REQUEST, "--db", str(built.db), "--json"]) == 0
    story = json.loads(capsys.readouterr().out)
    call, = story["runs"][0]["provider_calls"]
    assert call["purpose"] == "tab" and call["ttft_ms"] == 55.5 and story["runs"][0]["run"] is None


def tab_row(request_id: str, *, source: str = "answered", line: int = 3, start: int = 0, fits: str = "ok",
            rng: tuple[int, int] | None = None) -> dict:
    from tests.unit.cli.test_cli_verify import T0

    return {"request_id": request_id, "source": source, "ts_ms": T0, "client_version": "3.16.17",
            "cursor_line": line, "cursor_column": 4, "contents_start_at_line": start, "contents_lines": 30,
            "total_lines": 300, "line_ending": None, "column_fits": fits,
            "range_start": rng[0] if rng else None, "range_end": rng[1] if rng else None}


def test_verify_confirms_the_tab_conventions(db_target, capsys):
    from tests.unit.cli.test_cli_verify import record, verify_json

    def scenario(t):
        t.store.record_tab_position(tab_row("tab-answered"))
        t.store.record_tab_position(tab_row("tab-observed", source="observed", line=3, start=40, rng=(44, 44)))
        t.store.record_tab_position(tab_row("tab-observed-0", source="observed", line=5, start=0, rng=(6, 7)))

    record(db_target, scenario)
    code, found, out = verify_json(db_target, capsys)
    tab = found["tab.positions"]
    assert tab["verdict"] == "confirmed", tab
    assert tab["counts"] == {"requests": 3, "observed_answers": 2, "telling_answers": 1}
    assert "src" not in out  # numbers only


def test_verify_contradicts_a_file_reading_and_a_bad_column(db_target, capsys):
    from tests.unit.cli.test_cli_verify import record, verify_json

    def scenario(t):
        t.store.record_tab_position(tab_row("tab-file-reading", source="observed", line=3, start=40, rng=(4, 4)))
        t.store.record_tab_position(tab_row("tab-past-end", fits="past_end"))

    record(db_target, scenario)
    code, found, _ = verify_json(db_target, capsys)
    tab = found["tab.positions"]
    assert code == 1 and tab["verdict"] == "contradicted"
    assert tab["example_request_id"] == "tab-file-reading"
    assert "counts lines of the whole file" in tab["seen_instead"]
