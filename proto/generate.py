"""Regenerate the wire schema: schema facts (JSON) -> .proto -> Python modules.

    python proto/generate.py            # writes .proto files and *_pb2.py / *_pb2.pyi
    python proto/generate.py --check    # exits 1 if the committed files are stale

The facts in `proto/facts/` are the single source of names and field numbers (copied from the
project's shared schema extraction). Nothing here invents a number: every field is emitted as the
facts state it. The .proto files live under `proto/byok_pb/<pkg>/v1/` so the generated modules never
claim a generic top-level name such as `agent`; the `package` lines (and so the wire names) stay
`agent.v1` / `aiserver.v1`.

A target may take a `Selection` of a large facts file: the closure of some root messages, with the
fields we never read left out (a decoder keeps them as unknown fields, so nothing is lost on the wire)
and the types another generated file already defines imported from it instead of defined twice (two
files defining one full name cannot share a descriptor pool). Left-out fields are listed in a comment
in the .proto, so what is missing is visible.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
FACTS = HERE / "facts"
AISERVER_PROTO = HERE / "byok_pb" / "aiserver" / "v1" / "aiserver.proto"


@dataclass(frozen=True)
class Selection:
    """Which part of a facts file one .proto declares (see the module docstring)."""

    roots: tuple[str, ...]
    drop: dict[str, frozenset[str]] = field(default_factory=dict)
    """message -> fields left out."""
    keep_only: dict[str, frozenset[str]] = field(default_factory=dict)
    """message -> the only fields declared (for messages of which we read a handful)."""
    imports: tuple[tuple[str, Path], ...] = ()
    """(facts file, its .proto): types those facts define are imported from that .proto."""


_P = "aiserver.v1."
_CREDENTIALS = frozenset({"api_key_credentials", "azure_credentials", "bedrock_credentials"})
FEATURES = Selection(
    # Cursor's other AI calls (addon/assist/): commit messages, branch names, titles, terminal, Cmd-K,
    # and NetworkService/IsConnected. Nothing from Tab's closure (StreamCpp & co., another .proto)
    # is declared here: the fields that would pull it in are left out.
    roots=tuple(_P + name for name in (
        "WriteGitCommitMessageRequest", "WriteGitCommitMessageResponse",
        "WriteGitBranchNameRequest", "WriteGitBranchNameResponse",
        "GetChatTitleRequest", "GetChatTitleResponse", "NameTabRequest", "NameTabResponse",
        "NameAgentRequest", "NameAgentResponse",
        "StreamTerminalAutocompleteRequest", "StreamTerminalAutocompleteResponse",
        "GetTerminalCompletionRequest", "GetTerminalCompletionResponse",
        "IsConnectedRequest", "IsConnectedResponse",
        "StreamCmdKRequest", "StreamCmdKResponseContextWrapped",
        "StreamTerminalCmdKRequest", "StreamTerminalCmdKResponseContextWrapped",
    )),
    drop={_P + name: frozenset(fields) for name, fields in {
        "WriteGitCommitMessageRequest": _CREDENTIALS,
        "WriteGitBranchNameRequest": _CREDENTIALS,
        "NameTabRequest": _CREDENTIALS,
        "StreamTerminalAutocompleteRequest": {"file_diff_histories"},
        "GetTerminalCompletionRequest": {"file_diff_histories"},
        "File": {"file_git_context"},
        "StreamCmdKRequest": {"cmd_k_debug_info", "diff_history", "diff_to_base_branch", "images"},
        "CmdKLegacyContext": {"prompt_code_blocks"},
        "ContextItem": {"intent", "lsp_subgraph_chunk", "file_diff_history"},
        "ContextItem.OutlineChunk": {"full_range"},
        "Lint": {"range"},
    }.items()},
    keep_only={_P + "ConversationMessage": frozenset({"text", "type"})},
    imports=(("aiserver.v1.subset.json", AISERVER_PROTO),),
)

TAB = Selection(
    # Tab (addon/assist/tab.py, PROTOCOL 11.1): StreamCpp and the RPCs around it, every field (none of
    # their types is in aiserver.proto or features.proto, which keeps clear of them)
    roots=tuple(_P + name for name in (
        "StreamCppRequest", "StreamCppResponse", "CppConfigRequest", "CppConfigResponse",
        "StreamNextCursorPredictionRequest", "StreamNextCursorPredictionResponse",
        "RefreshTabContextRequest", "RefreshTabContextResponse", "CppEditHistoryStatusRequest",
        "CppEditHistoryStatusResponse", "CppAppendRequest", "CppAppendResponse",
        "EditHistoryAppendChangesRequest", "EditHistoryAppendChangesResponse",
        "AvailableCppModelsRequest", "AvailableCppModelsResponse", "RecordCppFateRequest", "RecordCppFateResponse",
    )),
)

TARGETS: list[tuple[str, Path, Selection | None]] = [
    ("agent.v1.json", HERE / "byok_pb" / "agent" / "v1" / "agent.proto", None),
    ("aiserver.v1.subset.json", AISERVER_PROTO, None),
    ("aiserver.v1.features.json", HERE / "byok_pb" / "aiserver" / "v1" / "features.proto", FEATURES),
    ("aiserver.v1.features.json", HERE / "byok_pb" / "aiserver" / "v1" / "cpp.proto", TAB),
]
_WKT_FILES = {"Struct": "struct", "Value": "struct", "ListValue": "struct", "Empty": "empty",
              "Duration": "duration", "Timestamp": "timestamp"}
SCALARS = {
    "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
    "fixed32", "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes",
}


@dataclass
class Scope:
    """A message (or the file) with its nested messages and enums, in facts order."""

    name: str
    messages: list[str] = field(default_factory=list)
    enums: list[str] = field(default_factory=list)


def _type_ref(f: dict) -> str:
    if f["type"] in SCALARS:
        return f["type"]
    if f["type"] in ("message", "enum"):
        return "." + f["type_name"]
    raise ValueError(f"unsupported field type {f['type']!r}")


def select(facts: dict, selection: Selection) -> dict:
    """The facts of `selection`: its roots' closure over the declared fields, minus imported types."""
    messages, enums = facts["messages"], facts["enums"]
    provided: dict[str, Path] = {}
    for facts_name, proto_path in selection.imports:
        other = json.loads((FACTS / facts_name).read_text())
        provided.update({name: proto_path for name in (*other["messages"], *other["enums"])})
    out_messages: dict[str, dict] = {}
    out_enums: dict[str, dict] = {}
    imports: set[Path] = set()
    pending = list(selection.roots)
    while pending:
        name = pending.pop()
        if name in out_messages or name in out_enums:
            continue
        if name in provided:
            imports.add(provided[name])
            continue
        if name in enums:
            out_enums[name] = enums[name]
            continue
        spec = messages[name]
        declared = [f for f in spec["fields"]
                    if f["name"] not in selection.drop.get(name, ())
                    and (name not in selection.keep_only or f["name"] in selection.keep_only[name])]
        left_out = [f for f in spec["fields"] if f not in declared]
        out_messages[name] = {**spec, "fields": declared, "left_out": left_out}
        pending.extend(f["type_name"] for f in declared if f.get("type_name"))
        parent = name.rsplit(".", 1)[0]
        if parent != facts["package"] and parent in messages:
            pending.append(parent)  # a nested type needs its own parent, never an empty namespace
    unknown = [n for n in (*selection.drop, *selection.keep_only) if n not in out_messages]
    if unknown:
        raise ValueError(f"selection names messages outside its closure: {unknown}")
    return {**facts, "messages": out_messages, "enums": out_enums,
            "proto_imports": sorted(str(p.relative_to(HERE)) for p in imports)}


def render_proto(facts: dict) -> str:
    package = facts["package"]
    messages: dict[str, dict] = dict(facts["messages"])
    enums: dict[str, dict] = facts["enums"]
    scopes: dict[str, Scope] = {package: Scope(package)}
    for name in messages:
        scopes[name] = Scope(name)

    def parent_of(name: str) -> str:
        parent = name.rsplit(".", 1)[0]
        if parent not in scopes:
            # The subset extraction keeps a nested type without its outer message: the outer one
            # becomes an empty namespace (no fields, so no number is invented).
            if not parent.startswith(package + "."):
                raise ValueError(f"{name}: parent scope {parent} is outside package {package}")
            scopes[parent] = Scope(parent)
            messages[parent] = {"fields": [], "namespace_only": True}
            scopes[parent_of(parent)].messages.append(parent)
        return parent

    for name in sorted(messages):
        scopes[parent_of(name)].messages.append(name)
    for name in sorted(enums):
        scopes[parent_of(name)].enums.append(name)

    out: list[str] = []

    def emit_enum(name: str, indent: str) -> None:
        values = enums[name]["values"]
        numbers = [n for _, n in values]
        out.append(f"{indent}enum {name.rsplit('.', 1)[1]} {{")
        if len(set(numbers)) != len(numbers):
            out.append(f"{indent}  option allow_alias = true;")
        for value_name, number in values:
            out.append(f"{indent}  {value_name} = {number};")
        out.append(f"{indent}}}")

    def emit_message(name: str, indent: str) -> None:
        spec = messages[name]
        out.append(f"{indent}message {name.rsplit('.', 1)[1]} {{")
        inner = indent + "  "
        if spec.get("left_out"):
            names = ", ".join(f"{f['name']} = {f['number']}" for f in sorted(spec["left_out"], key=lambda f: f["number"]))
            out.append(f"{inner}// left out (never read; kept as unknown fields): {names}")
        for nested in scopes[name].enums:
            emit_enum(nested, inner)
        for nested in scopes[name].messages:
            if not messages[nested].get("map_entry"):
                emit_message(nested, inner)
        oneofs: dict[str, list[dict]] = {}
        for f in sorted(spec["fields"], key=lambda f: f["number"]):
            if f.get("oneof"):
                oneofs.setdefault(f["oneof"], []).append(f)
                continue
            target = messages.get(f.get("type_name", ""), {})
            if f.get("label") == "repeated" and target.get("map_entry"):
                key, value = sorted(target["fields"], key=lambda e: e["number"])
                out.append(f"{inner}map<{_type_ref(key)}, {_type_ref(value)}> {f['name']} = {f['number']};")
                continue
            label = "repeated " if f.get("label") == "repeated" else "optional " if f.get("optional") else ""
            out.append(f"{inner}{label}{_type_ref(f)} {f['name']} = {f['number']};")
        for oneof_name, members in oneofs.items():
            out.append(f"{inner}oneof {oneof_name} {{")
            for f in members:
                out.append(f"{inner}  {_type_ref(f)} {f['name']} = {f['number']};")
            out.append(f"{inner}}}")
        out.append(f"{indent}}}")

    out.append("// Generated by proto/generate.py from proto/facts/. Do not edit by hand.")
    out.append('syntax = "proto3";')
    out.append(f"package {package};")
    used = {f["type_name"] for m in messages.values() for f in m["fields"] if f.get("type_name")}
    for imp in facts.get("proto_imports", []):
        out.append(f'import "{imp}";')
    for imp in facts.get("imports", []):
        wkt = imp.rsplit("/", 1)[1].removesuffix(".proto")
        if any(t.startswith("google.protobuf.") and _WKT_FILES.get(t.split(".")[-1]) == wkt for t in used):
            out.append(f'import "{imp}";')
    out.append("")
    for name in scopes[package].enums:
        emit_enum(name, "")
    for name in scopes[package].messages:
        emit_message(name, "")
    return "\n".join(out) + "\n"


def protoc(proto_path: Path, out_dir: Path) -> None:
    from grpc_tools import protoc as grpc_protoc  # dev-only dependency (the `test` extra)
    import grpc_tools

    include = str(Path(grpc_tools.__file__).parent / "_proto")
    rel = proto_path.relative_to(HERE)
    args = ["protoc", f"-I{HERE}", f"-I{include}", f"--python_out={out_dir}", f"--pyi_out={out_dir}", str(rel)]
    if grpc_protoc.main(args) != 0:
        raise SystemExit(f"protoc failed for {rel}")
    # protoc imports a sibling generated module by its file path (`from byok_pb.aiserver.v1 import
    # aiserver_pb2`), which is not a top-level package here: make it relative to the package.
    sibling = "from " + ".".join(rel.parent.parts) + " import "
    for suffix in ("_pb2.py", "_pb2.pyi"):
        module = out_dir / rel.parent / (rel.stem + suffix)
        text = module.read_text()
        module.write_text(text.replace(sibling, "from . import "))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if committed .proto files are stale")
    args = parser.parse_args(argv)
    stale = []
    for facts_name, proto_path, selection in TARGETS:
        facts = json.loads((FACTS / facts_name).read_text())
        text = render_proto(select(facts, selection) if selection else facts)
        if args.check:
            if not proto_path.exists() or proto_path.read_text() != text:
                stale.append(str(proto_path))
            continue
        proto_path.parent.mkdir(parents=True, exist_ok=True)
        proto_path.write_text(text)
        protoc(proto_path, HERE)
        print(f"wrote {proto_path.relative_to(HERE.parent)} and its _pb2 module")
    if stale:
        print("stale generated files (run python proto/generate.py):", *stale, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
