"""The embedded loopback HTTP/1.1 server that streams local RunSSE bodies.

mitmproxy cannot stream a response an addon builds itself (`Response.make` sends one piece), so a
local RunSSE flow is pointed at this server; mitmproxy streams its chunked body to Cursor like any
upstream response. Only mitmproxy connects here (127.0.0.1, ephemeral port). The run is found by the
`x-byok-request-id` header the backend adds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from .agent import connect
from .agent.errors import RunCanceled
from .agent.run import Run

log = logging.getLogger("byok.stream")

RUN_HEADER = "x-byok-request-id"


class StreamServer:
    def __init__(self, lookup: Callable[[str], Run | None]) -> None:
        self._lookup = lookup
        self._server: asyncio.base_events.Server | None = None
        self.port = 0
        self._conns: set[asyncio.Task] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting; give open streams `timeout` to write their end-stream, then cut them."""
        if self._server is not None:
            self._server.close()
        if self._conns:
            _, pending = await asyncio.wait(list(self._conns), timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1)
        await asyncio.sleep(0.2)  # let mitmproxy forward the last bytes before the loop ends

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                headers = _parse_headers(head)
                await _drain_body(reader, headers)
                request_id = headers.get(RUN_HEADER, "")
                run = self._lookup(request_id)
                if run is None or run.stream_attached:
                    # never a bare answer: every RunSSE the proxy took ends with an end-stream
                    error = connect.ConnectError(connect.Code.NOT_FOUND, f"no run for request {request_id} any more") \
                        if run is None else connect.ConnectError(
                            connect.Code.ALREADY_EXISTS, f"request {request_id} already has a RunSSE stream")
                    log.warning("[%s] RunSSE answered without a run: %s", request_id, error.message)
                    body = connect.encode_end_stream(error)
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/connect+proto\r\n"
                                 b"content-length: %d\r\n\r\n%s" % (len(body), body))
                    await writer.drain()
                    continue
                await self._stream(run, writer)
                del run  # a kept-alive connection must not hold the finished run until it closes
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:
            pass  # shutdown after the grace period; re-raising only adds asyncio noise on 3.11
        finally:
            writer.close()
            self._conns.discard(task)

    async def _stream(self, run: Run, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/connect+proto\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        run.attach_stream()
        try:
            async for chunk in run.frames():
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        except ConnectionError:
            log.info("[%s] RunSSE client went away", run.request_id)
            run.cancel(RunCanceled("the client closed the RunSSE stream"))
            raise


def _parse_headers(head: bytes) -> dict[str, str]:
    lines = head.decode("latin-1").split("\r\n")[1:]
    return {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines if ":" in line)}


async def _drain_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> None:
    if "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                return
