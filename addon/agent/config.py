"""The user's providers file (TOML): models, their public ids and how to reach them.

    [[providers]]
    name = "deepseek"
    kind = "openai_chat"            # openai_chat | openai_responses | anthropic
    base_url = "https://api.deepseek.com/v1"
    api_key_env = "DEEPSEEK_API_KEY"  # or api_key = "..."
    [[providers.models]]
    id = "deepseek-reasoner"
    display_name = "DeepSeek R1 (BYOK)"
    context_tokens = 128000
    max_output_tokens = 8192

A model's public id (what Cursor sends back as `requested_model.model_id`) is the first 4 bytes of
SHA-256(normalized_base_url + "\\0" + kind + "\\0" + model_id) as 8 lowercase hex characters.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

PROVIDER_KINDS = ("openai_chat", "openai_responses", "anthropic")


def normalize_base_url(base_url: str) -> str:
    return base_url.rstrip("/")


def public_model_id(base_url: str, kind: str, model_id: str) -> str:
    digest = hashlib.sha256(f"{normalize_base_url(base_url)}\0{kind}\0{model_id}".encode()).digest()
    return digest[:4].hex()


@dataclass(frozen=True)
class ModelRoute:
    """One configured model and everything needed to call it. `repr` never shows the key."""

    public_id: str
    provider: str
    kind: str
    base_url: str
    model_id: str
    display_name: str
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None
    context_tokens: int | None = None
    max_output_tokens: int | None = None
    reasoning_effort: str | None = None
    thinking_budget_tokens: int | None = None
    extra_body: dict | None = None
    extra_headers: dict | None = field(default=None, repr=False)
    supports_images: bool = False
    supports_thinking: bool = False

    def resolve_api_key(self) -> str | None:
        """The key to send, or None when it is not configured (a ConfigError for the run)."""
        import os

        if self.api_key:
            return self.api_key
        if self.api_key_env:
            return os.environ.get(self.api_key_env) or None
        return None
