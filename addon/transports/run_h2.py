"""The HTTP/2 `agent.v1.AgentService/Run` transport: a bidi Connect stream around the same engine.

A Run's route can only be known from its first message (the run_request), but mitmproxy fixes a
streamed request's route at its headers (docs/architecture.md). So in intercept mode every HTTP/2
Run goes to the embedded loopback server, and this transport reads the stream up to the
run_request, asks the runtime for the route, and then either

- LOCAL: feeds the run's client messages to the runtime in stream order (the stream position is the
  ordering number the runtime's inbox wants) and streams the run's frames back: the same `Run`
  RunSSE + BidiAppend feed, so turn, tools, checkpoints, ACK barrier, errors, cancel and resume are
  the engine's; or
- UPSTREAM (a Cursor model): relays the stream, byte for byte both ways, to the real host *back
  through mitmproxy* (CONNECT to the listener the client came in on, or straight to a reverse-mode
  listener), so `--mode upstream:`, `server_connect` remaps and `ssl_insecure` apply as to any other
  flow; the relay leg is a flow of its own (marked with `x-byok-relay`) that the recorder tees.

Ends: the run's end-stream envelope is the last response bytes, then the response ends (mitmproxy
forwards that end at once, see `duplex.py`). Cursor ends its request only after that; a request that
ends, or breaks, while the response is still running is the client leaving, and cancels the run
(every local run needs the client's blob ACKs, so a half-closed client could never finish one).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import ssl
import time
import uuid
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError
from mitmproxy import ctx, http

from byok.proto import agent_pb2 as apb

from ..wire import connect
from ..wire.errors import AccessDenied, ProtocolError, RunCanceled
from ..agent.cursor.bidi import BEFORE_RUN_REQUEST
from ..agent.run import PARENT_TOOL_CALL_HEADER
from ..agent.runtime import Route, Runtime
from .. import duplex
from ..access import authenticated_user
from ..router import RUN_PATH
from .h2conn import H2Connection, H2Error
from .loopback import point_at_loopback
from .stream_server import RUN_STREAM_HEADER, BodyAborted, ChunkedBody, ChunkedResponse

log = logging.getLogger("byok.run_h2")

RELAY_HEADER = "x-byok-relay"
CONNECT_PROTO = "application/connect+proto"
REQUEST_END_GRACE_S = 30.0
"""After the response ended, how long to wait for the client to end its request side."""
PENDING_TTL_S = 60.0
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te",
                        "host", "content-length", "http2-settings"})


@dataclass(frozen=True)
class RelayTarget:
    """How a Cursor-model Run gets back into mitmproxy on its way to Cursor."""

    listener: tuple[str, int]
    """The mitmproxy listener the client used."""
    tunnel: bool
    """CONNECT through the listener (regular/upstream mode); False: TLS straight to it (reverse mode)."""
    host: str
    port: int
    ca_file: str
    proxy_auth: tuple[str, str] | None = field(default=None, repr=False)


@dataclass
class PendingRun:
    """What the backend learned from the flow's headers, waiting for the loopback request."""

    token: str
    request_id: str
    authority: str
    path: str
    headers: list[tuple[str, str]]
    relay: RelayTarget | None
    """None: this listener's mode cannot relay (the Cursor-model run fails `unavailable`)."""
    refusal: str | None = None
    """Why this client may not run on the user's models (access.py), or None when it may."""
    user: str | None = None
    """The client's proxyauth user name: the run is theirs (team server)."""
    created: float = field(default_factory=time.monotonic)


def _parent_call(headers: list[tuple[str, str]]) -> str | None:
    """A subagent's Run names the parent's Task call (`X-Parent-Agent-Tool-Call-Id`)."""
    return next((v for k, v in headers if k.lower() == PARENT_TOOL_CALL_HEADER.lower() and v), None)


def relay_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The client's request headers as they may go on over HTTP/2 (lowercase, no hop-by-hop)."""
    return [(k.lower(), v) for k, v in headers if not k.startswith(":") and k.lower() not in HOP_BY_HOP
            and not k.lower().startswith("x-byok-")]


class RunTransport:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.pending: dict[str, PendingRun] = {}
        self.relays: dict[str, str] = {}
        """relay token -> request id of the Run it carries (the backend tags the relay leg's flow)."""
        self.active: set[asyncio.Task] = set()
        self.tls = TrustedCa()

    # ---- from the backend's requestheaders hook ---------------------------------------------------

    def expect(self, pending: PendingRun) -> None:
        now = time.monotonic()
        for token in [t for t, p in self.pending.items() if now - p.created > PENDING_TTL_S]:
            del self.pending[token]  # its loopback request never came (the flow failed first)
        self.pending[pending.token] = pending

    @staticmethod
    def new_token() -> str:
        return secrets.token_urlsafe(16)

    # ---- the loopback request -------------------------------------------------------------------------

    async def serve(self, token: str, body: ChunkedBody, response: ChunkedResponse) -> None:
        task = asyncio.current_task()
        if task is not None:
            self.active.add(task)
        try:
            await self._serve(token, body, response)
        except asyncio.CancelledError:
            if not response.finished:
                response.abort()
        finally:
            if task is not None:
                self.active.discard(task)

    async def _serve(self, token: str, body: ChunkedBody, response: ChunkedResponse) -> None:
        pending = self.pending.pop(token, None)
        if pending is None:
            await _answer_error(response, connect.ConnectError(connect.Code.INTERNAL, "unknown Run stream"), body)
            return
        rid = pending.request_id
        decoder = connect.EnvelopeDecoder()
        prefix = bytearray()
        first: tuple[apb.AgentClientMessage, bytes] | None = None
        rest: list[connect.Frame] = []
        try:
            async for chunk in body:
                prefix += chunk
                for frame in decoder.feed(chunk):
                    if first is not None:
                        rest.append(frame)
                        continue
                    message = _client_message(frame)
                    kind = message.WhichOneof("message")
                    if kind == "run_request":
                        first = (message, frame.payload)
                    elif kind not in BEFORE_RUN_REQUEST:
                        raise connect.ConnectError(connect.Code.INVALID_ARGUMENT,
                                                   f"a Run's first message must carry the run_request, not {kind}")
                if first is not None:
                    break
            else:
                raise connect.ConnectError(connect.Code.INVALID_ARGUMENT, "the Run request ended before its run_request")
        except BodyAborted:
            log.info("[%s] Run stream closed before its run_request", rid)
            return
        except connect.ConnectError as e:
            log.warning("[%s] Run rejected: %s", rid, e)
            await _answer_error(response, e, body)
            return
        route = self.runtime.on_append(rid, 0, *first, local_allowed=pending.refusal is None, user=pending.user,
                                       parent_tool_call_id=_parent_call(pending.headers))
        if route is Route.REFUSED:
            log.warning("[%s] refused: %s", rid, pending.refusal)
            await _answer_error(response, AccessDenied(
                pending.refusal or f"request {rid} belongs to another user").to_connect(), body)
            return
        if route is Route.UPSTREAM:
            await self._relay(pending, bytes(prefix), body, response)
        else:
            await self._local(pending, decoder, rest, body, response)

    # ---- LOCAL ---------------------------------------------------------------------------------------

    async def _local(self, pending: PendingRun, decoder: connect.EnvelopeDecoder, rest: list[connect.Frame],
                     body: ChunkedBody, response: ChunkedResponse) -> None:
        rid = pending.request_id
        run = self.runtime.run(rid)
        if run is None:  # it ended already (e.g. shutdown between decision and here)
            await _answer_error(response, connect.ConnectError(connect.Code.UNAVAILABLE, "the run ended before it streamed"),
                                body)
            return
        response.start(200, [("content-type", CONNECT_PROTO)])
        run.attach_stream()
        inbound = asyncio.get_running_loop().create_task(self._pump_in(pending, rid, decoder, rest, body),
                                                         name=f"run-in {rid}")
        try:
            async for chunk in run.frames():
                await response.write(chunk)
            await response.end()
        except ConnectionError:
            run.cancel(RunCanceled("the client closed the Run stream"))
        try:  # Cursor ends its request side once the response ended
            await asyncio.wait_for(asyncio.shield(inbound), REQUEST_END_GRACE_S)
        except asyncio.TimeoutError:
            log.info("[%s] the client kept its Run request open %g s after the response ended", rid,
                     REQUEST_END_GRACE_S)
            inbound.cancel()

    async def _pump_in(self, pending: PendingRun, rid: str, decoder: connect.EnvelopeDecoder, rest: list[connect.Frame],
                       body: ChunkedBody) -> None:
        seq = 1
        try:
            frames = list(rest)
            while True:
                for frame in frames:
                    message = _client_message(frame)
                    self.runtime.on_append(rid, seq, message, frame.payload, user=pending.user)
                    seq += 1
                try:
                    chunk = await body.__anext__()
                except StopAsyncIteration:
                    break
                frames = decoder.feed(chunk)
            why = "the client ended its Run request before the response ended"
        except BodyAborted:
            why = "the client reset the Run stream"
        except connect.ConnectError as e:
            run = self.runtime.run(rid)
            if run is not None:
                run.fail(ProtocolError(f"Run request stream: {e.message}"))
            return
        run = self.runtime.run(rid)
        if run is not None and not run.terminal:
            run.cancel(RunCanceled(why))

    # ---- UPSTREAM: relay back through mitmproxy -----------------------------------------------------

    async def _relay(self, pending: PendingRun, prefix: bytes, body: ChunkedBody, response: ChunkedResponse) -> None:
        rid, target = pending.request_id, pending.relay
        if target is None:
            await _answer_error(response, connect.ConnectError(
                connect.Code.UNAVAILABLE, "cursor-byok cannot pass this Run on to Cursor from this listener's mode"), body)
            return
        relay_token = self.new_token()
        self.relays[relay_token] = rid
        conn: H2Connection | None = None
        outbound: asyncio.Task | None = None
        try:
            context = await self.tls.context(target.ca_file)
            address = (target.host, target.port) if target.tunnel else target.listener
            conn = await H2Connection.open(*address, ssl_context=context, server_hostname=target.host,
                                           proxy=target.listener if target.tunnel else None,
                                           proxy_auth=target.proxy_auth)
            headers = [(":method", "POST"), (":scheme", "https"), (":authority", pending.authority),
                       (":path", pending.path)] + pending.headers + [(RELAY_HEADER, relay_token)]
            stream = await conn.request(headers)
            outbound = asyncio.get_running_loop().create_task(_pump_up(stream, prefix, body), name=f"relay-up {rid}")
            upstream_headers = await stream.response
            status = int(dict(upstream_headers)[":status"])
            response.start(status, [(k, v) for k, v in upstream_headers if not k.startswith(":")])
            async for chunk in stream.chunks():
                await response.write(chunk)
            await response.end()
        except (OSError, H2Error, asyncio.TimeoutError, ssl.SSLError) as e:
            log.warning("[%s] relaying the Run to Cursor failed: %s", rid, e)
            if not response.started:
                await _answer_error(response, connect.ConnectError(
                    connect.Code.UNAVAILABLE, f"cursor-byok could not pass the Run on to Cursor: {e}"))
            elif not response.finished:
                response.abort()
        finally:
            if outbound is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(outbound), REQUEST_END_GRACE_S)
                except (asyncio.TimeoutError, H2Error):
                    outbound.cancel()
            self.relays.pop(relay_token, None)
            if conn is not None:
                await conn.close()


class TrustedCa:
    """TLS contexts trusting mitmproxy's CA, one per CA file, read in a worker thread (reading and
    parsing the file on the event loop for every relayed Run would stall live traffic). A CA file
    that changed (mtime or size) is read again."""

    def __init__(self) -> None:
        self._contexts: dict[str, tuple[tuple[int, int], ssl.SSLContext]] = {}

    async def context(self, ca_file: str) -> ssl.SSLContext:
        return await asyncio.to_thread(self._context, ca_file)

    def _context(self, ca_file: str) -> ssl.SSLContext:
        st = os.stat(ca_file)
        stamp = (st.st_mtime_ns, st.st_size)
        cached = self._contexts.get(ca_file)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        context = ssl.create_default_context(cafile=ca_file)
        self._contexts[ca_file] = (stamp, context)
        return context


async def _pump_up(stream, prefix: bytes, body: ChunkedBody) -> None:
    """The client's request bytes to the relay stream as they come; its end or reset likewise."""
    try:
        await stream.send(prefix)
        async for chunk in body:
            await stream.send(chunk)
        await stream.end()
    except BodyAborted:
        stream.reset()
    except H2Error:
        pass  # upstream reset or closed the stream: the response side reports it


def _client_message(frame: connect.Frame) -> apb.AgentClientMessage:
    if frame.end_stream:
        raise connect.ConnectError(connect.Code.INVALID_ARGUMENT, "an end-stream envelope in a request stream")
    try:
        return apb.AgentClientMessage.FromString(frame.payload)
    except DecodeError as e:
        raise connect.ConnectError(connect.Code.INVALID_ARGUMENT, f"not an AgentClientMessage: {e}") from None


async def _answer_error(response: ChunkedResponse, error: connect.ConnectError, body: ChunkedBody | None = None) -> None:
    """A Connect error the Connect way: HTTP 200 and an error end-stream. Then, as after any answer,
    the client ends its request: closing the loopback connection before that would make mitmproxy
    reset the client's stream."""
    if not response.started:
        response.start(200, [("content-type", CONNECT_PROTO)])
    try:
        await response.write(connect.encode_end_stream(error))
        await response.end()
    except ConnectionError:
        return
    if body is not None and not body.ended:
        try:
            await asyncio.wait_for(_drain(body), REQUEST_END_GRACE_S)
        except (asyncio.TimeoutError, BodyAborted):
            pass


async def _drain(body: ChunkedBody) -> None:
    async for _ in body:
        pass


class RunH2Headers:
    """Routes every HTTP/2 Run at its headers (mitmproxy connects upstream right after this hook)."""

    def __init__(self, backend, recorder=None) -> None:
        self.backend = backend
        self.recorder = recorder

    async def requestheaders(self, flow: http.HTTPFlow) -> None:
        request = flow.request
        if request.method != "POST" or request.path.split("?", 1)[0] != RUN_PATH:
            return
        await self.backend.ready()  # the route is fixed at the headers: wait for the loopback server
        if self.backend.settings.is_cursor_host(request.pretty_host):
            self._route(flow)

    def _route(self, flow: http.HTTPFlow) -> None:
        backend, runs, request = self.backend, self.backend.runs, flow.request
        relay_token = request.headers.pop(RELAY_HEADER, None)
        relayed = runs.relays.get(relay_token or "")
        flow.metadata[duplex.FULL_DUPLEX] = request.is_http2
        if relayed is not None:  # our own relay leg of a Cursor-model Run: to Cursor as it is
            flow.metadata.update(byok="upstream", byok_request_id=relayed, byok_relay=True)
            request.stream = self._tee(flow)
            return
        request_id = self._request_id(flow)
        flow.metadata["byok_request_id"] = request_id
        if backend.settings.mode == "observe" or not request.is_http2:
            # observe records without answering; an HTTP/1.1 Run (no client sends one) passes on as before
            flow.metadata["byok"] = "observe" if backend.settings.mode == "observe" else "upstream"
            request.stream = self._tee(flow)
            return
        token = RunTransport.new_token()
        runs.expect(PendingRun(
            token, request_id, authority=request.authority or request.pretty_host, path=request.path,
            headers=relay_headers(list(request.headers.items(multi=True))), relay=_relay_target(flow),
            refusal=None if backend.allowed(flow) else backend.access.refusal(flow), user=authenticated_user(flow),
        ))
        flow.metadata["byok"] = "run"
        request.headers["transfer-encoding"] = "chunked"  # else mitmproxy's HTTP/1.1 hop has no body framing
        request.headers.pop("content-length", None)
        point_at_loopback(flow, backend.server, RUN_STREAM_HEADER, token)
        request.stream = self._tee(flow)

    def _tee(self, flow: http.HTTPFlow):
        return self.recorder.tee_request(flow) if self.recorder is not None else True

    def _request_id(self, flow: http.HTTPFlow) -> str:
        """The client's x-request-id when it is new to this process, else a fresh id."""
        runtime, runs = self.backend.runtime, self.backend.runs
        wanted = flow.request.headers.get("x-request-id", "").strip()
        if wanted and runtime.known_route(wanted) is None and wanted not in runtime.channels \
                and not any(p.request_id == wanted for p in runs.pending.values()):
            return wanted
        fresh = str(uuid.uuid4())
        if wanted:
            log.info("Run x-request-id %s already seen: this Run is %s", wanted, fresh)
        return fresh


def _relay_target(flow: http.HTTPFlow) -> RelayTarget | None:
    from mitmproxy.proxy.mode_specs import ReverseMode

    mode = flow.client_conn.proxy_mode
    sockname = flow.client_conn.sockname
    if isinstance(mode, ReverseMode):
        tunnel = False
    elif mode.type_name in ("regular", "upstream"):
        tunnel = True
    else:
        return None
    auth = flow.metadata.get("proxyauth")
    confdir = os.path.expanduser(ctx.options.confdir)
    return RelayTarget(
        listener=(sockname[0], sockname[1]), tunnel=tunnel, host=flow.request.host, port=flow.request.port,
        ca_file=os.path.join(confdir, "mitmproxy-ca-cert.pem"),
        proxy_auth=tuple(auth) if auth else None,
    )
