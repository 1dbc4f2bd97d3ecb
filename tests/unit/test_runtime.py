"""Runtime routing and ordering without sockets: appends, routes, heartbeats, late appends."""

import asyncio

from byok.agent.run import RunSettings
from byok.agent.runtime import Route, RouteTimeout, Runtime
from byok.cli.client import user_turn_request
from byok.proto import agent_pb2 as apb


def make_runtime(started):
    async def never_ending_turn(run):
        started.append(run.request_id)
        await asyncio.sleep(3600)

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
        await asyncio.sleep(0)
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
        await asyncio.sleep(0.05)
        assert seen == ["prepared", "prepared"]
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
        await asyncio.sleep(0.2)
        return run, rt.channels

    run, channels = asyncio.run(scenario())
    assert run.terminal and run.outcome == "failed" and "gap" not in channels
