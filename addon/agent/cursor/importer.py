"""Taking over a client checkpoint this store did not publish (a lost DB, or a conversation begun on
one of Cursor's own models): decode it through the blob graph and append it as history.

Blobs we already hold come from the store; the rest are fetched by KV GET (hash and type checked by
the run). Roots must be AI-SDK JSON messages with exactly one system root, first (ours replaces
it). The longest prefix of roots that matches a checkpoint we published is reused, so switching
between Cursor's models and ours keeps one history. The last turn is decoded too, so this run's
steps can extend it; the other turns stay opaque ids.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from google.protobuf.message import DecodeError

from byok.proto import agent_pb2 as apb
from byok.store import NewMessage

from .. import history
from ...wire.errors import ProtocolError
from .projection import roots_digest


async def fetch_blobs(run, store, ids: Sequence[bytes], kind: str) -> dict[bytes, bytes]:
    """Blobs by id: from the store when held (for a team user: held for them), else KV GET from the
    client (then stored). Another user's blob ids therefore come only from this client, if it has them."""
    have = await store.get_blobs(ids, user_id=run.user)
    missing = [bid for bid in dict.fromkeys(ids) if bid not in have]
    fetched = []
    for bid in missing:
        data = await run.get_blob(bid, kind)
        fetched.append((bid, data, ()))
        have[bid] = data
    if fetched:
        await store.put_blobs(fetched, user_id=run.user)
    return have


def _is_system(data: bytes) -> bool:
    try:
        return json.loads(data.decode("utf-8")).get("role") == "system"
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return False


async def import_checkpoint(turn, state: apb.ConversationStateStructure) -> int | None:
    """Append the client's unknown checkpoint as history; returns the revision it maps to."""
    run, store, cid = turn.run, turn.svc.store, turn.conversation_id
    roots = list(state.root_prompt_messages_json)
    blobs = await fetch_blobs(run, store, roots, "root prompt message")
    if not _is_system(blobs[roots[0]]):
        raise ProtocolError("the checkpoint's first root prompt message is not the system prompt")
    for rid in roots[1:]:
        if _is_system(blobs[rid]):
            raise ProtocolError("the checkpoint has more than one system root prompt message")
        history.parse_root_json(blobs[rid])  # a root we cannot read is a protocol error now, not later
    base, keep = None, 1
    for k in range(len(roots) - 1, 1, -1):  # the longest prefix we published ourselves
        known, revision = await store.find_published(cid, roots_digest(roots[:k]))
        if known:
            base, keep = revision, k
            break
    turns = list(state.turns)
    payload = history.import_payload(roots=roots[keep:], turns=turns, source="client checkpoint")
    if turns:
        last = (await fetch_blobs(run, store, [turns[-1]], "conversation turn"))[turns[-1]]
        try:
            structure = apb.ConversationTurnStructure.FromString(last)
        except DecodeError as e:
            raise ProtocolError(f"the checkpoint's last turn is not a ConversationTurnStructure: {e}") from e
        if structure.WhichOneof("turn") == "agent_conversation_turn":
            inner = structure.agent_conversation_turn
            payload["open_turn"] = {
                "id": turns[-1].hex(),
                "user_message": inner.user_message.hex(),
                "steps": [s.hex() for s in inner.steps],
                "request_id": inner.request_id,
            }
    revision = await turn._append_import([NewMessage("import", "imported", payload, request_id=run.request_id)],
                                         base)
    await store.record_published(cid, roots_digest(roots), revision, [])
    return revision
