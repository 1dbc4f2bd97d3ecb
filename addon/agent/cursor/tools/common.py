"""Shared pieces of the tool codecs: argument decoding and validation, paths, canonical strings.

Owns:
  - `decode_args`: the one strict JSON parse of the model's argument text (empty text = `{}`).
  - `Args`: typed accessors that raise `ToolArgsError` with a message the model can act on.
  - `resolve_path`: a relative model path joined to the workspace root (cards and execs agree).
  - `dumps`: the canonical JSON of structured results (sorted keys, compact, once).
  - `variant`: the set oneof of a client reply; an empty one is the client breaking the protocol.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from google.protobuf.message import Message

from byok.wire.errors import ProtocolError

from .base import ToolArgsError

CONTENT_LIMIT = 40_000
"""Characters of tool output the model sees at most (matches ShellArgs.file_output_threshold_bytes)."""


def decode_args(text: str) -> dict[str, Any]:
    """The model's complete argument text -> a JSON object. Empty text is `{}` (peers: no-arg calls)."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ToolArgsError(f"arguments are not valid JSON ({e.msg} at position {e.pos})") from None
    if not isinstance(value, dict):
        raise ToolArgsError(f"arguments must be a JSON object, got {_json_type(value)}")
    _check_unicode(value)
    return value


def _check_unicode(value: Any) -> None:
    # A lone \\uD800-style escape decodes to a surrogate that no protobuf string can carry.
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolArgsError("arguments contain an invalid \\u escape (a lone surrogate)") from None
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_unicode(k)
            _check_unicode(v)
    elif isinstance(value, list):
        for v in value:
            _check_unicode(v)


def _encodable(value: str, name: str) -> None:
    # Whoever decoded the JSON, a lone surrogate must not reach a protobuf string (it cannot encode).
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolArgsError(f"invalid {name}: contains an invalid \\u escape (a lone surrogate)") from None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


class Args:
    """Typed, validating view of one JSON object (the arguments, or one item inside them).

    Unknown keys are ignored: the model's extra keys never change behaviour (in particular the
    non-existent Shell `timeout` / `is_background`, seed §29)."""

    def __init__(self, raw: Mapping[str, Any], where: str = "") -> None:
        self.raw = raw
        self.where = where

    def _name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def _get(self, key: str, required: bool, kind: str) -> Any:
        value = self.raw.get(key)
        if value is None:
            if required:
                raise ToolArgsError(f"missing {self._name(key)}: `{self._name(key)}` is required ({kind})")
            return None
        return value

    def _bad(self, key: str, kind: str, value: Any) -> ToolArgsError:
        return ToolArgsError(f"invalid {self._name(key)}: expected {kind}, got {_json_type(value)}")

    def string(self, key: str, *, required: bool = False, non_empty: bool = False) -> str | None:
        value = self._get(key, required, "a string")
        if value is None:
            return None
        if not isinstance(value, str):
            if required:
                raise ToolArgsError(f"missing {self._name(key)}: expected a string, got {_json_type(value)}")
            raise self._bad(key, "a string", value)
        if non_empty and not value.strip():
            raise ToolArgsError(f"missing {self._name(key)}: `{self._name(key)}` must not be empty")
        _encodable(value, self._name(key))
        return value

    def integer(self, key: str, *, required: bool = False, minimum: int | None = None,
            maximum: int | None = None) -> int | None:
        value = self._get(key, required, "an integer")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            raise self._bad(key, "an integer", value)
        value = int(value)
        if minimum is not None and value < minimum:
            raise ToolArgsError(f"{self._name(key)} out of range: must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise ToolArgsError(f"{self._name(key)} out of range: must be <= {maximum}, got {value}")
        return value

    def boolean(self, key: str, *, required: bool = False) -> bool | None:
        value = self._get(key, required, "true or false")
        if value is None:
            return None
        if not isinstance(value, bool):
            raise self._bad(key, "true or false", value)
        return value

    def array(self, key: str, *, required: bool = False, min_items: int = 0) -> list[Any] | None:
        value = self._get(key, required, "an array")
        if value is None:
            return None
        if not isinstance(value, list):
            raise self._bad(key, "an array", value)
        if len(value) < min_items:
            raise ToolArgsError(f"invalid {self._name(key)}: needs at least {min_items} item(s), got {len(value)}")
        return value

    def str_list(self, key: str, *, required: bool = False) -> list[str] | None:
        items = self.array(key, required=required)
        if items is None:
            return None
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise ToolArgsError(f"invalid {self._name(key)}[{i}]: expected a string, got {_json_type(item)}")
            _encodable(item, f"{self._name(key)}[{i}]")
        return items

    def objects(self, key: str, *, required: bool = False, min_items: int = 0) -> list["Args"] | None:
        items = self.array(key, required=required, min_items=min_items)
        if items is None:
            return None
        out = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise ToolArgsError(f"invalid {self._name(key)}[{i}]: expected an object, got {_json_type(item)}")
            out.append(Args(item, f"{self._name(key)}[{i}]"))
        return out

    def choice(self, key: str, choices: tuple[str, ...], *, required: bool = False) -> str | None:
        value = self.string(key, required=required)
        if value is not None and value not in choices:
            raise ToolArgsError(f"invalid {self._name(key)}: {value!r} is not one of {', '.join(choices)}")
        return value


_WINDOWS_ABS = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\)")


def is_absolute(path: str) -> bool:
    return path.startswith(("/", "~")) or bool(_WINDOWS_ABS.match(path))


def resolve_path(path: str, workspace: str) -> str:
    """A relative path joined to the workspace root with the root's own separator; else unchanged."""
    if not workspace or is_absolute(path):
        return path
    sep = "\\" if "\\" in workspace and "/" not in workspace else "/"
    rel = path[2:] if path.startswith(("./", ".\\")) else path
    if rel in ("", "."):
        return workspace
    return workspace.rstrip("/\\") + sep + rel


def join_path(folder: str, name: str) -> str:
    sep = "\\" if "\\" in folder and "/" not in folder else "/"
    return folder.rstrip("/\\") + sep + name


def dumps(value: Any) -> str:
    """Canonical JSON of a structured result: sorted keys, compact, non-ASCII kept (§26.8)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def variant(message: Message, oneof: str, what: str) -> str:
    """The set member of `oneof`; a reply without one breaks the protocol (never guessed)."""
    name = message.WhichOneof(oneof)
    if name is None:
        raise ProtocolError(f"{what} has no {oneof} set")
    return name


def cap_tail(text: str, limit: int = CONTENT_LIMIT) -> str:
    """Keep the last `limit` characters (the end of an output is what matters), saying what was cut."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    return f"[... {cut} earlier characters omitted ...]\n" + text[cut:]


def cap_head(text: str, limit: int = CONTENT_LIMIT) -> str:
    """Keep the first `limit` characters, saying what was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters omitted ...]"
