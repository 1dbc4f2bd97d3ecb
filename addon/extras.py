"""The optional parts of cursor-byok (pyproject extras), and the one way to install each.

cursor-byok is installed from a checkout (it is not published on PyPI), so a hint that says
`pip install 'cursor-byok[team]'` cannot work: every message names the command run in the checkout.
No mitmproxy import: the CLI, the store and the addon all use this.
"""

from __future__ import annotations

import importlib.util

EXTRAS = {
    "team": ("psycopg", "psycopg_pool"),
    "plot": ("matplotlib",),
}
"""extra -> the modules it provides (pyproject.toml [project.optional-dependencies])."""


def install_command(extra: str) -> str:
    return f".venv/bin/pip install -e '.[{extra}]'"


def missing(extra: str) -> list[str]:
    """The modules of `extra` this Python environment lacks."""
    return [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]


def missing_message(extra: str, needed_for: str) -> str | None:
    """One sentence for the user when `extra` is not installed (None when it is)."""
    lacking = missing(extra)
    if not lacking:
        return None
    return (f"{needed_for} needs the optional '{extra}' dependencies ({', '.join(lacking)} not installed). "
            f"In your cursor-byok checkout run: {install_command(extra)} (in the environment mitmdump and "
            "cursor-byok run from)")
