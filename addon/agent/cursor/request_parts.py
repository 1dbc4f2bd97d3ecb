"""The blob-referenced parts of a run request: rules, skills, subagents, MCP, and attached images.

`ConversationAction.request_context_parts` carries blob ids and byte lengths, not the data
(PROTOCOL 8.4). Each part comes from `AgentRunRequest.pre_fetched_blobs`, the store, or a KV GET
from the client; every source is hash-checked, the length is checked, and the bytes are decoded as
the part's type. A missing blob, a wrong length or an undecodable part is a protocol error.
"""

from __future__ import annotations

import base64
import hashlib

from google.protobuf.message import DecodeError

from byok.proto import agent_pb2 as apb

from ...wire.errors import ProtocolError
from ...providers.transcript import ImagePart
from .context import ContextParts, selected_images, sniff_image_type

EMPTY_BLOB_ID = hashlib.sha256(b"").digest()

PARTS = (  # ContextParts field, blob id field, length field, message type
    ("rules", "rules_blob_id", "rules_byte_length", apb.RequestContextRulesPart),
    ("skills", "skills_blob_id", "skills_byte_length", apb.RequestContextSkillsPart),
    ("subagents", "subagents_blob_id", "subagents_byte_length", apb.RequestContextSubagentsPart),
    ("mcps", "mcps_blob_id", "mcps_byte_length", apb.RequestContextMcpsPart),
)


async def blob(turn, blob_id: bytes, kind: str, length: int | None = None) -> bytes:
    """One referenced blob, verified, from wherever it already is (else the client)."""
    if blob_id == EMPTY_BLOB_ID:
        data = b""
    elif blob_id in turn.prefetched:
        data = turn.prefetched[blob_id]
    else:
        data = await turn.svc.store.get_blob(blob_id, user_id=turn.run.user)  # a team user reads only theirs
        if data is None:
            data = await turn.run.get_blob(blob_id, kind, length)  # checks hash and length
            await turn.svc.store.put_blob(blob_id, data, user_id=turn.run.user)
    if hashlib.sha256(data).digest() != blob_id:
        raise ProtocolError(f"Blob hash mismatch for {kind} blob {blob_id.hex()}")
    if length is not None and len(data) != length:
        raise ProtocolError(f"{kind} blob {blob_id.hex()} has {len(data)} bytes, expected {length}")
    return data


def prefetched(request: apb.AgentRunRequest) -> dict[bytes, bytes]:
    """`pre_fetched_blobs` by id (verified when used)."""
    return {b.id: b.value for b in request.pre_fetched_blobs}


async def context_parts(turn, refs: apb.RequestContextPartReferences) -> ContextParts | None:
    """Fetch and decode the referenced parts; None when the action references none."""
    found = {}
    for name, id_field, length_field, message_type in PARTS:
        blob_id = getattr(refs, id_field)
        if not blob_id:
            continue
        data = await blob(turn, blob_id, f"request context {name}", getattr(refs, length_field))
        try:
            found[name] = message_type.FromString(data)
        except DecodeError as e:
            raise ProtocolError(f"request context {name} blob is not a {message_type.__name__}: {e}") from e
    return ContextParts(**found) if found else None


async def part(turn, refs: apb.RequestContextPartReferences, name: str):
    """One referenced part (e.g. "mcps"), fetched and decoded like `context_parts`; None when the
    action does not reference it."""
    for part_name, id_field, length_field, message_type in PARTS:
        if part_name != name or not getattr(refs, id_field):
            continue
        data = await blob(turn, getattr(refs, id_field), f"request context {name}", getattr(refs, length_field))
        try:
            return message_type.FromString(data)
        except DecodeError as e:
            raise ProtocolError(f"request context {name} blob is not a {message_type.__name__}: {e}") from e
    return None


async def image_parts(turn, user_message: apb.UserMessage) -> list[ImagePart]:
    """Attached images as model input; an image sent only by blob id is fetched like any blob."""
    parts = []
    for ref in selected_images(user_message.selected_context if user_message.HasField("selected_context") else None):
        if ref.data_b64 is None and ref.blob_id:
            data = await blob(turn, ref.blob_id, "selected image")
            parts.append(ImagePart(ref.mime_type or sniff_image_type(data), base64.b64encode(data).decode("ascii")))
        elif ref.data_b64 is not None:
            parts.append(ref.to_part())
    return parts
