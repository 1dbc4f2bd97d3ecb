"""Blob-referenced request parts and attached images, with the store and the client faked."""

import asyncio
import base64
import hashlib
from types import SimpleNamespace

import pytest

from byok.agent.cursor import request_parts
from byok.wire.errors import ProtocolError
from byok.proto import agent_pb2 as apb

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 20


class FakeStore:
    def __init__(self, blobs=None):
        self.blobs = dict(blobs or {})

    async def get_blob(self, blob_id, *, user_id=None):
        return self.blobs.get(blob_id)

    async def put_blob(self, blob_id, data, *, user_id=None):
        self.blobs[blob_id] = data


class FakeRun:
    user = None

    def __init__(self, client_blobs):
        self.client_blobs = client_blobs
        self.gets = []

    async def get_blob(self, blob_id, kind, length=None):
        self.gets.append(blob_id)
        return self.client_blobs[blob_id]


def turn(client_blobs=None, store=None, prefetched=None):
    return SimpleNamespace(svc=SimpleNamespace(store=store or FakeStore()), run=FakeRun(client_blobs or {}),
                           prefetched=prefetched or {})


def test_images_by_blob_id_are_fetched_and_typed():
    blob_id = hashlib.sha256(PNG).digest()
    message = apb.UserMessage(selected_context=apb.SelectedContext(selected_images=[
        apb.SelectedImage(blob_id=blob_id), apb.SelectedImage(data=PNG, mime_type="image/png")]))
    t = turn({blob_id: PNG})
    parts = asyncio.run(request_parts.image_parts(t, message))
    assert [p.mime_type for p in parts] == ["image/png", "image/png"]
    assert base64.b64decode(parts[0].data_b64) == PNG
    assert t.run.gets == [blob_id] and t.svc.store.blobs[blob_id] == PNG  # kept for next time


def test_a_stored_blob_that_does_not_hash_is_a_protocol_error():
    blob_id = hashlib.sha256(b"right").digest()
    t = turn(store=FakeStore({blob_id: b"wrong"}))
    with pytest.raises(ProtocolError, match="Blob hash mismatch"):
        asyncio.run(request_parts.blob(t, blob_id, "rules"))


def test_undecodable_part_is_a_protocol_error():
    junk = b"\xff\xff\xff"
    refs = apb.RequestContextPartReferences(rules_blob_id=hashlib.sha256(junk).digest(), rules_byte_length=3)
    with pytest.raises(ProtocolError, match="RequestContextRulesPart"):
        asyncio.run(request_parts.context_parts(turn({refs.rules_blob_id: junk}), refs))
