"""One-shot calls (Tab, commit messages, titles, terminal, Cmd-K) answered from the user's models.

Which RPCs: `byok.assist.SERVICES`, one explicit list. For each:
- at the request headers, a call the config surely does not answer (`may_answer` false) is streamed to
  Cursor untouched; otherwise its body is read;
- at the request, the service picks the model (`route_for`); none, or a client that may not use the
  user's models (access.py, the team file), passes the call to Cursor byte for byte;
- a unary call is answered here, in the request's own encoding (`application/proto` or
  `application/json`); its errors are Connect unary errors (HTTP status by code, JSON with ErrorDetails);
- a server-streaming call (`application/connect+proto`) is pointed at the loopback stream server, which
  writes each message as a Connect frame and then the end-stream (`{}` or the error). The client going
  away cancels the service at once, and with it the provider request.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import uuid

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from mitmproxy import http

from ..access import authenticated_user
from ..assist import CallContext, OneShot
from ..router import ONE_SHOT_PATHS, Rpc, classify
from ..wire import connect
from ..wire.errors import InternalError, RunError
from .loopback import CONNECT_PROTO, point_at_loopback, stream_error, unary_error
from .stream_server import CALL_HEADER, ChunkedResponse

log = logging.getLogger("byok.one_shot")

MARK = "byok_one_shot"


def _encoding(content_type: str) -> str:
    base = content_type.split(";", 1)[0].strip().lower()
    if base in ("application/proto", "application/connect+proto"):
        return "proto"
    if base in ("application/json", "application/connect+json"):
        return "json"
    raise connect.ConnectError(connect.Code.INVALID_ARGUMENT, f"unsupported content-type {content_type!r}")


def decode_request(service: OneShot, body: bytes, content_type: str) -> Message:
    """The request message: a unary body as it is, a streaming request's one envelope unwrapped."""
    encoding = _encoding(content_type)
    if service.streaming:
        frames = connect.decode_all(body)
        messages = [f for f in frames if not f.end_stream]
        if len(messages) != 1:
            raise connect.ConnectError(connect.Code.INVALID_ARGUMENT,
                                       f"a server-streaming request carries one message, not {len(messages)}")
        body = messages[0].payload
    message = service.request_type()
    try:
        if encoding == "json":
            json_format.Parse(body.decode("utf-8"), message, ignore_unknown_fields=True)
        else:
            message.ParseFromString(body)
    except (DecodeError, json_format.ParseError, UnicodeDecodeError) as e:
        raise connect.ConnectError(connect.Code.INVALID_ARGUMENT,
                                   f"not a {service.request_type.DESCRIPTOR.full_name}: {e}") from None
    return message


def encode_message(message: Message, encoding: str) -> bytes:
    if encoding == "json":
        return json_format.MessageToJson(message, indent=None).encode()
    return message.SerializeToString()


def _connect_error(error: BaseException, request_id: str, service: OneShot) -> connect.ConnectError:
    if isinstance(error, RunError):
        result = error.to_connect()
    elif isinstance(error, connect.ConnectError):
        result = error
    else:
        log.error("[%s] %s failed", request_id, service.path, exc_info=error)
        result = InternalError(f"internal error: {type(error).__name__}: {error}").to_connect()
    log.warning("[%s] %s ends with %s: %s", request_id, service.path.rsplit("/", 1)[-1], result.code.value,
                result.message)
    return result


def _deadline_s(headers) -> float | None:
    try:
        return int(headers.get("connect-timeout-ms", "")) / 1000
    except ValueError:
        return None


class OneShotCalls:
    def __init__(self, backend) -> None:
        self.backend = backend

    async def requestheaders(self, flow: http.HTTPFlow) -> None:
        if flow.request.path.split("?", 1)[0] not in ONE_SHOT_PATHS:
            return
        await self.backend.ready()
        if classify(flow, self.backend.settings) is not Rpc.ONE_SHOT or self.backend.settings.mode == "observe":
            flow.request.stream = True
            return
        service = ONE_SHOT_PATHS[flow.request.path.split("?", 1)[0]]
        if service.may_answer(self.backend.providers.current()):
            flow.metadata[MARK] = service.path  # read the body: the request decides
        else:
            flow.request.stream = True

    async def request(self, flow: http.HTTPFlow) -> None:
        path = flow.metadata.get(MARK)
        if path is None:
            return
        service = ONE_SHOT_PATHS[path]
        backend = self.backend
        request_id = flow.request.headers.get("x-request-id", "").strip() or str(uuid.uuid4())
        flow.metadata["byok_request_id"] = request_id
        content_type = flow.request.headers.get("content-type", CONNECT_PROTO if service.streaming else "application/proto")
        try:
            message = decode_request(service, flow.request.get_content(strict=True) or b"", content_type)
        except (connect.ConnectError, ValueError) as e:
            error = e if isinstance(e, connect.ConnectError) else connect.ConnectError(connect.Code.INVALID_ARGUMENT, str(e))
            self._error(flow, service, error)
            return
        config = backend.providers.current()
        route = service.route_for(message, config)
        if route is None or not backend.allowed(flow) or not backend.routes_for_flow(flow, [route]):
            flow.metadata["byok"] = "upstream"  # Cursor answers it, as it was sent
            return
        user = authenticated_user(flow)
        try:  # the team file's key for this user, and their budget, as for an agent turn
            route = backend.team.route_for(user, route)
            await backend.team.check_budget(backend.store, user, backend.clock.wall_ms)
        except RunError as e:
            self._error(flow, service, _connect_error(e, request_id, service))
            return
        ctx = CallContext(
            request_id=request_id, route=route, http=backend.http, limits=backend.provider_limits,
            store=backend.store, headers={k.lower(): v for k, v in flow.request.headers.items()},
            user=user, deadline_s=_deadline_s(flow.request.headers), config=config,
        )
        flow.metadata["byok"] = f"assist:{service.feature}"
        if service.streaming:
            if "content-length" not in flow.request.headers and "transfer-encoding" not in flow.request.headers:
                # an HTTP/2 request often has neither; on mitmproxy's HTTP/1.1 hop to the loopback server
                # its body would then follow a request that says it has none (docs/architecture.md)
                flow.request.headers["content-length"] = str(len(flow.request.raw_content or b""))
            token = secrets.token_urlsafe(16)
            backend.server.expect_call(token, lambda response: self._stream(service, message, ctx, response))
            point_at_loopback(flow, backend.server, CALL_HEADER, token)
            return
        encoding = _encoding(content_type)
        try:
            answer = await service.serve(message, ctx)
        except Exception as e:  # every failure becomes a Connect error for the client, never a hang
            unary_error(flow, _connect_error(e, request_id, service), what=service.path)
            return
        flow.response = http.Response.make(200, encode_message(answer, encoding), {
            "content-type": "application/json" if encoding == "json" else "application/proto"})
        flow.metadata["byok"] = "answered"

    @staticmethod
    def _error(flow: http.HTTPFlow, service: OneShot, error: connect.ConnectError) -> None:
        if service.streaming:
            stream_error(flow, error, what=service.path)
        else:
            unary_error(flow, error, what=service.path)

    @staticmethod
    async def _stream(service: OneShot, message: Message, ctx: CallContext, response: ChunkedResponse) -> None:
        response.start(200, [("content-type", CONNECT_PROTO)])
        try:
            async for frame in service.serve(message, ctx):
                await response.write(connect.encode_envelope(frame.SerializeToString()))
        except (asyncio.CancelledError, ConnectionError):
            raise  # the client went away: nothing more to write
        except Exception as e:  # every failure ends the stream with a Connect error
            await response.write(connect.encode_end_stream(_connect_error(e, ctx.request_id, service)))
            await response.end()
            return
        await response.write(connect.encode_end_stream())
        await response.end()

