"""A small asyncio HTTP/2 client on the `h2` state machine: full-duplex streams.

What neither httpx nor httpcore offers: a stream whose request body keeps going while its response
streams back (Connect bidi streaming, `agent.v1.AgentService/Run`). Used by the relay that carries a
Cursor-model Run back through mitmproxy, and by the HTTP/2 Cursor-like client (`byok.cli.h2client`).

One `H2Connection` per TCP connection (optionally tunnelled with CONNECT through an HTTP proxy, then
TLS with ALPN h2); many `H2Stream`s on it. Flow control: received data is acknowledged as it is
read; sends wait for the peer's window. No server push, no priorities.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator, Sequence

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

Headers = list[tuple[str, str]]
WINDOW = 16 * 1024 * 1024
"""Receive window per stream and for the connection: a fast sender is never held up by us."""


class H2Error(Exception):
    """The connection or a stream failed (reset, closed, refused CONNECT, no h2 in ALPN)."""


class StreamReset(H2Error):
    def __init__(self, code: int) -> None:
        try:
            name = h2.errors.ErrorCodes(code).name
        except ValueError:
            name = str(code)
        super().__init__(f"stream reset by peer ({name})")
        self.code = code


class H2Stream:
    def __init__(self, conn: "H2Connection", stream_id: int) -> None:
        self.conn = conn
        self.id = stream_id
        self.response: asyncio.Future[Headers] = asyncio.get_running_loop().create_future()
        self.trailers: Headers | None = None
        self._data: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()
        self.ended = False
        """The peer ended its side (END_STREAM)."""
        self.local_ended = False
        self.reset_code: int | None = None

    @property
    def status(self) -> int | None:
        if not self.response.done() or self.response.exception() is not None:
            return None
        return int(dict(self.response.result())[":status"])

    async def send(self, data: bytes, *, end_stream: bool = False) -> None:
        await self.conn._send_data(self.id, data, end_stream)

    async def end(self) -> None:
        """End our side of the stream (the request body is complete)."""
        await self.conn._end(self.id)

    def reset(self, code: int = h2.errors.ErrorCodes.CANCEL) -> None:
        self.conn._reset(self.id, code)

    def end_and_reset(self, code: int = h2.errors.ErrorCodes.CANCEL) -> None:
        """END_STREAM and RST_STREAM in one write: what an aborting client often sends."""
        self.conn._end_and_reset(self.id, code)

    async def chunks(self) -> AsyncIterator[bytes]:
        """Response body chunks until the peer ends the stream; StreamReset/H2Error if it fails."""
        while True:
            item = await self._data.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    # called by the connection's reader
    def _feed(self, item: bytes | BaseException | None) -> None:
        if item is None:
            self.ended = True
        self._data.put_nowait(item)

    def _fail(self, error: BaseException) -> None:
        if not self.response.done():
            self.response.set_exception(error)
            self.response.exception()  # retrieved: a stream nobody awaits must not warn
        self._data.put_nowait(error)


class H2Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self._h2 = h2.connection.H2Connection(config)
        self._reader = reader
        self._writer = writer
        self._streams: dict[int, H2Stream] = {}
        self._window = asyncio.Event()
        self._closed: H2Error | None = None
        self._h2.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: WINDOW,
                                         h2.settings.SettingCodes.ENABLE_PUSH: 0})
        self._h2.initiate_connection()
        self._h2.increment_flow_control_window(WINDOW - 65535)
        self._flush()
        self._task = asyncio.get_running_loop().create_task(self._read_forever(), name="h2 reader")

    @classmethod
    async def open(cls, host: str, port: int, *, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                   proxy: tuple[str, int] | None = None, proxy_auth: tuple[str, str] | None = None,
                   timeout_s: float = 10.0) -> "H2Connection":
        """TLS (ALPN h2) to host:port, directly or through an HTTP proxy's CONNECT tunnel."""
        ssl_context.set_alpn_protocols(["h2"])
        address = proxy or (host, port)
        reader, writer = await asyncio.wait_for(asyncio.open_connection(*address), timeout_s)
        try:
            if proxy is not None:
                await asyncio.wait_for(_connect_tunnel(reader, writer, host, port, proxy_auth), timeout_s)
            await asyncio.wait_for(writer.start_tls(ssl_context, server_hostname=server_hostname or host), timeout_s)
        except BaseException:
            writer.close()
            raise
        alpn = writer.get_extra_info("ssl_object").selected_alpn_protocol()
        if alpn != "h2":
            writer.close()
            raise H2Error(f"{host}:{port} did not negotiate HTTP/2 (ALPN {alpn!r})")
        return cls(reader, writer)

    @property
    def closed(self) -> bool:
        return self._closed is not None

    async def request(self, headers: Sequence[tuple[str, str]], *, end_stream: bool = False) -> H2Stream:
        """Open a stream with these headers (pseudo-headers first)."""
        if self._closed is not None:
            raise self._closed
        stream_id = self._h2.get_next_available_stream_id()
        stream = self._streams[stream_id] = H2Stream(self, stream_id)
        self._h2.send_headers(stream_id, list(headers), end_stream=end_stream)
        await self._drain()
        return stream

    async def close(self) -> None:
        if self._closed is None:
            self._closed = H2Error("connection closed")
            try:
                self._h2.close_connection()
                await self._drain()
            except (ConnectionError, h2.exceptions.ProtocolError):
                pass
        self._task.cancel()
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (ConnectionError, ssl.SSLError):
            pass

    # ---- sending -----------------------------------------------------------------------------------

    def _flush(self) -> None:
        data = self._h2.data_to_send()
        if data:
            self._writer.write(data)

    async def _drain(self) -> None:
        self._flush()
        await self._writer.drain()

    async def _send_data(self, stream_id: int, data: bytes, end_stream: bool) -> None:
        view = memoryview(data)
        while True:
            if self._closed is not None:
                raise self._closed
            try:
                window = min(self._h2.local_flow_control_window(stream_id), self._h2.max_outbound_frame_size)
                if window <= 0 and len(view):
                    self._window.clear()
                    await self._window.wait()
                    continue
                piece, view = view[:window], view[window:]
                last = not len(view)
                self._h2.send_data(stream_id, bytes(piece), end_stream=end_stream and last)
            except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError) as e:
                raise H2Error(f"stream {stream_id} is closed: {e}") from None
            await self._drain()
            if last:
                if end_stream:
                    self._local_end(stream_id)
                return

    async def _end(self, stream_id: int) -> None:
        try:  # the server may have answered and closed the stream first (e.g. a refusal)
            self._h2.end_stream(stream_id)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError) as e:
            raise H2Error(f"stream {stream_id} is closed: {e}") from None
        await self._drain()
        self._local_end(stream_id)

    def _local_end(self, stream_id: int) -> None:
        stream = self._streams.get(stream_id)
        if stream is not None:
            stream.local_ended = True
            if stream.ended:
                del self._streams[stream_id]

    def _reset(self, stream_id: int, code: int) -> None:
        self._forget_reset(stream_id)
        try:
            self._h2.reset_stream(stream_id, code)
        except h2.exceptions.StreamClosedError:
            return
        self._flush()

    def _forget_reset(self, stream_id: int) -> None:
        stream = self._streams.pop(stream_id, None)
        if stream is not None and not stream.ended:
            stream._fail(H2Error("stream reset by us"))

    def _end_and_reset(self, stream_id: int, code: int) -> None:
        self._forget_reset(stream_id)
        self._h2.end_stream(stream_id)
        self._h2.reset_stream(stream_id, code)
        self._flush()

    # ---- receiving ----------------------------------------------------------------------------------

    async def _read_forever(self) -> None:
        error: H2Error = H2Error("connection closed by peer")
        try:
            while True:
                data = await self._reader.read(65536)
                if not data:
                    break
                for event in self._h2.receive_data(data):
                    self._on_event(event)
                self._flush()
        except (ConnectionError, ssl.SSLError, h2.exceptions.ProtocolError) as e:
            error = H2Error(f"HTTP/2 connection failed: {e}")
        except asyncio.CancelledError:
            error = H2Error("connection closed")
        self._closed = self._closed or error
        self._window.set()
        for stream in self._streams.values():
            if not stream.ended:
                stream._fail(self._closed)

    def _on_event(self, event: h2.events.Event) -> None:
        stream = self._streams.get(getattr(event, "stream_id", 0) or 0)
        if isinstance(event, h2.events.ResponseReceived) and stream is not None:
            if not stream.response.done():
                stream.response.set_result(list(event.headers))
        elif isinstance(event, h2.events.DataReceived):
            if event.flow_controlled_length:
                self._h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            if stream is not None:
                stream._feed(event.data)
        elif isinstance(event, h2.events.TrailersReceived) and stream is not None:
            stream.trailers = list(event.headers)
        elif isinstance(event, h2.events.StreamEnded) and stream is not None:
            stream._feed(None)
            if stream.local_ended:
                del self._streams[stream.id]
        elif isinstance(event, h2.events.StreamReset) and stream is not None:
            stream.reset_code = event.error_code
            stream._fail(StreamReset(event.error_code))
            self._streams.pop(stream.id, None)
            self._window.set()
        elif isinstance(event, h2.events.WindowUpdated):
            self._window.set()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._closed = H2Error(f"connection terminated by peer (error {event.error_code})")
            for s in self._streams.values():
                if not s.ended:
                    s._fail(self._closed)
            self._window.set()


async def _connect_tunnel(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, port: int,
                          proxy_auth: tuple[str, str] | None) -> None:
    head = f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n"
    if proxy_auth is not None:
        token = base64.b64encode(f"{proxy_auth[0]}:{proxy_auth[1]}".encode()).decode()
        head += f"Proxy-Authorization: Basic {token}\r\n"
    writer.write(head.encode() + b"\r\n")
    await writer.drain()
    response = await reader.readuntil(b"\r\n\r\n")
    status = response.split(b" ", 2)[1] if b" " in response else b"?"
    if status != b"200":
        raise H2Error(f"proxy refused CONNECT {host}:{port}: {response.splitlines()[0].decode('latin-1')}")
