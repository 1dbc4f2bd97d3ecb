"""Replicas (issue 16): two real mitmdump processes on one PostgreSQL, sharing one CA.

- A newer run on replica B fences the older run of the same conversation on replica A at once
  (PostgreSQL NOTIFY): A's provider stream is cut while it still streams, not at A's next write.
- Replica A killed with kill -9 mid-round: the client's retry on B resumes from its staged
  checkpoint; nothing the client was told is lost or done twice.
- A BidiAppend or RunSSE that reaches the wrong replica fails at once, naming both replicas.
"""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from byok.wire import connect
from byok.cli.client import CursorClient, resume_request, user_turn_request
from byok.proto import agent_pb2 as apb
from tests.e2e.conftest import run, start_proxy
from tests.e2e.harness import newer_turn_while_streaming, run_with_executor, stage_then_leave
from tests.support.postgres import sql
from tests.support.scripted_provider import CHAT, Ev, Hang, ScriptedProvider, Sse

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


@pytest.fixture
def provider():
    with ScriptedProvider() as p:
        yield p


@pytest.fixture
def replicas(tmp_path, pg_server, provider):
    """Two proxies on one database; B uses A's CA (replicas share it, as docs/team.md says)."""
    db = pg_server.create_database()
    a, ids = start_proxy(tmp_path / "a", provider, byok_db=db, byok_replica="replica-a", byok_route_wait_s="60")
    (tmp_path / "b" / "mitm").mkdir(parents=True)
    for pem in (tmp_path / "a" / "mitm").glob("mitmproxy-ca*"):
        shutil.copy(pem, tmp_path / "b" / "mitm" / pem.name)
    b, _ = start_proxy(tmp_path / "b", provider, byok_db=db, byok_replica="replica-b", byok_route_wait_s="60")
    try:
        assert "replica=replica-a" in a.log() and "replica=replica-b" in b.log()
        yield a, b, ids["openai_chat"], db
    finally:
        a.stop()
        b.stop()


def test_a_newer_run_on_another_replica_fences_the_older_one_at_once(replicas, provider, tmp_path, capsys):
    a, b, model, db = replicas
    slow = Sse([Ev(item, delay_s=0.4) for item in CHAT.text_reply("a slow answer that gets cut", pieces=12).items])
    provider.enqueue("openai_chat", slow, CHAT.text_reply("the newer answer"))

    async def scenario():
        async with a.client() as on_a, b.client() as on_b:
            return await newer_turn_while_streaming(on_a, on_b, model)

    older, newer = run(scenario())
    assert newer.end_error is None and newer.text() == "the newer answer"
    assert older.end_error.code is connect.Code.CANCELED
    assert "on another replica" in older.end_error.message, older.end_error.message
    assert provider.wait_closed(1).closed_early  # A's provider stream was cut while it streamed
    statuses = dict(sql(db, "SELECT request_id, status FROM runs"))
    assert statuses == {older.request_id: "canceled", newer.request_id: "completed"}
    replicas_of = dict(sql(db, "SELECT request_id, replica FROM runs"))
    assert replicas_of == {older.request_id: "replica-a", newer.request_id: "replica-b"}
    texts = [json.loads(p)["text"] for (p,) in sql(db, "SELECT payload FROM messages WHERE role = 'assistant'")]
    assert texts == ["the newer answer"]

    # the operator's doctor against the server: both replicas, the schema
    from byok.cli import main as cli

    cli(["doctor", "--db", db, "--proxy", a.url, "--confdir", str(a.confdir), "--config", str(a.config),
         "--cursor-settings", str(tmp_path / "none.json"), "--os", "linux"])
    out = capsys.readouterr().out
    assert "team server" in out and "2 replica(s): replica-a (1 runs" in out and "replica-b (1 runs" in out
    assert "schema at m0" in out and "byok@" in out  # the URL shown, without a password


def test_kill9_of_a_replica_mid_round_and_the_retry_on_another_resumes(replicas, provider, tmp_path):
    a, b, model, db = replicas
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("from a\n")
    provider.enqueue("openai_chat", CHAT.tool_calls([("call_a", "Read", json.dumps({"path": str(workspace / "a.txt")}))]))

    request = user_turn_request("read a", model_id=model, workspace=str(workspace))
    staged, blobs = stage_then_leave(a, request, lambda _: a.kill9())
    calls_before = len(provider.requests)
    provider.enqueue("openai_chat", CHAT.text_reply("a says: from a"))

    result, execs = run_with_executor(b, resume_request(request, staged), workspace, blobs=blobs)  # on B
    assert result.end_error is None, result.end_error
    assert [e.WhichOneof("message") for e in execs] == ["read_args"]  # the staged round's tool, run once, on B
    assert len(provider.requests) == calls_before + 1  # no model call repeated
    assert "from a" in provider.requests[-1].json["messages"][-1]["content"]
    cid = request.conversation_id
    runs = sql(db, "SELECT replica, status FROM runs WHERE conversation_id = %s ORDER BY started_at_ms", [cid])
    assert runs == [("replica-a", "canceled"), ("replica-b", "completed")]  # B's claim displaced the dead run
    assert sql(db, "SELECT count(*) FROM messages WHERE conversation_id = %s AND role = 'tool'", [cid]) == [(1,)]


def test_an_append_or_runsse_on_the_wrong_replica_fails_at_once(replicas, provider):
    a, b, model, db = replicas
    provider.enqueue("openai_chat", Hang(30))

    async def scenario():
        async with a.client() as on_a, CursorClient(b.url, b.ca_file) as on_b:
            request_id = "req-sticky-1"
            started = asyncio.Event()

            async def on_frame(frame):
                if frame.kind == "conversation_checkpoint_update":
                    started.set()

            task = asyncio.ensure_future(on_a.run(user_turn_request("hold on", model_id=model),
                                                  request_id=request_id, on_frame=on_frame))
            await started.wait()
            stray = await on_b.append(request_id, apb.AgentClientMessage(client_heartbeat=apb.ClientHeartbeat()),
                                      seqno=1)
            stream = await on_b.run(user_turn_request("x", model_id=model), request_id=request_id,
                                    send_run_request=False)
            on_a.append_soon(request_id, apb.AgentClientMessage(conversation_action=apb.ConversationAction(
                cancel_action=apb.CancelAction())))
            return stray, stream, await task

    stray, stream, original = run(scenario())
    assert stray.status_code == 400
    assert "runs on replica replica-a, not on this one (replica-b)" in stray.json()["message"]
    assert stream.end_error.code is connect.Code.FAILED_PRECONDITION
    assert "sticky routing" in stream.end_error.message
    assert original.end_error.code is connect.Code.CANCELED  # the run on A was untouched until its own cancel
