"""API keys of the web backends, taken like provider keys: `api_key`, or `api_key_env` read from
mitmproxy's environment at call time (a variable exported later in that environment works)."""

from __future__ import annotations

import os


def resolve_key(api_key: str | None, api_key_env: str | None, where: str, error: type[Exception]) -> str:
    if api_key:
        return api_key
    if api_key_env:
        value = os.environ.get(api_key_env)
        if value:
            return value
        raise error(f"{where}: environment variable {api_key_env} is not set where mitmproxy runs")
    raise error(f"{where}: no API key configured (api_key_env or api_key)")
