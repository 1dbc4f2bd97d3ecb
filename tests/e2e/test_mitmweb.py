"""Issue 5/5: frames in mitmweb. A real headless `mitmweb -s addon/cursor_byok.py`; a turn driven by the
Cursor-like client; the flow read back through mitmweb's REST API with the Cursor Agent view, while
the RunSSE stream runs (partial frames) and after it ended (every frame, the end-stream); the frames
of both directions in the store."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import statistics
import time

import httpx
import pytest

from byok.wire import connect
from byok.cli.client import user_turn_request
from byok.proto import agent_pb2 as apb
from tests.e2e.conftest import run, start_proxy
from tests.e2e.harness import WEB_TOKEN
from tests.support.waiting import until
from tests.support.scripted_provider import CHAT, Ev, Sse

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

VIEW = "Cursor%20Agent"  # the view's name, URL-encoded as mitmweb's UI does
RUN_SSE = "/agent.v1.AgentService/RunSSE"
BIDI_APPEND = "/aiserver.v1.BidiService/BidiAppend"
FRAME_HEAD = re.compile(r"^\[(\d+)\] (?:after end-stream! )?(MSG|END) ")


@pytest.fixture(scope="module")
def web(tmp_path_factory, provider, upstream):
    proxy, ids = start_proxy(tmp_path_factory.mktemp("web"), provider, upstream, binary="mitmweb",
                             byok_route_wait_s="5")
    yield proxy, ids["openai_chat"]
    proxy.stop()


def slow(script: Sse, delay_s: float) -> Sse:
    """The same events with a pause before each content event, so a test can look mid-stream."""
    return Sse([Ev(item, delay_s=delay_s if n else 0) for n, item in enumerate(script.items)])


class Web:
    """mitmweb's REST API (mitmweb 12: a bearer token on every call)."""

    def __init__(self, base: str) -> None:
        self.http = httpx.AsyncClient(base_url=base, trust_env=False, timeout=10,
                                      headers={"authorization": f"Bearer {WEB_TOKEN}"})

    async def flows(self) -> list[dict]:
        return (await self.http.get("/flows")).json()

    async def view(self, flow_id: str, part: str, view: str = VIEW) -> tuple[str, list[str]]:
        body = (await self.http.get(f"/flows/{flow_id}/{part}/content/{view}.json")).json()
        title, *lines = body["text"].split("\n")  # the view's title is its first line
        return title, lines

    async def find(self, path: str, needle: str, timeout: float = 10) -> dict:
        """The flow on `path` whose decoded request mentions `needle` (a request id)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for flow in await self.flows():
                if flow["request"]["path"] == path:
                    _, lines = await self.view(flow["id"], "request")
                    if any(needle in line for line in lines):
                        return flow
            await asyncio.sleep(0.05)
        raise AssertionError(f"no {path} flow for {needle} in mitmweb")

    async def aclose(self) -> None:
        await self.http.aclose()


def stored_frames(proxy, request_id: str, columns: str, enough, timeout: float = 5) -> list[tuple]:
    db = sqlite3.connect(proxy.db)
    try:
        deadline = time.monotonic() + timeout
        while True:
            rows = db.execute(f"SELECT {columns} FROM frames WHERE request_id = ? ORDER BY direction, seq",
                              [request_id]).fetchall()
            if enough(rows) or time.monotonic() > deadline:
                return rows
            time.sleep(0.05)
    finally:
        db.close()


def frame_heads(lines: list[str]) -> list[str]:
    return [line for line in lines if FRAME_HEAD.match(line)]


def test_runsse_frames_in_mitmweb_while_streaming_and_after(web, provider):
    proxy, model = web
    words = ["alpha ", "bravo ", "charly", " delta"]  # equal lengths: the provider cuts text evenly
    provider.enqueue("openai_chat", slow(CHAT.text_reply("".join(words), pieces=4), 0.6))
    request_id = "req-web-live"

    async def scenario():
        api = Web(proxy.web_url)
        seen_by_client: dict[str, float] = {}

        async def on_frame(frame):
            if frame.kind == "interaction_update.text_delta":
                seen_by_client.setdefault(frame.message.interaction_update.text_delta.text, time.monotonic())

        request = user_turn_request("stream slowly", model_id=model, conversation_id="conv-web-live")
        async with proxy.client() as client:
            task = asyncio.ensure_future(client.run(request, request_id=request_id, on_frame=on_frame))
            flow = await api.find(RUN_SSE, request_id)
            # mid-stream: each text delta shows up in mitmweb while the stream is still open
            latencies, mid = [], None
            for word in words[:3]:
                while word not in seen_by_client:
                    await asyncio.sleep(0.01)
                while True:
                    description, lines = await api.view(flow["id"], "response")
                    if any(f'"text": "{word}"' in line for line in lines):
                        latencies.append(time.monotonic() - seen_by_client[word])
                        break
                    await asyncio.sleep(0.02)
                assert not task.done(), "the stream should still be running"
                mid = (description, lines)
            live_flow = next(f for f in await api.flows() if f["id"] == flow["id"])
            result = await task
        # after: the whole body, every frame, the end-stream
        description, lines = await api.view(flow["id"], "response")
        auto_description, _ = await api.view(flow["id"], "response", view="Auto")
        after_flow = next(f for f in await api.flows() if f["id"] == flow["id"])
        append = await api.find(BIDI_APPEND, "conv-web-live")
        _, append_lines = await api.view(append["id"], "request")
        await api.aclose()
        return result, mid, live_flow, description, lines, auto_description, after_flow, append_lines, latencies

    result, mid, live_flow, description, lines, auto_description, after_flow, append_lines, latencies = run(scenario())
    assert result.end_error is None and result.text() == "".join(words)

    mid_description, mid_lines = mid
    assert mid_description.startswith("Cursor Agent: RunSSE response: ") and "no end-stream yet" in mid_description
    assert not any(" END " in line for line in frame_heads(mid_lines))
    assert any("interaction_update.text_delta" in line for line in mid_lines)
    assert live_flow["response"]["timestamp_end"] is None  # still streaming when looked at
    assert 0 < live_flow["response"]["contentLength"] < after_flow["response"]["contentLength"]

    heads = frame_heads(lines)
    down = result.down()
    assert len(heads) == len(down) and description.endswith(f"{len(down)} frame(s), ended")
    for head, frame in zip(heads, down):
        assert (" END " in head) if frame.kind == "end_stream" else (frame.kind in head), (head, frame.kind)
    assert heads[-1].endswith(" ok")
    assert auto_description == description  # "auto" picks the view
    assert append_lines[1].startswith("run_request  conversation=conv-web-live model=")
    print(f"\nmitmweb live latency (client saw a text delta -> the view shows it), s: "
          f"median {statistics.median(latencies):.3f} max {max(latencies):.3f}")
    assert max(latencies) < 2.0

    # the store: both directions, numbered, with the conversation id (written in batches: poll)
    stored = stored_frames(proxy, request_id, "direction, seq, kind, conversation_id, ts_ms",
                           lambda rows: sum(r[0] == "down" for r in rows) >= len(down))
    stored_down = [r for r in stored if r[0] == "down"]
    stored_up = [r for r in stored if r[0] == "up"]
    assert [r[1] for r in stored_down] == list(range(len(stored_down))) and len(stored_down) == len(down)
    assert stored_up[0][2] == "run_request" and {r[3] for r in stored} == {"conv-web-live"}
    assert [r[4] for r in stored_down] == sorted(r[4] for r in stored_down)


def test_upstream_run_is_decoded_in_mitmweb_and_recorded(web, upstream):
    proxy, _ = web
    request_id = "req-web-official"

    async def scenario():
        api = Web(proxy.web_url)
        async with proxy.client() as client:
            result = await client.run(user_turn_request("official", model_id="gpt-5", conversation_id="conv-official"),
                                      request_id=request_id)
        flow = await api.find(RUN_SSE, request_id)
        view = await api.view(flow["id"], "response")
        await api.aclose()
        return result, view

    result, (description, lines) = run(scenario())
    assert result.text() == "official answer"
    heads = frame_heads(lines)
    assert description.endswith("3 frame(s), ended") and len(heads) == 3
    assert "interaction_update.text_delta" in heads[0] and heads[2].endswith(" ok")
    stored = stored_frames(proxy, request_id, "direction, kind, conversation_id, flags, data", lambda rows: len(rows) >= 4)
    assert [(d, k, c) for d, k, c, _, _ in stored] == [
        ("down", "interaction_update.text_delta", "conv-official"),
        ("down", "interaction_update.text_delta", "conv-official"),
        ("down", "end_stream", "conv-official"),
        ("up", "run_request", "conv-official"),
    ]
    assert "".join(apb.AgentServerMessage.FromString(d).interaction_update.text_delta.text
                   for _, k, _, _, d in stored if k.endswith("text_delta")) == "official answer"
    assert stored[2][3] == connect.FLAG_END_STREAM and stored[2][4] == b"{}"


def test_http2_run_frames_in_mitmweb_both_directions_while_streaming(web, provider):
    """Issue 14: an HTTP/2 Run shows both of its streams live, the client's messages (request) and the
    run's (response), decoded by the Cursor Agent view, and the flow keeps them after it ended."""
    proxy, model = web
    words = ["one ", "two ", "six ", "ten"]
    provider.enqueue("openai_chat", slow(CHAT.text_reply("".join(words), pieces=4), 0.5))
    request_id = "req-web-h2"

    async def scenario():
        api = Web(proxy.web_url)
        seen: set[str] = set()

        def on_frame(frame):
            if frame.kind == "interaction_update.text_delta":
                seen.add(frame.message.interaction_update.text_delta.text)

        request = user_turn_request("stream over h2", model_id=model, conversation_id="conv-web-h2")
        async with proxy.h2_client() as client:
            task = asyncio.ensure_future(client.run(request, request_id=request_id, on_frame=on_frame))
            flow = await api.find("/agent.v1.AgentService/Run", "conv-web-h2")
            while words[1] not in seen:
                await asyncio.sleep(0.01)
            while True:
                mid_response = await api.view(flow["id"], "response")
                mid_request = await api.view(flow["id"], "request")
                if any(f'"text": "{words[1]}"' in line for line in mid_response[1]) and \
                        any("kv_client_message" in line for line in mid_request[1]):
                    break
                await asyncio.sleep(0.02)
            assert not task.done(), "the stream should still be running"
            result = await task
        after_response = await api.view(flow["id"], "response")
        async def request_ended():  # the request side ends after the response: the view says when
            shown = await api.view(flow["id"], "request")
            return shown if shown[0].endswith(", ended") else None

        after_request = await until(request_ended, "the Run request to end")
        after_flow = next(f for f in await api.flows() if f["id"] == flow["id"])
        await api.aclose()
        return result, mid_response, mid_request, after_response, after_request, after_flow

    result, mid_response, mid_request, after_response, after_request, after_flow = run(scenario())
    assert result.end_error is None and result.text() == "".join(words)
    assert mid_response[0].startswith("Cursor Agent: Run response: ") and "no end-stream yet" in mid_response[0]
    assert mid_request[0].startswith("Cursor Agent: Run request: ") and mid_request[0].endswith("still streaming")
    assert "run_request" in frame_heads(mid_request[1])[0]
    assert after_request[0] == f"Cursor Agent: Run request: {len([f for f in result.frames if f.direction == 'up'])}" \
        " frame(s), ended"  # a finished request is not "no end-stream yet" (issue 24.4.14)
    assert after_response[0].endswith(f"{len(result.down())} frame(s), ended")
    up = [f for f in result.frames if f.direction == "up"]
    assert len(frame_heads(after_request[1])) == len(up)
    assert after_flow["request"]["host"] == "agentn.api5.cursor.sh"
    stored = stored_frames(proxy, request_id, "direction, kind", lambda rows: sum(r[0] == "down" for r in rows)
                           >= len(result.down()))
    assert sum(r[0] == "down" for r in stored) == len(result.down())
    assert [k for d, k in stored if d == "up"][0] == "run_request"
