"""The Cursor-like Agent client over HTTP/2: `agent.v1.AgentService/Run`, Cursor's default transport.

One Connect bidi stream per run: the request stream carries `AgentClientMessage` envelopes (the
run_request first, then KV results, exec results, heartbeats, actions), the response stream
`AgentServerMessage` envelopes and the end-stream. No BidiAppend, no seqno: order is stream order.

It behaves like the IDE as an experiment saw it (docs/architecture.md): the request side stays open
until the response ended, then ends cleanly. Blob store, KV answers, exec and query handlers are
the RunSSE client's (`CursorClient`); replies (`append_soon`) go into the run's request stream, so
the executor and scripted queries work unchanged. It connects through the proxy (CONNECT, TLS with
the proxy's CA, ALPN h2) or straight to a URL (e.g. the reverse listener).
"""

from __future__ import annotations

import asyncio
import ssl
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

import h2.errors

from byok.wire import connect
from byok.transports.h2conn import H2Connection, H2Error, H2Stream
from byok.proto import agent_pb2 as apb

from .client import CursorClient, Frame, RunResult, UnexpectedAnswer

RUN = "/agent.v1.AgentService/Run"
AGENT_URL = "https://agentn.api5.cursor.sh"


@dataclass
class H2CursorClient(CursorClient):
    base_url: str = AGENT_URL
    end_request_after_response: bool = True
    """Like the IDE: end the request side once the response ended (False: leave it open)."""
    extra_headers: dict[str, str] = field(default_factory=dict)
    user_agent: str = "connect-es/1.6.1"

    def __post_init__(self) -> None:
        super().__post_init__()
        self._conn: H2Connection | None = None
        self._conn_lock = asyncio.Lock()
        self._streams: dict[str, H2Stream] = {}
        self._send_locks: dict[str, asyncio.Lock] = {}
        self.responses: dict[str, list[tuple[str, str]]] = {}
        """request_id -> the response headers of its Run."""
        self.sent: dict[str, bytearray] = {}
        self.received: dict[str, bytearray] = {}
        """request_id -> every request / response body byte of its Run, as sent and received."""

    async def aclose(self) -> None:
        await super().aclose()
        if self._conn is not None:
            await self._conn.close()

    async def connection(self) -> H2Connection:
        async with self._conn_lock:
            if self._conn is None or self._conn.closed:
                url = urlsplit(self.base_url)
                context = ssl.create_default_context(cafile=self.ca_file) if self.ca_file \
                    else ssl.create_default_context()
                proxy = auth = None
                if self.proxy:
                    p = urlsplit(self.proxy)
                    proxy = (p.hostname, p.port or 8080)
                    if p.username is not None:
                        auth = (unquote(p.username), unquote(p.password or ""))
                self._conn = await H2Connection.open(url.hostname, url.port or 443, ssl_context=context,
                                                     proxy=proxy, proxy_auth=auth, timeout_s=10.0)
            return self._conn

    # ---- the request stream ------------------------------------------------------------------------

    def append_soon(self, request_id: str, message: apb.AgentClientMessage, delay: float = 0.0) -> None:
        """Send a client message on the run's request stream (in call order after `delay`)."""

        async def send() -> None:
            if delay:
                await asyncio.sleep(delay)
            await self.send(request_id, message)

        task = asyncio.get_running_loop().create_task(send())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def send(self, request_id: str, message: apb.AgentClientMessage, *, raw: bytes | None = None) -> None:
        """One envelope on the request stream; dropped (recorded as such) once the stream is gone."""
        stream = self._streams.get(request_id)
        self._frames.setdefault(request_id, []).append(Frame("up", time.monotonic(), message))
        if stream is None or stream.local_ended:
            return
        async with self._send_locks.setdefault(request_id, asyncio.Lock()):
            data = raw if raw is not None else connect.encode_envelope(message.SerializeToString())
            try:
                await stream.send(data)
                self.sent.setdefault(request_id, bytearray()).extend(data)
            except H2Error:
                pass  # the stream ended or was reset meanwhile: the IDE drops late replies too

    async def append(self, request_id, message, *, seqno=None, body=None):
        """There are no appends on Run: the message goes on the stream (`seqno` has no meaning)."""
        if body is not None:
            raise ValueError("a Run has no BidiAppend bodies")
        await self.send(request_id, message)

    async def cancel(self, request_id: str, reason: str = "") -> None:
        """`conversation_action.cancel_action` on the stream (the stop button)."""
        action = apb.ConversationAction(cancel_action=apb.CancelAction(reason=reason) if reason else apb.CancelAction())
        await self.send(request_id, apb.AgentClientMessage(conversation_action=action))

    def reset(self, request_id: str, *, with_end: bool = False) -> None:
        """Reset the Run stream (RST_STREAM CANCEL); `with_end`: END_STREAM and RST_STREAM in one write."""
        stream = self._streams.get(request_id)
        if stream is not None:
            (stream.end_and_reset if with_end else stream.reset)(h2.errors.ErrorCodes.CANCEL)

    async def end_request(self, request_id: str) -> None:
        stream = self._streams.get(request_id)
        if stream is not None and not stream.local_ended:
            async with self._send_locks.setdefault(request_id, asyncio.Lock()):
                try:
                    await stream.end()
                except H2Error:
                    pass

    # ---- a whole run ---------------------------------------------------------------------------------

    async def run(
        self,
        run_request: apb.AgentRunRequest,
        *,
        request_id: str | None = None,
        send_run_request: bool = True,
        run_request_delay_s: float = 0.0,
        on_frame: Callable[[Frame], Awaitable[None] | None] | None = None,
        first_messages: list[apb.AgentClientMessage] | None = None,
    ) -> RunResult:
        """Open a Run stream (x-request-id = request_id), send the run_request, serve KV, execs and
        queries until the end-stream; then end the request side. A stream that ends without an
        end-stream frame, or is reset, raises H2Error; an answer that is not a Connect stream
        UnexpectedAnswer."""
        request_id = request_id or str(uuid.uuid4())
        frames = self._frames.setdefault(request_id, [])
        first_frame = len(frames)
        conn = await self.connection()
        url = urlsplit(self.base_url)
        headers = [(":method", "POST"), (":scheme", "https"), (":authority", url.netloc), (":path", RUN),
                   ("content-type", "application/connect+proto"), ("connect-protocol-version", "1"),
                   ("user-agent", self.user_agent), ("x-request-id", request_id)]
        if self.client_version:
            headers.append(("x-cursor-client-version", self.client_version))
        headers += list(self.extra_headers.items())
        stream = self._streams[request_id] = await conn.request(headers)
        try:
            for message in first_messages or []:
                await self.send(request_id, message)
            if send_run_request:
                if run_request_delay_s:
                    await asyncio.sleep(run_request_delay_s)
                await self.send(request_id, apb.AgentClientMessage(run_request=run_request))
            response_headers = await stream.response
            self.responses[request_id] = response_headers
            status = int(dict(response_headers)[":status"])
            ctype = dict(response_headers).get("content-type", "")
            if not ctype.startswith("application/connect+"):
                head = b"".join([c async for c in stream.chunks()])[:200].decode("utf-8", "replace")
                raise UnexpectedAnswer(status, ctype, head)
            received = self.received.setdefault(request_id, bytearray())

            async def recorded_chunks():
                async for chunk in stream.chunks():
                    received.extend(chunk)
                    yield chunk

            ended, end_error = await self._receive(request_id, recorded_chunks(), on_frame)
            if not ended:
                raise AssertionError(f"Run ended without an end-stream frame (HTTP {status})")
            if self.end_request_after_response:
                await self.end_request(request_id)
            return RunResult(request_id, frames[first_frame:], end_error, status)
        finally:
            if self.end_request_after_response or stream.reset_code is not None:
                self._streams.pop(request_id, None)
