"""Which flows are ours: the agent RPCs and model lists on Cursor's backend hosts.

Classification is pure (host + method + path); the per-request route (local or upstream) lives in
the agent runtime and is decided by the request's first run_request.
"""

from __future__ import annotations

import enum

from mitmproxy import http

from .assist import SERVICES
from .connectivity import IS_CONNECTED_PATH
from .models import MODEL_LIST_PATHS
from .options import Settings
from .server_config import SERVER_CONFIG_PATHS

RUN_SSE_PATH = "/agent.v1.AgentService/RunSSE"
BIDI_APPEND_PATH = "/aiserver.v1.BidiService/BidiAppend"
RUN_PATH = "/agent.v1.AgentService/Run"
"""The HTTP/2 bidi-streaming agent RPC (PROTOCOL 10.1)."""
RUN_PROBE_PATH = "/agent/v1/run"
ONE_SHOT_PATHS = {service.path: service for service in SERVICES}
"""Tab, commit messages, titles, terminal, Cmd-K (addon/assist/): answered when the config says so."""


class Rpc(enum.Enum):
    RUN_SSE = "run_sse"
    BIDI_APPEND = "bidi_append"
    RUN = "run"
    RUN_PROBE = "run_probe"
    MODEL_LIST = "model_list"
    SERVER_CONFIG = "server_config"
    ONE_SHOT = "one_shot"
    IS_CONNECTED = "is_connected"
    """NetworkService/IsConnected: answered here while Cursor is unreachable (connectivity.py)."""


def classify(flow: http.HTTPFlow, settings: Settings) -> Rpc | None:
    request = flow.request
    if not settings.is_cursor_host(request.pretty_host):
        return None
    path = request.path.split("?", 1)[0]
    if path.rstrip("/") == RUN_PROBE_PATH:
        return Rpc.RUN_PROBE
    if request.method != "POST":
        return None
    if path == RUN_SSE_PATH:
        return Rpc.RUN_SSE
    if path == BIDI_APPEND_PATH:
        return Rpc.BIDI_APPEND
    if path == RUN_PATH:
        return Rpc.RUN
    if path in MODEL_LIST_PATHS:
        return Rpc.MODEL_LIST
    if path in SERVER_CONFIG_PATHS:
        return Rpc.SERVER_CONFIG
    if path in ONE_SHOT_PATHS:
        return Rpc.ONE_SHOT
    if path == IS_CONNECTED_PATH:
        return Rpc.IS_CONNECTED
    return None
