"""Task: launch a subagent (PROTOCOL 5.11; seed §32, §33.1, §33.6).

    card      task_tool_call{args: TaskArgs{description, prompt, subagent_type (oneof), model, resume,
              attachments}, result: TaskResult}
    exec      subagent_args = SubagentArgs{tool_call_id, subagent_type (the name as the model spelled
              it), model_id, prompt, readonly, resume_agent_id, run_in_background,
              parent_conversation_id, root_parent_conversation_id}, envelope
              accept_hook_additional_contexts=false -> subagent_result
    the child the client then runs is its own conversation and RunSSE (subagents.py binds it back).

This module is the codec (arguments, card, result). Choosing the type and the model, launching,
and recovering a child after a crash are the subagent capability's (`ctx.extra["subagents"]`,
subagents.py).

The model sees `Subagent name: {description}\nSubagent ID: {agent_id}`, then the child's final
message (§33.6): never empty, so the model learns which agent it created even for a background
Task. Continuing an earlier subagent (`resume`) does not repeat the identity.
"""

from __future__ import annotations

import dataclasses

from google.protobuf.message import Message

from byok.wire.errors import ProtocolError
from byok.proto import agent_pb2 as apb

from .base import CallIO, RunToolContext, ToolDef, ToolOutcome
from .common import Args, variant

EXTRA_KEY = "subagents"
DEFAULT_TYPE = "generalPurpose"
TYPE_ONEOF = {
    "generalPurpose": "unspecified", "explore": "explore", "shell": "shell", "bash": "bash",
    "cursor-guide": "cursor_guide", "debug": "debug", "browser-use": "browser_use", "computer-use": "computer_use",
    "media-review": "media_review", "vm-setup-helper": "vm_setup_helper", "watch-video": "watch_video",
}
"""A type name the model uses -> its `SubagentType` oneof; any other name is `custom` (spelling kept)."""
BACKGROUND_NOTE = "It works in the background; you will be told when it finishes."
USER_STOPPED = "The user stopped this subagent before it finished."
"""The Task error of a subagent the user stopped (cancel_subagent_action)."""
USER_STOPPED_MARK = "user_stopped"
"""The stored tool message's key saying so (its run state is ABORTED); rows stored before it
carry only the USER_STOPPED text."""


def subagent_type(name: str) -> apb.SubagentType:
    out = apb.SubagentType()
    oneof = TYPE_ONEOF.get(name)
    if oneof is None:
        out.custom.name = name
    else:
        getattr(out, oneof).SetInParent()
    return out


def type_name(t: apb.SubagentType) -> str:
    """The model-facing name of a SubagentType (the inverse of `subagent_type`)."""
    which = t.WhichOneof("type")
    if which == "custom":
        return t.custom.name
    for name, oneof in TYPE_ONEOF.items():
        if oneof == which:
            return name
    return DEFAULT_TYPE


def _parse(raw: dict, call_id: str, ctx: RunToolContext) -> apb.TaskArgs:
    a = Args(raw)
    args = apb.TaskArgs(description=a.string("description", required=True, non_empty=True).strip(),
                        prompt=a.string("prompt", required=True, non_empty=True))
    name = a.string("subagent_type") or DEFAULT_TYPE
    args.subagent_type.CopyFrom(subagent_type(name.strip()))
    model = a.string("model")
    if model:
        args.model = model
    resume = a.string("resume")
    if resume:
        args.resume = resume
    args.attachments.extend(a.str_list("attachments") or [])
    a.boolean("readonly")
    a.boolean("run_in_background")
    return args


def _error(message: str) -> apb.TaskResult:
    return apb.TaskResult(error=apb.TaskError(error=message))


async def _run(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    service = io.context.extra.get(EXTRA_KEY)
    if service is None:
        message = "Subagents are not available in this run."
        return ToolOutcome(_error(message), message, True)
    return await service.launch(io, raw, card)


def identity(description: str, agent_id: str) -> str:
    return f"Subagent name: {description}\nSubagent ID: {agent_id}"


def success_outcome(card: apb.TaskArgs, *, agent_id: str, final_message: str, background: bool,
                    background_reason: int = 0, duration_ms: int | None = None,
                    transcript_path: str = "") -> ToolOutcome:
    success = apb.TaskSuccess(is_background=background, background_reason=background_reason)
    if agent_id:
        success.agent_id = agent_id
    if duration_ms is not None:
        success.duration_ms = duration_ms
    if transcript_path:
        success.transcript_path = transcript_path
    parts = []
    if not (card.HasField("resume") and card.resume == agent_id):
        parts.append(identity(card.description, agent_id or "(not reported)"))
    if final_message.strip():
        parts.append(final_message.strip())
    elif background:
        parts.append(BACKGROUND_NOTE)
    elif not parts:
        parts.append("The subagent finished without a final message.")
    return ToolOutcome(apb.TaskResult(success=success), "\n\n".join(parts), args=_card_args(card, agent_id))


def stopped_outcome(card: apb.TaskArgs, *, agent_id: str = "") -> ToolOutcome:
    """The Task result of a subagent the user stopped."""
    outcome = error_outcome(card, USER_STOPPED, agent_id=agent_id)
    return dataclasses.replace(outcome, marks={USER_STOPPED_MARK: True})


def error_outcome(card: apb.TaskArgs, message: str, *, agent_id: str = "") -> ToolOutcome:
    head = identity(card.description, agent_id) + "\n\n" if agent_id and card.resume != agent_id else ""
    return ToolOutcome(_error(message), head + message, True, args=_card_args(card, agent_id))


def _card_args(card: apb.TaskArgs, agent_id: str) -> apb.TaskArgs:
    """The Task call's args for its completed card: as the model sent them, with the subagent's id
    once it has one."""
    args = apb.TaskArgs()
    args.CopyFrom(card)
    if agent_id:
        args.agent_id = agent_id
    return args


def result_outcome(result: apb.SubagentResult, card: apb.TaskArgs, *, background: bool,
                   duration_ms: int | None) -> ToolOutcome:
    """The client's SubagentResult -> the card's TaskResult and the model's string."""
    which = variant(result, "result", "SubagentResult")
    if which == "error":
        e = result.error
        return error_outcome(card, f"The subagent failed: {e.error}", agent_id=e.agent_id if e.HasField("agent_id") else "")
    s = result.success
    if not s.agent_id:
        raise ProtocolError("SubagentSuccess carries no agent_id (the parent cannot name the subagent it launched)")
    final = s.final_message if s.HasField("final_message") else ""
    is_background = background or s.background_reason != apb.SUBAGENT_BACKGROUND_REASON_UNSPECIFIED
    return success_outcome(card, agent_id=s.agent_id, final_message=final, background=is_background,
                           background_reason=s.background_reason, duration_ms=duration_ms,
                           transcript_path=s.transcript_path if s.HasField("transcript_path") else "")


TASK = ToolDef("Task", "exec", "task_tool_call", _parse, _run, _error)
