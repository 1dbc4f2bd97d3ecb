"""Provider failure payloads -> ProviderError: HTTP error bodies, mid-stream error events, refusals.

One place decides the title, retryable flag and kind of every provider failure:

    HTTP 401/403                -> "API key rejected", not retryable
    HTTP 408/409/429/5xx        -> retryable ("Rate limited" for 429)
    other 4xx                   -> not retryable
    context window exceeded     -> kind="context_length", "Conversation too long", not retryable
    refusal / content filter    -> kind="refusal", shown immediately, not retryable
    mid-stream error event      -> retryable unless its type says the request itself is bad

Messages name the provider and carry its own text; known secrets are scrubbed from them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from ..wire.errors import ProviderError

MAX_MESSAGE_CHARS = 2000

_CONTEXT_CODES = {"context_length_exceeded", "string_above_max_length"}
_CONTEXT_TEXT = re.compile(
    r"context[ _-]?length|context window|maximum context|prompt is too long|"
    r"exceeds? (?:the )?context limit|input length and `?max_tokens`? exceed",
    re.IGNORECASE,
)
# Error types/codes of a stream error event that mean "this request is bad", not "try again".
_NOT_RETRYABLE_TYPES = {
    "invalid_request_error", "authentication_error", "permission_error", "not_found_error",
    "request_too_large", "invalid_prompt", "invalid_api_key", "billing_error",
}


def scrub(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "<redacted>")
    return text


def is_context_length(code: Any, message: str) -> bool:
    return (isinstance(code, str) and code in _CONTEXT_CODES) or bool(_CONTEXT_TEXT.search(message))


def extract(body: bytes) -> tuple[str, str | None, str | None]:
    """(message, code, type) from the provider's JSON error shape, or the raw text excerpt."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        payload: Any = json.loads(text)
    except ValueError:
        return (text[:MAX_MESSAGE_CHARS] or "(empty body)"), None, None
    return from_payload(payload, fallback=text)


def from_payload(payload: Any, *, fallback: str = "") -> tuple[str, str | None, str | None]:
    """OpenAI `{"error": {...}}`, Anthropic `{"type": "error", "error": {...}}`, a bare
    `{"message": ...}` / `{"detail": ...}`, `{"error": "text"}`, or a list of those (Gemini)."""
    if isinstance(payload, list) and payload:
        payload = payload[0]
    if not isinstance(payload, dict):
        return (fallback[:MAX_MESSAGE_CHARS] or "(empty body)"), None, None
    err = payload.get("error", payload)
    if isinstance(err, str):
        return err[:MAX_MESSAGE_CHARS], None, None
    if not isinstance(err, dict):
        return (fallback[:MAX_MESSAGE_CHARS] or "(no message)"), None, None
    message = err.get("message") or err.get("detail") or payload.get("message") or payload.get("detail")
    if not isinstance(message, str) or not message:
        message = (fallback or json.dumps(payload))[:MAX_MESSAGE_CHARS]
    code = err.get("code")
    etype = err.get("type")
    return message[:MAX_MESSAGE_CHARS], (str(code) if code is not None else None), (
        etype if isinstance(etype, str) else None
    )


def context_length(provider: str, message: str, *, status: int | None = None) -> ProviderError:
    return ProviderError(
        f"{provider}: the conversation no longer fits the model's context window: {message}",
        status=status, retryable=False, title="Conversation too long", immediate=True, kind="context_length",
    )


def refusal(provider: str, message: str) -> ProviderError:
    return ProviderError(
        f"{provider}: the model refused to answer: {message}",
        retryable=False, title="Model refused", immediate=True, expected=True, kind="refusal",
    )


def http_error(provider: str, status: int, body: bytes, secrets: Iterable[str] = (), *,
               url: str | None = None, model: str | None = None) -> ProviderError:
    message, code, _ = extract(body)
    message = scrub(message, secrets)
    if status == 404:
        # almost always a wrong base_url (the path) or model id: say which request was sent where
        message += (f" [check base_url and the model id in the providers file: the request for model {model!r}"
                    f" went to {url}; base_url must end where /chat/completions, /responses or /messages begin,"
                    " usually /v1]" if url else " [check base_url and the model id in the providers file]")
        message = scrub(message, secrets)
    if status not in (401, 403, 408, 409, 429) and status < 500 and is_context_length(code, message):
        return context_length(provider, message, status=status)
    if status in (401, 403):
        return ProviderError(
            f"{provider} rejected the API key: {message}", status=status, retryable=False, title="API key rejected"
        )
    retryable = status in (408, 409, 429) or status >= 500
    title = "Rate limited" if status == 429 else "Provider Error"
    return ProviderError(f"{provider}: {message}", status=status, retryable=retryable, title=title)


def stream_error(provider: str, payload: Any) -> ProviderError:
    """An error event inside a 200 stream (all three dialects have one)."""
    message, code, etype = from_payload(payload)
    if is_context_length(code, message):
        return context_length(provider, message)
    retryable = not ({code, etype} & _NOT_RETRYABLE_TYPES)
    return ProviderError(f"{provider}: {message}", retryable=retryable, title="Provider Error")
