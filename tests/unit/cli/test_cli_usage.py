"""`cursor-byok usage`: tokens per model and day, as the providers reported them."""

from __future__ import annotations

from datetime import date

import pytest

from byok.cli import main
from byok.cli.common import open_db
from byok.dashboard.queries import usage_rows
from tests.support.cli_store import DAY1, DAY2


def test_rows_per_model_and_day(built):
    rows = usage_rows(open_db(built.db))
    assert [(r.day, r.model, r.calls, r.errors) for r in rows] == [
        (DAY1, "deepseek/deepseek-chat", 2, 0), (DAY2, "anthropic/claude-x", 1, 1)]
    first = rows[0]
    assert (first.input_tokens, first.output_tokens, first.cache_read_tokens, first.cache_write_tokens) == (
        2200, 50, 1600, 50)
    assert rows[1].input_tokens == 0  # the failed call reported nothing; nothing is estimated


def test_since_filters_days(built, capsys):
    assert [r.day for r in usage_rows(open_db(built.db), since=date.fromisoformat(DAY2))] == [DAY2]
    assert main(["usage", "--db", str(built.db), "--since", DAY2]) == 0
    out = capsys.readouterr().out
    assert "anthropic/claude-x" in out and "deepseek" not in out
    assert main(["usage", "--db", str(built.db), "--since", "2030-01-01"]) == 0
    assert "no provider calls since 2030-01-01" in capsys.readouterr().out


def test_table_has_totals(built, capsys):
    assert main(["usage", "--db", str(built.db)]) == 0
    out = capsys.readouterr().out
    assert "total" in out and "2,200" in out and "1,600" in out


def without_modules(monkeypatch, *prefixes: str) -> None:
    """This Python environment as if the given optional modules were not installed."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **k: None if name.startswith(prefixes) else real(name, *a, **k))


def test_png_without_matplotlib_fails_first_with_the_checkout_install_command(built, tmp_path, capsys, monkeypatch):
    without_modules(monkeypatch, "matplotlib")
    png = tmp_path / "u.png"
    assert main(["usage", "--db", str(built.db), "--png", str(png)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""  # no table first, then a failure
    assert "matplotlib" in captured.err and ".venv/bin/pip install -e '.[plot]'" in captured.err
    assert "cursor-byok[plot]" not in captured.err and not png.exists()


@pytest.mark.parametrize("command", [["usage"], ["trace", "some-id"], ["drift"], ["captures", "export", "some-id"],
                                     ["gc"]])
def test_a_postgresql_store_without_the_team_extra_is_one_clear_line(command, capsys, monkeypatch):
    without_modules(monkeypatch, "psycopg")
    code = main([*command, "--db", "postgresql://byok:secret@127.0.0.1:5432/byok"])
    captured = capsys.readouterr()
    assert code != 0 and "Traceback" not in captured.err + captured.out
    assert "psycopg" in captured.err and ".venv/bin/pip install -e '.[team]'" in captured.err
    assert "secret" not in captured.err


def test_bad_since_is_a_usage_error(built, capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["usage", "--db", str(built.db), "--since", "yesterday"])
    assert "YYYY-MM-DD" in capsys.readouterr().err
