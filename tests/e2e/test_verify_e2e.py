"""`cursor-byok verify` on traffic a real mitmdump recorded in observe mode: the Cursor-like clients run
against fake Cursor backends (an HTTP/2 Run, and RunSSE + BidiAppend with appends in both forms), and
verify (the CLI, as a user runs it) confirms the assumptions that traffic bears on. And the same
recording in intercept mode, a turn answered locally: live traffic confirms them too."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from byok.agent.cursor import updates
from byok.cli.client import user_turn_request
from byok.proto import agent_pb2 as apb
from byok.wire import connect
from tests.e2e.conftest import run, start_proxy
from tests.support.fake_cursor import FakeCursor
from tests.support.fake_h2_cursor import FakeH2Cursor
from tests.support.scripted_provider import CHAT, Usage
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
CLI = str(Path(sys.executable).with_name("cursor-byok"))
VERSION = "3.16.17"
SECRET_TEXT = "verify-e2e-private-words"
BLOB = json.dumps({"role": "assistant", "content": "official " * 50}).encode()
OFFICIAL = [
    connect.encode_envelope(updates.text_delta("observed ").SerializeToString()),
    connect.encode_envelope(updates.kv_set(0, hashlib.sha256(BLOB).digest(), BLOB).SerializeToString()),
    connect.encode_envelope(updates.text_delta("answer").SerializeToString()),
    connect.encode_end_stream(),
]


def wait_rows(db: Path, sql: str, count: int, timeout: float = 10) -> list[tuple]:
    """At least `count` rows of `sql`, or a failure naming what never came."""

    def rows() -> list[tuple]:
        conn = sqlite3.connect(db)
        try:
            found = conn.execute(sql).fetchall()
        finally:
            conn.close()
        return found if len(found) >= count else []

    return wait_until(rows, f"{count} row(s) of {sql}", timeout)


def verify(db: Path) -> tuple[int, dict, str]:
    done = subprocess.run([CLI, "verify", "--db", str(db), "--json"], capture_output=True, text=True, timeout=60)
    assert done.stderr == "", done.stderr
    return done.returncode, {a["id"]: a for a in json.loads(done.stdout)["assumptions"]}, done.stdout


def test_observe_mode_traffic_confirms_the_run_and_append_assumptions(tmp_path, provider):
    with FakeH2Cursor() as h2_upstream:
        proxy, ids = start_proxy(tmp_path / "h2", provider, h2_upstream, byok_mode="observe",
                                 byok_upstream_probe_ms="0")
        try:
            async def h2_scenario():
                async with proxy.h2_client(client_version=VERSION) as client:
                    return await client.run(user_turn_request(SECRET_TEXT, model_id=ids["openai_chat"],
                                                              conversation_id="conv-verify-h2"),
                                            request_id="req-verify-h2",
                                            first_messages=[apb.AgentClientMessage(client_heartbeat=apb.ClientHeartbeat())])

            result = run(h2_scenario())
            assert result.end_error is None
            # the Run's row is written once both sides ended (the request after the response)
            wait_rows(proxy.db, "SELECT 1 FROM rpc_streams WHERE request_end_ms IS NOT NULL", 1)
        finally:
            proxy.stop()
        h2_db = proxy.db

    with FakeCursor(script_frames=OFFICIAL, frame_delay_s=0.02) as upstream:
        proxy, ids = start_proxy(tmp_path / "sse", provider, upstream, byok_mode="observe")
        try:
            async def sse_scenario():
                for form, gz in (("data", False), ("data_binary", True)):
                    async with proxy.client(client_version=VERSION, append_form=form, gzip_appends=gz) as client:
                        result = await client.run(user_turn_request(SECRET_TEXT, model_id="claude-4.5-sonnet",
                                                                    conversation_id=f"conv-verify-{form}"),
                                                  request_id=f"req-verify-{form}")
                        assert result.end_error is None

            run(sse_scenario())
            wait_rows(proxy.db, "SELECT 1 FROM bidi_appends", 4)
        finally:
            proxy.stop()
        sse_db = proxy.db

    code, got, out = verify(h2_db)
    assert code == 0, out
    for assumption_id in ("run.headers", "run.first_message", "run.request_end", "kv.ack", "schema.unknown_fields",
                          "hosts.classified"):
        assert got[assumption_id]["verdict"] == "confirmed", (assumption_id, got[assumption_id])
    assert got["run.headers"]["client_versions"] == [VERSION]
    assert got["run.first_message"]["details"]["starts"] == {"run: client_heartbeat > run_request": 1}
    assert got["run.request_end"]["counts"]["after"] == 1
    assert got["appends.seqno"]["verdict"] == "not_seen"  # an HTTP/2 Run has no appends

    code, got, out = verify(sse_db)
    assert code == 0, out
    for assumption_id in ("run_sse.headers", "run.first_message", "appends.form", "appends.seqno", "kv.ack",
                          "schema.unknown_fields", "hosts.classified"):
        assert got[assumption_id]["verdict"] == "confirmed", (assumption_id, got[assumption_id])
    assert got["appends.form"]["details"]["forms_by_client_version"] == {VERSION: {"data": 2, "data_binary": 2}}
    assert got["appends.form"]["counts"]["encoding_gzip"] == 2
    assert got["kv.ack"]["counts"]["acked_sets"] == 2
    assert got["run.headers"]["verdict"] == "not_seen"
    for leaked in (SECRET_TEXT, "official official"):
        assert leaked not in out


def test_live_mode_traffic_of_a_local_turn_confirms_them_too(tmp_path, provider, fresh_provider):
    """Intercept mode, a turn on the user's model answered here, over HTTP/2 and over RunSSE."""
    proxy, ids = start_proxy(tmp_path, provider)
    try:
        async def scenario():
            for h2 in (True, False):
                provider.enqueue("openai_chat", CHAT.text_reply("local answer", usage=Usage(10, 2)))
                client = proxy.h2_client(client_version=VERSION) if h2 else proxy.client(client_version=VERSION,
                                                                                         append_form="data_binary")
                async with client:
                    result = await client.run(user_turn_request(SECRET_TEXT, model_id=ids["openai_chat"],
                                                                conversation_id=f"conv-live-{h2}"),
                                              request_id=f"req-live-{'h2' if h2 else 'sse'}")
                    assert result.end_error is None and result.text() == "local answer"

        run(scenario())
        wait_rows(proxy.db, "SELECT 1 FROM rpc_streams", 2)
    finally:
        proxy.stop()
    code, got, out = verify(proxy.db)
    assert code == 0, out
    for assumption_id in ("run.headers", "run_sse.headers", "run.first_message", "run.request_end", "appends.form",
                          "appends.seqno", "kv.ack", "schema.unknown_fields", "hosts.classified"):
        assert got[assumption_id]["verdict"] == "confirmed", (assumption_id, got[assumption_id])
    assert SECRET_TEXT not in out
