"""The web, configured or not offered, end to end through a real mitmdump: WebSearch through the hosted
search APIs (keys taken like provider keys), WebSearch and GenerateImage absent without their
tables, WebSearch off when the client turns it off, a failing backend is an error the model sees,
and WebFetch on a loopback page when the user allows private addresses, with its size cap.
(The SearXNG backend, the images endpoint, the loopback refusal and the HTML extraction are in
test_tools.py, with the full card and checkpoint checks.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from byok.cli.client import user_turn_request
from byok.cli.executor import FetchPage, LocalExecutor, ScriptedQueries
from byok.proto import agent_pb2 as apb
from tests.e2e.conftest import run, start_proxy
from tests.e2e.harness import mode_tools
from tests.support.fake_web import FakeWeb
from tests.support.scripted_provider import CHAT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60), pytest.mark.usefixtures("fresh_provider")]

BRAVE_KEY = "brave-test-key-0123456789"


@pytest.fixture(scope="module")
def web():
    with FakeWeb() as fake:
        yield fake


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider):
    home = tmp_path_factory.mktemp("web")
    os.environ["BYOK_TEST_BRAVE_KEY"] = BRAVE_KEY  # mitmdump inherits it, as it would a user's shell
    try:
        proxy, models = start_proxy(home, provider, byok_web_fetch_private="true", byok_web_fetch_max_kb="1")
    finally:
        del os.environ["BYOK_TEST_BRAVE_KEY"]
    base = (home / "providers.toml").read_text()
    yield proxy, models["openai_chat"], home / "providers.toml", base
    proxy.stop()


def configure(env, tables: str) -> None:
    """Rewrite the providers file's web tables; the proxy reloads it at the next run."""
    _, _, path, base = env
    path.write_text(base + "\n" + tables)


def turn(env, provider, calls, *, mode=apb.AGENT_MODE_AGENT, queries=None, executor=None, context=None,
         workspace: Path | None = None):
    proxy, model, _, _ = env
    scripts = [CHAT.tool_calls(calls), CHAT.text_reply("done")] if calls else [CHAT.text_reply("done")]
    provider.enqueue("openai_chat", *scripts)
    before = len(provider.requests)
    request = user_turn_request("search please", model_id=model, mode=mode,
                                workspace=str(workspace) if workspace else None)
    if context:
        request.action.user_message_action.request_context.MergeFrom(context)

    async def scenario():
        async with proxy.client(on_query=(queries or ScriptedQueries()).on_query,
                                on_exec=executor.on_exec if executor else None) as client:
            try:
                return await client.run(request)
            finally:
                if executor is not None:
                    await executor.aclose()

    result = run(scenario())
    assert result.end_error is None, result.end_error
    return result, provider.requests[before:]


def tool_names(request) -> list[str]:
    return [t["function"]["name"] for t in request.json["tools"]]


def tool_result(request, call_id: str) -> str:
    return next(m["content"] for m in request.json["messages"] if m["role"] == "tool" and m["tool_call_id"] == call_id)


SEARCH = ("call_s", "WebSearch", '{"search_term": "python 3.11 tomllib"}')
HITS = [("tomllib - Python docs", "https://docs.python.org/3/library/tomllib.html", "Parse TOML files."),
        ("PEP 680", "https://peps.python.org/pep-0680/", "tomllib: support for parsing TOML")]
EXPECTED = ("Web results for 'python 3.11 tomllib':\n\n"
            "1. tomllib - Python docs\n   https://docs.python.org/3/library/tomllib.html\n   Parse TOML files.\n\n"
            "2. PEP 680\n   https://peps.python.org/pep-0680/\n   tomllib: support for parsing TOML")


def test_web_search_through_brave_with_a_key_from_the_environment(env, provider, web):
    configure(env, f'[web_search]\nkind = "brave"\nbase_url = "{web.base_url}"\napi_key_env = "BYOK_TEST_BRAVE_KEY"\n'
                   "max_results = 5\n")
    web.results = HITS
    before = len(web.requests)
    result, sent = turn(env, provider, [SEARCH])
    [seen] = web.requests[before:]
    assert (seen.method, seen.path) == ("GET", "/res/v1/web/search")
    assert seen.query == {"q": ["python 3.11 tomllib"], "count": ["5"]}
    assert seen.headers["x-subscription-token"] == BRAVE_KEY
    assert tool_result(sent[1], "call_s") == EXPECTED
    success = result.down("interaction_update.tool_call_completed")[0].message.interaction_update \
        .tool_call_completed.tool_call.web_search_tool_call.result.success
    assert [(r.title, r.url, r.chunk) for r in success.references] == HITS
    assert BRAVE_KEY not in env[0].log()


def test_web_search_through_tavily_with_an_inline_key(env, provider, web):
    configure(env, f'[web_search]\nkind = "tavily"\nbase_url = "{web.base_url}"\napi_key = "tvly-test-key"\n')
    web.results = HITS
    before = len(web.requests)
    _, sent = turn(env, provider, [SEARCH])
    [seen] = web.requests[before:]
    assert (seen.method, seen.path, seen.json) == ("POST", "/search", {"query": "python 3.11 tomllib", "max_results": 8})
    assert seen.headers["authorization"] == "Bearer tvly-test-key"
    assert tool_result(sent[1], "call_s") == EXPECTED


def test_a_failing_search_backend_is_an_error_the_model_sees(env, provider, web):
    configure(env, f'[web_search]\nkind = "searxng"\nbase_url = "{web.base_url}"\n')
    web.status = 502
    try:
        _, sent = turn(env, provider, [SEARCH])
    finally:
        web.status = 200
    assert tool_result(sent[1], "call_s") == "The web search for 'python 3.11 tomllib' failed: SearXNG answered HTTP 502"


@pytest.mark.parametrize("mode", ["agent", "ask", "plan", "debug", "multitask"])
def test_web_search_and_generate_image_are_absent_without_configuration(env, provider, web, mode):
    configure(env, "")
    modes = {"agent": apb.AGENT_MODE_AGENT, "ask": apb.AGENT_MODE_ASK, "plan": apb.AGENT_MODE_PLAN,
             "debug": apb.AGENT_MODE_DEBUG, "multitask": apb.AGENT_MODE_MULTITASK}
    _, [sent] = turn(env, provider, [], mode=modes[mode])
    expected = mode_tools(mode)
    assert tool_names(sent) == expected
    assert "WebFetch" in expected  # Cursor fetches pages itself: WebFetch needs no backend


def test_a_model_calling_an_unconfigured_web_tool_gets_a_tool_error(env, provider, web):
    configure(env, "")
    before = len(web.requests)
    queries = ScriptedQueries()
    _, sent = turn(env, provider, [SEARCH], queries=queries)
    assert queries.log == [] and web.requests[before:] == []
    assert "'WebSearch' is not available" in tool_result(sent[1], "call_s")


def test_web_search_is_off_when_the_client_turns_it_off(env, provider, web):
    configure(env, f'[web_search]\nkind = "searxng"\nbase_url = "{web.base_url}"\n')
    _, [on] = turn(env, provider, [], context=apb.RequestContext(web_search_enabled=True))
    _, [off] = turn(env, provider, [], context=apb.RequestContext(web_search_enabled=False))
    assert "WebSearch" in tool_names(on)
    assert tool_names(off) == [t for t in tool_names(on) if t != "WebSearch"]


def test_web_fetch_reaches_a_loopback_page_when_the_user_allows_it_and_caps_its_size(env, provider, web, tmp_path):
    """This proxy runs with byok_web_fetch_private=true and byok_web_fetch_max_kb=1."""
    configure(env, "")
    small, big = "http://127.0.0.1:8000/notes.txt", "http://localhost:8000/big.txt"
    pages = {small: FetchPage("local notes", 200, "text/plain"), big: FetchPage("x" * 5000, 200, "text/plain")}
    executor = LocalExecutor(tmp_path / "ws", pages=pages)
    calls = [("call_a", "WebFetch", json.dumps({"url": small})), ("call_b", "WebFetch", json.dumps({"url": big}))]
    _, sent = turn(env, provider, calls, executor=executor, workspace=tmp_path / "ws")
    assert sorted(m.fetch_args.url for m in executor.log) == sorted(pages)
    assert tool_result(sent[1], "call_a") == f"URL: {small}\nStatus: 200 (text/plain)\n\nlocal notes"
    capped = tool_result(sent[1], "call_b")
    assert capped == (f"URL: {big}\nStatus: 200 (text/plain)\n\n" + "x" * 1024
                      + "\n\n[The page is larger than 1 KB; only its start was read.]")
