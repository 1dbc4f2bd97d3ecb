"""Builders for the server -> client messages (`agent.v1.AgentServerMessage`).

One function per downstream message kind, so the wire shape of each lives in exactly one place.
"""

from __future__ import annotations

from collections.abc import Mapping

from byok.proto import agent_pb2 as apb

A = apb.AgentServerMessage


def _update(**kwargs) -> apb.AgentServerMessage:
    return A(interaction_update=apb.InteractionUpdate(**kwargs))


def text_delta(text: str) -> apb.AgentServerMessage:
    return _update(text_delta=apb.TextDeltaUpdate(text=text))


def thinking_delta(text: str) -> apb.AgentServerMessage:
    return _update(
        thinking_delta=apb.ThinkingDeltaUpdate(text=text, thinking_style=apb.THINKING_STYLE_DEFAULT)
    )


def thinking_completed(duration_ms: int) -> apb.AgentServerMessage:
    return _update(thinking_completed=apb.ThinkingCompletedUpdate(thinking_duration_ms=max(1, duration_ms)))


def token_delta(tokens: int) -> apb.AgentServerMessage:
    return _update(token_delta=apb.TokenDeltaUpdate(tokens=tokens))


def heartbeat() -> apb.AgentServerMessage:
    return _update(heartbeat=apb.HeartbeatUpdate())


USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")


def turn_ended(totals: Mapping[str, int | None]) -> apb.AgentServerMessage:
    """Only the fields a provider reported are set; a missing one stays absent (never 0)."""
    ended = apb.TurnEndedUpdate()
    for name in USAGE_FIELDS:
        if totals.get(name) is not None:
            setattr(ended, name, int(totals[name]))
    return _update(turn_ended=ended)


def checkpoint(state: apb.ConversationStateStructure) -> apb.AgentServerMessage:
    return A(conversation_checkpoint_update=state)


def kv_set(kv_id: int, blob_id: bytes, data: bytes) -> apb.AgentServerMessage:
    return A(kv_server_message=apb.KvServerMessage(
        id=kv_id, set_blob_args=apb.SetBlobArgs(blob_id=blob_id, blob_data=data)))


def kv_get(kv_id: int, blob_id: bytes) -> apb.AgentServerMessage:
    return A(kv_server_message=apb.KvServerMessage(id=kv_id, get_blob_args=apb.GetBlobArgs(blob_id=blob_id)))


def exec_abort(exec_id: int) -> apb.AgentServerMessage:
    return A(exec_server_control_message=apb.ExecServerControlMessage(abort=apb.ExecServerAbort(id=exec_id)))


def partial_tool_call(call_id: str, model_call_id: str, tool_call: apb.ToolCall,
                      args_text_delta: str = "") -> apb.AgentServerMessage:
    return _update(partial_tool_call=apb.PartialToolCallUpdate(
        call_id=call_id, tool_call=tool_call, args_text_delta=args_text_delta, model_call_id=model_call_id))


def tool_call_started(call_id: str, model_call_id: str, tool_call: apb.ToolCall) -> apb.AgentServerMessage:
    return _update(tool_call_started=apb.ToolCallStartedUpdate(
        call_id=call_id, tool_call=tool_call, model_call_id=model_call_id))


def tool_call_delta(call_id: str, model_call_id: str, delta: apb.ToolCallDelta) -> apb.AgentServerMessage:
    return _update(tool_call_delta=apb.ToolCallDeltaUpdate(
        call_id=call_id, tool_call_delta=delta, model_call_id=model_call_id))


def tool_call_completed(call_id: str, model_call_id: str, tool_call: apb.ToolCall) -> apb.AgentServerMessage:
    return _update(tool_call_completed=apb.ToolCallCompletedUpdate(
        call_id=call_id, tool_call=tool_call, model_call_id=model_call_id))


def injection_rejected(injection_id: str, reason: str) -> apb.AgentServerMessage:
    return _update(context_injection_state=apb.ContextInjectionStateUpdate(
        injection_id=injection_id,
        state=apb.ContextInjectionState(rejected=apb.ContextInjectionRejected(reason=reason))))


def interaction(update: apb.InteractionUpdate) -> apb.AgentServerMessage:
    return A(interaction_update=update)
