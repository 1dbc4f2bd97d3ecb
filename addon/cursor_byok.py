"""cursor-byok: Cursor's Agent backend on your own models and API keys.

    mitmdump -s addon/cursor_byok.py        (or mitmweb / mitmproxy)

Thin entry: the logic lives in the installed package `byok` (pip install -e . from the repo root).
"""

try:
    from byok.main import make_addons
except ImportError as e:  # pragma: no cover - only without the package installed
    raise SystemExit(
        "cursor-byok is not installed in this Python environment: run `pip install -e .` in the "
        f"repository, then start mitmproxy from that environment ({e})"
    ) from e

addons = make_addons()
