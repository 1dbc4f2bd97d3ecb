"""The user's own shell command (`ConversationAction.shell_command_action`): no model call.

    shell_stream_args to the client (ShellArgs as for the Shell tool, exec_id = the action's exec_id)
    -> stdout / stderr stream to Cursor as `shell_output_delta` (start and exit too)
    -> one stored runtime message: the command and its output, which the model reads as context on
       the next turn (it is told the user ran it, not itself)
    -> a checkpoint whose new turn is a `shell_conversation_turn` {ShellCommand, ShellOutput blobs}
    -> the run ends with an empty end-stream.
"""

from __future__ import annotations

from dataclasses import dataclass

from byok.proto import agent_pb2 as apb
from byok.store import NewMessage

from . import history
from .cursor import projection as proj
from .cursor import updates
from .cursor.tools.common import cap_tail
from .cursor.tools.dispatch import CallPort
from .cursor.tools.shell import SHELL
from ..wire.errors import ProtocolError
from ..providers.transcript import TextPart
from .turn_base import TurnState


@dataclass
class _UserShellPort(CallPort):
    """The Shell tool's transport, with its output shown as the user's shell output (not a card)."""

    def delta(self, delta: apb.ToolCallDelta) -> None:
        shell = delta.shell_tool_call_delta
        which = shell.WhichOneof("delta")
        if which == "stdout":
            update = apb.ShellOutputDeltaUpdate(stdout=apb.ShellStreamStdout(data=shell.stdout.content))
        elif which == "stderr":
            update = apb.ShellOutputDeltaUpdate(stderr=apb.ShellStreamStderr(data=shell.stderr.content))
        else:
            return
        self.emit(updates.interaction(apb.InteractionUpdate(shell_output_delta=update)))


def _exit_code(result: apb.ShellResult) -> int:
    kind = result.WhichOneof("result")
    if kind in ("success", "failure"):
        return getattr(result, kind).exit_code
    return -1


async def run_user_shell(turn: TurnState) -> None:
    action = turn.request.action.shell_command_action
    command = action.shell_command.command
    if not command.strip():
        raise ProtocolError("shell_command_action carries no command")
    call_id = action.exec_id or f"user-shell:{turn.run.request_id}"
    port = _UserShellPort(turn.execs, turn.run.emit, call_id, "", "Shell (user command)", turn.tool_context)
    card = SHELL.parse({"command": command}, call_id, turn.tool_context)
    turn.run.emit(updates.interaction(apb.InteractionUpdate(
        shell_output_delta=apb.ShellOutputDeltaUpdate(start=apb.ShellStreamStart()))))
    outcome = await SHELL.run(port, {"command": command}, card)
    result: apb.ShellResult = outcome.result
    code = _exit_code(result)
    turn.run.emit(updates.interaction(apb.InteractionUpdate(
        shell_output_delta=apb.ShellOutputDeltaUpdate(exit=apb.ShellStreamExit(code=code & 0xFFFFFFFF)))))

    kind = result.WhichOneof("result")
    done = getattr(result, kind) if kind in ("success", "failure") else None
    output = apb.ShellOutput(stdout=done.stdout if done else "", stderr=done.stderr if done else outcome.content,
                             exit_code=code)
    shell_command = apb.ShellCommand(command=command).SerializeToString(deterministic=True)
    shell_output = output.SerializeToString(deterministic=True)
    text = "\n".join([
        "<user_shell_command>",
        "The user ran this command in their own terminal (you did not run it). Its result is context for",
        "what they ask next; do not run it again unless they ask.",
        f"Command: {command}",
        f"Working directory: {card.working_directory or '(the terminal default)'}",
        cap_tail(outcome.content),
        "</user_shell_command>",
    ])
    event_id = f"run-request:{turn.run.request_id}"
    payload = history.runtime_user_payload(
        [TextPart(text)], wire_id=f"runtime:{event_id}",
        blob_refs=[proj.sha256(shell_command), proj.sha256(shell_output)],
    )
    payload["shell_turn"] = {"command": history.b64(shell_command), "output": history.b64(shell_output)}
    await turn._append([NewMessage("user", "runtime", payload, event_id, turn.run.request_id)])
    await turn._publish(await turn._project(turn.messages), revision=turn.revision)
