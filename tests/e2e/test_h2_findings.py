"""Re-verifying, against a real mitmdump (the installed version, one of `duplex.ACCEPTED`) and without cursor-byok, what an experiment found about
full-duplex HTTP/2 streams (shared notes, mitmproxy-h2-bidi.md); docs/architecture.md builds on each:

1. the route is fixed before the first message arrives;
2. the response's end is held until the request ends (and cursor-byok's patch forwards it at once);
3. an abort (END_STREAM + RST_STREAM in one packet) can reach the server as a clean request end;
4. an HTTP/1.1 loopback hop carries the request body only with `transfer-encoding: chunked`.

The client is the project's own HTTP/2 driver (`byok.transports.h2conn`); the server a fake HTTP/2 Cursor agent
host (or, for 4, a raw HTTP/1.1 socket server that records the bytes it gets).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import ssl
import subprocess
import time
from pathlib import Path

import pytest

from byok.wire import connect
from byok.cli.client import user_turn_request
from byok.transports.h2conn import H2Connection
from byok.proto import agent_pb2 as apb
from tests.e2e.conftest import run
from tests.e2e.harness import MITMDUMP, ROOT
from tests.support.fake_h2_cursor import FakeH2Cursor

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

HEADERS = [(":method", "POST"), (":scheme", "https"), (":authority", "agentn.api5.cursor.sh"),
           (":path", "/agent.v1.AgentService/Run"), ("content-type", "application/connect+proto")]
RUN_REQUEST = connect.encode_envelope(apb.AgentClientMessage(
    run_request=user_turn_request("hi", model_id="m")).SerializeToString())
HEARTBEAT = connect.encode_envelope(apb.AgentClientMessage(client_heartbeat=apb.ClientHeartbeat()).SerializeToString())


class Bare:
    """mitmdump with only the findings script and the upstream redirect: no cursor-byok."""

    def __init__(self, home: Path, upstream_port: int, **options) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.home = home
        args = [MITMDUMP, "-s", str(ROOT / "tests/support/h2_findings_addon.py"),
                "-s", str(ROOT / "tests/support/redirect_upstream.py"),
                "--listen-host", "127.0.0.1", "--listen-port", "0", "--set", f"confdir={home}",
                "--set", "connection_strategy=lazy", "--set", "ssl_insecure=true",
                "--set", f"test_upstream=127.0.0.1:{upstream_port}"]
        for key, value in options.items():
            args += ["--set", f"{key}={value}"]
        self.log_path = home / "mitmdump.log"
        env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
        self.process = subprocess.Popen(args, stdout=open(self.log_path, "wb"), stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            found = re.search(r"proxy listening at 127\.0\.0\.1:(\d+)", self.log_path.read_text(errors="replace"))
            if found:
                self.port = int(found.group(1))
                return
            assert self.process.poll() is None, self.log_path.read_text()
            time.sleep(0.05)
        raise RuntimeError("mitmdump did not start")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)

    async def connect(self) -> H2Connection:
        context = ssl.create_default_context(cafile=str(self.home / "mitmproxy-ca-cert.pem"))
        return await H2Connection.open("agentn.api5.cursor.sh", 443, ssl_context=context,
                                       proxy=("127.0.0.1", self.port))


async def until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


@pytest.fixture
def upstream():
    with FakeH2Cursor() as fake:
        yield fake


def test_1_the_route_is_fixed_before_the_first_message(tmp_path, upstream):
    """With request streaming on, the upstream has the request headers while the client has sent no
    body byte: nothing in the first message can still choose where the request goes."""
    proxy = Bare(tmp_path, upstream.port, finding_stream="true")
    try:
        async def scenario():
            conn = await proxy.connect()
            stream = await conn.request(HEADERS)
            await until(lambda: upstream.runs)
            seen_before_data = bytes(upstream.runs[0].request)
            stream.reset()
            await conn.close()
            return seen_before_data

        assert run(scenario()) == b""
    finally:
        proxy.stop()


@pytest.mark.parametrize("patched", [False, True], ids=["bare", "with cursor-byok's patch"])
def test_2_the_response_end_waits_for_the_request_end(tmp_path, upstream, patched):
    """The upstream ends its response (end-stream envelope, then END_STREAM) while the client's request
    is open. Bare mitmproxy delivers every response byte but holds END_STREAM until the client ends
    its request, which Cursor never does first; with the patch END_STREAM comes at once."""
    options = {"finding_stream": "true", **({"finding_duplex": "true"} if patched else {})}
    proxy = Bare(tmp_path, upstream.port, **options)
    try:
        async def scenario():
            conn = await proxy.connect()
            stream = await conn.request(HEADERS)
            await stream.send(RUN_REQUEST)
            body, ended_before_request_end = bytearray(), None
            chunks = stream.chunks()
            sent_second = False
            while True:
                try:
                    chunk = await asyncio.wait_for(chunks.__anext__(), 1.0 if sent_second else 10.0)
                except StopAsyncIteration:
                    ended_before_request_end = True
                    break
                except asyncio.TimeoutError:
                    ended_before_request_end = False  # every byte arrived, the end did not
                    break
                body += chunk
                if not sent_second:
                    await stream.send(HEARTBEAT)  # the fake answers its second half, then ends
                    sent_second = True
            assert body.endswith(connect.encode_end_stream())  # the whole answer arrived either way
            if not ended_before_request_end:
                await stream.end()
                async for _ in chunks:  # now the end comes
                    pass
            await conn.close()
            return ended_before_request_end

        assert run(scenario()) is patched
    finally:
        proxy.stop()


def test_3_an_abort_can_arrive_as_a_clean_request_end(tmp_path, upstream):
    """END_STREAM and RST_STREAM in one write: the upstream sees the request end, not (only) a reset.
    cursor-byok therefore treats a request that ends before its response as the client leaving."""
    proxy = Bare(tmp_path, upstream.port, finding_stream="true", finding_duplex="true")
    try:
        async def scenario():
            conn = await proxy.connect()
            stream = await conn.request(HEADERS)
            await stream.send(RUN_REQUEST)
            await until(lambda: upstream.runs and upstream.runs[0].messages)
            stream.end_and_reset()
            await until(lambda: upstream.runs[0].request_ended or upstream.runs[0].reset)
            await conn.close()

        run(scenario())
        seen = upstream.runs[0]
        assert seen.request_ended  # the abort's END_STREAM reached the server as an ordinary end
    finally:
        proxy.stop()


@pytest.mark.parametrize("chunked", [False, True], ids=["as is", "chunked"])
def test_4_an_http1_loopback_hop_needs_chunked_encoding(tmp_path, upstream, chunked):
    """mitmproxy turns the client's HTTP/2 stream into an HTTP/1.1 request. Without a framing header the
    request says it has no body (RFC 9112: no Content-Length and no Transfer-Encoding = length 0), so a
    server cannot read the stream; with `transfer-encoding: chunked` the body arrives framed and ends
    with the last chunk. Changed in mitmproxy 12: the empty DATA frame that carries the client's END_STREAM
    is no longer written as a second last chunk (11.0.2 did). mitmproxy still writes any other empty DATA
    frame as a zero-length chunk, so cursor-byok's stream tee drops empty chunks: an empty frame
    mid-stream cannot end a body."""
    received = bytearray()

    async def scenario():
        head_seen, hop_closed = asyncio.Event(), asyncio.Event()

        async def handle(reader, writer):
            received.extend(await reader.readuntil(b"\r\n\r\n"))
            head_seen.set()
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/connect+proto\r\ntransfer-encoding: chunked\r\n\r\n")
            try:
                while True:
                    data = await reader.read(65536)
                    if not data:
                        break
                    received.extend(data)
            finally:
                writer.close()
                hop_closed.set()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        proxy = Bare(tmp_path, upstream.port, finding_stream="true", finding_duplex="true",
                     finding_loopback=f"127.0.0.1:{port}", **({"finding_chunked": "true"} if chunked else {}))
        try:
            conn = await proxy.connect()
            stream = await conn.request(HEADERS)
            await stream.send(RUN_REQUEST)
            await until(lambda: head_seen.is_set())
            await until(lambda: RUN_REQUEST[5:15] in received)
            await stream.end()
            if chunked:  # the end's last chunk arrives before the reset is sent
                await until(lambda: received.endswith(b"0\r\n\r\n"))
            stream.reset()
            await conn.close()
            await until(hop_closed.is_set)  # everything mitmproxy forwarded has arrived
        finally:
            proxy.stop()
            server.close()

    run(scenario())
    head, _, body = bytes(received).partition(b"\r\n\r\n")
    lower = head.lower()
    if chunked:
        assert b"transfer-encoding: chunked" in lower
        assert body == b"%x\r\n%s\r\n0\r\n\r\n" % (len(RUN_REQUEST), RUN_REQUEST)
    else:
        assert b"content-length" not in lower and b"transfer-encoding" not in lower
        assert body == RUN_REQUEST  # raw bytes after a head that announced no body, and no end marker
