"""`cursor-byok verify`: recorded traffic (frames built from the real protobufs, wire facts, drift, hosts,
written through the store API the recorder uses) that confirms each assumption, and traffic that
contradicts each one, on SQLite and PostgreSQL; the JSON is redacted; every doc it names exists."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from google.protobuf.internal import encoder

from byok.agent import drift
from byok.agent.cursor import updates
from byok.cli import main
from byok.cli.assumptions import ASSUMPTIONS, OPEN_AT_SHUTDOWN, classify_run_end, seqno_findings
from byok.cli.client import user_turn_request
from byok.proto import agent_pb2 as apb
from byok.store.store import Store
from byok.wire import connect
from tests.unit.cli.test_docs_links import ROOT, anchors

T0 = 1_767_312_000_000  # 2026-01-02T00:00Z
SECRET = "sk-verify-SECRET-0123456789"
USER_TEXT = "please refactor my secret project"
BLOB = json.dumps({"role": "user", "content": USER_TEXT}).encode()
BLOB_ID = hashlib.sha256(BLOB).digest()
OTHER_BLOB = b"another blob " * 10
OTHER_ID = hashlib.sha256(OTHER_BLOB).digest()
GOOD_HEADERS = {"content-type": "application/connect+proto", "connect-protocol-version": "1"}
GOOD_NAMES = ["authorization", "content-type", "connect-protocol-version", "user-agent", "x-cursor-client-version",
              "x-request-id"]


class Traffic:
    """Writes what the recorder writes, for one store."""

    def __init__(self, target: str) -> None:
        self.store = Store.open(target)
        self.seq: dict[tuple[str, str], int] = {}

    def close(self) -> None:
        self.store.close()

    def client(self, request_id: str, version: str = "3.16.17", ts: int = T0) -> None:
        self.store.record_clients([{"request_id": request_id, "client_version": version, "user_agent": "Cursor",
                                    "ts_ms": ts}])

    def frame(self, request_id: str, direction: str, message, ts: int, *, conversation: str | None = None,
              end: bytes | None = None) -> None:
        seq = self.seq.get((request_id, direction), 0)
        self.seq[(request_id, direction)] = seq + 1
        if end is not None:
            kind, flags, data = "end_stream", connect.FLAG_END_STREAM, end
        else:
            kind = message.WhichOneof("message")
            inner = getattr(message, kind)
            if direction == "down" and kind in ("interaction_update", "kv_server_message"):
                kind = f"{kind}.{inner.WhichOneof('message')}"
            flags, data = 0, message.SerializeToString()
        self.store.record_frames([{"request_id": request_id, "conversation_id": conversation, "seq": seq,
                                   "direction": direction, "ts_ms": ts, "kind": kind, "flags": flags, "data": data}])

    def stream(self, request_id: str, rpc: str = "run", *, headers: dict | None = None, names: list[str] | None = None,
               first: list[str] | None = None, http_version: str = "HTTP/2.0", request_end: int | None = T0 + 900,
               response_end: int | None = T0 + 800, error: str | None = None, host: str = "agentn.api5.cursor.sh"):
        self.store.record_wire_facts(streams=[{
            "request_id": request_id, "rpc": rpc, "host": host, "http_version": http_version,
            "header_names": json.dumps(names if names is not None else GOOD_NAMES),
            "headers": json.dumps(headers if headers is not None else GOOD_HEADERS),
            "first_kinds": None if first is None else json.dumps(first), "route": "observe", "started_ms": T0,
            "request_end_ms": request_end, "response_end_ms": response_end, "error": error}])

    def appends(self, request_id: str, arrivals: list[tuple], *, content_type: str = "application/proto") -> None:
        """arrivals: (seqno, form, kind[, problem]) in arrival order."""
        self.store.record_wire_facts(appends=[{
            "request_id": request_id, "seqno": a[0], "form": a[1], "content_type": content_type,
            "content_encoding": None, "kind": a[2], "problem": a[3] if len(a) > 3 else None,
            "arrived_us": (T0 + i) * 1000} for i, a in enumerate(arrivals)])

    def host(self, host: str, rpc: str, matched: bool, count: int = 1) -> None:
        self.store.record_wire_facts(hosts=[{"host": host, "rpc": rpc, "matched": matched, "count": count,
                                             "first_seen_ms": T0, "last_seen_ms": T0}])

    def run_turn(self, request_id: str, conversation: str, *, ack: bool = True, ack_error: bool = False) -> None:
        """A run_request with a secret in it, a SET of a blob with user text, its ACK, the end-stream."""
        request = user_turn_request(f"{USER_TEXT} {SECRET}", model_id="m", conversation_id=conversation)
        self.frame(request_id, "up", apb.AgentClientMessage(run_request=request), T0, conversation=conversation)
        self.frame(request_id, "down", updates.kv_set(0, BLOB_ID, BLOB), T0 + 10, conversation=conversation)
        self.frame(request_id, "down", updates.kv_set(1, OTHER_ID, OTHER_BLOB), T0 + 11, conversation=conversation)
        if ack:
            result = apb.SetBlobResult(error=apb.Error(message=f"disk full at /home/me {SECRET}")) if ack_error \
                else apb.SetBlobResult()
            self.frame(request_id, "up", apb.AgentClientMessage(kv_client_message=apb.KvClientMessage(
                id=1, set_blob_result=apb.SetBlobResult())), T0 + 40, conversation=conversation)
            self.frame(request_id, "up", apb.AgentClientMessage(kv_client_message=apb.KvClientMessage(
                id=0, set_blob_result=result)), T0 + 45, conversation=conversation)
        self.frame(request_id, "down", updates.text_delta(USER_TEXT), T0 + 50, conversation=conversation)
        self.frame(request_id, "down", None, T0 + 60, conversation=conversation, end=b"{}")

    def get(self, request_id: str, conversation: str, blob_id: bytes, *, data: bytes | None, ts: int) -> None:
        self.frame(request_id, "down", updates.kv_get(7, blob_id), ts, conversation=conversation)
        result = apb.GetBlobResult(blob_data=data) if data is not None else apb.GetBlobResult(
            error=apb.Error(message="not found"))
        self.frame(request_id, "up", apb.AgentClientMessage(kv_client_message=apb.KvClientMessage(
            id=7, get_blob_result=result)), ts + 5, conversation=conversation)


def record(target: str, scenario) -> None:
    t = Traffic(target)
    try:
        scenario(t)
    finally:
        t.close()


def verify_json(target: str, capsys, *extra: str) -> tuple[int, dict, str]:
    code = main(["verify", "--db", target, "--json", *extra])
    out = capsys.readouterr().out
    return code, {a["id"]: a for a in json.loads(out)["assumptions"]}, out


def confirming(t: Traffic) -> None:
    # an HTTP/2 Run: heartbeat, then run_request; its request ends 100 ms after the response
    t.client("req-h2")
    t.stream("req-h2", first=["client_heartbeat", "run_request"])
    t.run_turn("req-h2", "conv-h2")
    # a RunSSE run whose appends arrive out of order, once twice, in both forms
    t.client("req-sse", version="3.17.2")
    t.stream("req-sse", "run_sse", headers={"content-type": "application/connect+proto"}, host="api2.cursor.sh",
             request_end=T0, response_end=T0 + 500)
    t.appends("req-sse", [(0, "data", "run_request"), (2, "data_binary", "kv_client_message"),
                          (1, "data_binary", "kv_client_message"), (2, "data_binary", "kv_client_message"),
                          (3, "both", "client_heartbeat")])
    t.run_turn("req-sse", "conv-sse")
    t.get("req-sse", "conv-sse", BLOB_ID, data=BLOB, ts=T0 + 70)  # a GET of an acknowledged blob succeeds
    for host, rpc in (("api2.cursor.sh", "run_sse"), ("api2.cursor.sh", "bidi_append"), ("api2.cursor.sh", "other"),
                      ("agentn.api5.cursor.sh", "run"), ("api3.cursor.sh", "other")):
        t.host(host, rpc, True, 3)


def test_traffic_that_fits_confirms_every_assumption_recorded(db_target, capsys):
    record(db_target, confirming)
    code, got, out = verify_json(db_target, capsys)
    assert code == 0
    assert {i: a["verdict"] for i, a in got.items()} == {
        "run.headers": "confirmed", "run_sse.headers": "confirmed", "run.first_message": "confirmed",
        "run.request_end": "confirmed", "appends.form": "confirmed", "appends.seqno": "confirmed",
        "kv.ack": "confirmed", "schema.unknown_fields": "confirmed", "tab.positions": "not_seen",
        "hosts.classified": "confirmed"}
    assert got["run.headers"]["client_versions"] == ["3.16.17"]
    assert got["run.headers"]["details"]["header_values"]["content-type"] == {"application/connect+proto": 1}
    assert got["run.first_message"]["details"]["starts"] == {"run: client_heartbeat > run_request": 1,
                                                               "run_sse: run_request": 1}
    assert got["run.request_end"]["counts"] == {"after": 1, "request_end_lag_ms_p50": 100, "request_end_lag_ms_max": 100}
    assert got["appends.form"]["counts"] == {"data_binary": 3, "both": 1, "data": 1, "encoding_identity": 5}
    assert got["appends.form"]["details"]["forms_by_client_version"] == {"3.17.2": {"data": 1, "data_binary": 3,
                                                                                    "both": 1}}
    assert got["appends.seqno"]["counts"] == {"requests": 1, "appends": 5, "duplicates": 1, "out_of_order_arrivals": 1,
                                              "requests_with_out_of_order_arrivals": 1}
    kv = got["kv.ack"]["counts"]
    assert (kv["sets"], kv["acked_sets"], kv["gets"], kv["gets_answered"]) == (4, 4, 1, 1)
    assert (kv["ack_ms_p50"], kv["ack_ms_p95"], kv["ack_ms_max"]) == (29, 35, 35)
    assert got["kv.ack"]["client_versions"] == ["3.16.17", "3.17.2"]
    assert got["hosts.classified"]["counts"] == {"hosts": 3, "calls": 15, "classified_calls": 9}
    # redacted: ids, counts, versions and kinds; no content, no key, no blob
    for secret in (SECRET, USER_TEXT, BLOB_ID.hex(), "disk full"):
        assert secret not in out


def contradicting(t: Traffic) -> None:
    # headers: HTTP/1.1, JSON codec, no x-request-id
    t.client("req-h1")
    t.stream("req-h1", http_version="HTTP/1.1", headers={"content-type": "application/connect+json"},
             names=["content-type"], first=["run_request"])
    # first message: an exec result before the run_request; and a RunSSE whose append 0 is a KV result
    t.stream("req-exec-first", first=["client_heartbeat", "exec_client_message"])
    t.stream("req-sse-bad", "run_sse", headers={"content-type": "application/proto"}, host="api2.cursor.sh")
    t.appends("req-sse-bad", [(1, "data", "run_request"), (0, "data", "kv_client_message"),
                              (3, "data_binary", "kv_client_message"),
                              (4, "invalid", None, "BidiAppend data and data_binary hold different messages")],
              content_type="application/proto")
    # request end: ended 300 ms before the response, and the run still completed
    t.stream("req-early", first=["run_request"], request_end=T0 + 500, response_end=T0 + 800)
    t.frame("req-early", "down", None, T0 + 800, end=b"{}")
    # KV: a SET acknowledged with an error, a SET skipped while a later one was answered, and a failed
    # GET of a blob acknowledged before
    t.client("req-kv")
    t.run_turn("req-kv", "conv-kv", ack_error=True)
    t.frame("req-skip", "down", updates.kv_set(0, BLOB_ID, BLOB), T0, conversation="conv-skip")
    t.frame("req-skip", "down", updates.kv_set(1, OTHER_ID, OTHER_BLOB), T0 + 1, conversation="conv-skip")
    t.frame("req-skip", "up", apb.AgentClientMessage(kv_client_message=apb.KvClientMessage(
        id=1, set_blob_result=apb.SetBlobResult())), T0 + 20, conversation="conv-skip")
    t.run_turn("req-kv2", "conv-kv2")
    t.get("req-kv2b", "conv-kv2", OTHER_ID, data=None, ts=T0 + 100)
    # drift: an unknown field on a run_request
    message = apb.AgentClientMessage(run_request=user_turn_request("x", model_id="m", conversation_id="c"))
    message.run_request.MergeFromString(encoder._VarintBytes((901 << 3) | 0) + b"\x01")
    tally = drift.DriftTally()
    tally.observe("up", message, "req-drift", client_version="3.18.0", ts_ms=T0)
    t.store.record_drift(tally.take())
    # hosts: a *.cursor.sh host outside byok_hosts
    t.host("api9.cursor.sh", "other", False)
    t.host("api2.cursor.sh", "run_sse", True)


def test_traffic_that_does_not_fit_contradicts_each_assumption_with_an_example(db_target, capsys):
    record(db_target, contradicting)
    code, got, out = verify_json(db_target, capsys)
    assert code == 1
    expected = {
        "run.headers": ("req-h1", "HTTP/1.1 (a Run over HTTP/1.1 passes upstream unanswered); content-type "
                                  "application/connect+json; no x-request-id header"),
        "run_sse.headers": ("req-sse-bad", "content-type application/proto"),
        "run.first_message": ("req-exec-first", "HTTP/2 Run: exec_client_message before the run_request"),
        "run.request_end": ("req-early", "the request ended 300 ms before the response, and the run still completed"),
        "appends.form": ("req-sse-bad", "BidiAppend data and data_binary hold different messages"),
        "appends.seqno": ("req-sse-bad", "append_seqno 2 never arrived (1 missing)"),
        "kv.ack": ("req-kv", "blob SET (KV id 0) answered with an error"),
        "schema.unknown_fields": ("req-drift", "up AgentClientMessage.run_request: unknown field(s) 901 (varint)"),
        "hosts.classified": (None, "api9.cursor.sh is not under byok_hosts: its calls were never classified"),
    }
    for assumption_id, (example, instead) in expected.items():
        a = got[assumption_id]
        assert (a["verdict"], a["example_request_id"], a["seen_instead"]) == ("contradicted", example, instead), \
            assumption_id
    kv = got["kv.ack"]
    assert kv["counts"]["set_errors"] == 1 and kv["counts"]["get_errors_for_acked_blobs"] == 1
    # the skipped SET and the failed GET are counted too
    assert kv["summary"] == "3 contradiction(s) in 7 blob SET(s) and GET(s)"
    assert got["run.first_message"]["summary"] == "2 contradiction(s) in 4 request(s)"  # the RunSSE's too
    assert got["schema.unknown_fields"]["client_versions"] == ["3.18.0"]
    assert got["schema.unknown_fields"]["details"]["messages"][0]["fields"] == [
        {"field_number": 901, "wire_type": "varint", "kind": "field", "count": 1}]
    for secret in (SECRET, USER_TEXT, "disk full", "/home/me"):
        assert secret not in out


def test_human_output_names_the_verdict_the_example_and_the_docs(tmp_path, capsys):
    target = str(tmp_path / "b.db")
    record(target, contradicting)
    assert main(["verify", "--db", target]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^CONTRADICTED\s+run\.request_end\s", out, re.M)
    assert re.search(r"^    example +req-early \(cursor-byok trace req-early\)$", out, re.M)
    assert re.search(r"^not seen yet\s+tab\.positions", out, re.M)
    assert re.search(r"^    docs +docs/architecture.md#how-an-http2-run-is-served", out, re.M)
    assert re.search(r"^\d+ confirmed, 9 contradicted, 1 not seen yet", out, re.M)


def test_since_leaves_out_older_traffic(tmp_path, capsys):
    target = str(tmp_path / "b.db")
    record(target, contradicting)
    code, got, _ = verify_json(target, capsys, "--since", "2026-01-03")
    assert code == 0
    assert {a["verdict"] for a in got.values()} == {"not_seen"}
    code, got, _ = verify_json(target, capsys, "--since", "2026-01-01T23:00")
    assert code == 1


def test_an_empty_store_has_seen_nothing_and_a_missing_one_is_an_error(tmp_path, capsys):
    target = str(tmp_path / "b.db")
    Store.open(target).close()
    code, got, _ = verify_json(target, capsys)
    assert code == 0 and {a["verdict"] for a in got.values()} == {"not_seen"}
    assert main(["verify", "--db", str(tmp_path / "none.db")]) == 2
    assert "no database at" in capsys.readouterr().err


@pytest.mark.parametrize("request_end, response_end, error, end_stream, outcome", [
    (900, 800, None, "ok", "after"),
    (800, 800, None, "canceled", "after"),
    (500, 800, None, "canceled", "left"),
    (500, 800, None, None, "left"),
    (500, 800, None, "ok", "early_end"),
    (None, 800, "stream reset", "ok", "reset_after"),
    (None, None, "connection lost", None, "left"),
    (None, 800, None, "ok", "open"),
    (None, 800, OPEN_AT_SHUTDOWN, "ok", "unfinished"),
    (None, None, OPEN_AT_SHUTDOWN, None, "unfinished"),
])
def test_how_a_run_ended_is_classified(request_end, response_end, error, end_stream, outcome):
    assert classify_run_end(request_end, response_end, error, end_stream) == outcome


def test_seqno_findings():
    assert seqno_findings([0, 2, 1, 2, 3]) == {"start": 0, "gaps": [], "duplicates": 1, "out_of_order": 1}
    assert seqno_findings([1, 2]) == {"start": 1, "gaps": [], "duplicates": 0, "out_of_order": 0}
    assert seqno_findings([0, 3, 1]) == {"start": 0, "gaps": [2], "duplicates": 0, "out_of_order": 1}


def test_every_assumption_names_docs_that_exist():
    for a in ASSUMPTIONS:
        assert a.docs, a.id
        for doc in a.docs:
            if doc.startswith("PROTOCOL.md"):
                continue  # the design notes beside the repository
            path, _, anchor = doc.partition("#")
            assert (ROOT / path).exists(), (a.id, doc)
            if anchor:
                assert anchor in anchors(ROOT / path), (a.id, doc)


def test_the_assumptions_are_one_explicit_list_with_unique_ids():
    """Describing a check registers nothing: only the list at the end of assumptions.py is reported."""
    from byok.cli import assumptions

    before = assumptions.ASSUMPTIONS
    extra = assumptions.assumption("kv.ack", "again", ["docs/compatibility.md"])(lambda ev: None)
    assert extra.assumption.id == "kv.ack" and assumptions.ASSUMPTIONS is before
    ids = [a.id for a in assumptions.ASSUMPTIONS]
    assert len(ids) == len(set(ids)) == 10 and ids[0] == "run.headers" and ids[-1] == "hosts.classified"
