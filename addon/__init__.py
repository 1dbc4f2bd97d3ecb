"""cursor-byok: Cursor's Agent backend, answered by a mitmproxy addon with your own provider.

Installed as the import package `byok` (this folder), with `byok.proto`, `byok.store` and
`byok.prompt` mapped from the repository's proto/, store/ and prompt/ folders (pyproject.toml).
Modules directly in this package face mitmproxy; `byok.agent` never imports mitmproxy.
"""

import sys


def _import_without(module: str, hidden: tuple[str, ...]) -> None:
    """Import `module` while `hidden` look uninstalled to it: optional extras it would pull in at
    import time, which the proxy never uses. Only the placeholders added here are removed, so the
    hidden modules stay importable for everything else in the process (other addons included)."""
    added = [name for name in hidden if name not in sys.modules]
    sys.modules.update(dict.fromkeys(added))
    try:
        __import__(module)
    finally:
        for name in added:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


# Start-up cost, measured by bench/vs_bare.py: sqlite-utils imports pandas and numpy when they are
# installed (for column types this store never writes: ~0.3 s and ~10 MiB with numpy, far more with
# pandas), and httpx imports its command-line tool (rich, pygments, click: ~4 MiB).
_import_without("sqlite_utils.db", ("numpy", "pandas"))
_import_without("httpx", ("httpx._main",))
