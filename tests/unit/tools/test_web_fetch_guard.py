"""Issue 24.3: the WebFetch guard fails closed, and checks redirects itself before they are followed.

No network: name resolution is made to fail through the loop's resolver, and the redirect walk's
client answers from a table (tests/support/web_walk.py)."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from byok.agent.cursor.tools import interaction as it
from byok.agent.cursor.tools.base import RunToolContext
from byok.agent.web import WebTools
from byok.agent.web.fetch import MAX_REDIRECTS, FetchPolicy, FetchRefused
from byok.proto import agent_pb2 as apb
from tests.support.fake_call_io import FakeCallIO, run_tool
from tests.support.web_walk import walk_client

PUBLIC = "https://93.184.215.14"


def test_a_name_that_does_not_resolve_is_refused(monkeypatch):
    async def no_dns(self, *args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(asyncio.BaseEventLoop, "getaddrinfo", no_dns)

    async def scenario():
        with pytest.raises(FetchRefused, match="does not resolve here"):
            await FetchPolicy().check("https://docs.example.org/page")
        with pytest.raises(FetchRefused, match="does not resolve"):
            await FetchPolicy().check("https:///no-host")
        await FetchPolicy(allow_private=True).check("https://docs.example.org/page")  # the user turned it off

    asyncio.run(scenario())


@pytest.mark.parametrize("location, why", [
    ("http://169.254.169.254/latest/meta-data", "link-local address"),
    ("http://127.0.0.1:8080/admin", "loopback address"),
    ("http://[::1]/", "loopback address"),
    ("file:///etc/passwd", r"not an http\(s\) URL"),
])
def test_a_redirect_is_checked_before_it_is_requested(location, why):
    http, seen = walk_client({f"{PUBLIC}/a": (302, location)})

    async def scenario():
        with pytest.raises(FetchRefused, match=why) as refused:
            await FetchPolicy().follow(f"{PUBLIC}/a", http)
        return str(refused.value)

    message = asyncio.run(scenario())
    assert message.startswith(f"{PUBLIC}/a redirects to ")
    assert seen == [f"{PUBLIC}/a"]  # the private hop was never requested


def test_the_walk_ends_where_the_redirects_end():
    http, seen = walk_client({f"{PUBLIC}/a": (301, "/b?x=1"), f"{PUBLIC}/b?x=1": (307, "https://93.184.215.15/c"),
                              "https://93.184.215.15/c": (200, None)})
    assert asyncio.run(FetchPolicy().follow(f"{PUBLIC}/a", http)) == "https://93.184.215.15/c"
    assert seen == [f"{PUBLIC}/a", f"{PUBLIC}/b?x=1", "https://93.184.215.15/c"]
    http, seen = walk_client()
    assert asyncio.run(FetchPolicy(check_redirects=False).follow(f"{PUBLIC}/a", http)) == f"{PUBLIC}/a"
    assert asyncio.run(FetchPolicy(allow_private=True).follow(f"{PUBLIC}/a", http)) == f"{PUBLIC}/a"
    assert seen == []  # off: the proxy requests nothing


def test_an_endless_or_unreachable_chain_is_refused():
    loop_http, seen = walk_client({f"{PUBLIC}/a": (302, f"{PUBLIC}/b"), f"{PUBLIC}/b": (302, f"{PUBLIC}/a")})
    with pytest.raises(FetchRefused, match=f"more than {MAX_REDIRECTS} times"):
        asyncio.run(FetchPolicy().follow(f"{PUBLIC}/a", loop_http))
    assert len(seen) == MAX_REDIRECTS + 1

    def down(request):
        raise httpx.ConnectError("connection refused", request=request)

    down_http = httpx.AsyncClient(transport=httpx.MockTransport(down))
    with pytest.raises(FetchRefused, match="could not check where .* leads .*ConnectError"):
        asyncio.run(FetchPolicy().follow(f"{PUBLIC}/a", down_http))
    with pytest.raises(FetchRefused, match="no HTTP client"):
        asyncio.run(FetchPolicy().follow(f"{PUBLIC}/a", None))


APPROVED = ("web_fetch_request_response", apb.WebFetchRequestResponse(approved=apb.WebFetchRequestResponse.Approved()))


def tool_io(http) -> FakeCallIO:
    return FakeCallIO(context=RunToolContext(conversation_id="c", workspace_paths=("/ws",), mode="agent",
                                             web=WebTools(http=http)))


def test_cursor_fetches_the_checked_end_of_the_redirects():
    http, _ = walk_client({f"{PUBLIC}/short": (302, f"{PUBLIC}/long/page")})
    io = tool_io(http)
    fetched = apb.FetchResult(success=apb.FetchSuccess(url=f"{PUBLIC}/long/page", content="# Page", status_code=200,
                                                       content_type="text/markdown"))
    io.reply(APPROVED)
    io.reply(("fetch_result", fetched))
    card, out = run_tool(it.WEB_FETCH, {"url": f"{PUBLIC}/short"}, io)
    assert card.url == f"{PUBLIC}/short"  # the user approved the URL the model named
    assert io.sent[1].message.fetch_args.url == f"{PUBLIC}/long/page"
    assert out.result.success.url == f"{PUBLIC}/long/page" and not out.is_error


def test_a_redirect_to_a_private_address_is_refused_before_cursor_fetches():
    http, _ = walk_client({f"{PUBLIC}/short": (302, "http://192.168.1.1/admin")})
    io = tool_io(http)
    io.reply(APPROVED)
    _, out = run_tool(it.WEB_FETCH, {"url": f"{PUBLIC}/short"}, io)
    assert out.is_error and "redirects to http://192.168.1.1/admin points to a private address" in out.content
    assert [m.kind for m in io.sent] == ["query"]  # approved, but no fetch exec was sent


def test_where_cursors_own_fetch_ended_is_checked_after():
    http, _ = walk_client()
    io = tool_io(http)
    fetched = apb.FetchResult(success=apb.FetchSuccess(url="http://10.0.0.5/", content="x", status_code=200))
    io.reply(APPROVED)
    io.reply(("fetch_result", fetched))
    _, out = run_tool(it.WEB_FETCH, {"url": f"{PUBLIC}/a"}, io)
    assert out.is_error and "redirected to http://10.0.0.5/ points to a private address" in out.content
