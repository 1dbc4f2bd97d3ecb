"""Protocol drift: unknown fields and oneof branches are found at their message path, tallied per
(direction, path, field, wire type, kind, client version), written by the recorder's store-thread
writer, summed across batches in the store, and reported by `cursor-byok drift [--json]`."""

from __future__ import annotations

import json
import logging

from google.protobuf.internal import encoder

from byok.agent import drift
from byok.agent.cursor import updates
from byok.cli import main
from byok.proto import agent_pb2 as apb
from byok.recorder import Captured, FrameWriter
from byok.store import Store


def tag(number: int, wire_type: int) -> bytes:
    return encoder._VarintBytes((number << 3) | wire_type)


def unknown_branch() -> apb.AgentClientMessage:
    """A top-level AgentClientMessage branch newer than our schema (field 99, length-delimited)."""
    return apb.AgentClientMessage.FromString(tag(99, 2) + b"\x02\x08\x01")


def run_request_with_nested_unknowns() -> apb.AgentClientMessage:
    message = apb.AgentClientMessage()
    um = message.run_request.action.user_message_action.user_message
    um.text = "hi"
    um.MergeFromString(tag(4242, 0) + b"\x07")  # a new scalar in UserMessage
    message.run_request.conversation_state.root_prompt_messages_json.append(b"x")
    message.run_request.requested_model.model_id = "abcd1234"
    message.run_request.requested_model.MergeFromString(tag(77, 5) + b"\x00\x00\x80\x3f")  # a new float
    return message


def test_unknowns_name_path_field_wire_type_and_kind():
    found = drift.unknowns(run_request_with_nested_unknowns())
    assert sorted((u.path, u.field_number, u.wire_type, u.kind) for u in found) == [
        ("AgentClientMessage.run_request.action.user_message_action.user_message", 4242, 0, "field"),
        ("AgentClientMessage.run_request.requested_model", 77, 5, "field"),
    ]
    assert drift.unknowns(unknown_branch()) == [drift.Unknown("AgentClientMessage", 99, 2, "oneof_branch")]
    # an unknown ConversationAction branch inside a known AgentClientMessage branch
    message = apb.AgentClientMessage()
    message.conversation_action.MergeFromString(tag(63, 2) + b"\x00")
    assert drift.unknowns(message) == [drift.Unknown("AgentClientMessage.conversation_action", 63, 2, "oneof_branch")]
    assert drift.unknowns(updates.text_delta("known only")) == []


def test_unknowns_inside_repeated_and_map_fields():
    from google.protobuf.descriptor import FieldDescriptor

    def first(descriptor, want_map: bool):
        return next(fd for fd in descriptor.fields if fd.is_repeated and fd.type == FieldDescriptor.TYPE_MESSAGE
                    and fd.message_type.GetOptions().map_entry == want_map
                    and (not want_map or fd.message_type.fields_by_name["value"].type == FieldDescriptor.TYPE_MESSAGE))

    holder = apb.AgentServerMessage()
    rep = first(apb.ConversationStateStructure.DESCRIPTOR, False)
    getattr(holder.conversation_checkpoint_update, rep.name).add().MergeFromString(tag(5000, 0) + b"\x01")
    [found] = drift.unknowns(holder)
    assert (found.path, found.field_number) == (f"AgentServerMessage.conversation_checkpoint_update.{rep.name}[]", 5000)
    # a map with message values, wherever the schema has one
    owner = next(m for m in apb.DESCRIPTOR.message_types_by_name.values()
                 if any(fd.is_repeated and fd.type == FieldDescriptor.TYPE_MESSAGE and fd.message_type.GetOptions()
                        .map_entry and fd.message_type.fields_by_name["value"].type == FieldDescriptor.TYPE_MESSAGE
                        for fd in m.fields))
    fd = first(owner, True)
    message = getattr(apb, owner.name)()
    key_type = fd.message_type.fields_by_name["key"].type
    key = "k" if key_type == FieldDescriptor.TYPE_STRING else 1
    getattr(message, fd.name)[key].MergeFromString(tag(6000, 0) + b"\x01")
    assert drift.unknowns(message) == [drift.Unknown(f"{owner.name}.{fd.name}[]", 6000, 0,
                                                     drift.unknowns(message)[0].kind)]


def test_tally_sums_per_key_with_first_last_and_example():
    tally = drift.DriftTally()
    tally.observe("up", unknown_branch(), "req-a", client_version="3.1.0", ts_ms=10)
    tally.observe("up", unknown_branch(), "req-b", client_version="3.1.0", ts_ms=30)
    tally.observe("up", unknown_branch(), "req-c", client_version="3.2.0", ts_ms=20)
    rows = sorted(tally.take(), key=lambda r: r.client_version)
    assert [(r.client_version, r.count, r.first_seen_ms, r.last_seen_ms, r.example_request_id) for r in rows] == [
        ("3.1.0", 2, 10, 30, "req-b"), ("3.2.0", 1, 20, 20, "req-c")]
    assert tally.take() == []


def test_writer_counts_both_directions_and_store_sums_batches(tmp_path, capsys, caplog):
    store = Store.open(tmp_path / "byok.db")
    store.record_clients([{"request_id": "req-1", "client_version": "3.99.0", "user_agent": "x", "ts_ms": 1}])
    writer = FrameWriter()
    down = apb.AgentServerMessage()
    down.interaction_update.MergeFromString(tag(1234, 2) + b"\x00")  # an unknown InteractionUpdate branch
    batch = [
        Captured("req-1", "up", 100, "empty", 0, unknown_branch().SerializeToString()),
        Captured("req-1", "down", 101, None, 0, down.SerializeToString()),
        Captured("req-1", "up", 102, "run_request", 0, run_request_with_nested_unknowns().SerializeToString()),
    ]
    with caplog.at_level(logging.WARNING, logger="byok.recorder"):
        writer.write(store, batch)
        writer.write(store, [Captured("req-2", "up", 200, "empty", 0, unknown_branch().SerializeToString())])
    assert "[req-1] protocol drift (up, client 3.99.0): unknown AgentClientMessage field 99" in caplog.text
    rows = store.db.execute("SELECT direction, path, field_number, wire_type, kind, client_version, count,"
                            " first_seen_ms, last_seen_ms, example_request_id FROM protocol_drift"
                            " ORDER BY direction, path, client_version").fetchall()
    assert rows == [
        ("down", "AgentServerMessage.interaction_update", 1234, 2, "oneof_branch", "3.99.0", 1, 101, 101, "req-1"),
        ("up", "AgentClientMessage", 99, 2, "oneof_branch", "", 1, 200, 200, "req-2"),
        ("up", "AgentClientMessage", 99, 2, "oneof_branch", "3.99.0", 1, 100, 100, "req-1"),
        ("up", "AgentClientMessage.run_request.action.user_message_action.user_message", 4242, 0, "field", "3.99.0",
         1, 102, 102, "req-1"),
        ("up", "AgentClientMessage.run_request.requested_model", 77, 5, "field", "3.99.0", 1, 102, 102, "req-1"),
    ]
    writer.write(store, [Captured("req-1", "up", 300, "empty", 0, unknown_branch().SerializeToString())])
    count, first, last = store.db.execute(
        "SELECT count, first_seen_ms, last_seen_ms FROM protocol_drift WHERE client_version = '3.99.0'"
        " AND path = 'AgentClientMessage'").fetchone()
    assert (count, first, last) == (2, 100, 300)
    store.close()

    assert main(["drift", "--db", str(tmp_path / "byok.db"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["client_versions_seen"] == ["3.99.0"] and len(report["unknown"]) == 5
    first_row = report["unknown"][0]
    assert first_row["path"] == "AgentClientMessage" and first_row["count"] == 2
    assert first_row["wire_type_name"] == "len" and first_row["example_request_id"] == "req-1"
    assert main(["drift", "--db", str(tmp_path / "byok.db")]) == 0
    out = capsys.readouterr().out
    assert "protocol drift: 5 unknown" in out and "AgentClientMessage.run_request.requested_model" in out
    assert "captures export" in out


def test_no_drift_says_so(tmp_path, capsys):
    Store.open(tmp_path / "byok.db").close()
    assert main(["drift", "--db", str(tmp_path / "byok.db")]) == 0
    assert "no protocol drift: nothing unknown in 0 recorded frames" in capsys.readouterr().out
