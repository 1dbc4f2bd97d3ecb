"""The embedded loopback HTTP/1.1 server that streams local RunSSE bodies and serves HTTP/2 Runs.

mitmproxy cannot stream a response an addon builds itself (`Response.make` sends one piece), so a
local RunSSE flow is pointed at this server; mitmproxy streams its chunked body to Cursor like any
upstream response. Only mitmproxy connects here (127.0.0.1, ephemeral port). The run is found by the
`x-byok-request-id` header the backend adds.

An HTTP/2 `Run` (bidi) arrives here as an HTTP/1.1 request whose chunked body streams while the
response streams back (`x-byok-run` names it; mitmproxy translates the client's HTTP/2 stream). The
backend adds `transfer-encoding: chunked` to that request: without it mitmproxy would forward an
HTTP/1.1 request with no body framing at all. The Run transport (`run_h2.py`) gets the body
as an async iterator of chunks and a `ChunkedResponse` to answer into.

Only the proxy may ask: any local process can connect to 127.0.0.1, and one that knows a live
request id could otherwise take that run's stream (bypassing the per-user check of the transports).
Every request must carry `x-byok-auth`, a proof of this process's secret (random at start, never
logged) bound to what the request names (`LoopbackSecret`); one without it is refused before anything
is looked up. The proxy adds the proof to each flow it points here, and removes it again with the
other internal headers when the response starts (loopback.py), so a proof in a flow file or mitmweb
opens nothing but that one, already used, request.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable

from ..wire import connect
from ..wire.errors import RunCanceled
from ..agent.run import Run

log = logging.getLogger("byok.stream")

RUN_HEADER = "x-byok-request-id"
RUN_STREAM_HEADER = "x-byok-run"
CALL_HEADER = "x-byok-call"
"""A one-shot server stream (transports/one_shot.py): the token of a call registered with `expect_call`."""
CALL_TTL_S = 60.0
AUTH_HEADER = "x-byok-auth"
"""Proof of the process's secret for the request's naming header (LoopbackSecret.proof)."""
NAMING_HEADERS = (CALL_HEADER, RUN_STREAM_HEADER, RUN_HEADER)
"""What a request to this server names, in the order `_handle` dispatches on them."""

CallServe = Callable[["ChunkedResponse"], Awaitable[None]]
"""Writes one streamed answer (status, chunks, end); cancelled when the client goes away."""

RunStreamHandler = Callable[[str, "ChunkedBody", "ChunkedResponse"], Awaitable[None]]
"""(token from x-byok-run, request body, response) -> serves one HTTP/2 Run."""


class MalformedRequest(Exception):
    """A request this server cannot read (a bad chunk size or content-length): answered 400, closed."""


class BodyAborted(Exception):
    """The request body stopped inside a chunk: mitmproxy closed the connection (client reset)."""


class ChunkedBody:
    """The streaming request body: `async for chunk in body` until the final chunk. `ended` says
    the body ended cleanly; a connection closed mid-body raises BodyAborted."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader
        self.ended = False

    def __aiter__(self):
        return self

    async def __anext__(self) -> bytes:
        if self.ended:
            raise StopAsyncIteration
        try:
            while True:
                size = _number((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16, "chunk size")
                if size == 0:
                    await self._reader.readuntil(b"\r\n")  # no trailers from mitmproxy
                    self.ended = True
                    raise StopAsyncIteration
                data = await self._reader.readexactly(size + 2)
                return data[:-2]
        except (asyncio.IncompleteReadError, ConnectionError, MalformedRequest, asyncio.LimitOverrunError) as e:
            raise BodyAborted(f"request body cut: {type(e).__name__}") from None


class ChunkedResponse:
    """The response side: a status line and headers once, then chunks, then the last chunk."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self.started = False
        self.finished = False

    def start(self, status: int = 200, headers: list[tuple[str, str]] | None = None) -> None:
        head = [f"HTTP/1.1 {status} {'OK' if status == 200 else 'Status'}"]
        for name, value in headers or [("content-type", "application/connect+proto")]:
            if name.lower() not in ("transfer-encoding", "content-length", "connection"):
                head.append(f"{name}: {value}")
        head.append("transfer-encoding: chunked")
        self._writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        self.started = True

    async def write(self, data: bytes) -> None:
        if data:
            self._writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await self._writer.drain()

    async def end(self) -> None:
        if not self.finished:
            self.finished = True
            self._writer.write(b"0\r\n\r\n")
            await self._writer.drain()

    def abort(self) -> None:
        """Cut the connection mid-body: mitmproxy resets the client's stream."""
        self.finished = True
        self._writer.transport.abort()


class LoopbackSecret:
    """This process's secret for its loopback server, made at start and never logged or shown. A
    request proves it with an HMAC of the header that names what it wants and that header's value."""

    def __init__(self) -> None:
        self._key = secrets.token_urlsafe(32).encode()

    def __repr__(self) -> str:
        return "LoopbackSecret(<hidden>)"

    def proof(self, header: str, value: str) -> str:
        return hmac.new(self._key, f"{header.lower()}:{value}".encode(), hashlib.sha256).hexdigest()

    def admits(self, headers: dict[str, str]) -> bool:
        """Whether a request (its lowercased headers) proves the secret for what it names."""
        naming = next((h for h in NAMING_HEADERS if h in headers), None)
        if naming is None:
            return False
        expected = self.proof(naming, headers[naming]).encode()
        return hmac.compare_digest(headers.get(AUTH_HEADER, "").encode("latin-1"), expected)


class StreamServer:
    def __init__(self, lookup: Callable[[str], Run | None], run_stream: RunStreamHandler | None = None) -> None:
        self._lookup = lookup
        self._run_stream = run_stream
        self.secret = LoopbackSecret()
        self._server: asyncio.base_events.Server | None = None
        self.port = 0
        self._conns: set[asyncio.Task] = set()
        self._calls: dict[str, tuple[float, CallServe]] = {}
        self.stopping = asyncio.Event()
        """Set when the server stops: long-lived answers (the dashboard's live stream) end at once."""

    def expect_call(self, token: str, serve: CallServe) -> None:
        """The next request carrying `x-byok-call: token` is answered by `serve`."""
        now = asyncio.get_running_loop().time()
        for stale in [t for t, (at, _) in self._calls.items() if now - at > CALL_TTL_S]:
            del self._calls[stale]  # its flow failed before it reached this server
        self._calls[token] = (now, serve)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting; give open streams `timeout` to write their end-stream, then cut them."""
        self.stopping.set()
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
                if not self.secret.admits(headers):  # before any lookup: a refused request learns nothing
                    peer = writer.get_extra_info("peername")
                    log.warning("stream server: refused a request without the proxy's proof (from %s)",
                                f"{peer[0]}:{peer[1]}" if peer else "?")
                    writer.write(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    return
                if CALL_HEADER in headers:
                    await _drain_body(reader, headers)
                    await self._serve_call(headers[CALL_HEADER], reader, ChunkedResponse(writer))
                    return  # one call per connection: its end is the connection's end
                if RUN_STREAM_HEADER in headers and self._run_stream is not None:
                    await self._run_stream(headers[RUN_STREAM_HEADER], ChunkedBody(reader), ChunkedResponse(writer))
                    return  # one Run per connection (mitmproxy does not reuse HTTP/2-to-1 connections)
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
        except (MalformedRequest, asyncio.LimitOverrunError) as e:
            log.warning("stream server: unreadable request (%s); answered 400", e)
            writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        finally:
            writer.close()
            self._conns.discard(task)

    async def _serve_call(self, token: str, reader: asyncio.StreamReader, response: ChunkedResponse) -> None:
        """Serve one registered call; the client leaving (mitmproxy closes this connection) cancels it
        at once, so its provider request closes too."""
        _, serve = self._calls.pop(token, (0.0, None))
        if serve is None:
            body = connect.encode_end_stream(connect.ConnectError(connect.Code.NOT_FOUND, "no such call any more"))
            response.start(200, [("content-type", "application/connect+proto")])
            await response.write(body)
            await response.end()
            return
        serving = asyncio.ensure_future(serve(response))
        gone = asyncio.ensure_future(reader.read(1))  # mitmproxy sends nothing more until the response ends
        try:
            await asyncio.wait([serving, gone], return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not serving.done():
                serving.cancel()
                await asyncio.wait([serving])
            gone.cancel()
        if gone.done() and not gone.cancelled():
            gone.exception()  # retrieved: a reset connection is the client leaving, not an error
        error = None if serving.cancelled() else serving.exception()
        if isinstance(error, ConnectionError):
            log.debug("one-shot call: the client went away while it was answered (%s)", error)
        elif error is not None:
            log.error("one-shot call failed", exc_info=error)

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
        await reader.readexactly(_number(headers["content-length"], 10, "content-length"))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = _number((await reader.readuntil(b"\r\n")).split(b";")[0], 16, "chunk size")
            await reader.readexactly(size + 2)
            if size == 0:
                return


def _number(text: str | bytes, base: int, what: str) -> int:
    """A chunk size (hex) or content-length (decimal), strictly: digits only (int() would also take
    signs, underscores and 0x)."""
    raw = (text.decode("latin-1") if isinstance(text, bytes) else text).strip()
    digits = "0123456789abcdefABCDEF" if base == 16 else "0123456789"
    if not raw or len(raw) > 16 or any(c not in digits for c in raw):
        raise MalformedRequest(f"bad {what} {raw[:40]!r}")
    return int(raw, base)
