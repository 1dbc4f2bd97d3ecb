"""Test-only script loaded before cursor-byok: mitmproxy reports the version in BYOK_PRETEND_MITMPROXY."""

import os

from mitmproxy import version

version.VERSION = os.environ["BYOK_PRETEND_MITMPROXY"]
