"""Image generation for the GenerateImage tool (`[image_generation]` in the providers file): an
OpenAI-compatible images endpoint, `POST {base_url}/images/generations` with
`{"model", "prompt", "n": 1, "size"?}`. The image comes back as `b64_json` (gpt-image-1 always;
most compatible servers too) or as a `url`, which is then downloaded (same size cap).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

import httpx

from ...providers.config import ImageConfig

TIMEOUT_S = 180.0  # image models take a while
MAX_IMAGE_BYTES = 20 * 1024 * 1024


class ImageFailed(Exception):
    """The endpoint produced no image; `str()` is shown to the model (no key material)."""




@dataclass(frozen=True)
class GeneratedImage:
    data: bytes
    mime_type: str
    revised_prompt: str | None = None


class ImageBackend:
    def __init__(self, config: ImageConfig) -> None:
        self.config = config

    async def generate(self, http: httpx.AsyncClient, prompt: str, *, size: str | None = None) -> GeneratedImage:
        from .keys import resolve_key

        key = resolve_key(self.config.api_key, self.config.api_key_env, "[image_generation]", ImageFailed)
        body = {"model": self.config.model, "prompt": prompt, "n": 1}
        if size or self.config.size:
            body["size"] = size or self.config.size
        try:
            response = await http.post(f"{self.config.base_url}/images/generations", json=body,
                                       headers={"Authorization": f"Bearer {key}"}, timeout=TIMEOUT_S)
        except httpx.HTTPError as e:
            raise ImageFailed(f"the image endpoint could not be reached: {type(e).__name__}") from None
        if response.status_code != 200:
            raise ImageFailed(f"the image endpoint answered HTTP {response.status_code}: {_error_text(response)}")
        try:
            item = response.json()["data"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            raise ImageFailed("the image endpoint's answer has no data[0]") from None
        if isinstance(item.get("b64_json"), str):
            try:
                data = base64.b64decode(item["b64_json"], validate=True)
            except (binascii.Error, ValueError):
                raise ImageFailed("the image endpoint's b64_json is not base64") from None
        elif isinstance(item.get("url"), str):
            data = await _download(http, item["url"])
        else:
            raise ImageFailed("the image endpoint's answer has neither b64_json nor url")
        if len(data) > MAX_IMAGE_BYTES:
            raise ImageFailed(f"the generated image is larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MB")
        mime = sniff(data)
        if mime is None:
            raise ImageFailed("the image endpoint returned data that is not a PNG, JPEG, GIF or WebP image")
        revised = item.get("revised_prompt")
        return GeneratedImage(data, mime, revised if isinstance(revised, str) else None)


def _error_text(response: httpx.Response) -> str:
    try:
        error = response.json().get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(message, str) and message:
            return message[:300]
    except (ValueError, AttributeError):
        pass
    return response.text[:200] or "(no body)"


async def _download(http: httpx.AsyncClient, url: str) -> bytes:
    try:
        async with http.stream("GET", url, timeout=TIMEOUT_S) as response:
            if response.status_code != 200:
                raise ImageFailed(f"downloading the generated image answered HTTP {response.status_code}")
            chunks, size = [], 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > MAX_IMAGE_BYTES:
                    raise ImageFailed(f"the generated image is larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MB")
                chunks.append(chunk)
    except httpx.HTTPError as e:
        raise ImageFailed(f"the generated image could not be downloaded: {type(e).__name__}") from None
    return b"".join(chunks)


def sniff(data: bytes) -> str | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None
