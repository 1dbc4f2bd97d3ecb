"""One conversation of a few hundred turns through a real mitmdump: every provider request carries
the whole history (a turn reads only what it adds, the request is still the whole conversation),
and after a restart (the cold path: the history read from the store) the conversation continues
from the same checkpoint, byte-stable, and resumes."""

from __future__ import annotations

import pytest

from byok.cli.client import resume_request, user_turn_request
from tests.e2e.conftest import run, start_proxy
from tests.support.scripted_provider import CHAT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

TURNS = 250


def test_a_conversation_of_a_few_hundred_turns_keeps_its_whole_history(tmp_path, provider):
    proxy, ids = start_proxy(tmp_path / "home", provider)
    model = ids["openai_chat"]

    async def turns(first: int, last: int, state, conversation_id: str | None):
        async with proxy.client() as client:
            for n in range(first, last + 1):
                provider.enqueue("openai_chat", CHAT.text_reply(f"answer {n}"))
                request = user_turn_request(f"question {n}", model_id=model, conversation_id=conversation_id,
                                            state=state)
                result = await client.run(request)
                assert result.end_error is None, (n, result.end_error)
                state, conversation_id = result.checkpoints()[-1], request.conversation_id
            return state, conversation_id, list(client.get_log)

    try:
        state, conversation, _ = run(turns(1, TURNS, None, None))
        messages = provider.requests[-1].json["messages"]
        assert len(messages) == 1 + 2 * TURNS - 1  # system, then every question and answer so far
        for n in range(1, TURNS + 1):
            assert f"question {n}\n" in messages[2 * n - 1]["content"]
            if n < TURNS:
                assert messages[2 * n]["content"] == f"answer {n}"
        assert len(state.root_prompt_messages_json) == 1 + 2 * TURNS and len(state.turns) == TURNS

        proxy.stop()  # a restart: nothing warm, the next turn folds the history from the store
        proxy.start()
        after, _, gets = run(turns(TURNS + 1, TURNS + 1, state, conversation))
        assert gets == []  # its own checkpoint: nothing to import, nothing fetched back
        again = provider.requests[-1].json["messages"]
        assert again[: len(messages)] == messages and len(again) == len(messages) + 2
        assert list(after.root_prompt_messages_json[: len(state.root_prompt_messages_json)]) == list(
            state.root_prompt_messages_json)
        assert list(after.turns[:TURNS]) == list(state.turns)

        async def resume():
            provider.enqueue("openai_chat", CHAT.text_reply("still here"))
            async with proxy.client() as client:
                return await client.run(resume_request(user_turn_request("", model_id=model,
                                                                         conversation_id=conversation), after))

        resumed = run(resume())
        assert resumed.end_error is None and resumed.text() == "still here"
        last = provider.requests[-1].json["messages"]
        assert last[: len(again)] == again  # the whole history again, then the transient continuation
    finally:
        proxy.stop()
