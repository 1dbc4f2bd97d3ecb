"""What providers refuse in tool schemas, as a checker the scripted provider can apply to requests.

Written from the providers' documented and observed errors, independently of the normaliser under
test (`byok.agent.cursor.tools.mcp_schema`):
  - every dialect: the parameters are an object schema (OpenAI: "schema must be a JSON Schema of
    'type: \"object\"'"); Anthropic refuses oneOf/anyOf/allOf at the top; OpenAI refuses an array
    schema without `items`; OpenAI-compatible gateways (Gemini-style) refuse keywords outside a small
    core such as `$schema`, `$ref`/`$defs`, `oneOf`, `allOf`, `default`, `format`, `examples`.
  - OpenAI strict mode (`strict: true`): every object has `additionalProperties: false` and lists
    every property in `required`; every value is typed; no `minLength`/`maxLength`/`default`/... .
"""

from __future__ import annotations

from typing import Any

CORE = {"type", "description", "properties", "required", "items", "enum", "anyOf", "additionalProperties",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems",
        "minLength", "maxLength", "pattern"}
STRICT_UNSUPPORTED = {"minLength", "maxLength", "default", "examples", "format", "oneOf", "allOf", "not",
                      "$schema", "$ref", "$defs", "definitions", "patternProperties"}


def _walk(schema: Any, where: str):
    if not isinstance(schema, dict):
        return
    yield where, schema
    for name, sub in (schema.get("properties") or {}).items() if isinstance(schema.get("properties"), dict) else ():
        yield from _walk(sub, f"{where}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from _walk(schema["items"], f"{where}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], f"{where}{{}}")
    for key in ("anyOf", "oneOf", "allOf"):
        for i, sub in enumerate(schema.get(key) or []):
            yield from _walk(sub, f"{where}.{key}[{i}]")


def _types(schema: dict) -> list:
    t = schema.get("type")
    return t if isinstance(t, list) else [t]


def portable_problems(schema: Any) -> list[str]:
    problems = []
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return ["parameters must be a schema of type object"]
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            problems.append(f"{key} is not allowed at the top level")
    for where, node in _walk(schema, "$"):
        extra = sorted(set(node) - CORE)
        if extra:
            problems.append(f"{where}: unsupported keyword(s) {', '.join(extra)}")
        if "array" in _types(node) and "items" not in node:
            problems.append(f"{where}: array schema missing items")
    return problems


def strict_problems(schema: Any) -> list[str]:
    problems = portable_problems(schema)
    for where, node in _walk(schema, "$"):
        bad = sorted(set(node) & STRICT_UNSUPPORTED)
        if bad:
            problems.append(f"{where}: not supported in strict mode: {', '.join(bad)}")
        if "type" not in node and "anyOf" not in node:
            problems.append(f"{where}: strict mode needs a type")
        if "object" in _types(node):
            props = node.get("properties")
            if node.get("additionalProperties") is not False:
                problems.append(f"{where}: additionalProperties must be false in strict mode")
            if not isinstance(props, dict) or set(node.get("required", [])) != set(props or {}):
                problems.append(f"{where}: every property must be required in strict mode")
    return problems


def check_tools(path: str, body: Any) -> str | None:
    """The scripted provider's `check_request`: a 400 text for the first bad tool schema, else None."""
    if not isinstance(body, dict):
        return None
    for tool in body.get("tools") or []:
        if path.endswith("/chat/completions"):
            fn = tool.get("function") or {}
            name, schema, strict = fn.get("name"), fn.get("parameters"), fn.get("strict") is True
        elif path.endswith("/responses"):
            name, schema, strict = tool.get("name"), tool.get("parameters"), tool.get("strict") is True
        else:
            name, schema, strict = tool.get("name"), tool.get("input_schema"), False
        problems = strict_problems(schema) if strict else portable_problems(schema)
        if problems:
            return f"Invalid schema for function '{name}': " + "; ".join(problems)
    return None
