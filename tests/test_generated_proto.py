"""The committed wire schema matches the facts it is generated from."""

import json
from pathlib import Path

from byok.proto import agent_pb2, aiserver_pb2, cpp_pb2, features_pb2

ROOT = Path(__file__).resolve().parents[1]


def test_committed_proto_files_are_current():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, str(ROOT / "proto" / "generate.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def _check_against_facts(module, facts_file, only: set[str] | None = None):
    facts = json.loads((ROOT / "proto" / "facts" / facts_file).read_text())
    pool = module.DESCRIPTOR.pool
    for name, spec in facts["messages"].items():
        if only is not None and name not in only:
            continue
        desc = pool.FindMessageTypeByName(name)
        for f in spec["fields"]:
            if only is not None and f["name"] not in desc.fields_by_name:
                continue  # a field the selection leaves out (proto/generate.py FEATURES)
            fd = desc.fields_by_name[f["name"]]
            assert fd.number == f["number"], (name, f["name"])
            if f.get("oneof"):
                assert fd.containing_oneof is not None and fd.containing_oneof.name == f["oneof"]
    for name, spec in facts["enums"].items():
        if only is not None and name not in only:
            continue
        desc = pool.FindEnumTypeByName(name)
        assert [(v.name, v.number) for v in desc.values] == [tuple(v) for v in spec["values"]]


def test_agent_schema_matches_facts():
    _check_against_facts(agent_pb2, "agent.v1.json")


def test_aiserver_schema_matches_facts():
    _check_against_facts(aiserver_pb2, "aiserver.v1.subset.json")


TAB_RPCS = ("StreamCpp", "CppConfig", "StreamNextCursorPrediction", "RefreshTabContext", "CppEditHistoryStatus",
            "CppAppend", "CppEditHistoryAppend", "AvailableModels", "RecordCppFate")


def test_tab_schema_matches_facts():
    """cpp.proto declares Tab's RPC messages and everything they reach, as the facts state them."""
    facts = json.loads((ROOT / "proto" / "facts" / "aiserver.v1.features.json").read_text())
    services = {**facts["services"], **json.loads(
        (ROOT / "proto" / "facts" / "aiserver.v1.features.undeclared-services.json").read_text())["services"]}
    roots = [name for service, rpcs in services.items() if service.endswith(("AiService", "CppService"))
             for rpc, request, response, _ in rpcs if rpc in TAB_RPCS for name in (request, response)]
    reached, pending = set(), list(roots)
    while pending:
        name = pending.pop()
        if name in reached or (name not in facts["messages"] and name not in facts["enums"]):
            continue
        reached.add(name)
        pending += [f["type_name"] for f in facts["messages"].get(name, {}).get("fields", []) if f.get("type_name")]
        pending.append(name.rsplit(".", 1)[0])
    assert len(roots) == 18 and {"aiserver.v1.CurrentFileInfo", "aiserver.v1.LineRange",
                                 "aiserver.v1.StreamCppResponse.ModelInfo", "aiserver.v1.CppFate"} <= reached
    _check_against_facts(cpp_pb2, "aiserver.v1.features.json", only=reached)


def _declared(module) -> set[str]:
    names: set[str] = set()

    def walk(desc):
        names.add(desc.full_name)
        for nested in desc.nested_types:
            walk(nested)
        names.update(e.full_name for e in desc.enum_types)

    for desc in module.DESCRIPTOR.message_types_by_name.values():
        walk(desc)
    names.update(e.full_name for e in module.DESCRIPTOR.enum_types_by_name.values())
    return names


def test_features_schema_matches_facts():
    declared = _declared(features_pb2)
    assert "aiserver.v1.StreamCmdKRequest" in declared
    assert "aiserver.v1.ModelDetails" not in declared  # imported from aiserver.proto, not defined twice
    _check_against_facts(features_pb2, "aiserver.v1.features.json", only=declared)


def test_features_declares_nothing_of_tab():
    """Tab's messages (StreamCpp & co.) belong to another .proto of the same package: a full name
    defined in both files would break the descriptor pool, so the selection keeps clear of them."""
    facts = json.loads((ROOT / "proto" / "facts" / "aiserver.v1.features.json").read_text())
    tab_roots = [name for service in facts["services"].values() for rpc, request, response, _ in service
                 for name in (request, response) if "Cpp" in rpc or "CursorPrediction" in rpc
                 or rpc in ("RefreshTabContext",)]
    closure, pending = set(), list(tab_roots)
    while pending:
        name = pending.pop()
        if name in closure:
            continue
        closure.add(name)
        spec = facts["messages"].get(name)
        pending.extend(f["type_name"] for f in (spec or {}).get("fields", []) if f.get("type_name"))
    assert tab_roots and not (_declared(features_pb2) & closure)


def test_left_out_fields_survive_a_round_trip():
    # CmdKLegacyContext.prompt_code_blocks (12) is left out of features.proto: it stays an unknown field
    legacy = b"\x62\x03abc"  # field 12, length 3
    body = b"\x2a" + bytes([len(legacy)]) + legacy + features_pb2.StreamCmdKRequest(session_id="s").SerializeToString()
    parsed = features_pb2.StreamCmdKRequest.FromString(body)
    assert parsed.session_id == "s" and parsed.HasField("legacy_context")
    assert parsed.SerializeToString() == body


def test_unknown_fields_survive_round_trip():
    # field 999 (unknown) inside a nested message and at top level
    inner = agent_pb2.TextDeltaUpdate(text="hi").SerializeToString() + b"\xb8\x3e\x2a"
    update = b"\x0a" + bytes([len(inner)]) + inner
    msg = b"\x0a" + bytes([len(update)]) + update + b"\xba\x3e\x02zz"
    parsed = agent_pb2.AgentServerMessage.FromString(msg)
    assert parsed.interaction_update.text_delta.text == "hi"
    assert parsed.SerializeToString() == msg


def test_captured_kv_ack_hex_decodes():
    msg = agent_pb2.AgentClientMessage.FromString(bytes.fromhex("1a0408011a00"))
    assert msg.WhichOneof("message") == "kv_client_message"
    assert msg.kv_client_message.id == 1
    assert msg.kv_client_message.WhichOneof("message") == "set_blob_result"
