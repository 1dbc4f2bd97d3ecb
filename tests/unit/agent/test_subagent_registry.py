"""The subagent capability's pieces that need no proxy: the live registry of child runs."""

from __future__ import annotations

import asyncio

from byok.agent.run import Run
from byok.agent.subagents import Registry


def test_the_registry_forgets_a_child_when_its_run_ends():
    async def scenario():
        registry = Registry()
        release = asyncio.Event()

        async def turn(run):
            await release.wait()

        child = Run("child-request")
        child.attach_stream()
        child.start(turn)
        registry.add("parent", "call_1", child, "child-conversation")
        assert registry.child("parent", "call_1") == (child, "child-conversation")
        assert registry.child("other-parent", "call_1") is None  # call ids are per conversation
        assert registry.by_agent("parent", "child-conversation") == ("call_1", child)
        assert registry.by_agent("other-parent", "child-conversation") is None
        release.set()
        await child.wait()
        await asyncio.gather(*registry._watchers)
        return registry.children

    assert asyncio.run(scenario()) == {}
