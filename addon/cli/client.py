"""A Cursor-like Agent client: speaks RunSSE + BidiAppend through the proxy like the IDE does.

It opens the RunSSE stream, posts BidiAppends concurrently (each its own HTTP request, ordered only
by append_seqno), keeps a blob store (verifies sha256(data) == blob_id on every SET, then ACKs it),
answers KV GETs from that store, hands exec requests and interaction queries to pluggable handlers,
and records every frame both ways. The test suite drives the proxy with it, and `cursor-byok smoke`
uses it against a running proxy.
"""

from __future__ import annotations

import asyncio
import contextvars
import gzip
import hashlib
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import httpx

from byok.wire import connect
from byok.agent.cursor.bidi import encode_bidi_append
from byok.proto import agent_pb2 as apb, aiserver_pb2 as spb

RUN_SSE = "/agent.v1.AgentService/RunSSE"
BIDI_APPEND = "/aiserver.v1.BidiService/BidiAppend"


class BlobMismatch(AssertionError):
    pass


class UnexpectedAnswer(Exception):
    """RunSSE was not answered with a Connect stream (e.g. mitmproxy's 502 page when a run on a model
    the proxy does not know went upstream and Cursor's backend was unreachable)."""

    def __init__(self, status: int, content_type: str, excerpt: str) -> None:
        self.status = status
        self.content_type = content_type
        self.excerpt = excerpt
        super().__init__(f"RunSSE answered HTTP {status} ({content_type or 'no content type'}): {excerpt}")


@dataclass
class Frame:
    direction: str  # "down" (server -> client) or "up"
    t: float
    message: object  # AgentServerMessage / AgentClientMessage, or the end-stream ConnectError|None
    flags: int = 0
    seqno: int | None = None

    @property
    def kind(self) -> str:
        if self.flags & connect.FLAG_END_STREAM:
            return "end_stream"
        kind = self.message.WhichOneof("message")
        sub = getattr(self.message, kind)
        inner = sub.WhichOneof("message") if hasattr(sub, "WhichOneof") and kind in (
            "interaction_update", "kv_server_message", "kv_client_message") else None
        return f"{kind}.{inner}" if inner else kind


@dataclass
class RunResult:
    request_id: str
    frames: list[Frame]
    end_error: connect.ConnectError | None
    status: int

    def down(self, kind_prefix: str = "") -> list[Frame]:
        return [f for f in self.frames if f.direction == "down" and f.kind.startswith(kind_prefix)]

    def kinds(self, *, skip_heartbeats: bool = True) -> list[str]:
        return [f.kind for f in self.frames if f.direction == "down"
                and not (skip_heartbeats and f.kind == "interaction_update.heartbeat")]

    def checkpoints(self) -> list[apb.ConversationStateStructure]:
        return [f.message.conversation_checkpoint_update for f in self.down("conversation_checkpoint_update")]

    def text(self) -> str:
        return "".join(f.message.interaction_update.text_delta.text for f in self.down("interaction_update.text_delta"))


ExecHandler = Callable[["CursorClient", apb.ExecServerMessage], Awaitable[None]]
QueryHandler = Callable[["CursorClient", apb.InteractionQuery], Awaitable[None]]

_HANDLER_REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("handler_request_id")


def handler_request_id() -> str:
    """Inside an on_exec / on_query handler: the request_id of the run it serves (to append replies)."""
    return _HANDLER_REQUEST_ID.get()


@dataclass
class CursorClient:
    proxy: str | None
    """http://127.0.0.1:PORT of the proxy, or None to talk to `base_url` directly."""
    ca_file: str | None = None
    base_url: str = "https://api2.cursor.sh"
    http2: bool = False
    blobs: dict[bytes, bytes] = field(default_factory=dict)
    on_exec: ExecHandler | None = None
    on_query: QueryHandler | None = None
    client_version: str | None = None
    """Sent as `x-cursor-client-version` on RunSSE, as the IDE does."""
    ack_delay_s: float = 0.0
    ack_blobs: bool = True
    ack_gate: asyncio.Event | None = None
    """When set, blob ACKs wait until this event is set (tests what the server does meanwhile)."""
    corrupt_gets: bool = False
    """Answer KV GETs with data that does not hash to the id (tests the server's check)."""
    get_log: list[bytes] = field(default_factory=list)
    timeout_s: float = 60.0
    ack_log: list[tuple[float, bytes]] = field(default_factory=list)
    """(time, blob id) of every ACK sent."""
    append_form: str = "data"
    """Where appends carry the message: `data` (hex), `data_binary` (raw, newer clients) or `both`."""
    gzip_appends: bool = False
    """Send append bodies with `content-encoding: gzip`, as real clients do."""

    def __post_init__(self) -> None:
        verify: ssl.SSLContext | bool = True
        if self.ca_file:
            verify = ssl.create_default_context(cafile=self.ca_file)
        self._http = httpx.AsyncClient(
            proxy=self.proxy, verify=verify, http2=self.http2, trust_env=False,
            timeout=httpx.Timeout(self.timeout_s, connect=10.0),
        )
        self._seqno: dict[str, int] = {}
        self._frames: dict[str, list[Frame]] = {}
        self.append_headers: dict[str, dict[str, str]] = {}
        """Extra headers on every BidiAppend of a request (a subagent's X-Parent-Agent-Tool-Call-Id)."""
        self._tasks: set[asyncio.Task] = set()

    async def aclose(self) -> None:
        for task in list(self._tasks):
            await asyncio.gather(task, return_exceptions=True)
        await self._http.aclose()

    async def __aenter__(self) -> "CursorClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    # ---- appends --------------------------------------------------------------------------------

    def next_seqno(self, request_id: str) -> int:
        seqno = self._seqno.get(request_id, 0)
        self._seqno[request_id] = seqno + 1
        return seqno

    async def append(self, request_id: str, message: apb.AgentClientMessage, *, seqno: int | None = None,
                     body: bytes | None = None) -> httpx.Response:
        """POST one BidiAppend (seqno defaults to the next one for this request)."""
        if seqno is None:
            seqno = self.next_seqno(request_id)
        self._frames.setdefault(request_id, []).append(Frame("up", time.monotonic(), message, seqno=seqno))
        data = body if body is not None else encode_bidi_append(request_id, seqno, message, self.append_form)
        headers = {"content-type": "application/proto", "connect-protocol-version": "1",
                   **self.append_headers.get(request_id, {})}
        if self.gzip_appends:
            data = gzip.compress(data)
            headers["content-encoding"] = "gzip"
        return await self._http.post(self.base_url + BIDI_APPEND, content=data, headers=headers)

    def append_soon(self, request_id: str, message: apb.AgentClientMessage, delay: float = 0.0) -> None:
        """Fire an append concurrently (the IDE does not wait for one append before the next)."""
        seqno = self.next_seqno(request_id)

        async def send() -> None:
            if delay:
                await asyncio.sleep(delay)
            response = await self.append(request_id, message, seqno=seqno)
            if response.status_code != 200:
                raise AssertionError(f"BidiAppend seqno {seqno} -> {response.status_code} {response.text}")

        task = asyncio.get_running_loop().create_task(send())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def appends_sent(self) -> None:
        """Wait until every append fired with `append_soon` so far has been answered."""
        while self._tasks:
            await asyncio.wait(list(self._tasks))

    # ---- a whole run ------------------------------------------------------------------------------

    async def run(
        self,
        run_request: apb.AgentRunRequest,
        *,
        request_id: str | None = None,
        send_run_request: bool = True,
        run_request_delay_s: float = 0.0,
        on_frame: Callable[[Frame], Awaitable[None] | None] | None = None,
    ) -> RunResult:
        """Open RunSSE, send the run_request, serve KV/exec/queries until the end-stream."""
        request_id = request_id or str(uuid.uuid4())
        frames = self._frames.setdefault(request_id, [])
        first_frame = len(frames)  # a second run on the same request id reports only its own frames
        if send_run_request:
            self.append_soon(request_id, apb.AgentClientMessage(run_request=run_request), delay=run_request_delay_s)
        body = connect.encode_envelope(spb.BidiRequestId(request_id=request_id).SerializeToString())
        headers = {"content-type": "application/connect+proto", "connect-protocol-version": "1"}
        if self.client_version:
            headers["x-cursor-client-version"] = self.client_version
        async with self._http.stream("POST", self.base_url + RUN_SSE, content=body, headers=headers) as response:
            status = response.status_code
            content_type = response.headers.get("content-type", "")
            if status != 200 or not content_type.startswith("application/connect+proto"):
                raise UnexpectedAnswer(status, content_type, _excerpt(await response.aread()))
            ended, end_error = await self._receive(request_id, response.aiter_raw(), on_frame)
        if not ended:
            raise AssertionError("RunSSE ended without an end-stream frame")
        return RunResult(request_id, frames[first_frame:], end_error, status)

    async def _receive(
        self,
        request_id: str,
        chunks: AsyncIterator[bytes],
        on_frame: Callable[[Frame], Awaitable[None] | None] | None,
    ) -> tuple[bool, connect.ConnectError | None]:
        """Read a run's response stream (RunSSE or Run: the same Connect envelopes) to its end: each
        frame recorded, server messages served as they come, `on_frame` called. Returns whether an
        end-stream frame came, and its error."""
        frames = self._frames.setdefault(request_id, [])
        decoder = connect.EnvelopeDecoder()
        end_error: connect.ConnectError | None = None
        ended = False
        async for chunk in chunks:
            for frame in decoder.feed(chunk):
                if ended:
                    raise AssertionError("bytes after the end-stream frame")
                if frame.end_stream:
                    end_error = connect.parse_end_stream(frame.payload)
                    f = Frame("down", time.monotonic(), end_error, frame.flags)
                    ended = True
                else:
                    f = Frame("down", time.monotonic(), apb.AgentServerMessage.FromString(frame.payload), frame.flags)
                    await self._handle(request_id, f.message)
                frames.append(f)
                if on_frame is not None:
                    result = on_frame(f)
                    if asyncio.iscoroutine(result):
                        await result
        decoder.close()
        return ended, end_error

    async def _handle(self, request_id: str, message: apb.AgentServerMessage) -> None:
        kind = message.WhichOneof("message")
        if kind == "kv_server_message":
            kv = message.kv_server_message
            if kv.WhichOneof("message") == "set_blob_args":
                args = kv.set_blob_args
                if hashlib.sha256(args.blob_data).digest() != args.blob_id:
                    raise BlobMismatch(f"SET blob {args.blob_id.hex()} does not hash to its id")
                self.blobs[args.blob_id] = args.blob_data
                if self.ack_blobs:
                    self._ack(request_id, kv.id, args.blob_id)
            else:
                blob_id = kv.get_blob_args.blob_id
                self.get_log.append(blob_id)
                result = apb.GetBlobResult()
                if blob_id in self.blobs:
                    result.blob_data = self.blobs[blob_id] + (b" tampered" if self.corrupt_gets else b"")
                else:
                    result.error.message = f"blob {blob_id.hex()} not found"
                self.append_soon(request_id, apb.AgentClientMessage(
                    kv_client_message=apb.KvClientMessage(id=kv.id, get_blob_result=result)))
        elif kind == "exec_server_message" and self.on_exec is not None:
            self._spawn_handler(request_id, self.on_exec(self, message.exec_server_message))
        elif kind == "interaction_query" and self.on_query is not None:
            self._spawn_handler(request_id, self.on_query(self, message.interaction_query))

    def _spawn_handler(self, request_id: str, coro: Awaitable[None]) -> None:
        # The handler task sees its run's request_id through handler_request_id().
        context = contextvars.copy_context()
        context.run(_HANDLER_REQUEST_ID.set, request_id)
        task = asyncio.get_running_loop().create_task(coro, context=context)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _ack(self, request_id: str, kv_id: int, blob_id: bytes) -> None:
        message = apb.AgentClientMessage(
            kv_client_message=apb.KvClientMessage(id=kv_id, set_blob_result=apb.SetBlobResult()))
        if self.ack_gate is None:
            self.ack_log.append((time.monotonic(), blob_id))
            self.append_soon(request_id, message, delay=self.ack_delay_s)
            return
        seqno = self.next_seqno(request_id)  # the gap holds every later append back too, as in the IDE

        async def after_gate() -> None:
            await self.ack_gate.wait()
            self.ack_log.append((time.monotonic(), blob_id))
            await self.append(request_id, message, seqno=seqno)

        task = asyncio.get_running_loop().create_task(after_gate())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def frames(self, request_id: str) -> list[Frame]:
        return self._frames.get(request_id, [])


def _excerpt(body: bytes, limit: int = 200) -> str:
    """The start of an unexpected body as one line: HTML pages reduced to their text."""
    import re

    text = body.decode("utf-8", errors="replace")
    text = re.sub(r"<(style|script)\b.*?</\1>", " ", text, flags=re.S | re.I)
    text = " ".join(re.sub(r"<[^>]+>", " ", text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def user_turn_request(
    text: str,
    *,
    model_id: str,
    conversation_id: str | None = None,
    state: apb.ConversationStateStructure | None = None,
    mode: int = apb.AGENT_MODE_AGENT,
    message_id: str | None = None,
    workspace: str | None = None,
) -> apb.AgentRunRequest:
    """A run_request with a user_message_action, as the IDE sends for a new message."""
    request = apb.AgentRunRequest(
        conversation_id=conversation_id or str(uuid.uuid4()),
        requested_model=apb.RequestedModel(model_id=model_id),
    )
    if state is not None:
        request.conversation_state.CopyFrom(state)
    else:
        request.conversation_state.SetInParent()
    action = request.action.user_message_action
    action.user_message.text = text
    action.user_message.message_id = message_id or str(uuid.uuid4())
    action.user_message.mode = mode
    env = action.request_context.env
    env.os_version = "linux 6.1"
    env.shell = "bash"
    if workspace:
        env.workspace_paths.append(workspace)
        env.terminals_folder = workspace + "/.terminals"
    env.time_zone = "UTC"
    return request


def resume_request(turn: apb.AgentRunRequest, state: apb.ConversationStateStructure) -> apb.AgentRunRequest:
    """A run_request with a resume_action, as the IDE sends to continue `turn`'s conversation from a
    checkpoint it received (e.g. one with a staged tool round, after the stream died): the same
    model and the turn's request context."""
    request = apb.AgentRunRequest(conversation_id=turn.conversation_id, requested_model=turn.requested_model)
    request.conversation_state.CopyFrom(state)
    request.action.resume_action.request_context.CopyFrom(turn.action.user_message_action.request_context)
    return request
