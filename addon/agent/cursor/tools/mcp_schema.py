"""MCP input schemas as every provider accepts them, and the model's arguments mapped back.

An MCP server may publish any JSON Schema: `$schema`, `$ref` into `$defs`, `oneOf` at the top,
arrays without `items`, `format` values, defaults... Providers differ in what they refuse (Anthropic
rejects top-level combinators, OpenAI arrays without items and non-object parameters, Gemini-style
gateways most keywords beyond a small core). So the model is shown a normalised copy; the exec
always uses the definition the client sent, untouched.

    portable(schema)   -> the one form shown to every provider: local $refs inlined, `oneOf` -> `anyOf`,
                          `allOf` of objects merged, top-level combinators merged into one object,
                          `const` -> `enum`, `default` moved into the description, arrays given `items`,
                          every keyword outside PORTABLE_KEYWORDS dropped, an object at the top.
    strict(portable)   -> the strict-mode form (OpenAI `strict: true`): every object closed
                          (`additionalProperties: false`) with every property required and the optional
                          ones made nullable; keywords strict mode does not support moved into the
                          description. None when the schema cannot be strict (a free-form object or
                          map, an untyped value, more than STRICT_MAX_DEPTH levels).
    drop_unset(args, portable) -> the model's arguments with the nulls a strict form made it send for
                          optional properties removed again (recursively), so the server sees what a
                          non-strict call would have sent.
"""

from __future__ import annotations

import copy
import json
from typing import Any

PORTABLE_KEYWORDS = frozenset({
    "type", "description", "properties", "required", "items", "enum", "anyOf", "additionalProperties",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minItems", "maxItems", "minLength", "maxLength", "pattern",
})
"""What survives normalisation: the subset all three dialects accept inside tool parameters."""

STRICT_KEYWORDS = frozenset({
    "type", "description", "properties", "required", "items", "enum", "anyOf", "additionalProperties",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems",
    "pattern",
})
"""What OpenAI's strict mode supports; the rest becomes words in the description."""

STRICT_MAX_DEPTH = 10
_REF_DEPTH = 4
_TYPES = ("string", "integer", "number", "boolean", "array", "object", "null")
EMPTY_OBJECT: dict = {"type": "object", "properties": {}}


def parse(value: Any) -> dict:
    """An input schema as sent (a dict, or JSON text) -> a dict; anything unusable -> {}."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


# ---- portable -------------------------------------------------------------------------------------


def portable(schema: Any) -> dict:
    """The normalised schema every provider accepts (see the module docstring). Pure."""
    root = parse(schema)
    defs = {**_dict(root.get("definitions")), **_dict(root.get("$defs"))}
    out = _clean(root, defs, 0)
    out = _merge_top(out)
    if out.get("type") != "object":
        # A non-object top level cannot be function parameters: offer an empty object (the model
        # then calls with {}), since guessing a wrapper key would send the server what it never asked for.
        out = {k: v for k, v in out.items() if k == "description"} | copy.deepcopy(EMPTY_OBJECT)
    out.setdefault("properties", {})
    return out


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _resolve(ref: Any, defs: dict) -> dict | None:
    if not isinstance(ref, str):
        return None
    for prefix in ("#/$defs/", "#/definitions/"):
        if ref.startswith(prefix):
            target = defs.get(ref[len(prefix):])
            return target if isinstance(target, dict) else None
    return None


def _clean(node: Any, defs: dict, depth: int) -> dict:
    if not isinstance(node, dict):
        return {}
    node = dict(node)
    if "$ref" in node:
        target = _resolve(node.pop("$ref"), defs) if depth < _REF_DEPTH else None
        # Keywords beside $ref (a description, usually) refine the target.
        node = {**(target or {}), **node} if target is not None else node
        if target is None and not (set(node) & {"type", "properties", "items", "enum", "anyOf"}):
            return _described({}, node)
        depth += 1
    if "const" in node and "enum" not in node:
        node["enum"] = [node.pop("const")]
    if "oneOf" in node and "anyOf" not in node:
        node["anyOf"] = node.pop("oneOf")
    if "allOf" in node:
        node = _merge_all_of(node, defs, depth)
    if "nullable" in node and node.pop("nullable") is True and isinstance(node.get("type"), str):
        node["type"] = [node["type"], "null"]
    out: dict = {}
    for key, value in node.items():
        if key not in PORTABLE_KEYWORDS:
            continue
        if key == "properties":
            out[key] = {name: _clean(sub, defs, depth + 1) for name, sub in _dict(value).items()}
        elif key == "items":
            out[key] = _clean(value if isinstance(value, dict) else {}, defs, depth + 1)
        elif key == "anyOf":
            variants = [_clean(v, defs, depth + 1) for v in value if isinstance(v, dict)] if isinstance(value, list) else []
            if variants:
                out[key] = variants
        elif key == "additionalProperties":
            out[key] = value if isinstance(value, bool) else _clean(value, defs, depth + 1)
        elif key == "required":
            if isinstance(value, list):
                out[key] = [r for r in dict.fromkeys(value) if isinstance(r, str)]
        elif key == "type":
            kinds = [t for t in (value if isinstance(value, list) else [value]) if t in _TYPES]
            if kinds:
                out[key] = kinds[0] if len(kinds) == 1 else kinds
        elif key == "enum":
            if isinstance(value, list) and value:
                out[key] = value
        elif key == "description":
            if isinstance(value, str):
                out[key] = value
        else:
            out[key] = value
    if "properties" in out:
        out.setdefault("type", "object")
        if "required" in out:
            out["required"] = [r for r in out["required"] if r in out["properties"]]
            if not out["required"]:
                del out["required"]
    elif "required" in out:
        del out["required"]
    if _is_type(out, "array") and "items" not in out:
        out["items"] = {}
    if "enum" in out and "type" not in out:
        kinds = sorted({_json_type(v) for v in out["enum"]})
        out["type"] = kinds[0] if len(kinds) == 1 else kinds
    return _described(out, node)


def _described(out: dict, source: dict) -> dict:
    """Hints the portable form cannot carry (default, format, examples) go into the description."""
    notes = []
    if "format" in source and isinstance(source["format"], str):
        notes.append(f"format: {source['format']}")
    if "default" in source:
        notes.append(f"default: {json.dumps(source['default'], ensure_ascii=False)}")
    if notes:
        base = out.get("description", "")
        out["description"] = (base + " " if base else "") + "(" + "; ".join(notes) + ")"
    return out


def _merge_all_of(node: dict, defs: dict, depth: int) -> dict:
    parts = [p for p in node.pop("allOf") if isinstance(p, dict)]
    resolved = []
    for part in parts:
        if "$ref" in part:
            target = _resolve(part["$ref"], defs)
            part = {**(target or {}), **{k: v for k, v in part.items() if k != "$ref"}}
        resolved.append(part)
    merged = dict(node)
    for part in resolved:
        for key, value in part.items():
            if key == "properties":
                merged.setdefault("properties", {}).update(_dict(value))
            elif key == "required" and isinstance(value, list):
                merged["required"] = list(dict.fromkeys([*merged.get("required", []), *value]))
            else:
                merged.setdefault(key, value)
    return merged


def _merge_top(schema: dict) -> dict:
    """Anthropic refuses anyOf/oneOf/allOf at the top: fold object variants into one object whose
    properties are the union and whose required ones are those every variant requires."""
    variants = schema.get("anyOf")
    if not variants:
        return schema
    objects = [v for v in variants if v.get("type") == "object" or "properties" in v]
    out = {k: v for k, v in schema.items() if k != "anyOf"}
    if not objects:
        return out
    properties: dict = dict(out.get("properties", {}))
    required_sets = []
    for v in objects:
        for name, sub in v.get("properties", {}).items():
            properties.setdefault(name, sub)
        required_sets.append(set(v.get("required", [])))
    out["type"] = "object"
    out["properties"] = properties
    common = set.intersection(*required_sets) | set(out.get("required", []))
    if common:
        out["required"] = [name for name in properties if name in common]
    note = "Accepts one of several argument shapes; give only the fields of the one you use."
    out["description"] = (out.get("description", "") + " " + note).strip()
    return out


def _is_type(schema: dict, kind: str) -> bool:
    t = schema.get("type")
    return t == kind or (isinstance(t, list) and kind in t)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


# ---- strict ---------------------------------------------------------------------------------------


class _NotStrict(Exception):
    pass


def strict(schema: dict) -> dict | None:
    """The strict-mode form of a portable schema, or None when it has none."""
    try:
        return _strict(schema, 0, required=True)
    except _NotStrict:
        return None


def _strict(node: dict, depth: int, *, required: bool) -> dict:
    if depth > STRICT_MAX_DEPTH:
        raise _NotStrict("too deep")
    out = {}
    notes = []
    for key, value in node.items():
        if key in STRICT_KEYWORDS:
            out[key] = value
        elif key in ("minLength", "maxLength"):
            notes.append(f"{key}: {value}")
    if "anyOf" in out:
        out["anyOf"] = [_strict(v, depth + 1, required=True) for v in out["anyOf"]]
    elif "type" not in out:
        raise _NotStrict("untyped value")  # strict mode needs a type (or anyOf) everywhere
    if _is_type(out, "object"):
        properties = out.get("properties") or {}
        open_map = out.get("additionalProperties") not in (None, False)
        if open_map or (not properties and depth > 0):
            raise _NotStrict("free-form object")  # a map cannot be closed without losing its keys
        optional = set(properties) - set(out.get("required", []))
        out["properties"] = {name: _strict(sub, depth + 1, required=name not in optional)
                             for name, sub in properties.items()}
        out["required"] = list(properties)
        out["additionalProperties"] = False
    if _is_type(out, "array"):
        out["items"] = _strict(out.get("items") or {}, depth + 1, required=True)
    if notes:
        out["description"] = (out.get("description", "") + " (" + "; ".join(notes) + ")").strip()
    return out if required else _nullable(out)


def _nullable(node: dict) -> dict:
    if "anyOf" in node:
        if not any(v.get("type") == "null" for v in node["anyOf"]):
            node["anyOf"] = [*node["anyOf"], {"type": "null"}]
        return node
    kinds = node["type"] if isinstance(node["type"], list) else [node["type"]]
    if "null" not in kinds:
        node["type"] = [*kinds, "null"]
    if "enum" in node and None not in node["enum"]:
        node["enum"] = [*node["enum"], None]
    return node


# ---- arguments back -----------------------------------------------------------------------------------


def drop_unset(args: Any, schema: dict) -> Any:
    """Remove the nulls the model sent for optional properties (strict mode makes it send them)."""
    if isinstance(args, dict) and isinstance(schema.get("properties"), dict):
        required = set(schema.get("required", []))
        properties = schema["properties"]
        return {
            key: drop_unset(value, properties.get(key, {}))
            for key, value in args.items()
            if not (value is None and key not in required and key in properties)
        }
    if isinstance(args, list) and isinstance(schema.get("items"), dict):
        return [drop_unset(item, schema["items"]) for item in args]
    return args
