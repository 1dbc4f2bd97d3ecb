"""Images end to end: an image attached in Cursor reaches the provider as an image part in each
dialect (inline bytes, and by blob id fetched from the client), and a model configured without
`supports_images` gets a note instead, never the bytes."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from byok.cli.client import user_turn_request
from tests.e2e.conftest import run
from tests.e2e.harness import Proxy, model_entry, providers_toml, public_id
from tests.support.fake_web import tiny_png
from tests.support.scripted_provider import KINDS, SCRIPTS

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60), pytest.mark.usefixtures("fresh_provider")]

PNG = tiny_png(4, 3, (20, 40, 220))
B64 = base64.b64encode(PNG).decode()


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider):
    home = tmp_path_factory.mktemp("images")
    entries = {}
    for kind in KINDS:
        extra = {"supports_images": "true"} | ({"max_output_tokens": 4096} if kind == "anthropic" else {})
        entries[kind] = model_entry(provider.base_url, kind=kind, model_id=f"{kind}-vision", name=f"v-{kind}",
                                    extra=extra)
    entries["blind"] = model_entry(provider.base_url, kind="openai_chat", model_id="text-only", name="blind")
    (home / "providers.toml").write_text(providers_toml(list(entries.values())))
    proxy = Proxy(home).start()
    yield proxy, {k: public_id(e) for k, e in entries.items()}
    proxy.stop()


def image_turn(proxy, provider, model: str, kind: str, *, by_blob: bool = False):
    request = user_turn_request("what colour is this?", model_id=model)
    image = request.action.user_message_action.user_message.selected_context.selected_images.add(
        uuid="img-1", path="/home/me/Desktop/shot.png", mime_type="image/png")
    if by_blob:  # Cursor sent only the blob id: the proxy fetches the bytes from the client (KV GET)
        image.blob_id = hashlib.sha256(PNG).digest()
    else:
        image.data = PNG
    provider.enqueue(kind, SCRIPTS[kind].text_reply("Blue."))
    before = len(provider.requests)

    async def scenario():
        async with proxy.client() as client:
            client.blobs[hashlib.sha256(PNG).digest()] = PNG
            return await client.run(request)

    result = run(scenario())
    assert result.end_error is None and result.text() == "Blue."
    [sent] = provider.requests[before:]
    return result, sent.json


def last_user_content(kind: str, body: dict) -> list:
    if kind == "openai_responses":
        return [item for item in body["input"] if item.get("role") == "user"][-1]["content"]
    return [m for m in body["messages"] if m["role"] == "user"][-1]["content"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("by_blob", [False, True], ids=["inline", "blob"])
def test_an_attached_image_reaches_the_provider_as_an_image_part(env, provider, kind, by_blob):
    proxy, models = env
    _, body = image_turn(proxy, provider, models[kind], kind, by_blob=by_blob)
    content = last_user_content(kind, body)
    images = [p for p in content if p["type"] in ("image_url", "input_image", "image")]
    expected = {
        "openai_chat": {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64}"}},
        "openai_responses": {"type": "input_image", "image_url": f"data:image/png;base64,{B64}"},
        "anthropic": {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}},
    }[kind]
    if kind == "anthropic":  # the newest user message's last block carries a cache breakpoint
        expected["cache_control"] = {"type": "ephemeral"}
    assert images == [expected]
    text = "".join(p.get("text", "") for p in content)
    assert "what colour is this?" in text and "/home/me/Desktop" not in text  # the local path stays private
    assert "configured without image input" not in text


def test_a_model_without_image_input_gets_the_note_and_never_the_bytes(env, provider):
    proxy, models = env
    _, body = image_turn(proxy, provider, models["blind"], "openai_chat")
    raw = json.dumps(body)
    assert B64 not in raw and "image_url" not in raw
    content = last_user_content("openai_chat", body)
    text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
    assert ("The user attached 1 image(s); this model is configured without image input, so they are not "
            "shown.") in text
    assert "not sent" in proxy.log() and models["blind"] in proxy.log()
