"""The tool framework: what one model tool is, and the port it executes through.

A `ToolDef` maps ONE model tool name to ONE transport (exec | interaction | local) and one
`agent.v1.ToolCall` variant, and knows how to:
  - parse + validate the complete JSON arguments into the typed `*Args` for the card (`parse`),
  - execute through a `CallIO` port (`run`), returning a `ToolOutcome` (typed result + string),
  - build the typed error result the card shows when the model's arguments are unusable,
  - optionally decode streaming argument text into live card updates (`stream`).

Execution never touches the wire directly: `CallIO.exec` / `CallIO.query` send the message with a
fresh id from the run's shared id space and return the client's terminal reply; a reply of the wrong
type, a stream closed before its result, or a throw is a protocol error raised there. Tools are thus
testable with a fake `CallIO`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from google.protobuf.message import Message

from byok.proto import agent_pb2 as apb

Transport = Literal["exec", "interaction", "local"]


class ToolArgsError(Exception):
    """The model's arguments are unusable (not JSON, missing/invalid field). Not a protocol error:
    it becomes a tool error result the model sees and can recover from."""


@dataclass(frozen=True)
class ToolOutcome:
    result: Message | None
    """The typed `*Result` for ToolCall.<variant>.result (None only for an unknown tool)."""
    content: str
    """What the model sees (always a string; structured data JSON-serialised once)."""
    is_error: bool = False
    args: Message | None = None
    """Replaces the card's args when execution refined them (e.g. edit stream content)."""
    images: tuple = ()
    """Images the result carries (`transcript.ImagePart`, e.g. from an MCP tool); the content
    string names each one, so a model without image input still knows they exist."""
    marks: Mapping[str, Any] = field(default_factory=dict)
    """Extra keys of the stored tool message that folds read back (e.g. Task's `user_stopped`)."""


@dataclass(frozen=True)
class RunToolContext:
    """Per-run facts tools need (from the run request)."""

    conversation_id: str
    workspace_paths: tuple[str, ...] = ()
    terminals_folder: str = ""
    shell: str = ""
    admin_command_denylist: tuple[str, ...] = ()
    mode: str = "agent"
    """The run's mode name (agent, ask, plan, subagent...)."""
    web: Any = None
    """The run's web backends (`byok.agent.web.WebTools`); None = none configured."""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def workspace(self) -> str:
        return self.workspace_paths[0] if self.workspace_paths else ""


StreamHandler = Callable[[str, Message], bool]
"""(oneof name, submessage) of a non-final exec reply -> True when it was terminal."""


class CallIO(Protocol):
    """The port one tool call executes through (implemented by the run's dispatcher)."""

    call_id: str
    model_call_id: str
    context: RunToolContext

    async def exec(
        self,
        field: str,
        args: Message,
        *,
        results: frozenset[str],
        stream: Callable[[str, Message], bool] | None = None,
        abortable: bool = True,
        envelope: Mapping[str, Any] | None = None,
    ) -> tuple[str, Message]:
        """Send `ExecServerMessage{id, exec_id=call_id, <field>=args, **envelope}` and wait for the
        client's terminal reply. `results` = the ExecClientMessage oneof names accepted as terminal.
        With `stream`, every reply whose oneof is `field`-typed stream events (e.g. `shell_stream`)
        is passed to it; it returns True for the terminal event, whose (name, message) is returned.
        `abortable=False` after a shell went to the background (never aborted at turn end)."""
        ...

    async def query(self, field: str, query: Message, *, results: frozenset[str]) -> tuple[str, Message]:
        """Send `InteractionQuery{id, <field>=query}`; return the InteractionResponse oneof."""
        ...

    def delta(self, delta: apb.ToolCallDelta) -> None:
        """Emit `tool_call_delta` (execution output: shell stdout/stderr, edit stream content)."""
        ...

    def set_background(self) -> None:
        """The current exec left the abortable set (a backgrounded shell)."""
        ...


class ArgsStream(Protocol):
    """Incremental decoder of the model's streaming argument text for live cards."""

    def feed(self, text: str) -> list[apb.InteractionUpdate]:
        ...


@dataclass(frozen=True)
class ToolDef:
    name: str
    transport: Transport
    variant: str
    """The agent.v1.ToolCall oneof field, e.g. "read_tool_call"."""
    parse: Callable[[dict, str, RunToolContext], Message]
    """(validated JSON args, call_id, context) -> typed *Args for the card; raises ToolArgsError."""
    run: Callable[[CallIO, dict, Message], Awaitable[ToolOutcome]]
    error_result: Callable[[str], Message | None]
    """A typed *Result saying `message` failed (for unusable args and failures)."""
    stream: Callable[..., ArgsStream] | None = None
    """(call_id, model_call_id, context) -> decoder for streaming argument text, if the card shows it
    live (context: the run's RunToolContext, e.g. to show paths as the tool resolves them)."""
    card_fields: Callable[[Message], Mapping[str, Any]] | None = None
    """args -> extra scalar fields of the variant message beside args/result (ShellToolCall.description)."""

    def tool_call(self, args: Message | None = None, result: Message | None = None) -> apb.ToolCall:
        """The typed ToolCall: `{<variant>: {args, result}}`."""
        variant_cls = getattr(apb.ToolCall, "DESCRIPTOR").fields_by_name[self.variant].message_type._concrete_class
        inner = variant_cls()
        if args is not None:
            inner.args.CopyFrom(args)
        if result is not None:
            inner.result.CopyFrom(result)
        if args is not None and self.card_fields is not None:
            for name, value in self.card_fields(args).items():
                setattr(inner, name, value)
        call = apb.ToolCall()
        getattr(call, self.variant).CopyFrom(inner)
        return call
