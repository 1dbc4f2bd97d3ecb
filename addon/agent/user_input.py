"""A user's input as the model sees it: the runtime (user-role) message of one UserMessage.

Used for the run's own message (loop.py) and for messages that arrive while the run works
(queued.py), so both render the same way: mode reminder, request context (its blob-referenced parts
fetched and verified), time and query, attached images as image parts. The message also records a
digest of the request-context section it showed, so a resumed run can tell whether the context
changed since (queued.py renders a change once).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from byok.proto import agent_pb2 as apb

from . import history
from .cursor import context as request_context
from .cursor import projection as proj
from .cursor import request_parts
from ..providers.transcript import TextPart
from .turn_base import TurnState

log = logging.getLogger("byok.loop")


@dataclass(frozen=True)
class Rendered:
    parts: list
    context_digest: str
    """sha256 (hex) of the REQUEST_CONTEXT section as rendered."""


def context_of(user_message_context: apb.RequestContext | None, refs: apb.RequestContextPartReferences | None,
               ) -> apb.RequestContext | None:
    """The request context of an input: its own, else the parts' dynamic context."""
    if user_message_context is not None:
        return user_message_context
    if refs is not None and refs.HasField("dynamic_context"):
        return refs.dynamic_context
    return None


async def context_section(turn: TurnState, context: apb.RequestContext | None,
                          refs: apb.RequestContextPartReferences | None) -> tuple[str, object]:
    """(the REQUEST_CONTEXT text, the fetched parts) of one input."""
    parts = await request_parts.context_parts(turn, refs) if refs is not None else None
    return request_context.render_request_context(context, parts, offered_tools=tuple(turn.offered_tools)), parts


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


async def render(turn: TurnState, user_message: apb.UserMessage, context: apb.RequestContext | None,
                 refs: apb.RequestContextPartReferences | None, now: datetime, *,
                 action_context: Sequence[str] = ()) -> Rendered:
    """`action_context`: blocks the caller adds to ACTION_CONTEXT (e.g. an approved plan)."""
    section, parts = await context_section(turn, context, refs)
    offered = tuple(turn.offered_tools)
    for reason in request_context.left_out(context, parts, offered):
        log.info("[%s] request context: %s (mode %s)", turn.run.request_id, reason, turn.mode.name)
    text = request_context.runtime_text(turn.mode, context, parts, user_message, now, action_context=action_context,
                                        offered_tools=offered)
    images = await request_parts.image_parts(turn, user_message)
    if images and not turn.route.supports_images:
        log.info("[%s] %d attached image(s) not sent: %s is configured without image input",
                 turn.run.request_id, len(images), turn.route.public_id)
        text += (f"\n\n<system_reminder>The user attached {len(images)} image(s); this model is "
                 "configured without image input, so they are not shown.</system_reminder>")
        images = []
    return Rendered([TextPart(text), *images], digest(section))


def turn_payload(rendered: Rendered, user_message: apb.UserMessage, *, event_id: str, request_id: str,
                 state_blob: bytes) -> tuple[dict, apb.UserMessage]:
    """The stored runtime message that starts a Cursor turn, and the UserMessage it shows: a copy of
    the client's, pointing at the state before it (`state_blob`)."""
    shown = apb.UserMessage()
    shown.CopyFrom(user_message)
    shown.conversation_state_blob_id = proj.sha256(state_blob)
    um_blob = shown.SerializeToString(deterministic=True)
    payload = history.runtime_user_payload(
        rendered.parts,
        wire_id=f"runtime:{event_id}",
        turn={"request_id": request_id, "user_message_blob": history.b64(um_blob),
              "state_blob": history.b64(state_blob)},
        blob_refs=[proj.sha256(um_blob), proj.sha256(state_blob)],
        context_digest=rendered.context_digest,
    )
    return payload, shown
