"""What the three request builders share: the API key, the URL, the JSON body's last touches.

Pure functions; no IO except reading the key's environment variable via ModelRoute.
"""

from __future__ import annotations

import json
from typing import Any

from .config import ModelRoute, normalize_base_url
from ..wire.errors import ConfigError
from .transcript import ImagePart

EMPTY_SCHEMA: dict = {"type": "object", "properties": {}}
"""Sent for a tool without parameters (Anthropic requires an object schema; the others accept it)."""


def api_key(route: ModelRoute) -> str | None:
    """The key to send; None only when the route configures no key at all (a local server).

    A configured `api_key_env` that is unset or empty is a ConfigError naming the variable.
    """
    key = route.resolve_api_key()
    if key is None and route.api_key_env:
        raise ConfigError(
            f"Model '{route.display_name}' (provider '{route.provider}'): the environment variable "
            f"{route.api_key_env} holding its API key is not set in the proxy's environment.",
            bad_key=True,
        )
    return key


def endpoint(route: ModelRoute, path: str) -> str:
    return normalize_base_url(route.base_url) + path


def json_headers(route: ModelRoute, auth: dict[str, str]) -> dict[str, str]:
    headers = {"content-type": "application/json", "accept": "text/event-stream", **auth}
    if route.extra_headers:
        headers.update(route.extra_headers)
    return headers


def merge_extra_body(body: dict, extra: dict | None) -> dict:
    """`extra_body` merged last: nested objects merge key by key, anything else replaces."""
    if not extra:
        return body
    out = dict(body)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_extra_body(out[key], value)
        else:
            out[key] = value
    return out


def history_last(body: dict, key: str) -> dict:
    """The body with its growing history key moved to the end (after `extra_body`'s keys), so the
    serialized request starts with the previous request's bytes."""
    if key in body:
        body[key] = body.pop(key)
    return body


def schema(parameters: dict) -> dict:
    return parameters if parameters else dict(EMPTY_SCHEMA)


def data_url(image: ImagePart) -> str:
    return f"data:{image.mime_type};base64,{image.data_b64}"


def parse_json_object(text: str) -> dict[str, Any] | None:
    """The tool arguments as an object, or None when the text is not a JSON object."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def reject_knob(route: ModelRoute, knob: str, instead: str) -> None:
    """A config knob that this dialect cannot express is a clear error, never silently dropped."""
    raise ConfigError(
        f"Model '{route.display_name}' (provider '{route.provider}', kind {route.kind}): "
        f"{knob} is not supported by this provider kind; {instead}."
    )


def is_done_sentinel(data: str) -> bool:
    """`data: [DONE]`: the end of an OpenAI Chat stream, which gateways (LiteLLM) also append to
    Responses and Anthropic streams after their terminal event."""
    return data.strip() == "[DONE]"


def event_json(provider: str, data: str) -> dict | None:
    """One SSE event's JSON payload (None for an empty keep-alive event); not JSON is a provider
    protocol error."""
    from .base import ProviderProtocolError

    if not data.strip():
        return None
    try:
        payload = json.loads(data)
    except ValueError as e:
        raise ProviderProtocolError(f"{provider}: event is not JSON: {data[:200]!r}") from e
    if not isinstance(payload, dict):
        raise ProviderProtocolError(f"{provider}: event is not a JSON object: {data[:200]!r}")
    return payload



class DataChunkFold:
    """The shared start of the OpenAI-style folds (chat, legacy completions): `data:` JSON chunks and a
    final `data: [DONE]` (repeated by some gateways: ignored). Empty keep-alive events are skipped, an
    `error` object is the provider's failure, the first chunk opens the response (Start). A subclass
    sets `_provider`, `_started = _done = False`, `_finish` and `_usage` (None until seen), and
    implements `_chunk` and `_on_done` (which starts with `_finished()`)."""

    _provider: str
    _started: bool
    _done: bool
    _finish: str | None
    _usage: object

    def _finished(self) -> list:
        """At [DONE] (or a clean EOF): the stream must have said why it finished; its usage, if any."""
        from ..wire.errors import ProviderError

        if self._finish is None:
            raise ProviderError(f"{self._provider}: the stream ended ([DONE]) without a finish_reason.")
        self._done = True
        return [self._usage] if self._usage is not None else []

    def feed(self, event) -> list:
        from . import failures
        from .base import ProviderProtocolError, Start

        data = event.data.strip()
        if is_done_sentinel(data):
            return [] if self._done else self._on_done()
        if self._done:
            raise ProviderProtocolError(f"{self._provider}: data after [DONE]")
        if not data:
            return []
        chunk = event_json(self._provider, data)
        if chunk.get("error"):
            raise failures.stream_error(self._provider, chunk)
        out: list = []
        if not self._started:
            self._started = True
            out.append(Start(response_id=chunk.get("id") if isinstance(chunk.get("id"), str) else None))
        return out + self._chunk(chunk)

    def _chunk(self, chunk: dict) -> list:
        raise NotImplementedError

    def _on_done(self) -> list:
        raise NotImplementedError
