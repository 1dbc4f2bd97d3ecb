"""NetworkService/IsConnected (addon/connectivity.py): answered here only while Cursor's backend is
unreachable and the user's models serve calls; otherwise it passes as sent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import pytest
from mitmproxy import http
from mitmproxy.test import taddons, tflow

from byok import connectivity as c
from byok import models as m
from byok.proto import features_pb2 as fpb
from byok.wire.connect import decode_all
from tests.unit.test_models import StubProbe, closed_port


def flow(ctype: str = "application/proto", host: str = "api2.cursor.sh", port: int = 443) -> http.HTTPFlow:
    req = http.Request.make("POST", f"https://{host}:{port}{c.IS_CONNECTED_PATH}", b"", {"content-type": ctype})
    return tflow.tflow(req=req, resp=False)


def run(addon, f, *, mode: str = "intercept", hosts=None):
    async def go():
        with taddons.context(addon) as tctx:
            tctx.options.add_option("byok_mode", str, "intercept", "mode")
            tctx.options.add_option("byok_upstream_probe_ms", int, 3000, "probe")
            tctx.options.add_option("byok_hosts", Sequence[str], ["api2.cursor.sh"], "hosts")
            tctx.options.byok_mode = mode
            if hosts:
                tctx.options.byok_hosts = hosts
            await addon.request(f)
        return f

    return asyncio.run(go())


@pytest.mark.parametrize("ctype", ["application/proto", "application/json", "application/connect+proto"])
def test_answered_in_the_requests_encoding_while_cursor_is_unreachable(ctype):
    f = run(c.ConnectivityAnswer(lambda: True, StubProbe(False)), flow(ctype))
    assert f.response.status_code == 200 and f.response.headers["content-type"] == ctype
    if ctype == "application/json":
        assert json.loads(f.response.content) == {}
    elif ctype == "application/connect+proto":
        message, end = decode_all(f.response.content)
        assert fpb.IsConnectedResponse.FromString(message.payload) == fpb.IsConnectedResponse()
        assert end.end_stream and end.payload == b"{}"
    else:
        assert f.response.content == b""


def test_the_real_probe_of_a_closed_port():
    port = closed_port()
    f = run(c.ConnectivityAnswer(lambda: True, m.UpstreamProbe()), flow(host="127.0.0.1", port=port),
            hosts=["127.0.0.1"])
    assert f.response is not None and f.response.status_code == 200


@pytest.mark.parametrize("serving, reachable, mode", [
    (True, True, "intercept"),    # Cursor answers for itself
    (False, False, "intercept"),  # nothing is served here: the probe tells the truth
    (True, False, "observe"),     # observe never answers
])
def test_passes_as_sent(serving, reachable, mode):
    f = run(c.ConnectivityAnswer(lambda: serving, StubProbe(reachable)), flow(), mode=mode)
    assert f.response is None


def test_a_gateway_page_is_replaced_and_a_failed_connection_remembered():
    probe = m.UpstreamProbe()
    addon = c.ConnectivityAnswer(lambda: True, probe)

    async def go():
        with taddons.context(addon) as tctx:
            tctx.options.add_option("byok_upstream_probe_ms", int, 0, "probe")
            first = flow()
            await addon.request(first)
            assert first.response is None  # nothing known yet, and no probe (0 ms)
            first.response = http.Response.make(502, b"<html>Bad Gateway</html>", {"content-type": "text/html"})
            addon.response(first)
            second = flow()
            await addon.request(second)
            second.server_conn.error = "Connect call failed"
            addon.error(second)
            third = flow()
            await addon.request(third)
            return first, third

    first, third = asyncio.run(go())
    assert first.response.status_code == 200 and first.response.headers["content-type"] == "application/proto"
    assert third.response is not None and third.response.status_code == 200
