"""addon/assist/ stands beside the agent engine: it never imports the agent nor mitmproxy (DESIGN §9)."""

import subprocess
import sys

PROBE = """
import sys
import byok.assist
print(",".join(sorted(m for m in sys.modules if m == "mitmproxy" or m.startswith(("mitmproxy.", "byok.agent")))))
"""


def test_the_services_import_neither_the_agent_nor_mitmproxy():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
