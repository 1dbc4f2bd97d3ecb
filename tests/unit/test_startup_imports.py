"""What loading the addon imports: optional extras that libraries would pull in at import time stay
out of the proxy process (start-up time and memory, bench/vs_bare.py), yet remain importable."""

import subprocess
import sys

import pytest

PROBE = """
import sys
import byok.main
byok.main.make_addons()
loaded = sorted(m for m in ("numpy", "pandas", "rich", "pygments", "httpx._main") if m in sys.modules)
print(",".join(loaded))
import httpx, rich, numpy, sqlite_utils.db  # still importable afterwards
print("importable", callable(httpx.main))
"""


def test_the_addon_does_not_load_dataframes_or_httpx_cli_but_they_stay_importable():
    pytest.importorskip("numpy")  # the test extra installs it (matplotlib): the case that matters
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded, importable = done.stdout.splitlines()
    assert loaded == ""
    assert importable == "importable True"
