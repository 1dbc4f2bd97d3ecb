"""The subagent capability's pieces that need no proxy: the live registry of child runs, the model choice."""

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


# ---- model resolution ---------------------------------------------------------------------------------------


def _resolver(overrides=()):
    from types import SimpleNamespace

    from byok.providers.config import ModelRoute
    from byok.agent.subagents import Subagents
    from byok.proto import agent_pb2 as apb

    def route(public_id, model_id, display_name):
        return ModelRoute(public_id=public_id, provider="p", kind="openai_chat", base_url="http://127.0.0.1:1",
                          model_id=model_id, display_name=display_name)

    parent = route("pub-parent", "parent-1", "Parent Model")
    models = [parent, route("pub-a", "a-1", "Model A"), route("pub-b", "b-1", "Model B")]
    request = apb.AgentRunRequest(subagent_model_overrides=list(overrides))
    subagents = Subagents.__new__(Subagents)
    subagents.turn = SimpleNamespace(route=parent, request=request, svc=SimpleNamespace(user_models=lambda: models),
                                     run=SimpleNamespace(request_id="req-model"))
    return subagents


def test_subagent_model_resolution_order():
    """subagent_model_overrides, then Task.model, then the type's model, then the parent's."""
    import pytest

    from byok.agent.subagents import Kind
    from byok.proto import agent_pb2 as apb

    typed = Kind("reviewer", model="Model B")
    override = apb.SubagentModelOverride(subagent_type="reviewer", model=apb.RequestedModel(model_id="override-x"))
    # the override wins over Task.model and the type's model, and is used as given
    assert _resolver([override])._model("reviewer", "pub-a", typed) == "override-x"
    # an override for another type does not apply
    other = apb.SubagentModelOverride(subagent_type="explore", model=apb.RequestedModel(model_id="override-x"))
    assert _resolver([other])._model("reviewer", "Model A", typed) == "pub-a"  # Task.model, by display name
    assert _resolver()._model("reviewer", "pub-a", typed) == "pub-a"  # Task.model, by public id
    assert _resolver()._model("reviewer", "", typed) == "pub-b"  # the type's model
    assert _resolver()._model("reviewer", "", Kind("reviewer", model="b-1")) == "pub-b"  # by provider model id
    assert _resolver()._model("reviewer", "", Kind("reviewer")) == "pub-parent"  # the parent's
    assert _resolver()._model("reviewer", "inherit", Kind("reviewer", model="inherit")) == "pub-parent"
    # a type naming a model that is not configured runs on the parent's
    assert _resolver()._model("reviewer", "", Kind("reviewer", model="gpt-unknown")) == "pub-parent"
    # inherit: the parent's, whatever Task.model says
    inherit = apb.SubagentModelOverride(subagent_type="reviewer", inherit=True)
    assert _resolver([inherit])._model("reviewer", "pub-a", typed) == "pub-parent"
    disabled = apb.SubagentModelOverride(subagent_type="reviewer", disabled=True)
    with pytest.raises(LookupError, match="disabled"):
        _resolver([disabled])._model("reviewer", "pub-a", typed)
    with pytest.raises(LookupError, match=r"Model A \(pub-a\)"):  # a Task.model that is not one of yours
        _resolver()._model("reviewer", "gpt-unknown", typed)
