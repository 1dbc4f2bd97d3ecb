"""Captures: export from a store -> file -> load -> compare; redaction; the normalised diff."""

from __future__ import annotations

import base64
import hashlib
import copy
import json

import pytest

from byok.cli import capture as cap
from byok.cli import frames as fr
from byok.cli import main
from byok.cli.common import open_db
from tests.support.cli_store import SECRET


def exported(built, **kw):
    conn = open_db(built.db)
    try:
        return cap.export(conn, built.conversation_id, **kw)
    finally:
        conn.close()


def test_round_trip_export_write_load_compare(built, tmp_path):
    capture = exported(built)
    path = capture.write(tmp_path / "c.jsonl")
    loaded = cap.load(path)
    assert loaded.header == capture.header and loaded.records == capture.records
    assert cap.diff(capture, loaded) == ""
    assert path.read_text() == loaded.dumps()  # byte-stable rewrite
    # structure: header, then per run: run line, up frames, down frames, provider calls + SSE
    assert capture.header["request_ids"] == [built.request_ok, built.request_failed]
    kinds = [r["t"] for r in capture.records]
    assert kinds[0] == "run" and kinds.count("run") == 2 and kinds.count("llm_call") == 3
    dirs = [r["dir"] for r in capture.frames(run=0)]
    assert dirs == sorted(dirs, key=lambda d: d != "up")
    for record in capture.frames():  # b64 is the exact payload; json its decoded form
        payload = base64.b64decode(record["b64"])
        assert fr.to_json(fr.decode(record["dir"], record["flags"], payload)) == record["json"]


def test_sse_transcript_keeps_exact_bytes(built):
    capture = exported(built)
    events = [r for r in capture.of("sse") if r["run"] == 0 and r["call"] == 1]
    assert [e["data"] for e in events][-1] == "[DONE]"
    assert events[0]["data"]["choices"][0]["delta"]["content"] == "Reading"
    joined = "".join(e["raw"] for e in events)
    assert joined.startswith("data: {") and joined.endswith("data: [DONE]\n\n")


def test_secrets_are_redacted_everywhere(built):
    capture = exported(built, redactor=cap.Redactor(secrets=[SECRET]))
    text = capture.dumps()
    assert SECRET not in text
    assert SECRET.encode() not in b"".join(base64.b64decode(r["b64"]) for r in capture.frames())
    run_request = capture.frames(run=0, direction="up")[0]
    assert run_request["redacted"] is True
    message = fr.decode("up", 0, base64.b64decode(run_request["b64"]))
    assert "my key is <redacted>" in message.run_request.action.user_message_action.user_message.text
    assert "configured API keys" in capture.header["redactions"]
    # the home path stays unless asked
    assert str(built.home) in text


def test_key_shaped_strings_and_secret_headers_without_configuration(built):
    redactor = cap.Redactor()
    capture = exported(built, redactor=redactor)
    assert SECRET not in capture.dumps()  # sk-... is key-shaped
    record = cap.provider_request_record(0, 0, "POST", "/v1/chat/completions",
                                         {"Authorization": "Bearer abcdefghijklmnop", "Cookie": "a=b",
                                          "Content-Type": "application/json", "Host": "x:1"}, {"k": 1}, redactor)
    assert record["headers"] == {"authorization": "<redacted>", "cookie": "<redacted>",
                                 "content-type": "application/json"}


def test_redact_paths_replaces_home(built):
    capture = exported(built, redactor=cap.Redactor(secrets=[SECRET], home=str(built.home)))
    text = capture.dumps()
    assert str(built.home) not in text
    blobs = [base64.b64decode(r["b64"]) for r in capture.frames()]
    assert not any(str(built.home).encode() in b for b in blobs)
    assert "~/project/a.py" in text and "home path -> ~" in capture.header["redactions"]
    # the JSON blob SET to the client was redacted in place, not dropped
    [blob_frame] = [r for r in capture.frames() if r["kind"] == "kv_server_message.set_blob_args"]
    data = base64.b64decode(blob_frame["json"]["kv_server_message"]["set_blob_args"]["blob_data"])
    assert json.loads(data) == {"role": "user", "content": "cwd ~/project"}


def test_binary_blob_with_a_secret_is_dropped():
    from byok.agent.cursor import updates

    r = cap.Redactor(secrets=[SECRET])
    payload = updates.kv_set(3, b"\x01" * 32, b"\x00\xff" + SECRET.encode()).SerializeToString()
    new, changed = r.frame("down", 0, payload)
    assert changed
    message = fr.decode("down", 0, new)
    assert message.kv_server_message.set_blob_args.blob_data == b""
    assert message.kv_server_message.id == 3


def test_error_details_inside_the_end_stream_are_redacted():
    from byok.wire import connect
    from byok.proto import aiserver_pb2 as spb

    details = spb.ErrorDetails(error=spb.ErrorDetails.ERROR_PROVIDER_ERROR)
    details.details.detail = f"HTTP 401: bad key {SECRET}"
    error = connect.ConnectError(connect.Code.UNAVAILABLE, "provider error",
                                 [connect.ErrorDetail("aiserver.v1.ErrorDetails", details.SerializeToString())])
    new, changed = cap.Redactor(secrets=[SECRET]).frame("down", connect.FLAG_END_STREAM,
                                                        connect.encode_end_stream(error)[5:])
    assert changed and SECRET.encode() not in new
    parsed = connect.parse_end_stream(new)
    assert spb.ErrorDetails.FromString(parsed.details[0].value).details.detail == "HTTP 401: bad key <redacted>"


def test_diff_is_readable_and_ignores_volatile_parts(built):
    a = exported(built)
    b = copy.deepcopy(a)
    # no difference: heartbeats, measured times, exact bytes, up-frame arrival order
    b.records = [r for r in b.records if r.get("kind") != "interaction_update.heartbeat"]
    thinking = next(r for r in b.frames() if r["kind"] == "interaction_update.thinking_completed")
    thinking["json"]["interaction_update"]["thinking_completed"]["thinking_duration_ms"] = 99
    ups = [i for i, r in enumerate(b.records) if r["t"] == "frame" and r["run"] == 0 and r["dir"] == "up"]
    b.records[ups[0]], b.records[ups[1]] = b.records[ups[1]], b.records[ups[0]]
    for r in b.frames():
        r["b64"] = "AAAA"
    assert cap.diff(a, b) == ""
    # a real change: one changed leaf, shown as -/+ lines naming the frame and field
    delta = next(r for r in b.frames() if r["kind"] == "interaction_update.text_delta")
    delta["json"]["interaction_update"]["text_delta"]["text"] = "Writing"
    text = cap.diff(a, b, expected_name="committed", actual_name="fresh")
    minus = [line for line in text.splitlines() if line.startswith("-") and not line.startswith("---")]
    plus = [line for line in text.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert minus == ['-r0 down interaction_update.text_delta | json.interaction_update.text_delta.text = "Reading"']
    assert plus == ['+r0 down interaction_update.text_delta | json.interaction_update.text_delta.text = "Writing"']
    assert text.startswith("--- committed\n+++ fresh\n@@")


def test_ids_become_placeholders(built):
    a = exported(built)
    lines = cap.normalise(a)
    assert not any(built.request_ok in line for line in lines)
    assert any("<request-1>" in line for line in lines) and any("<conversation-1>" in line for line in lines)
    assert any('= "<blob-1>"' in line for line in lines)


def test_bad_files_name_the_line(tmp_path):
    with pytest.raises(cap.CaptureError, match="first line must be the capture header"):
        cap.loads('{"t":"run"}\n')
    with pytest.raises(cap.CaptureError, match=r"x.jsonl:2: not JSON"):
        cap.loads('{"t":"capture","format":1}\nnot json\n', "x.jsonl")
    with pytest.raises(cap.CaptureError, match="format 7"):
        cap.loads('{"t":"capture","format":7}\n')


def test_export_command(built, tmp_path, capsys):
    config = tmp_path / "providers.toml"
    config.write_text(f"""
[[providers]]
name = "deepseek"
kind = "openai_chat"
base_url = "https://api.deepseek.com/v1"
api_key = "{SECRET}"
[[providers.models]]
id = "deepseek-chat"
display_name = "DeepSeek (BYOK)"
""")
    out = tmp_path / "out" / "conv.jsonl"
    assert main(["captures", "export", built.request_ok, "--db", str(built.db), "--config", str(config),
                 "--redact-paths", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "1 run(s)" in err and "configured API keys" in err and "home path" in err
    capture = cap.load(out)
    assert capture.header["request_ids"] == [built.request_ok]
    assert SECRET not in out.read_text() and str(built.home) not in out.read_text()
    # to stdout by default; unknown ids fail
    assert main(["captures", "export", built.request_failed, "--db", str(built.db), "--config", str(config)]) == 0
    assert cap.loads(capsys.readouterr().out).header["request_ids"] == [built.request_failed]
    assert main(["captures", "export", "nope", "--db", str(built.db), "--config", str(config)]) == 1
    assert "no run (request id) or conversation" in capsys.readouterr().err


def test_measured_thinking_time_inside_blobs_is_not_a_difference():
    """A different thinking duration changes a step blob, hence its id, the turn blob that lists it
    and every checkpoint: the typed blob view and id placeholders make that no difference."""
    from byok.proto import agent_pb2 as apb
    from tests.scenarios import CAPTURES

    committed = cap.load(CAPTURES / "thinking_text.jsonl")
    changed = cap.loads(committed.dumps())
    b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
    renamed: dict[str, str] = {}

    def sets():
        return [r["json"]["kv_server_message"]["set_blob_args"] for r in changed.frames(direction="down")
                if r["kind"] == "kv_server_message.set_blob_args"]

    types = cap._blob_types(changed)
    for args in sets():  # the thinking step: 77 ms instead of what was measured
        if types.get(args["blob_id"]) != "ConversationStep":
            continue
        step = apb.ConversationStep.FromString(base64.b64decode(args["blob_data"]))
        if step.HasField("thinking_message"):
            step.thinking_message.duration_ms = 77
            data = step.SerializeToString(deterministic=True)
            renamed[args["blob_id"]] = b64(hashlib.sha256(data).digest())
            args["blob_data"], args["blob_id"] = b64(data), renamed[args["blob_id"]]
    assert len(renamed) == 1
    for args in sets():  # turn blobs listing that step get a new id too
        if types.get(args["blob_id"]) != "ConversationTurnStructure":
            continue
        turn = apb.ConversationTurnStructure.FromString(base64.b64decode(args["blob_data"]))
        steps = [b64(s) for s in turn.agent_conversation_turn.steps]
        if any(s in renamed for s in steps):
            del turn.agent_conversation_turn.steps[:]
            turn.agent_conversation_turn.steps.extend(base64.b64decode(renamed.get(s, s)) for s in steps)
            data = turn.SerializeToString(deterministic=True)
            renamed[args["blob_id"]] = b64(hashlib.sha256(data).digest())
            args["blob_data"], args["blob_id"] = b64(data), renamed[args["blob_id"]]
    assert len(renamed) == 2
    text = changed.dumps()
    for old, new in renamed.items():
        text = text.replace(old, new)
    changed = cap.loads(text)
    assert changed.dumps() != committed.dumps()
    assert cap.diff(committed, changed) == ""
