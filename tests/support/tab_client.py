"""A Cursor-like Tab client for tests and benchmarks: StreamCpp (and the unary Tab RPCs) through a
proxy over HTTP/1.1 (httpx) or HTTP/2 (the project's h2 connection), with frame timings and aborts.

    answer = await stream_cpp(proxy_url, ca_file, request, http2=True)
    answer.kinds()     # ["model_info", "range", "text", ..., "done"]
    answer.edit()      # the Edit the frames describe (range + all text)
    answer.error       # the end-stream's ConnectError, or None
"""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

from byok.assist.tab_edit import Edit
from byok.proto import cpp_pb2 as cpb
from byok.transports.h2conn import H2Connection
from byok.wire import connect

STREAM_CPP = "/aiserver.v1.AiService/StreamCpp"
HOST = "api3.cursor.sh"


@dataclass
class TabAnswer:
    status: int
    content_type: str
    frames: list[cpb.StreamCppResponse] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    """time.monotonic() when each frame (and the end-stream, last) was decoded."""
    error: connect.ConnectError | None = None
    ended: bool = False
    raw: bytes = b""

    def kinds(self) -> list[str]:
        return ["model_info" if f.HasField("model_info") else "range" if f.HasField("range_to_replace")
                else "done" if f.done_stream else "text" for f in self.frames]

    def edit(self) -> Edit | None:
        ranges = [f.range_to_replace for f in self.frames if f.HasField("range_to_replace")]
        if not ranges:
            return None
        return Edit(ranges[0].start_line_number, ranges[0].end_line_number_inclusive,
                    "".join(f.text for f in self.frames))

    def first_text_at(self) -> float | None:
        return next((t for f, t in zip(self.frames, self.times) if f.text), None)


class _Reader:
    def __init__(self, answer: TabAnswer) -> None:
        self.answer = answer
        self.decoder = connect.EnvelopeDecoder()

    def feed(self, chunk: bytes) -> int:
        self.answer.raw += chunk
        frames = self.decoder.feed(chunk)
        now = time.monotonic()
        for frame in frames:
            self.answer.times.append(now)
            if frame.end_stream:
                self.answer.error, self.answer.ended = connect.parse_end_stream(frame.payload), True
            else:
                self.answer.frames.append(cpb.StreamCppResponse.FromString(frame.payload))
        return len(frames)


def body_of(request: cpb.StreamCppRequest) -> bytes:
    return connect.encode_envelope(request.SerializeToString())


async def stream_cpp(proxy_url: str, ca_file: str, request: cpb.StreamCppRequest, *, http2: bool = False,
                     host: str = HOST, headers: dict[str, str] | None = None, abort_after: int | None = None,
                     body: bytes | None = None, direct: tuple[str, int] | None = None) -> TabAnswer:
    """One StreamCpp through the proxy; `abort_after` frames, the client resets / closes the stream.
    `direct`: connect to this (host, port) itself (a reverse-mode listener) instead of through `proxy_url`,
    with `host` as the Host / :authority."""
    data = body if body is not None else body_of(request)
    extra = {"content-type": "application/connect+proto", "connect-protocol-version": "1", **(headers or {})}
    if http2:
        return await _h2(proxy_url, ca_file, host, data, extra, abort_after, direct)
    context = ssl.create_default_context(cafile=ca_file)
    url = f"https://{direct[0]}:{direct[1]}{STREAM_CPP}" if direct else f"https://{host}{STREAM_CPP}"
    if direct:
        extra["host"] = host
    async with httpx.AsyncClient(proxy=None if direct else proxy_url, verify=context, timeout=30,
                                 trust_env=False) as client:
        async with client.stream("POST", url, content=data, headers=extra) as response:
            answer = TabAnswer(response.status_code, response.headers.get("content-type", ""))
            reader = _Reader(answer)
            async for chunk in response.aiter_raw():
                reader.feed(chunk)
                if abort_after is not None and len(answer.frames) >= abort_after:
                    break  # leaving the block closes the connection
    return answer


async def _h2(proxy_url: str, ca_file: str, host: str, data: bytes, extra: dict[str, str],
              abort_after: int | None, direct: tuple[str, int] | None = None) -> TabAnswer:
    context = ssl.create_default_context(cafile=ca_file)
    if direct:
        conn = await H2Connection.open(direct[0], direct[1], ssl_context=context)
    else:
        proxy = urlsplit(proxy_url)
        conn = await H2Connection.open(host, 443, ssl_context=context, proxy=(proxy.hostname, proxy.port))
    try:
        stream = await conn.request([(":method", "POST"), (":scheme", "https"), (":authority", host),
                                     (":path", STREAM_CPP), *extra.items()])
        await stream.send(data, end_stream=True)
        response = dict(await stream.response)
        answer = TabAnswer(int(response[":status"]), response.get("content-type", ""))
        reader = _Reader(answer)
        async for chunk in stream.chunks():
            reader.feed(chunk)
            if abort_after is not None and len(answer.frames) >= abort_after:
                stream.reset()
                break
        return answer
    finally:
        await conn.close()


async def unary(proxy_url: str, ca_file: str, path: str, message, *, json_codec: bool = False,
                host: str = HOST, direct: tuple[str, int] | None = None) -> httpx.Response:
    """A unary Tab RPC (CppConfig, RecordCppFate, ...) through the proxy (or `direct`) over HTTP/1.1."""
    from google.protobuf import json_format

    content = json_format.MessageToJson(message).encode() if json_codec else message.SerializeToString()
    headers = {"content-type": "application/json" if json_codec else "application/proto"}
    url = f"https://{direct[0]}:{direct[1]}{path}" if direct else f"https://{host}{path}"
    if direct:
        headers["host"] = host
    async with httpx.AsyncClient(proxy=None if direct else proxy_url, verify=ssl.create_default_context(cafile=ca_file),
                                 timeout=30, trust_env=False) as client:
        return await client.post(url, content=content, headers=headers)


def request(contents: str, line: int, column: int, *, path: str = "src/app.py", language: str = "python",
            **file_fields) -> cpb.StreamCppRequest:
    return cpb.StreamCppRequest(current_file=cpb.CurrentFileInfo(
        relative_workspace_path=path, language_id=language, contents=contents,
        cursor_position=cpb.CursorPosition(line=line, column=column), **file_fields))
