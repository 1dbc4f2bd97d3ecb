"""Issue 14: observe mode records HTTP/2 Runs without answering them. A Run on the user's own model goes
to (fake) Cursor like any other, both directions stream through untouched, every frame is in the store
in stream order, and the `-w` flow file keeps both bodies for the Cursor Agent view."""

from __future__ import annotations

import sqlite3

import pytest
from mitmproxy import io as mitmio

from byok import contentview
from byok.cli.client import user_turn_request
from tests.e2e.conftest import run, start_proxy
from tests.support.fake_h2_cursor import FakeH2Cursor
from tests.support.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]


def test_observe_mode_records_a_run_without_answering_it(tmp_path, provider):
    with FakeH2Cursor() as upstream:
        proxy, ids = start_proxy(tmp_path, provider, upstream, byok_mode="observe", byok_upstream_probe_ms="0",
                                 save_stream_file=str(tmp_path / "flows.mitm"))
        try:
            async def scenario():
                async with proxy.h2_client() as client:
                    result = await client.run(user_turn_request("observe me", model_id=ids["openai_chat"],
                                                                conversation_id="conv-observe-h2"),
                                              request_id="observed-run")
                    # the request side ends after the response: until Cursor's backend saw it end
                    await until(lambda: upstream.runs and upstream.runs[0].request_ended, "the request to end upstream")
                    return result, client

            result, client = run(scenario())
            calls = len(provider.requests)
        finally:
            proxy.stop()
        [seen] = upstream.runs
    assert calls == 0  # nothing answered locally, even on the user's model
    assert result.end_error is None and result.text() == "official answer"
    assert bytes(client.received["observed-run"]) == bytes(seen.response)
    assert bytes(client.sent["observed-run"]) == bytes(seen.request)
    assert seen.request_ended and seen.request_ended_at > seen.response_ended_at

    rows = sqlite3.connect(proxy.db).execute(
        "SELECT direction, seq, kind, conversation_id FROM frames WHERE request_id = 'observed-run'"
        " ORDER BY direction, seq").fetchall()
    assert [(d, s, k) for d, s, k, _ in rows] == [
        ("down", 0, "kv_server_message.set_blob_args"), ("down", 1, "interaction_update.text_delta"),
        ("down", 2, "interaction_update.text_delta"), ("down", 3, "end_stream"),
        ("up", 0, "run_request"), ("up", 1, "kv_client_message")]
    assert {c for *_, c in rows} == {"conv-observe-h2"}

    with open(tmp_path / "flows.mitm", "rb") as f:
        flows = [fl for fl in mitmio.FlowReader(f).stream() if fl.request.path == "/agent.v1.AgentService/Run"]
    # mitmproxy's `-w` saves a flow when its response ends and, since the request of a Run ends later,
    # once more at shutdown with the whole request: the last copy is complete
    assert len({f.id for f in flows}) == 1
    flow = flows[-1]
    assert flow.request.raw_content == bytes(seen.request) and flow.response.raw_content == bytes(seen.response)
    view = contentview.CursorAgentView()
    title, lines = view.render(flow.request.raw_content, content_type="application/connect+proto", flow=flow,
                        http_message=flow.request)
    assert title == "Cursor Agent: Run request: 2 frame(s), ended"  # not "no end-stream yet" (issue 24.4.14)
    text = ["".join(t for _, t in line) for line in lines]
    assert "run_request" in text[0] and "model=" in text[0] and "kv_client_message" in text[2]
    title, _ = view.render(flow.response.raw_content, content_type="application/connect+proto", flow=flow,
                    http_message=flow.response)
    assert title == "Cursor Agent: Run response: 4 frame(s), ended"
