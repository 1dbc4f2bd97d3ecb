"""Titles and names (`[features] chat_title`): `AiService/GetChatTitle`, `AiService/NameTab`, and
`NameAgent` on both `aiserver.v1.AiService` and `agent.v1.AgentService` (PROTOCOL 11.2).

    GetChatTitleRequest{conversation=2 repeated ConversationMessage}   -> GetChatTitleResponse{title=1}
    NameTabRequest{messages=1 repeated ConversationMessage, is_project=2} -> NameTabResponse{name=1, reason=2, icon=3}
    NameAgentRequest{user_message=1}                                    -> NameAgentResponse{name=1}

Only each message's text and role are read. NameTab's `reason` and `icon` are left empty: what
Cursor expects in them (an icon vocabulary?) is not known, and empty is what proto3 sends for "none".
"""

from __future__ import annotations

from collections.abc import Iterable

from byok.proto import agent_pb2 as apb, features_pb2 as fpb

from ..wire.errors import ProtocolError
from . import trim
from .call import CallContext, OneShot
from .llm import Ask, answer
from .prompts import PROMPTS
from .shared import clip, clip_all, configured

MESSAGES = 6
MESSAGE_CHARS = 1_500
CONVERSATION_CHARS = 6_000
_ROLES = {fpb.ConversationMessage.MESSAGE_TYPE_HUMAN: "User", fpb.ConversationMessage.MESSAGE_TYPE_AI: "Assistant"}


def conversation_text(messages: Iterable[fpb.ConversationMessage]) -> str:
    """The start of a conversation, one `Role: text` block per message, cut to size."""
    shown = [m for m in messages if m.text.strip()][:MESSAGES]
    return clip_all((f"{_ROLES.get(m.type, 'User')}: {clip(m.text.strip(), MESSAGE_CHARS)}" for m in shown),
                    CONVERSATION_CHARS, separator="\n\n")


def ask(conversation: str, what: str) -> Ask:
    if not conversation.strip():
        raise ProtocolError(f"{what} without any message text: nothing to name")
    system, user = PROMPTS["chat_title"].render(CONVERSATION=conversation)
    return Ask("chat_title", system, user)


async def title_of(conversation: str, what: str, ctx: CallContext) -> str:
    return await answer(ask(conversation, what), ctx, shape=trim.title, what="title")


async def get_chat_title(request: fpb.GetChatTitleRequest, ctx: CallContext) -> fpb.GetChatTitleResponse:
    return fpb.GetChatTitleResponse(title=await title_of(conversation_text(request.conversation), "GetChatTitle", ctx))


async def name_tab(request: fpb.NameTabRequest, ctx: CallContext) -> fpb.NameTabResponse:
    return fpb.NameTabResponse(name=await title_of(conversation_text(request.messages), "NameTab", ctx))


def _agent_name_serve(response_type):
    """NameAgent of either package: the same request and response fields (agent.v1 has its own copy)."""

    async def serve(request, ctx: CallContext):
        text = request.user_message.strip()
        conversation = f"User: {clip(text, CONVERSATION_CHARS)}" if text else ""
        return response_type(name=await title_of(conversation, "NameAgent", ctx))

    return serve


def _service(path: str, request_type, response_type, serve) -> OneShot:
    return OneShot(path=path, feature="chat_title", request_type=request_type, response_type=response_type,
                   streaming=False, serve=serve, **configured("chat_title"))


SERVICES = (
    _service("/aiserver.v1.AiService/GetChatTitle", fpb.GetChatTitleRequest, fpb.GetChatTitleResponse,
             get_chat_title),
    _service("/aiserver.v1.AiService/NameTab", fpb.NameTabRequest, fpb.NameTabResponse, name_tab),
    _service("/aiserver.v1.AiService/NameAgent", fpb.NameAgentRequest, fpb.NameAgentResponse,
             _agent_name_serve(fpb.NameAgentResponse)),
    _service("/agent.v1.AgentService/NameAgent", apb.NameAgentRequest, apb.NameAgentResponse,
             _agent_name_serve(apb.NameAgentResponse)),
)
