"""The loopback stream server on its own (issue 24): only requests proving the process's secret get
in, refused before anything is looked up; a cancel reaches its connection tasks; a request it cannot
read is answered 400 without an exception escaping into the event loop."""

from __future__ import annotations

import asyncio

import pytest

from byok.transports.stream_server import (
    AUTH_HEADER, CALL_HEADER, RUN_HEADER, RUN_STREAM_HEADER, BodyAborted, ChunkedBody, LoopbackSecret, MalformedRequest,
    StreamServer, _number,
)


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


def proven(server: StreamServer, header: str, value: str) -> str:
    return f"{header}: {value}\r\n{AUTH_HEADER}: {server.secret.proof(header, value)}\r\n"


@pytest.mark.parametrize("framing", [
    "transfer-encoding: chunked\r\n\r\nzz\r\n",  # not hex
    "transfer-encoding: chunked\r\n\r\n-5\r\n",  # a sign int() would take
    "transfer-encoding: chunked\r\n\r\n0x10\r\n",
    "content-length: ten\r\n\r\n",
    "content-length: -1\r\n\r\n",
])
def test_an_unreadable_request_is_answered_400_and_nothing_escapes(framing):
    looked_up: list[str] = []

    async def scenario():
        with LoopErrors() as errors:
            server = StreamServer(lambda rid: looked_up.append(rid))
            await server.start()
            raw = f"POST /x HTTP/1.1\r\n{proven(server, RUN_HEADER, 'r1')}{framing}".encode()
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
        writer.write(f"POST /RunSSE HTTP/1.1\r\n{proven(server, RUN_HEADER, 'r')}content-length: 0\r\n\r\n".encode())
        await writer.drain()
        await reader.readuntil(b"first\r\n")  # streaming now
        [task] = server._conns
        await server.stop(timeout=0.1)
        writer.close()
        return task

    task = asyncio.run(scenario())
    assert task.cancelled()


# ---- only the proxy gets in -------------------------------------------------------------------------------


def test_a_proof_is_bound_to_the_secret_and_to_what_the_request_names():
    one, other = LoopbackSecret(), LoopbackSecret()
    proof = one.proof(RUN_HEADER, "req-1")
    assert one.admits({RUN_HEADER: "req-1", AUTH_HEADER: proof})
    assert not other.admits({RUN_HEADER: "req-1", AUTH_HEADER: proof})  # another process's secret
    assert not one.admits({RUN_HEADER: "req-2", AUTH_HEADER: proof})  # another request id
    assert not one.admits({RUN_STREAM_HEADER: "req-1", AUTH_HEADER: proof})  # another kind of request
    # the server dispatches a call before a run: a proof for the run does not let a call header in
    assert not one.admits({CALL_HEADER: "t", RUN_HEADER: "req-1", AUTH_HEADER: proof})
    assert not one.admits({RUN_HEADER: "req-1"}) and not one.admits({AUTH_HEADER: proof})
    assert not one.admits({RUN_HEADER: "req-1", AUTH_HEADER: "é" + proof[1:]})  # non-ASCII: refused, no error
    assert "<hidden>" in repr(one) and one._key.decode() not in repr(one)


@pytest.mark.parametrize("auth", [None, "0" * 64, "wrong"])
def test_a_request_without_the_proof_is_refused_before_any_lookup(auth, caplog):
    looked_up: list[str] = []

    async def scenario():
        server = StreamServer(lambda rid: looked_up.append(rid))
        await server.start()
        extra = f"{AUTH_HEADER}: {auth}\r\n" if auth is not None else ""
        try:
            return server, await exchange(server.port, f"POST /RunSSE HTTP/1.1\r\n{RUN_HEADER}: live\r\n{extra}"
                                                         "content-length: 0\r\n\r\n".encode())
        finally:
            await server.stop(timeout=1)

    server, answer = asyncio.run(scenario())
    assert answer.startswith(b"HTTP/1.1 403 ") and answer.endswith(b"\r\n\r\n") and looked_up == []
    logged = caplog.text
    assert "refused a request without the proxy's proof" in logged
    assert server.secret._key.decode() not in logged and server.secret.proof(RUN_HEADER, "live") not in logged
