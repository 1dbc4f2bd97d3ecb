"""A scripted `CallIO` for tool codec tests: records what a tool sends, replays the client's replies.

Semantics mirror `CallIO` (tools/base.py) and the run's exec table:
  - exec and query ids come from ONE counter starting at 1; every call takes a fresh id.
  - each exec/query consumes the next script entry: a list of events the client sends for that id,
    or a callable `(Sent) -> list` computing them from what was sent (e.g. a Read reply per path).
  - events: `(oneof_name, submessage)`; `EMPTY` (ExecClientMessage with no payload: stays pending);
    `CLOSE` (stream_close before a result) and `THROW` -> ProtocolError, like the real table.
  - with `stream`, `shell_stream` events go to the handler until it returns True (that event is the
    terminal reply returned); any other event must be in `results`, else ProtocolError (wrong oneof).
  - a script that ends before a terminal event is a bug in the test (AssertionError).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import Message

from byok.agent.cursor.tools.base import RunToolContext
from byok.wire.errors import ProtocolError
from byok.proto import agent_pb2 as apb

EMPTY = "EMPTY"
CLOSE = "CLOSE"
THROW = "THROW"


@dataclass
class Sent:
    kind: str  # "exec" | "query"
    id: int
    field: str
    args: Message
    results: frozenset[str]
    message: Message
    """The ExecServerMessage / InteractionQuery the real port would emit."""
    abortable: bool = True
    streamed: bool = False


Script = list[Any] | Callable[[Sent], list[Any]]


def exec_reply(name: str, sub: Message, *, results: frozenset[str], stream, exec_id: int):
    """One exec reply as the real exec table (tools/dispatch.py) treats it: shell stream events go to
    the synchronous stream handler; returns (name, message) when terminal, None while pending."""
    if stream is not None and name == "shell_stream":
        terminal = stream(name, sub)
        if inspect.isawaitable(terminal):
            raise TypeError("exec stream handlers must be synchronous (the real exec table requires it)")
        return (name, sub) if terminal else None
    if name not in results:
        raise ProtocolError(f"unexpected exec result {name} (id {exec_id})")
    return name, sub


@dataclass
class FakeCallIO:
    context: RunToolContext = field(default_factory=lambda: RunToolContext(conversation_id="conv-1"))
    script: list[Script] = field(default_factory=list)
    call_id: str = "call-1\nfc_1"
    model_call_id: str = "model-call-1"
    next_id: int = 1
    sent: list[Sent] = field(default_factory=list)
    deltas: list[apb.ToolCallDelta] = field(default_factory=list)
    background: set[int] = field(default_factory=set)
    _current: Sent | None = None

    def reply(self, *events: Any) -> "FakeCallIO":
        self.script.append(list(events))
        return self

    def _issue(self, kind: str, field_name: str, args: Message, results: frozenset[str],
               envelope: Mapping[str, Any] | None = None) -> Sent:
        if kind == "exec":
            message = apb.ExecServerMessage(id=self.next_id, exec_id=self.call_id, **(envelope or {}))
        else:
            message = apb.InteractionQuery(id=self.next_id)
        getattr(message, field_name).CopyFrom(args)  # a wrong field name fails here, like the real port
        sent = Sent(kind, self.next_id, field_name, args, results, message)
        self.next_id += 1
        self.sent.append(sent)
        return sent

    def _events(self, sent: Sent) -> list[Any]:
        assert self.script, f"no scripted reply for {sent.kind} {sent.field} (id {sent.id})"
        entry = self.script.pop(0)
        return list(entry(sent) if callable(entry) else entry)

    async def exec(self, field: str, args: Message, *, results: frozenset[str], stream=None,
                   abortable: bool = True, envelope: Mapping[str, Any] | None = None) -> tuple[str, Message]:
        sent = self._issue("exec", field, args, results, envelope)
        sent.abortable = abortable
        sent.streamed = stream is not None
        self._current = sent
        try:
            for event in self._events(sent):
                if event == EMPTY:
                    continue
                if event == CLOSE:
                    raise ProtocolError(f"Exec stream closed before result (id {sent.id})")
                if event == THROW:
                    raise ProtocolError(f"client exec threw (id {sent.id})")
                name, sub = event
                terminal = exec_reply(name, sub, results=results, stream=stream, exec_id=sent.id)
                if terminal is not None:
                    return terminal
            raise AssertionError(f"script for exec id {sent.id} ended without a terminal reply")
        finally:
            self._current = None

    async def query(self, field: str, query: Message, *, results: frozenset[str]) -> tuple[str, Message]:
        sent = self._issue("query", field, query, results)
        for event in self._events(sent):
            name, sub = event
            if name not in results:
                raise ProtocolError(f"unexpected interaction response {name} (id {sent.id})")
            return name, sub
        raise AssertionError(f"script for query id {sent.id} ended without a response")

    def delta(self, delta: apb.ToolCallDelta) -> None:
        self.deltas.append(delta)

    def set_background(self) -> None:
        assert self._current is not None, "set_background outside an exec"
        self._current.abortable = False
        self.background.add(self._current.id)

    # ---- helpers for assertions -------------------------------------------------------------------

    @property
    def execs(self) -> list[Sent]:
        return [s for s in self.sent if s.kind == "exec"]

    @property
    def queries(self) -> list[Sent]:
        return [s for s in self.sent if s.kind == "query"]


def run_tool(tool, args: dict | str, io: FakeCallIO):
    """parse + run one tool like the dispatcher does; returns (card args, outcome)."""
    import asyncio

    from byok.agent.cursor.tools.common import decode_args

    raw = decode_args(args) if isinstance(args, str) else args
    card = tool.parse(raw, io.call_id, io.context)
    return card, asyncio.run(tool.run(io, raw, card))
