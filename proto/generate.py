"""Regenerate the wire schema: schema facts (JSON) -> .proto -> Python modules.

    python proto/generate.py            # writes .proto files and *_pb2.py / *_pb2.pyi
    python proto/generate.py --check    # exits 1 if the committed files are stale

The facts in `proto/facts/` are the single source of names and field numbers (copied from the
project's shared schema extraction). Nothing here invents a number: every field is emitted as the
facts state it. The .proto files live under `proto/byok_pb/<pkg>/v1/` so the generated modules never
claim a generic top-level name such as `agent`; the `package` lines (and so the wire names) stay
`agent.v1` / `aiserver.v1`.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
FACTS = HERE / "facts"


@dataclass(frozen=True)
class Target:
    """One generated .proto: from a facts file, either all of it or the closure of `roots` (the
    messages and enums they reach, with the outer message of every nested type). A rooted target
    leaves out what an earlier target of the same package already defines and imports that file
    instead, so one wire name is defined once in the process (protobuf's pool refuses twins)."""

    facts: str
    proto: Path
    roots: tuple[str, ...] = ()


TAB_ROOTS = tuple(f"aiserver.v1.{name}" for name in (
    "StreamCppRequest", "StreamCppResponse", "CppConfigRequest", "CppConfigResponse",
    "StreamNextCursorPredictionRequest", "StreamNextCursorPredictionResponse",
    "RefreshTabContextRequest", "RefreshTabContextResponse", "CppEditHistoryStatusRequest",
    "CppEditHistoryStatusResponse", "CppAppendRequest", "CppAppendResponse",
    "EditHistoryAppendChangesRequest", "EditHistoryAppendChangesResponse",
    "AvailableCppModelsRequest", "AvailableCppModelsResponse", "RecordCppFateRequest", "RecordCppFateResponse",
))
"""Tab (PROTOCOL 11.1): StreamCpp and the RPCs around it."""

TARGETS = [
    Target("agent.v1.json", HERE / "byok_pb" / "agent" / "v1" / "agent.proto"),
    Target("aiserver.v1.subset.json", HERE / "byok_pb" / "aiserver" / "v1" / "aiserver.proto"),
    Target("aiserver.v1.features.json", HERE / "byok_pb" / "aiserver" / "v1" / "cpp.proto", TAB_ROOTS),
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


def closure(facts: dict, roots: tuple[str, ...]) -> set[str]:
    """The messages and enums `roots` reach through their fields, with every nested type's outer message."""
    messages, enums = facts["messages"], facts["enums"]
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        if name not in messages and name not in enums:
            raise ValueError(f"{name} is not in the facts")
        seen.add(name)
        outer = name.rsplit(".", 1)[0]
        if outer in messages:
            todo.append(outer)
        for f in messages.get(name, {}).get("fields", []):
            if f.get("type_name", "").startswith(facts["package"] + "."):
                todo.append(f["type_name"])
    return seen


def select(facts: dict, roots: tuple[str, ...], defined: dict[str, Path]) -> tuple[dict, list[Path]]:
    """The facts reduced to the closure of `roots` minus the names `defined` (name -> the .proto that
    defines it), and the .proto files to import for those."""
    wanted = closure(facts, roots)
    imports = sorted({defined[n] for n in wanted if n in defined})
    keep = {n for n in wanted if n not in defined}
    reduced = {**facts, "messages": {n: m for n, m in facts["messages"].items() if n in keep},
               "enums": {n: e for n, e in facts["enums"].items() if n in keep}}
    return reduced, imports


def render_proto(facts: dict, proto_imports: list[str] = ()) -> str:
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
    for imp in facts.get("imports", []):
        wkt = imp.rsplit("/", 1)[1].removesuffix(".proto")
        if any(t.startswith("google.protobuf.") and _WKT_FILES.get(t.split(".")[-1]) == wkt for t in used):
            out.append(f'import "{imp}";')
    for imp in proto_imports:
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
    # protoc names an imported .proto's module by its path (`from byok_pb.aiserver.v1 import ...`);
    # installed, that folder is the package byok.proto.byok_pb
    module = out_dir / rel.with_name(rel.stem + "_pb2.py")
    code = module.read_text()
    fixed = code.replace("\nfrom byok_pb.", "\nfrom byok.proto.byok_pb.")
    if fixed != code:
        module.write_text(fixed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if committed .proto files are stale")
    args = parser.parse_args(argv)
    stale = []
    defined: dict[str, Path] = {}  # wire name -> the .proto that defines it (earlier targets)
    for target in TARGETS:
        proto_path = target.proto
        facts = json.loads((FACTS / target.facts).read_text())
        imports: list[Path] = []
        if target.roots:
            facts, imports = select(facts, target.roots, defined)
        text = render_proto(facts, [str(p.relative_to(HERE)) for p in imports])
        defined.update(dict.fromkeys([*facts["messages"], *facts["enums"]], proto_path))
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
