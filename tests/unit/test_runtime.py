"""Runtime routing and ordering without sockets: appends, routes, heartbeats, late appends."""

import asyncio

from byok.agent.run import RunSettings
from byok.agent.runtime import Route, RouteTimeout, Runtime
from byok.cli.client import user_turn_request
from byok.proto import agent_pb2 as apb
from tests.support.waiting import until


def make_runtime(started):
    async def never_ending_turn(run):
        started.append(run.request_id)
        await asyncio.Event().wait()  # the scenario: a turn that never ends by itself

    return Runtime(is_user_model=lambda model_id: model_id == "mine",
                   make_turn=lambda request: never_ending_turn)


def run_request(model):
    return apb.AgentClientMessage(run_request=user_turn_request("q", model_id=model))


HEARTBEAT = apb.AgentClientMessage(client_heartbeat=apb.ClientHeartbeat())


def test_route_decided_by_the_first_run_request():
    async def scenario():
        started = []
        rt = make_runtime(started)
        assert rt.on_append("a", 0, run_request("mine"), b"") is Route.LOCAL
        assert rt.on_append("b", 0, run_request("cursor-model"), b"") is Route.UPSTREAM
        assert rt.on_append("b", 1, HEARTBEAT, b"") is Route.UPSTREAM
        await until(lambda: started, "the local turn to start")
        assert rt.run("a") is not None and rt.run("b") is None
        await rt.shutdown(timeout=1)
        return started

    # the turn's preparation starts at once, overlapping the RunSSE's arrival (upstream: no turn)
    assert asyncio.run(scenario()) == ["a"]


def test_the_provider_waits_for_the_stream_and_a_stream_that_never_comes_ends_the_run():
    async def scenario():
        seen = []

        async def turn(run):
            seen.append("prepared")
            await run.client_listening()  # what model_call awaits before the provider request
            seen.append("provider called")

        rt = Runtime(is_user_model=lambda model_id: True, make_turn=lambda request: turn,
                     settings=RunSettings(stream_attach_timeout_s=0.2))
        rt.on_append("late", 0, run_request("mine"), b"")
        rt.on_append("never", 0, run_request("mine"), b"")
        late, never = rt.run("late"), rt.run("never")
        await until(lambda: seen == ["prepared", "prepared"], "both turns prepared")
        late.attach_stream()
        await late.wait()
        await never.wait()
        frames = [f async for f in never.frames()]
        return seen, late.outcome, never.outcome, frames[-1]

    seen, late, never, end = asyncio.run(scenario())
    assert seen == ["prepared", "prepared", "provider called"]
    assert (late, never) == ("completed", "canceled")
    assert b"never opened" in end


def test_early_append_waits_and_times_out():
    async def scenario():
        rt = make_runtime([])
        assert rt.on_append("x", 1, HEARTBEAT, b"") is None
        try:
            await rt.wait_route("x", 0.05)
        except RouteTimeout as e:
            return str(e)

    assert "run_request" in asyncio.run(scenario())


def test_observe_mode_routes_everything_upstream():
    async def scenario():
        rt = make_runtime([])
        rt.observe = True
        return rt.on_append("a", 0, run_request("mine"), b"")

    assert asyncio.run(scenario()) is Route.UPSTREAM


def test_late_append_after_the_run_finished_is_accepted():
    async def scenario():
        rt = make_runtime([])
        rt.on_append("a", 0, run_request("mine"), b"")
        run = rt.run("a")
        await run.finish(None)
        return rt.on_append("a", 7, HEARTBEAT, b""), await rt.wait_route("a", 0.05)

    assert asyncio.run(scenario()) == (Route.LOCAL, Route.LOCAL)


def test_upstream_decisions_and_orphans_hold_no_channel():
    async def scenario():
        rt = make_runtime([])
        rt.max_finished = 2
        for n in range(3):
            assert rt.on_append(f"up{n}", 0, run_request("cursor-model"), b"") is Route.UPSTREAM
        assert rt.on_append("up2", 1, HEARTBEAT, b"") is Route.UPSTREAM
        assert await rt.wait_route("up2", 0.01) is Route.UPSTREAM
        assert list(rt.upstream) == ["up1", "up2"] and not rt.channels
        try:
            await rt.wait_route("orphan", 0.01)
        except RouteTimeout:
            pass
        return rt.channels

    assert asyncio.run(scenario()) == {}


def test_a_run_request_stuck_behind_a_seqno_gap_expires():
    async def scenario():
        rt = make_runtime([])
        rt.settings.stream_attach_timeout_s = 0.05
        rt.on_append("gap", 1, run_request("mine"), b"")  # seqno 0 never comes
        run = rt.run("gap")
        await until(lambda: run.terminal and "gap" not in rt.channels, "the stuck run to expire")
        return run, rt.channels

    run, channels = asyncio.run(scenario())
    assert run.terminal and run.outcome == "failed" and "gap" not in channels


# ---- issue 10.8: no hang, no bare answer ---------------------------------------------------------------

UNKNOWN_EXEC = apb.AgentClientMessage(exec_client_message=apb.ExecClientMessage(id=5, read_result=apb.ReadResult()))


async def drain(run) -> list[bytes]:
    """What the stream server would write for this run."""
    return [chunk async for chunk in run.frames()]


def end_error(chunks: list[bytes]):
    from byok.wire import connect

    frames = connect.decode_all(b"".join(chunks))
    assert frames[-1].end_stream
    return connect.parse_end_stream(frames[-1].payload)


def test_a_run_failing_in_the_same_tick_it_starts_still_ends_and_its_runsse_gets_the_error():
    """run_request and a bad message processed in one go: the turn task is cancelled before its
    first step, so it never runs its own `finish`."""
    async def scenario():
        started = []
        rt = make_runtime(started)
        rt.on_append("r", 0, run_request("mine"), b"")
        rt.on_append("r", 1, UNKNOWN_EXEC, b"")
        await until(lambda: rt.run("r").terminal, "the run to end")
        run = rt.stream_run("r")  # the RunSSE reaches the stream server only now
        assert run is not None and run.terminal and not run.stream_attached
        run.attach_stream()
        return started, await drain(run), rt.stream_run("r")

    started, chunks, again = asyncio.run(scenario())
    assert started == []  # the turn never ran
    error = end_error(chunks)
    assert error.code.value == "invalid_argument" and "exec" in error.message.lower()
    assert again is None  # handed out once


def test_a_run_failing_before_its_runsse_attached_is_kept_for_that_runsse():
    async def scenario():
        started = []
        rt = make_runtime(started)
        rt.settings.stream_attach_timeout_s = 0.3
        rt.on_append("r", 0, run_request("mine"), b"")
        await until(lambda: started, "the turn to run (its stream not there yet)")
        rt.on_append("r", 1, UNKNOWN_EXEC, b"")
        await until(lambda: rt.run("r").terminal, "the run to end")
        run = rt.stream_run("r")  # waiting for its stream, or ended: either way that RunSSE gets the end
        run.attach_stream()
        chunks = await drain(run)
        # a run that never started its turn (its run_request behind a rejected seqno) ends at once and
        # waits, unclaimed, for its RunSSE until the attach timeout
        rt.on_append("s", 1, run_request("mine"), b"")
        rt.reject_append("s", 0, "empty data")
        kept = await until(lambda: (s := rt.run("s")) is not None and s.terminal and s, "the unstarted run to end")
        await until(lambda: rt.run("s") is None, "the unclaimed run to be dropped after the attach timeout")
        return chunks, kept, rt.run("s")

    chunks, kept, later = asyncio.run(scenario())
    assert end_error(chunks).code.value == "invalid_argument"
    assert kept is not None and kept.terminal and later is None


def test_a_rejected_append_ends_the_local_run_at_once():
    async def scenario():
        rt = make_runtime([])
        rt.on_append("r", 0, run_request("mine"), b"")
        run = rt.run("r")
        assert rt.reject_append("r", 1, "data is not hex") is Route.LOCAL
        await until(lambda: run.terminal, "the run to end")
        return run

    run = asyncio.run(scenario())
    assert run.terminal and run.outcome == "failed"


def test_a_rejection_before_the_route_ends_the_run_once_it_is_local():
    async def scenario():
        rt = make_runtime([])
        assert rt.reject_append("r", 2, "empty data") is None  # no route yet: the client gets its 400
        assert rt.reject_append("u", 1, "empty data") is None
        rt.on_append("r", 0, run_request("mine"), b"")
        rt.on_append("u", 0, run_request("cursor-model"), b"")
        run = rt.run("r")
        await until(lambda: run.terminal, "the run to end")
        return run, rt.rejected_early, rt.reject_append("u", 3, "again")

    run, early, upstream = asyncio.run(scenario())
    assert run.terminal and run.outcome == "failed"
    assert upstream is Route.UPSTREAM and "r" not in early


def test_a_rejection_that_loses_nothing_or_comes_from_another_client_ends_nothing():
    async def scenario():
        rt = make_runtime([])
        rt.on_append("r", 0, run_request("mine"), b"")
        rt.on_append("r", 1, HEARTBEAT, b"")
        run = rt.run("r")
        assert rt.reject_append("r", 1, "a bad duplicate of a delivered seqno") is Route.LOCAL
        assert rt.reject_append("r", 2, "from a client that may not use the run", local_allowed=False) \
            is Route.REFUSED
        # ending a run is decided synchronously (Run.fail): nothing pending means nothing will end it
        alive = not run.terminal and run._fail_with is None
        rt.on_append("r", 3, HEARTBEAT, b"")  # held behind 2
        assert rt.reject_append("r", 3, "a bad copy of a held seqno") is Route.LOCAL
        alive = alive and not run.terminal and run._fail_with is None
        await rt.shutdown(timeout=1)
        return alive

    assert asyncio.run(scenario())


def test_the_stream_server_never_answers_a_runsse_without_an_end_stream():
    from byok.wire import connect
    from byok.transports.stream_server import AUTH_HEADER, RUN_HEADER, StreamServer

    async def ask(server, request_id: str) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        proof = server.secret.proof(RUN_HEADER, request_id)
        writer.write(f"POST /RunSSE HTTP/1.1\r\n{RUN_HEADER}: {request_id}\r\n{AUTH_HEADER}: {proof}\r\n"
                     "content-length: 0\r\n\r\n".encode())
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        body = await reader.readexactly(length)
        writer.close()
        return head + body

    async def scenario():
        rt = make_runtime([])
        rt.on_append("live", 0, run_request("mine"), b"")
        rt.run("live").attach_stream()  # a first RunSSE already streams it
        server = StreamServer(rt.stream_run)
        await server.start()
        try:
            return await ask(server, "gone"), await ask(server, "live")
        finally:
            await rt.shutdown(timeout=1)
            await server.stop(timeout=1)

    for answer, code in zip(asyncio.run(scenario()), ("not_found", "already_exists")):
        head, body = answer.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 200 ") and b"application/connect+proto" in head
        [frame] = connect.decode_all(body)
        assert frame.end_stream and connect.parse_end_stream(frame.payload).code.value == code


def test_a_local_run_belongs_to_the_user_of_its_run_request():
    async def scenario():
        rt = make_runtime([])
        assert rt.on_append("a", 0, run_request("mine"), b"", user="alice") is Route.LOCAL
        assert rt.run("a").user == "alice"
        inbox = rt.channels["a"].inbox
        assert inbox.next_seqno == 1
        assert rt.on_append("a", 1, HEARTBEAT, b"", user="bob") is Route.REFUSED
        assert rt.on_append("a", 1, HEARTBEAT, b"", user=None) is Route.REFUSED
        assert inbox.next_seqno == 1  # nothing of bob's reached alice's run, not even its seqno
        assert rt.on_append("a", 1, HEARTBEAT, b"", user="alice") is Route.LOCAL
        assert inbox.next_seqno == 2
        await rt.shutdown(timeout=1)

    asyncio.run(scenario())
