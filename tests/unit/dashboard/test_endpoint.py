"""The dashboard's mitmproxy side (taddons): who gets an answer, /status left alone, forms read whole,
and /events pointed at the loopback stream server as a one-shot call."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from mitmproxy.test import taddons, tflow

from byok.agent.team import Team
from byok.dashboard.views import Dashboard, Sources
from byok.dashboard_endpoint import DashboardEndpoint
from byok.transports.stream_server import CALL_HEADER
from tests.unit.dashboard.conftest import NOW_MS

HOST = "cursor-byok.invalid"


class FakeServer:
    port = 45678

    def __init__(self) -> None:
        from byok.transports.stream_server import LoopbackSecret

        self.secret = LoopbackSecret()
        self.calls: dict = {}
        self.stopping = asyncio.Event()

    def expect_call(self, token, serve) -> None:
        self.calls[token] = serve


def flow_for(path: str = "/", peer=("127.0.0.1", 5000), method: str = "GET", host: str = HOST):
    f = tflow.tflow()
    f.request.method = method
    f.request.host, f.request.port, f.request.scheme, f.request.path = host, 80, "http", path
    f.request.headers["host"] = host
    f.client_conn.peername = peer
    return f


def endpoint_over(built, providers_file) -> DashboardEndpoint:
    backend = SimpleNamespace(team=Team(), server=FakeServer(), settings=None, runtime=None)
    endpoint = DashboardEndpoint(backend)
    endpoint.board = Dashboard(built.db, Sources(config=lambda: providers_file, clock_ms=lambda: NOW_MS))
    return endpoint


def test_answers_this_machine_only_and_leaves_status_and_other_hosts(built, providers_file):
    endpoint = endpoint_over(built, providers_file)
    try:
        with taddons.context(endpoint):
            asyncio.run(endpoint.request(remote := flow_for(peer=("192.0.2.7", 5000))))
            assert remote.response.status_code == 403 and b"<html" not in remote.response.content
            asyncio.run(endpoint.request(local := flow_for("/conversations")))
            assert local.response.status_code == 200 and built.conversation_id.encode() in local.response.content
            asyncio.run(endpoint.request(status := flow_for("/status")))
            assert status.response is None  # status.py's
            asyncio.run(endpoint.request(other := flow_for(host="example.com")))
            assert other.response is None
    finally:
        endpoint.board.close()


def test_forms_are_read_whole_and_events_go_to_the_stream_server(built, providers_file):
    endpoint = endpoint_over(built, providers_file)
    try:
        with taddons.context(endpoint):
            post = flow_for("/gc", method="POST")
            post.request.stream = True  # as FlowStreaming leaves every flow it does not classify
            endpoint.requestheaders(post)
            assert post.request.stream is False
            events = flow_for("/events")
            asyncio.run(endpoint.request(events))
            assert events.response is None
            assert (events.request.host, events.request.port) == ("127.0.0.1", FakeServer.port)
            token = events.request.headers[CALL_HEADER]
            assert set(endpoint.backend.server.calls) == {token}
            assert endpoint.backend.server.secret.admits(dict(events.request.headers.items()))  # it gets in
            assert events.metadata["byok_target"] == ("http", HOST, 80)  # shown again when the answer starts
    finally:
        endpoint.board.close()
