"""`cursor-byok captures regen|check|export`: scenario captures and exports from the store.

`regen` and `check` run the scenarios of `tests/scenarios.py` (so they need a checkout of the
repository, found next to the installed package or with `--repo`), each through a real mitmdump.
`regen` rewrites a committed capture only when its normalised form changed (or with `--force`), so
unrelated byte noise never churns the files; `check` prints a unified diff of the normalised forms
and exits 1 on any difference. `export` writes one request or conversation of a store as a capture.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import console, db_arg, default_config, default_db, fail, StoreUnavailable, open_db
from .output import Column, line, table


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("captures", help="regenerate, check or export captures (captures/README.md)",
                       description="Captures: recorded conversations as diff-friendly JSON lines (captures/README.md).")
    csub = p.add_subparsers(dest="captures_command", metavar="ACTION", required=True)

    r = csub.add_parser("regen", help="run the e2e scenarios and (re)write captures/scenarios/<name>.jsonl")
    r.add_argument("names", nargs="*", help="scenarios to run (default: all)")
    r.add_argument("--dir", type=Path, default=None, help="captures folder (default: <repo>/captures/scenarios)")
    r.add_argument("--force", action="store_true", help="rewrite files even when only volatile bytes changed")
    r.add_argument("--repo", type=Path, default=None, help="the cursor-byok checkout (default: found automatically)")
    r.set_defaults(func=run_regen)

    c = csub.add_parser("check", help="run the scenarios and diff them against the committed captures")
    c.add_argument("names", nargs="*", help="scenarios to check (default: all)")
    c.add_argument("--dir", type=Path, default=None, help="committed captures (default: <repo>/captures/scenarios)")
    c.add_argument("--fresh", type=Path, default=None,
                   help="compare captures already regenerated into this folder instead of running the scenarios")
    c.add_argument("--repo", type=Path, default=None, help="the cursor-byok checkout (default: found automatically)")
    c.set_defaults(func=run_check)

    e = csub.add_parser("export", help="export a request or conversation from the store as a capture")
    e.add_argument("id", help="request id or conversation id")
    e.add_argument("--db", type=db_arg, default=None,
                   help="SQLite store or postgresql:// URL (default: ~/.cursor-byok/byok.db)")
    e.add_argument("--out", default="-", help="output file (default: stdout)")
    e.add_argument("--config", type=Path, default=None,
                   help="providers file whose API keys are redacted (default ~/.cursor-byok/providers.toml)")
    e.add_argument("--redact-paths", action="store_true", help="also replace your home folder by ~")
    e.add_argument("--name", default=None, help="capture name (default: the id)")
    e.add_argument("--cursor-version", default=None, help="Cursor version to note in the header, if known")
    e.set_defaults(func=run_export)


# ---- scenarios --------------------------------------------------------------------------------------


def find_repo(explicit: Path | None) -> Path:
    """The checkout holding tests/scenarios.py: --repo, the package's parent, or the working directory."""
    import byok

    candidates = [explicit] if explicit else [Path(byok.__file__).resolve().parents[1], Path.cwd()]
    for root in candidates:
        if root and (root / "tests" / "scenarios.py").exists():
            return root.resolve()
    raise FileNotFoundError("captures regen/check run the scenarios of a cursor-byok checkout "
                            "(tests/scenarios.py); run them inside the repository or pass --repo")


def load_scenarios(repo: Path):
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    import tests.scenarios as scenarios

    return scenarios


def _names(scenarios, names: list[str]) -> list[str]:
    unknown = [n for n in names if n not in scenarios.SCENARIOS]
    if unknown:
        raise KeyError(f"unknown scenario(s) {', '.join(unknown)}; there are: {', '.join(scenarios.SCENARIOS)}")
    return names or list(scenarios.SCENARIOS)


def _selection(args: argparse.Namespace):
    """(scenarios module, scenario names, captures folder) for regen/check, or an exit code."""
    try:
        repo = find_repo(args.repo)
        scenarios = load_scenarios(repo)
        names = _names(scenarios, args.names)
    except (FileNotFoundError, KeyError) as e:
        return fail(str(e).strip("'\""))
    return scenarios, names, args.dir or repo / "captures" / "scenarios"


def run_regen(args: argparse.Namespace) -> int:
    from . import capture as cap

    selection = _selection(args)
    if isinstance(selection, int):
        return selection
    scenarios, names, folder = selection
    out = console()
    line(out, f"running {len(names)} scenario(s) through mitmdump ...")
    captures = scenarios.run_scenarios(names)
    rows = []
    for name in names:
        fresh = captures[name]
        path = folder / f"{name}.jsonl"
        if path.exists() and not args.force and not cap.diff(cap.load(path), fresh):
            result = "unchanged"
        else:
            result = "updated" if path.exists() else "new"
            fresh.write(path)
        rows.append([name, result, str(len(fresh.of("run"))), str(len(fresh.frames())),
                     str(len(fresh.of("llm_call"))), f"{path.stat().st_size:,}"])
    table(out, f"captures in {folder}", ["scenario", "result", *(Column(c, "right") for c in (
        "runs", "frames", "provider calls", "bytes"))], rows)
    stale = sorted(p.stem for p in folder.glob("*.jsonl") if p.stem not in scenarios.SCENARIOS)
    if stale:
        line(out, (f"no scenario for {', '.join(stale)} (delete the file if the scenario is gone)", "yellow"))
    return 0


def run_check(args: argparse.Namespace) -> int:
    from . import capture as cap

    selection = _selection(args)
    if isinstance(selection, int):
        return selection
    scenarios, names, folder = selection
    out = console()
    if args.fresh:
        fresh = {n: cap.load(args.fresh / f"{n}.jsonl") for n in names if (args.fresh / f"{n}.jsonl").exists()}
    else:
        line(out, f"running {len(names)} scenario(s) through mitmdump ...")
        fresh = scenarios.run_scenarios(names)
    failed = 0
    for name in names:
        path = folder / f"{name}.jsonl"
        if not path.exists():
            line(out, ("FAIL", "red"), f" {name}: no committed capture {path} (cursor-byok captures regen {name})")
            failed += 1
            continue
        if name not in fresh:
            line(out, ("FAIL", "red"), f" {name}: no fresh capture to compare")
            failed += 1
            continue
        try:
            text = cap.diff(cap.load(path), fresh[name], expected_name=f"committed/{name}.jsonl",
                            actual_name=f"fresh/{name}.jsonl")
        except cap.CaptureError as e:
            line(out, ("FAIL", "red"), f" {name}: {e}")
            failed += 1
            continue
        if text:
            failed += 1
            line(out, ("FAIL", "red"), f" {name}: the fresh run differs from {path} (normalised):")
            _print_diff(out, text)
        else:
            line(out, ("ok", "green"), f"   {name}")
    if failed:
        line(out, f"{failed} of {len(names)} scenario(s) differ; if the change is intended: "
                  "cursor-byok captures regen, and review the diff in git")
    return 1 if failed else 0


def _print_diff(out, text: str) -> None:
    for text_line in text.splitlines():
        style = ("green" if text_line.startswith("+") and not text_line.startswith("+++") else
                 "red" if text_line.startswith("-") and not text_line.startswith("---") else
                 "cyan" if text_line.startswith("@@") else None)
        line(out, (text_line, style))


# ---- export ---------------------------------------------------------------------------------------


def run_export(args: argparse.Namespace) -> int:
    from byok.providers.config import ConfigFileError, load_providers

    from . import capture as cap

    routes = []
    config = args.config or default_config()
    if config.exists():
        try:
            routes = list(load_providers(config).models)
        except ConfigFileError as e:
            return fail(f"{e} (needed to know which API keys to redact; fix it or pass --config)")
    redactor = cap.Redactor.from_routes(routes, home=str(Path.home()) if args.redact_paths else None)
    try:
        conn = open_db(args.db or default_db())
    except StoreUnavailable as e:
        return fail(str(e))
    try:
        capture = cap.export(conn, args.id, redactor=redactor, name=args.name, cursor_version=args.cursor_version)
    except LookupError as e:
        return fail(str(e), 1)
    finally:
        conn.close()
    err = console(stderr=True)
    if args.out == "-":
        sys.stdout.write(capture.dumps())
    else:
        path = Path(args.out)
        capture.write(path)
        line(err, f"wrote {path}")
    line(err, f"{len(capture.of('run'))} run(s), {len(capture.frames())} frames, {len(capture.of('llm_call'))} "
              f"provider call(s); redacted: {', '.join(capture.header['redactions']) or 'nothing found'}")
    return 0
