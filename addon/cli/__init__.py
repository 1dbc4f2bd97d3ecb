"""The `cursor-byok` command: setup, smoke, trace, usage, captures, doctor, gc, drift, verify.

Each subcommand lives in its own module with `add_parser(subparsers)` and a `run(args) -> exit code`
set as the parser's `func`; the modules keep heavy imports inside `run`, so `--help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib

COMMANDS = {
    "setup": "byok.cli.setup",
    "smoke": "byok.cli.smoke",
    "trace": "byok.cli.trace",
    "usage": "byok.cli.usage",
    "captures": "byok.cli.captures_cmd",
    "doctor": "byok.cli.doctor",
    "gc": "byok.cli.gc",
    "drift": "byok.cli.drift",
    "verify": "byok.cli.verify",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cursor-byok",
        description="cursor-byok: Cursor's Agent backend on your own models. Checks, traces and captures.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS.values():
        importlib.import_module(module).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
