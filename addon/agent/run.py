"""One actor per request_id: the wire state of a local run.

The run owns its id spaces (KV ids from 0; exec/interaction ids from 1, shared and monotonic), the
pending maps that pair requests with client replies, the outgoing frame queue the RunSSE stream
drains, and the terminal state. It knows nothing about providers or history: the turn logic
(`loop.py`) drives it through `emit`, `set_blobs`, `get_blob` and the exec table.

Terminal doors (exactly one is taken, the end-stream is the last frame):
    finish(None)          -> end-stream {}
    finish(RunError)      -> abort running execs -> error end-stream (logged with the request id)
    cancel(RunCanceled)   -> the turn task is cancelled -> finish(that error)
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from byok.proto import agent_pb2 as apb

from ..wire import connect
from . import drift
from .cursor import updates
from ..wire.errors import AckTimeout, InternalError, ProtocolError, RunCanceled, RunError, ShuttingDown

log = logging.getLogger("byok.run")

PARENT_TOOL_CALL_HEADER = "X-Parent-Agent-Tool-Call-Id"
"""The header on a subagent's requests naming its parent's Task call (PROTOCOL 5.11; compare case-insensitively)."""

FrameSink = Callable[[str, str, bytes, int], None]
"""(direction 'down'|'up', kind, payload bytes, flags) -> None; must not block."""


class ClientRejectedBlob(RunError):
    code = connect.Code.UNAVAILABLE


@dataclass
class PendingKv:
    future: asyncio.Future
    blob_id: bytes
    kind: str
    is_get: bool
    expected_length: int | None = None


@dataclass
class RunSettings:
    ack_timeout_s: float = 30.0
    heartbeat_s: float = 5.0
    stream_attach_timeout_s: float = 30.0


@dataclass
class Run:
    request_id: str
    user: str | None = None
    """The proxyauth user whose run_request started it (None: no proxyauth, the single user)."""
    settings: RunSettings = field(default_factory=RunSettings)
    frame_sink: FrameSink | None = None
    on_finished: Callable[["Run", RunError | None], Awaitable[None]] | None = None

    conversation_id: str | None = None
    usage: dict | None = None
    """Token totals over the run's provider calls, as reported (set by the turn)."""
    terminal: bool = False
    outcome: str | None = None
    out: asyncio.Queue = field(default_factory=asyncio.Queue)
    held_blobs: set[bytes] = field(default_factory=set)
    """Blobs the client holds: referenced by its state, or SET and ACKed in this run."""
    _next_kv_id: int = 0
    _kv: dict[int, PendingKv] = field(default_factory=dict)
    _task: asyncio.Task | None = None
    _ticker: asyncio.Task | None = None
    _ending: asyncio.Future | None = None
    _fail_with: RunError | None = None
    _last_emit: float = field(default_factory=time.monotonic)
    _stream_attached: asyncio.Event = field(default_factory=asyncio.Event)
    _stream_deadline: float = 0.0
    _closed: bool = False
    execs: object = None
    """The exec/interaction table (tools/dispatch.py) once the run has tools."""
    client_messages: list = field(default_factory=list)
    parent_tool_call_id: str | None = None
    """A subagent's run: the parent's Task call id its client sent (`X-Parent-Agent-Tool-Call-Id`)."""
    mid_run_action: Callable[[apb.ConversationAction], bool] | None = None
    """Set by the turn (actions.py): handles a mid-run action, False when it has no handler."""
    on_client_cancel: list[Callable[[], None]] = field(default_factory=list)
    """Called (synchronously, before the run ends) when the client cancels it with cancel_action."""

    # ---- lifecycle ----------------------------------------------------------------------------

    def start(self, turn: Callable[["Run"], Awaitable[None]]) -> None:
        if self.terminal or self._fail_with is not None:
            return  # failed before its turn began: `fail` already took the terminal door
        loop = asyncio.get_running_loop()
        self._stream_deadline = loop.time() + self.settings.stream_attach_timeout_s
        self._task = loop.create_task(self._main(turn), name=f"run {self.request_id}")
        self._task.add_done_callback(self._task_done)
        self._ticker = loop.create_task(self._heartbeats(), name=f"hb {self.request_id}")

    def _task_done(self, task: asyncio.Task) -> None:
        # A task cancelled before its first step never runs `_main`, so never reaches `finish`
        # (appends processed in one go: run_request, then a message that fails the run at once).
        if not self.terminal:
            asyncio.ensure_future(self.finish(self._fail_with or RunCanceled("run canceled")))

    async def _main(self, turn: Callable[["Run"], Awaitable[None]]) -> None:
        """The turn starts at once: its preparation (claim, history, the runtime message) overlaps the
        client's stream arriving. A watchdog ends a run whose stream never comes, and the provider is
        not called before it is there (`client_listening`)."""
        error: RunError | None = None
        watchdog = asyncio.get_running_loop().call_at(self._stream_deadline, self._stream_never_came)
        try:
            await turn(self)
        except asyncio.CancelledError:
            error = self._fail_with or RunCanceled("run canceled")
        except RunError as e:
            error = e
        except Exception as e:  # a bug must still end the stream with a proper Connect error
            log.exception("[%s] internal error", self.request_id)
            error = InternalError(f"internal error: {type(e).__name__}: {e}")
        finally:
            watchdog.cancel()
        # The terminal door runs in a task of its own: a cancel still pending on this task (a TaskGroup
        # in the turn cancels its parent again when a child fails) must not cut the store write or the
        # end-stream short. This task may still see that cancel; the end goes on regardless.
        self._ending = asyncio.ensure_future(self._end(error))
        await asyncio.shield(self._ending)

    async def _end(self, error: RunError | None) -> None:
        if not self.terminal and not isinstance(error, ShuttingDown):
            await self._until_stream_attached()  # an early failure still reaches the client's stream
        await self.finish(error)

    def _stream_never_came(self) -> None:
        if not self.stream_attached:
            self.fail(RunCanceled(f"RunSSE for {self.request_id} never opened"))

    async def _until_stream_attached(self) -> None:
        remaining = self._stream_deadline - asyncio.get_running_loop().time()
        if self.stream_attached or remaining <= 0:
            return
        try:
            await asyncio.wait_for(self._stream_attached.wait(), remaining)
        except asyncio.TimeoutError:
            pass  # finish() follows either way

    async def client_listening(self) -> None:
        """Wait until the client's stream is attached (at once when it is): the turn calls it before
        the provider, so no provider call is paid for a run nobody listens to."""
        if not self.stream_attached:
            await self._stream_attached.wait()  # bounded by the watchdog, which ends the run

    def attach_stream(self) -> None:
        self._stream_attached.set()

    @property
    def stream_attached(self) -> bool:
        return self._stream_attached.is_set()

    @property
    def done(self) -> bool:
        return self.terminal

    def fail(self, error: RunError) -> None:
        """End the run from outside its task (a client protocol error, cancel, shutdown)."""
        if self.terminal:
            return
        if self._fail_with is None:
            self._fail_with = error
        if self._task is None:  # no turn yet (RunSSE or run_request still to come): end it directly
            asyncio.ensure_future(self.finish(self._fail_with))
        elif not self._task.done():
            self._task.cancel()

    def cancel(self, error: RunCanceled) -> None:
        self.fail(error)

    async def wait(self) -> None:
        if self._task is not None:
            await asyncio.wait([self._task])  # done or cancelled; a cancel of the caller still propagates
        if self._ending is not None:
            await asyncio.shield(self._ending)

    async def finish(self, error: RunError | None) -> None:
        if self.terminal:
            return
        self.terminal = True
        if self._ticker is not None:
            self._ticker.cancel()
        for pending in self._kv.values():
            if not pending.future.done():
                pending.future.cancel()
        if self.execs is not None:
            for abort_id in self.execs.abort_running():  # type: ignore[attr-defined]
                self.emit(updates.exec_abort(abort_id))
        if error is None:
            self.outcome = "completed"
            frame = connect.encode_end_stream()
        else:
            self.outcome = "canceled" if isinstance(error, RunCanceled) and error.code is connect.Code.CANCELED else "failed"
            level = logging.INFO if self.outcome == "canceled" else logging.WARNING
            log.log(level, "[%s] run ends with %s: %s", self.request_id, error.code.value, error.message)
            frame = connect.encode_end_stream(error.to_connect())
        if self.on_finished is not None:  # the terminal state is committed before the client sees it
            try:
                await self.on_finished(self, error)
            except Exception:
                log.exception("[%s] on_finished failed", self.request_id)
        self._emit_raw(frame, "end_stream", frame[5:], connect.FLAG_END_STREAM)
        self._closed = True
        self.out.put_nowait(None)

    # ---- downstream -----------------------------------------------------------------------------

    def emit(self, message: apb.AgentServerMessage) -> None:
        if self._closed:
            return  # nothing may follow the end-stream
        payload = message.SerializeToString()
        self._emit_raw(connect.encode_envelope(payload), _kind(message), payload, 0)

    def _emit_raw(self, envelope: bytes, kind: str, payload: bytes, flags: int) -> None:
        self._last_emit = time.monotonic()
        self.out.put_nowait(envelope)
        if self.frame_sink is not None:
            self.frame_sink("down", kind, payload, flags)

    async def _heartbeats(self) -> None:
        interval = self.settings.heartbeat_s
        while not self.terminal:
            await asyncio.sleep(max(0.05, interval - (time.monotonic() - self._last_emit)))
            if not self.terminal and self.stream_attached and time.monotonic() - self._last_emit >= interval:
                self.emit(updates.heartbeat())

    # ---- blobs -------------------------------------------------------------------------------------

    async def set_blobs(self, blobs: Mapping[bytes, bytes]) -> list[bytes]:
        """SET every blob the client does not hold yet (each exactly once, children first as
        given) and wait for all their ACKs. Returns the ids that were sent."""
        sent: list[tuple[int, bytes]] = []
        for blob_id, data in blobs.items():
            if blob_id in self.held_blobs or any(p.blob_id == blob_id for p in self._kv.values()):
                continue
            kv_id = self._next_kv_id
            self._next_kv_id += 1
            self._kv[kv_id] = PendingKv(asyncio.get_running_loop().create_future(), blob_id, "set", False)
            self.emit(updates.kv_set(kv_id, blob_id, data))
            sent.append((kv_id, blob_id))
        if not sent:
            return []
        futures = [self._kv[k].future for k, _ in sent]
        try:
            await asyncio.wait_for(asyncio.gather(*futures), self.settings.ack_timeout_s)
        except asyncio.TimeoutError:
            missing = [k for k, _ in sent if not self._kv.get(k) or not self._kv[k].future.done()]
            raise AckTimeout(
                f"blob SET not acknowledged within {self.settings.ack_timeout_s:g} s (KV ids {missing[:10]})"
            ) from None
        for kv_id, blob_id in sent:
            self._kv.pop(kv_id, None)
            self.held_blobs.add(blob_id)
        return [b for _, b in sent]

    async def get_blob(self, blob_id: bytes, kind: str, expected_length: int | None = None) -> bytes:
        """KV GET from the client's blob store, hash- and length-checked."""
        kv_id = self._next_kv_id
        self._next_kv_id += 1
        pending = PendingKv(asyncio.get_running_loop().create_future(), blob_id, kind, True, expected_length)
        self._kv[kv_id] = pending
        self.emit(updates.kv_get(kv_id, blob_id))
        try:
            data = await asyncio.wait_for(pending.future, self.settings.ack_timeout_s)
        except asyncio.TimeoutError:
            raise AckTimeout(f"blob GET {blob_id.hex()} ({kind}) not answered in time") from None
        finally:
            self._kv.pop(kv_id, None)
        self.held_blobs.add(blob_id)
        return data

    # ---- upstream ------------------------------------------------------------------------------------

    def record_up(self, message: apb.AgentClientMessage, raw: bytes) -> None:
        if self.frame_sink is not None:
            self.frame_sink("up", message.WhichOneof("message") or "empty", raw, 0)

    def deliver(self, message: apb.AgentClientMessage) -> None:
        """An in-order client message. Protocol violations end the run."""
        if self.terminal:
            return
        try:
            self._deliver(message)
        except RunError as e:
            self.fail(e)
        except Exception as e:  # a bug must end this run with a proper error, not the append hook
            log.exception("[%s] internal error handling a client message", self.request_id)
            self.fail(InternalError(f"internal error: {type(e).__name__}: {e}"))

    def _deliver(self, message: apb.AgentClientMessage) -> None:
        kind = message.WhichOneof("message")
        if kind == "kv_client_message":
            self._on_kv(message.kv_client_message)
        elif kind in ("exec_client_message", "exec_client_control_message", "interaction_response"):
            if self.execs is None:
                raise ProtocolError(f"{kind} but no exec or interaction was issued")
            self.execs.on_client_message(kind, getattr(message, kind))  # type: ignore[attr-defined]
        elif kind == "conversation_action":
            action = message.conversation_action.WhichOneof("action")
            if action is None:  # a branch newer than our schema: say so, then refuse it like any other
                log.warning("[%s] unknown ConversationAction branch: %s", self.request_id,
                            drift.describe(drift.unknowns(message)) or "no fields at all")
            if action == "cancel_action":
                reason = message.conversation_action.cancel_action.reason or "canceled by the client"
                for listener in self.on_client_cancel:
                    listener()
                self.cancel(RunCanceled(reason))
            elif self.mid_run_action is None or not self.mid_run_action(message.conversation_action):
                self._refuse_mid_run(message.conversation_action, action)
        elif kind == "run_request":
            log.warning("[%s] ignoring a second run_request on a running request", self.request_id)
        elif kind in ("client_heartbeat", "prewarm_request"):
            pass
        elif kind is None:  # never dropped silently: a newer client sent a branch our schema lacks
            log.warning("[%s] unknown AgentClientMessage branch ignored: %s", self.request_id,
                        drift.describe(drift.unknowns(message)) or "an empty message")
        else:
            raise ProtocolError(f"unexpected client message {kind}")

    def _refuse_mid_run(self, action_message: apb.ConversationAction, action: str | None) -> None:
        """An action no mid-run handler takes (actions.MID_RUN_ACTIONS) is refused. The refusal is
        logged, and for the actions Cursor tracks as injections the client is told (so the message
        is not lost silently)."""
        reason = f"cursor-byok does not accept {action} while a run is in progress; send it again when it ends"
        log.warning("[%s] refusing mid-run conversation action %s", self.request_id, action)
        injection_id = None
        if action == "inject_context_action":
            injection_id = action_message.inject_context_action.injection_id
        elif action == "user_message_action":
            injection_id = f"user-message:{action_message.user_message_action.user_message.message_id}"
        if injection_id:
            self.emit(updates.injection_rejected(injection_id, reason))

    def _on_kv(self, msg: apb.KvClientMessage) -> None:
        pending = self._kv.get(msg.id)
        if pending is None or pending.future.done():
            raise ProtocolError(f"unknown KvClientMessage id: {msg.id}")
        which = msg.WhichOneof("message")
        if pending.is_get:
            if which != "get_blob_result":
                raise ProtocolError(f"KV id {msg.id} expected get_blob_result, got {which}")
            result = msg.get_blob_result
            if result.HasField("error") or not result.HasField("blob_data"):
                detail = result.error.message if result.HasField("error") else "no data"
                raise ProtocolError(f"blob {pending.blob_id.hex()} ({pending.kind}) could not be read: {detail}")
            data = result.blob_data
            if hashlib.sha256(data).digest() != pending.blob_id:
                raise ProtocolError(f"Blob hash mismatch for {pending.kind} blob {pending.blob_id.hex()}")
            if pending.expected_length is not None and len(data) != pending.expected_length:
                raise ProtocolError(
                    f"{pending.kind} blob {pending.blob_id.hex()} has {len(data)} bytes, expected {pending.expected_length}"
                )
            pending.future.set_result(data)
        else:
            if which != "set_blob_result":
                raise ProtocolError(f"KV id {msg.id} expected set_blob_result, got {which}")
            if msg.set_blob_result.HasField("error"):
                pending.future.set_exception(
                    ClientRejectedBlob(f"client rejected blob {pending.blob_id.hex()}: "
                                       f"{msg.set_blob_result.error.message}")
                )
            else:
                pending.future.set_result(None)

    # ---- frames for the RunSSE body ----------------------------------------------------------------

    async def frames(self):
        """What the stream server writes: envelopes until the end-stream. Frames already queued are
        joined into one write: a burst of deltas costs one chunk through mitmproxy, not hundreds."""
        while True:
            chunk = await self.out.get()
            if chunk is None:
                return
            batch = [chunk]
            while not self.out.empty():
                more = self.out.get_nowait()
                if more is None:
                    yield b"".join(batch)
                    return
                batch.append(more)
            yield b"".join(batch)


def _kind(message: apb.AgentServerMessage) -> str:
    kind = message.WhichOneof("message") or "empty"
    if kind == "interaction_update":
        return f"interaction_update.{message.interaction_update.WhichOneof('message')}"
    if kind == "kv_server_message":
        return f"kv_server_message.{message.kv_server_message.WhichOneof('message')}"
    return kind
