"""The loopback stream server on its own (issue 24.3): a cancel reaches its connection tasks, and a
request it cannot read is answered 400 without an exception escaping into the event loop."""

from __future__ import annotations

import asyncio

import pytest

from byok.transports.stream_server import RUN_HEADER, BodyAborted, ChunkedBody, MalformedRequest, StreamServer, _number


class LoopErrors:
    """Collects what reaches the loop's exception handler (an exception no one handled)."""

    def __init__(self) -> None:
        self.seen: list[dict] = []

    def __enter__(self):
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: self.seen.append(context))
        return self

    def __exit__(self, *exc) -> None:
        asyncio.get_running_loop().set_exception_handler(None)


async def exchange(port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 5)  # the server closes after its answer
    writer.close()
    return answer


@pytest.mark.parametrize("raw", [
    b"POST /x HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",  # not hex
    b"POST /x HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n-5\r\n",  # a sign int() would take
    b"POST /x HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n0x10\r\n",
    b"POST /x HTTP/1.1\r\ncontent-length: ten\r\n\r\n",
    b"POST /x HTTP/1.1\r\ncontent-length: -1\r\n\r\n",
])
def test_an_unreadable_request_is_answered_400_and_nothing_escapes(raw):
    looked_up: list[str] = []

    async def scenario():
        with LoopErrors() as errors:
            server = StreamServer(lambda rid: looked_up.append(rid))
            await server.start()
            try:
                answer = await exchange(server.port, raw)
            finally:
                await server.stop(timeout=1)
            return answer, errors.seen

    answer, errors = asyncio.run(scenario())
    assert answer.startswith(b"HTTP/1.1 400 ") and errors == [] and looked_up == []


def test_a_bad_chunk_in_a_streamed_body_is_the_body_aborted():
    async def scenario():
        reader = asyncio.StreamReader()
        reader.feed_data(b"3\r\nabc\r\nnot-hex\r\n")
        body = ChunkedBody(reader)
        assert await body.__anext__() == b"abc"
        with pytest.raises(BodyAborted):
            await body.__anext__()

    asyncio.run(scenario())


def test_numbers_are_digits_only():
    assert _number(b"1a", 16, "chunk size") == 26 and _number("12", 10, "content-length") == 12
    for bad in (b"", b" ", b"1_0", b"+1", b"1" * 17):
        with pytest.raises(MalformedRequest):
            _number(bad, 16, "chunk size")


def test_a_cancel_reaches_the_connection_task():
    """Shutdown cancels the connections still open after the grace period: that cancel must end
    their tasks as cancelled (a swallowed cancel looks like a normal end to whoever awaits them)."""

    class Endless:
        request_id = "r"
        stream_attached = False

        def attach_stream(self) -> None:
            self.stream_attached = True

        async def frames(self):
            yield b"first"
            await asyncio.Event().wait()  # a run still waiting on its provider
            yield b""  # pragma: no cover

    async def scenario():
        server = StreamServer(lambda rid: Endless())
        await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(f"POST /RunSSE HTTP/1.1\r\n{RUN_HEADER}: r\r\ncontent-length: 0\r\n\r\n".encode())
        await writer.drain()
        await reader.readuntil(b"first\r\n")  # streaming now
        [task] = server._conns
        await server.stop(timeout=0.1)
        writer.close()
        return task

    task = asyncio.run(scenario())
    assert task.cancelled()
