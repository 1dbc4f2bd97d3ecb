"""Exec and interaction transport for one run: the shared id space, pending map and tombstones.

- Ids start at 1 and grow monotonically across tool rounds; exec and interaction share them and
  none is ever reused.
- Presence in `pending` means running; a terminal reply consumes the entry once (`take`).
- An `ExecClientMessage` with no payload keeps it pending.
- A late reply, stream_close, throw or heartbeat for an id that completed or was aborted is ignored,
  also after its round settled: ids are never reused, so any id below `next_id` that is not pending
  was issued and has finished (the tombstones only name the recent ones in the log).
- Everything else is the client breaking the protocol (ProtocolError, the run ends): a reply for an
  id never issued, the wrong result type, stream_close before the result, a throw.
- `abort_running()` (cancel, error, shutdown) returns the ids to send `abort` for: running execs only,
  never a shell that went to the background.
- `stop(call_id, field, error, abort=)` ends one call's exec from the server's side (a subagent the
  user cancelled or moved to the background).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import Message

from byok.proto import agent_pb2 as apb

from ....wire.errors import ProtocolError
from .. import updates
from .base import RunToolContext

log = logging.getLogger("byok.tools")

Emit = Callable[[apb.AgentServerMessage], None]


@dataclass
class Pending:
    id: int
    kind: str  # "exec" | "query"
    field: str
    call_id: str
    tool: str
    results: frozenset[str]
    future: asyncio.Future
    stream: Callable[[str, Message], bool] | None = None
    abortable: bool = True


@dataclass
class ExecTable:
    emit: Emit
    fail: Callable[[Exception], None]
    """Ends the run with a protocol error (Run.fail)."""
    next_id: int = 1
    pending: dict[int, Pending] = field(default_factory=dict)
    tombstones: set[int] = field(default_factory=set)
    background: set[int] = field(default_factory=set)

    def issue(self, kind: str, field_name: str, call_id: str, tool: str, results: frozenset[str],
              stream=None) -> Pending:
        entry = Pending(self.next_id, kind, field_name, call_id, tool, results,
                        asyncio.get_running_loop().create_future(), stream)
        self.next_id += 1
        self.pending[entry.id] = entry
        return entry

    def take(self, exec_id: int) -> Pending:
        entry = self.pending.pop(exec_id)
        self.tombstones.add(exec_id)
        return entry

    def settle(self) -> None:
        """The round settled: late replies for its ids are no longer expected."""
        self.tombstones.clear()

    def stop(self, call_id: str, field_name: str, error: Exception, *, abort: bool) -> int | None:
        """End one call's pending exec from the server's side: its waiter gets `error`. With `abort`
        the client is told to stop it (ExecServerAbort); without, it goes on in the background (a
        subagent moved there). Either way a late reply for it is ignored. Returns the exec id."""
        for exec_id, entry in list(self.pending.items()):
            if entry.call_id == call_id and entry.field == field_name and entry.kind == "exec":
                self.take(exec_id)
                if abort:
                    self.emit(updates.exec_abort(exec_id))
                else:
                    entry.abortable = False
                    self.background.add(exec_id)
                if not entry.future.done():
                    entry.future.set_exception(error)
                return exec_id
        return None

    def abort_running(self) -> list[int]:
        ids = [i for i, p in self.pending.items() if p.kind == "exec" and p.abortable]
        for i in list(self.pending):
            entry = self.take(i)
            if not entry.future.done():
                entry.future.cancel()
        return ids

    # ---- client replies (in seqno order, from Run.deliver) ---------------------------------------

    def on_client_message(self, kind: str, message: Message) -> None:
        if kind == "exec_client_message":
            self._on_exec(message)
        elif kind == "exec_client_control_message":
            self._on_control(message)
        elif kind == "interaction_response":
            self._on_response(message)

    def _lookup(self, exec_id: int, what: str) -> Pending | None:
        entry = self.pending.get(exec_id)
        if entry is not None:
            return entry
        if exec_id in self.tombstones or exec_id in self.background:
            log.debug("ignoring late %s for finished id %d", what, exec_id)
            return None
        if 0 < exec_id < self.next_id:  # issued and finished in an earlier, settled round
            log.debug("ignoring late %s for id %d of a settled round", what, exec_id)
            return None
        raise ProtocolError(f"unknown {what} id: {exec_id}")

    def _on_exec(self, msg: apb.ExecClientMessage) -> None:
        entry = self._lookup(msg.id, "ExecClientMessage")
        if entry is None:
            return
        if entry.kind != "exec":
            raise ProtocolError(f"ExecClientMessage for interaction id {msg.id}")
        which = msg.WhichOneof("message")
        if which is None:
            return  # no payload: still running
        sub = getattr(msg, which)
        if entry.stream is not None and which == "shell_stream":
            self._stream(entry, which, sub)
            return
        if which not in entry.results:
            self.take(msg.id)
            error = ProtocolError(f"unexpected exec result {which} for tool {entry.tool} (id {msg.id})")
            entry.future.set_exception(error)
            raise error
        self.take(msg.id)
        entry.future.set_result((which, sub))

    def _stream(self, entry: Pending, which: str, sub: Message) -> None:
        """Stream events are handled inline, in arrival (= seqno) order."""
        try:
            terminal = entry.stream(which, sub)
            if inspect.isawaitable(terminal):
                raise TypeError("exec stream handlers must be synchronous (events are ordered)")
        except Exception as e:  # a bug in a stream handler ends the call, never hangs it
            if entry.id in self.pending:
                self.take(entry.id)
            if not entry.future.done():
                entry.future.set_exception(e)
            return
        if terminal and entry.id in self.pending:
            self.take(entry.id)
            entry.future.set_result((which, sub))

    def _on_control(self, msg: apb.ExecClientControlMessage) -> None:
        which = msg.WhichOneof("message")
        if which == "heartbeat":
            return
        sub = getattr(msg, which) if which else None
        if sub is None:
            return
        entry = self._lookup(sub.id, f"exec control {which}")
        if entry is None:
            return
        self.take(sub.id)
        if which == "stream_close":
            error = ProtocolError(f"Exec stream closed before result (tool {entry.tool}, id {sub.id})")
        else:
            error = ProtocolError(
                f"client exec threw (tool {entry.tool}, id {sub.id}): {msg.throw.error or msg.throw.error_code}"
            )
        if not entry.future.done():
            entry.future.set_exception(error)
        raise error

    def _on_response(self, msg: apb.InteractionResponse) -> None:
        entry = self._lookup(msg.id, "InteractionResponse")
        if entry is None:
            return
        if entry.kind != "query":
            raise ProtocolError(f"InteractionResponse for exec id {msg.id}")
        which = msg.WhichOneof("result")
        self.take(msg.id)
        if which not in entry.results:
            error = ProtocolError(f"unexpected interaction response {which} for tool {entry.tool} (id {msg.id})")
            entry.future.set_exception(error)
            raise error
        entry.future.set_result((which, getattr(msg, which)))


@dataclass
class CallPort:
    """The CallIO of one tool call: sends through the run's ExecTable, emits its cards' deltas."""

    table: ExecTable
    emit: Emit
    call_id: str
    model_call_id: str
    tool: str
    context: RunToolContext
    _current: Pending | None = None

    async def exec(self, field: str, args: Message, *, results: frozenset[str], stream=None,
                   abortable: bool = True, envelope: Mapping[str, Any] | None = None) -> tuple[str, Message]:
        entry = self.table.issue("exec", field, self.call_id, self.tool, results, stream)
        entry.abortable = abortable
        self._current = entry
        message = apb.ExecServerMessage(id=entry.id, exec_id=self.call_id, **(envelope or {}))
        getattr(message, field).CopyFrom(args)
        self.emit(apb.AgentServerMessage(exec_server_message=message))
        try:
            return await entry.future
        finally:
            self._current = None

    async def query(self, field: str, query: Message, *, results: frozenset[str]) -> tuple[str, Message]:
        entry = self.table.issue("query", field, self.call_id, self.tool, results)
        message = apb.InteractionQuery(id=entry.id)
        getattr(message, field).CopyFrom(query)
        self.emit(apb.AgentServerMessage(interaction_query=message))
        return await entry.future

    def delta(self, delta: apb.ToolCallDelta) -> None:
        self.emit(updates.tool_call_delta(self.call_id, self.model_call_id, delta))

    def set_background(self) -> None:
        entry = self._current
        if entry is not None:
            entry.abortable = False
            self.table.background.add(entry.id)
