"""A fake Cursor agent host speaking HTTP/2 (TLS, ALPN h2), for Runs on Cursor's own models.

Reached like `fake_cursor.FakeCursor` through `redirect_upstream.py` (a `server_connect` remap; the
proxy runs with `ssl_insecure=true`). `POST /agent.v1.AgentService/Run` is answered as a bidi stream:

1. after the client's first message (the run_request): a KV SET (the client must ACK it) and a text delta;
2. after the next client message (the ACK): another text delta and the end-stream `{}`, then END_STREAM,
   while the client's request side is still open;
3. then it waits for the client's request end (or reset) and records it.

So the relay is proved full duplex: the answer's second half depends on a message the client sends
while the response streams. Every byte each way is kept per stream (`runs`). Any other path: 200.
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import h2.config
import h2.connection
import h2.events

from byok.wire import connect
from byok.agent.cursor import updates
from byok.proto import agent_pb2 as apb
from tests.support.fake_cursor import self_signed

BLOB = b"an official blob"


@dataclass
class SeenRun:
    headers: dict[str, str]
    request: bytearray = field(default_factory=bytearray)
    response: bytearray = field(default_factory=bytearray)
    messages: list[apb.AgentClientMessage] = field(default_factory=list)
    request_ended: bool = False
    reset: bool = False
    response_ended_at: float | None = None
    request_ended_at: float | None = None


class H2AgentHost:
    """A TLS (ALPN h2) server for agentn.api5.cursor.sh on 127.0.0.1 with its own event loop thread;
    a subclass answers each connection in `_connection`. Use `with`, or `start()` / `stop()`."""

    def __init__(self) -> None:
        self.port = 0
        self._dir = tempfile.TemporaryDirectory()
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()

    def start(self):
        cert, key = self_signed(Path(self._dir.name), "agentn.api5.cursor.sh")
        self._ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._ssl.load_cert_chain(cert, key)
        self._ssl.set_alpn_protocols(["h2"])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._started.wait(10)
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._dir.cleanup()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def main() -> None:
            server = await asyncio.start_server(self._connection, "127.0.0.1", 0, ssl=self._ssl)
            self.port = server.sockets[0].getsockname()[1]
            self._started.set()

        self._loop.run_until_complete(main())
        self._loop.run_forever()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class FakeH2Cursor(H2AgentHost):
    def __init__(self) -> None:
        super().__init__()
        self.runs: list[SeenRun] = []

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        conn.initiate_connection()
        writer.write(conn.data_to_send())
        streams: dict[int, tuple[SeenRun, connect.EnvelopeDecoder]] = {}

        def send(stream_id: int, run: SeenRun, payload: bytes, end: bool = False) -> None:
            run.response += payload
            conn.send_data(stream_id, payload, end_stream=end)

        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived):
                        headers = dict(event.headers)
                        if headers[":path"] != "/agent.v1.AgentService/Run":
                            conn.send_headers(event.stream_id, [(":status", "200"), ("content-type", "text/plain")])
                            conn.send_data(event.stream_id, b"upstream ok", end_stream=True)
                            continue
                        run = SeenRun(headers)
                        self.runs.append(run)
                        streams[event.stream_id] = (run, connect.EnvelopeDecoder())
                        conn.send_headers(event.stream_id, [(":status", "200"), ("content-type", "application/connect+proto"),
                                                            ("x-official", "yes")])
                    elif isinstance(event, h2.events.DataReceived):
                        conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                        if event.stream_id not in streams:
                            continue
                        run, decoder = streams[event.stream_id]
                        run.request += event.data
                        for frame in decoder.feed(event.data):
                            run.messages.append(apb.AgentClientMessage.FromString(frame.payload))
                            if len(run.messages) == 1:
                                blob_set = updates.kv_set(0, hashlib.sha256(BLOB).digest(), BLOB)
                                send(event.stream_id, run, connect.encode_envelope(blob_set.SerializeToString()))
                                send(event.stream_id, run, connect.encode_envelope(
                                    updates.text_delta("official ").SerializeToString()))
                            elif len(run.messages) == 2:
                                send(event.stream_id, run, connect.encode_envelope(
                                    updates.text_delta("answer").SerializeToString()))
                                send(event.stream_id, run, connect.encode_end_stream(), end=True)
                                run.response_ended_at = time.monotonic()
                    elif isinstance(event, h2.events.StreamEnded) and event.stream_id in streams:
                        run = streams[event.stream_id][0]
                        run.request_ended, run.request_ended_at = True, time.monotonic()
                    elif isinstance(event, h2.events.StreamReset) and event.stream_id in streams:
                        streams[event.stream_id][0].reset = True
                writer.write(conn.data_to_send())
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()
