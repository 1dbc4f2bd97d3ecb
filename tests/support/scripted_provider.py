"""A scripted LLM provider: a local HTTP/1.1 server that speaks each provider dialect's SSE.

It runs its own asyncio loop in a background thread, so a test (sync or async) and a separate
process (the `mitmdump` under test) can both call it over plain HTTP on 127.0.0.1. Each dialect
path (`/chat/completions`, `/responses`, `/messages`, under any prefix) has a FIFO queue of scripted
responses; a request with nothing queued gets a 500 JSON error that says so. Every request is
recorded (path, headers, parsed JSON body, time) together with whether the client closed the
connection before its response was complete.

Usage, without any conftest:

    from tests.support.scripted_provider import ANTHROPIC, CHAT, Hang, HttpError, ScriptedProvider

    def test_something():
        with ScriptedProvider() as provider:
            provider.enqueue("openai_chat", CHAT.tool_calls([("call_1", "Read", '{"path": "a.py"}')]))
            provider.enqueue("openai_chat", CHAT.text_reply("done", usage=Usage(100, 7)))
            provider.enqueue("anthropic", HttpError(529, {"type": "error", "error": {
                "type": "overloaded_error", "message": "Overloaded"}}))
            provider.enqueue("anthropic", Hang(30))             # never sends headers
            ...  # point a providers file at provider.base_url, run the scenario
            first = provider.wait_for_request(1)
            assert first.json["messages"][0]["role"] == "system"
            assert provider.wait_closed(4).closed_early        # the client gave up on the hang

The fill-in-the-middle kinds are scripted with `COMPLETIONS` (legacy completions chunks, optionally
with LiteLLM's quirks) and `MISTRAL_FIM` (Mistral's chat-style FIM chunks).

Scripts are lists of SSE items: `Ev(data, event=None, delay_s=0)`, or a bare dict / str (sent as
`data: ...`), or raw bytes. `Sse(items, abort_after=N)` drops the connection after N items without
finishing the chunked body (a transport failure); a script without its terminal event simply ends
(EOF without a terminal event).
"""

from __future__ import annotations

import asyncio
import hashlib
import http
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Union

from byok.providers.base import Usage

PATHS = {"openai_chat": "/chat/completions", "openai_responses": "/responses", "anthropic": "/messages"}
KINDS = tuple(PATHS)
"""The three chat dialects (provider kinds), in the order tests run them."""
FIM_PATHS = {"openai_completions": "/v1/completions", "mistral_fim": "/v1/fim/completions"}
"""The fill-in-the-middle kinds (Tab); with /v1 so `/v1/chat/completions` never takes their scripts."""


def _key(where: str) -> str:
    return PATHS.get(where) or FIM_PATHS.get(where) or where
DEFAULT_USAGE = Usage(input_tokens=100, output_tokens=20)


# ---- scripts --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ev:
    """One SSE event: `event:` line when `event` is set, JSON-encoded `data` (str sent as is, bytes raw)."""

    data: dict | str | bytes
    event: str | None = None
    delay_s: float = 0.0
    """Sleep this long before sending the event (the connection's close is noticed while sleeping)."""

    def encode(self) -> bytes:
        if isinstance(self.data, bytes):
            return self.data
        data = self.data if isinstance(self.data, str) else json.dumps(self.data, ensure_ascii=False)
        head = f"event: {self.event}\n" if self.event else ""
        return (head + "".join(f"data: {line}\n" for line in data.split("\n")) + "\n").encode()


@dataclass(frozen=True)
class Gate:
    """Hold the stream here until the test sets `event` (or the client leaves): a run that is
    visibly mid-stream for as long as the test needs it to be."""

    event: threading.Event = field(default_factory=threading.Event, compare=False)
    timeout_s: float = 60.0


SseItem = Union[Ev, Gate, dict, str, bytes]


@dataclass(frozen=True)
class Sse:
    items: list[SseItem]
    abort_after: int | None = None
    """Drop the connection after this many items, leaving the chunked body unfinished."""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HttpError:
    status: int
    body: dict | str
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass(frozen=True)
class Hang:
    """Hold the request without sending headers for `seconds`, then send `then` (or drop the connection)."""

    seconds: float
    then: Sse | HttpError | None = None


Script = Union[Sse, HttpError, Hang]
Responder = Callable[["RecordedRequest"], Script]
"""Decides the script when the request arrives (e.g. usage from `PromptCacheSim`)."""


def _ev(item: SseItem) -> Ev:
    return item if isinstance(item, Ev) else Ev(item)


# ---- recording ------------------------------------------------------------------------------------


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    """Lower-case names. Holds the client's real auth header: tests only."""
    body: bytes
    json: Any
    received_at: float
    script: Script | None = None
    closed_early: bool = False
    """The client closed the connection before the scripted response was complete."""
    closed_at: float | None = None
    done: threading.Event = field(default_factory=threading.Event, repr=False)
    """Set once the server is finished with this request (response sent, dropped or client gone)."""


class ScriptedProvider:
    """The server. Use as a context manager (or start()/stop()); `base_url` ends in `/v1`."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = 0
        self._queues: dict[str, list[Script | Responder]] = {}
        self._routed: dict[str, list[tuple[Any, Script | Responder]]] = {}
        self.check_request: Any = None
        """(path, parsed JSON body) -> an error text to answer 400 with (no script is used), or None.
        Lets a test play a provider that validates what it is sent (e.g. tool schemas)."""
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._tasks: set[asyncio.Task] = set()
        self._startup_error: BaseException | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    # -- lifecycle

    def start(self) -> "ScriptedProvider":
        self._thread = threading.Thread(target=self._run, name="scripted-provider", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("scripted provider did not start")
        if self._startup_error is not None:
            raise RuntimeError("scripted provider failed to start") from self._startup_error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)
        self._thread = None

    def __enter__(self) -> "ScriptedProvider":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- scripting and inspection (thread-safe)

    def enqueue(self, where: str, *scripts: Script | Responder, match: Any = None) -> None:
        """`where` is a provider kind (openai_chat, openai_responses, anthropic) or a path suffix. A
        callable is called with the recorded request when it arrives and returns the script.
        With `match` (parsed JSON body -> bool), the scripts answer only requests it accepts, before
        any unmatched script: concurrent conversations (subagents) each get their own answers."""
        key = _key(where)
        with self._lock:
            if match is None:
                self._queues.setdefault(key, []).extend(scripts)
            else:
                self._routed.setdefault(key, []).extend((match, s) for s in scripts)

    def pending(self, where: str) -> int:
        key = _key(where)
        with self._lock:
            return len(self._queues.get(key, [])) + len(self._routed.get(key, []))

    def clear(self) -> None:
        """Drop every queued script (a test that failed early must not answer the next test)."""
        with self._lock:
            self._queues.clear()
            self._routed.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def wait_for_request(self, n: int = 1, timeout: float = 10.0) -> RecordedRequest:
        """The n-th request (1-based), waiting until it has arrived."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._requests) >= n, timeout):
                raise TimeoutError(f"scripted provider: {len(self._requests)} requests after {timeout}s, wanted {n}")
            return self._requests[n - 1]

    def wait_closed(self, n: int = 1, timeout: float = 10.0) -> RecordedRequest:
        """The n-th request once the server is done with it (see RecordedRequest.closed_early)."""
        req = self.wait_for_request(n, timeout)
        if not req.done.wait(timeout):
            raise TimeoutError(f"scripted provider: request {n} still open after {timeout}s")
        return req

    # -- server

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            server = await asyncio.start_server(self._handle, self.host, 0)
        except BaseException as e:
            self._startup_error = e
            self._ready.set()
            raise
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()
            server.close()
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.wait(self._tasks, timeout=5)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        rec: RecordedRequest | None = None
        try:
            rec = await self._read_request(reader)
            if rec is None:
                return
            # The request body is fully read: any further read completing means the client hung up.
            gone = asyncio.ensure_future(reader.read(1))
            try:
                await self._respond(rec, rec.script, writer, gone)
            finally:
                gone.cancel()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            if rec is not None:
                rec.done.set()

    async def _read_request(self, reader: asyncio.StreamReader) -> RecordedRequest | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = await _read_chunked(reader)
        else:
            body = await reader.readexactly(int(headers.get("content-length", "0")))
        try:
            parsed: Any = json.loads(body) if body else None
        except ValueError:
            parsed = None
        path = target.split("?", 1)[0]
        problem = self.check_request(path, parsed) if self.check_request is not None else None
        with self._cond:
            if problem:
                script = HttpError(400, {"error": {"message": problem, "type": "invalid_request_error"}})
            else:
                script = self._pop(path, parsed)
            rec = RecordedRequest(method, path, headers, body, parsed, time.time())
            rec.script = script(rec) if callable(script) else script
            self._requests.append(rec)
            self._cond.notify_all()
        return rec

    def _pop(self, path: str, body: Any = None) -> Script | Responder | None:
        for key in sorted((k for k in self._routed if path.endswith(k)), key=len, reverse=True):
            for i, (match, script) in enumerate(self._routed[key]):
                try:
                    accepted = bool(match(body))
                except Exception:
                    accepted = False
                if accepted:
                    return self._routed[key].pop(i)[1]
        keys = sorted((k for k in self._queues if path.endswith(k) and self._queues[k]), key=len, reverse=True)
        return self._queues[keys[0]].pop(0) if keys else None

    async def _respond(
        self, rec: RecordedRequest, script: Script | None, writer: asyncio.StreamWriter, gone: asyncio.Future
    ) -> None:
        if script is None:
            script = HttpError(500, {"error": {"message": f"scripted provider: nothing queued for {rec.path}",
                                               "type": "scripted_provider_error"}})
        if isinstance(script, Hang):
            if await _closed_within(gone, script.seconds):
                _mark_closed(rec)
                return
            if script.then is None:
                writer.transport.abort()
                return
            script = script.then
        if isinstance(script, HttpError):
            if script.delay_s and await _closed_within(gone, script.delay_s):
                _mark_closed(rec)
                return
            body = script.body if isinstance(script.body, str) else json.dumps(script.body)
            data = body.encode()
            headers = {"content-type": "application/json", "content-length": str(len(data)), **script.headers}
            writer.write(_head(script.status, headers) + data)
            await writer.drain()
            return
        await self._stream(rec, script, writer, gone)

    async def _stream(self, rec: RecordedRequest, script: Sse, writer: asyncio.StreamWriter, gone: asyncio.Future) -> None:
        headers = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache",
                   "transfer-encoding": "chunked", **script.headers}
        try:
            writer.write(_head(script.status, headers))
            await writer.drain()
            for sent, item in enumerate(script.items):
                if script.abort_after is not None and sent >= script.abort_after:
                    writer.transport.abort()  # no terminating chunk: the client sees a broken body
                    return
                if isinstance(item, Gate):
                    opened = asyncio.get_running_loop().run_in_executor(None, item.event.wait, item.timeout_s)
                    await asyncio.wait({opened, gone}, return_when=asyncio.FIRST_COMPLETED)
                    if gone.done():
                        _mark_closed(rec)
                        return
                    continue
                ev = _ev(item)
                if (ev.delay_s and await _closed_within(gone, ev.delay_s)) or gone.done():
                    _mark_closed(rec)
                    return
                data = ev.encode()
                writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                await writer.drain()
            if script.abort_after is not None and script.abort_after <= len(script.items):
                writer.transport.abort()
                return
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        except ConnectionError:
            _mark_closed(rec)


async def _closed_within(gone: asyncio.Future, seconds: float) -> bool:
    done, _ = await asyncio.wait({gone}, timeout=seconds)
    return bool(done)


def _mark_closed(rec: RecordedRequest) -> None:
    rec.closed_early = True
    rec.closed_at = time.time()


def _head(status: int, headers: dict[str, str]) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Scripted"
    lines = [f"HTTP/1.1 {status} {phrase}", "connection: close", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return bytes(body)
        body += await reader.readexactly(size)
        await reader.readexactly(2)


# ---- dialect script builders ----------------------------------------------------------------------

_ids = itertools.count(1)


def _pieces(text: str, n: int = 3) -> list[str]:
    """`text` cut into up to n non-empty pieces (so deltas really arrive split)."""
    if not text:
        return []
    n = max(1, min(n, len(text)))
    step = -(-len(text) // n)
    return [text[i:i + step] for i in range(0, len(text), step)]


ToolCallSpec = tuple[str, str, str]
"""(call_id, name, arguments JSON text)."""


class ChatScripts:
    """OpenAI Chat Completions chunks (`data:` only, `[DONE]` last, usage in a `choices: []` chunk)."""

    kind = "openai_chat"
    path = PATHS[kind]

    def text_reply(self, text: str, *, usage: Usage | None = DEFAULT_USAGE, pieces: int = 3) -> Sse:
        c = self._chunker()
        return Sse([c({"role": "assistant", "content": ""})]
                   + [c({"content": p}) for p in _pieces(text, pieces)] + self._tail(c, "stop", usage))

    def thinking_then_text(self, thinking: str, text: str, *, usage: Usage | None = DEFAULT_USAGE,
                           pieces: int = 3) -> Sse:
        c = self._chunker()
        return Sse([c({"role": "assistant", "content": None, "reasoning_content": ""})]
                   + [c({"content": None, "reasoning_content": p}) for p in _pieces(thinking, pieces)]
                   + [c({"content": p, "reasoning_content": None}) for p in _pieces(text, pieces)]
                   + self._tail(c, "stop", usage))

    def tool_calls(self, calls: list[ToolCallSpec], *, split_args: bool = True, reasoning: str | None = None,
                   text: str | None = None, usage: Usage | None = DEFAULT_USAGE) -> Sse:
        c = self._chunker()
        items: list[SseItem] = [c({"role": "assistant", "content": None})]
        items += [c({"content": None, "reasoning_content": p}) for p in _pieces(reasoning or "")]
        items += [c({"content": p}) for p in _pieces(text or "")]
        for i, (call_id, name, args) in enumerate(calls):
            first = {"index": i, "id": call_id, "type": "function",
                     "function": {"name": name, "arguments": "" if split_args else args}}
            items.append(c({"tool_calls": [first]}))
            if split_args:
                items += [c({"tool_calls": [{"index": i, "function": {"arguments": p}}]}) for p in _pieces(args)]
        return Sse(items + self._tail(c, "tool_calls", usage))

    def length_cutoff(self, text: str, *, usage: Usage | None = DEFAULT_USAGE) -> Sse:
        c = self._chunker()
        return Sse([c({"role": "assistant", "content": ""})] + [c({"content": p}) for p in _pieces(text)]
                   + self._tail(c, "length", usage))

    def error_event(self, message: str, *, partial_text: str = "Partial") -> Sse:
        c = self._chunker()
        return Sse([c({"role": "assistant", "content": ""}), c({"content": partial_text}),
                    {"error": {"message": message, "type": "server_error", "param": None, "code": None}}])

    @staticmethod
    def _chunker() -> Any:
        cid = f"chatcmpl-scripted-{next(_ids)}"

        def chunk(delta: dict | None, finish: str | None = None, usage: dict | None = None) -> dict:
            choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
            return {"id": cid, "object": "chat.completion.chunk", "created": 1700000000, "model": "scripted-model",
                    "choices": choices, "usage": usage}

        return chunk

    @staticmethod
    def _tail(c: Any, finish: str, usage: Usage | None) -> list[SseItem]:
        items: list[SseItem] = [c({}, finish)]
        if usage is not None:
            u: dict = {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens,
                       "total_tokens": (usage.input_tokens or 0) + (usage.output_tokens or 0)}
            if usage.cache_read_tokens is not None:
                u["prompt_tokens_details"] = {"cached_tokens": usage.cache_read_tokens}
            if usage.reasoning_tokens is not None:
                u["completion_tokens_details"] = {"reasoning_tokens": usage.reasoning_tokens}
            items.append(c(None, usage=u))
        return items + ["[DONE]"]


class ResponsesScripts:
    """OpenAI Responses events (`event:` + `data:` with `type` and `sequence_number`)."""

    kind = "openai_responses"
    path = PATHS[kind]

    def text_reply(self, text: str, *, usage: Usage | None = DEFAULT_USAGE, pieces: int = 3) -> Sse:
        b = _ResponsesBuilder()
        b.message(text, pieces)
        return Sse(b.finish("response.completed", usage))

    def thinking_then_text(self, thinking: str, text: str, *, usage: Usage | None = DEFAULT_USAGE,
                           pieces: int = 3, encrypted_content: str = "gAAAA-scripted-reasoning==") -> Sse:
        b = _ResponsesBuilder()
        b.reasoning(thinking, encrypted_content, pieces)
        b.message(text, pieces)
        return Sse(b.finish("response.completed", usage))

    def tool_calls(self, calls: list[ToolCallSpec], *, split_args: bool = True, reasoning: str | None = None,
                   text: str | None = None, usage: Usage | None = DEFAULT_USAGE,
                   encrypted_content: str = "gAAAA-scripted-reasoning==") -> Sse:
        b = _ResponsesBuilder()
        if reasoning is not None:
            b.reasoning(reasoning, encrypted_content, 3)
        if text:
            b.message(text, 3)
        for call_id, name, args in calls:
            b.function_call(call_id, name, args, 3 if split_args else 1)
        return Sse(b.finish("response.completed", usage))

    def length_cutoff(self, text: str, *, usage: Usage | None = DEFAULT_USAGE) -> Sse:
        b = _ResponsesBuilder()
        b.message(text, 3, status="incomplete")
        return Sse(b.finish("response.incomplete", usage, incomplete_details={"reason": "max_output_tokens"}))

    def error_event(self, message: str, *, partial_text: str = "Partial") -> Sse:
        b = _ResponsesBuilder()
        b.ev("response.output_item.added", output_index=0,
             item={"id": "msg_x", "type": "message", "status": "in_progress", "role": "assistant", "content": []})
        b.ev("response.output_text.delta", item_id="msg_x", output_index=0, content_index=0, delta=partial_text)
        b.ev("error", code="server_error", message=message, param=None)
        return Sse(b.items)


class _ResponsesBuilder:
    def __init__(self) -> None:
        self.rid = f"resp_scripted_{next(_ids)}"
        self.items: list[SseItem] = []
        self.output: list[dict] = []
        self._seq = itertools.count()
        self.ev("response.created", response=self._response("in_progress"))
        self.ev("response.in_progress", response=self._response("in_progress"))

    def ev(self, etype: str, **fields: Any) -> None:
        self.items.append(Ev({"type": etype, "sequence_number": next(self._seq), **fields}, event=etype))

    def _response(self, status: str, **extra: Any) -> dict:
        return {"id": self.rid, "object": "response", "created_at": 1700000000, "status": status,
                "model": "scripted-model", "output": list(self.output), "usage": None, **extra}

    def message(self, text: str, pieces: int, status: str = "completed") -> None:
        oi, mid = len(self.output), f"msg_{self.rid}_{len(self.output)}"
        self.ev("response.output_item.added", output_index=oi,
                item={"id": mid, "type": "message", "status": "in_progress", "role": "assistant", "content": []})
        self.ev("response.content_part.added", item_id=mid, output_index=oi, content_index=0,
                part={"type": "output_text", "text": "", "annotations": []})
        for p in _pieces(text, pieces):
            self.ev("response.output_text.delta", item_id=mid, output_index=oi, content_index=0, delta=p)
        part = {"type": "output_text", "text": text, "annotations": []}
        self.ev("response.output_text.done", item_id=mid, output_index=oi, content_index=0, text=text)
        self.ev("response.content_part.done", item_id=mid, output_index=oi, content_index=0, part=part)
        item = {"id": mid, "type": "message", "status": status, "role": "assistant", "content": [part]}
        self.ev("response.output_item.done", output_index=oi, item=item)
        self.output.append(item)

    def reasoning(self, summary: str, encrypted: str, pieces: int) -> None:
        oi, rid = len(self.output), f"rs_{self.rid}_{len(self.output)}"
        self.ev("response.output_item.added", output_index=oi, item={"id": rid, "type": "reasoning", "summary": []})
        if summary:
            self.ev("response.reasoning_summary_part.added", item_id=rid, output_index=oi, summary_index=0,
                    part={"type": "summary_text", "text": ""})
            for p in _pieces(summary, pieces):
                self.ev("response.reasoning_summary_text.delta", item_id=rid, output_index=oi, summary_index=0, delta=p)
            self.ev("response.reasoning_summary_text.done", item_id=rid, output_index=oi, summary_index=0, text=summary)
            self.ev("response.reasoning_summary_part.done", item_id=rid, output_index=oi, summary_index=0,
                    part={"type": "summary_text", "text": summary})
        item = {"id": rid, "type": "reasoning",
                "summary": [{"type": "summary_text", "text": summary}] if summary else [],
                "encrypted_content": encrypted}
        self.ev("response.output_item.done", output_index=oi, item=item)
        self.output.append(item)

    def function_call(self, call_id: str, name: str, args: str, pieces: int) -> None:
        oi, fid = len(self.output), f"fc_{self.rid}_{len(self.output)}"
        base = {"id": fid, "type": "function_call", "call_id": call_id, "name": name}
        self.ev("response.output_item.added", output_index=oi, item={**base, "status": "in_progress", "arguments": ""})
        for p in _pieces(args, pieces):
            self.ev("response.function_call_arguments.delta", item_id=fid, output_index=oi, delta=p)
        self.ev("response.function_call_arguments.done", item_id=fid, output_index=oi, arguments=args)
        item = {**base, "status": "completed", "arguments": args}
        self.ev("response.output_item.done", output_index=oi, item=item)
        self.output.append(item)

    def finish(self, etype: str, usage: Usage | None, **extra: Any) -> list[SseItem]:
        u = None
        if usage is not None:
            u = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                 "total_tokens": (usage.input_tokens or 0) + (usage.output_tokens or 0)}
            if usage.cache_read_tokens is not None:
                u["input_tokens_details"] = {"cached_tokens": usage.cache_read_tokens}
            if usage.reasoning_tokens is not None:
                u["output_tokens_details"] = {"reasoning_tokens": usage.reasoning_tokens}
        status = "completed" if etype == "response.completed" else "incomplete"
        self.ev(etype, response={**self._response(status, **extra), "usage": u})
        return self.items


class AnthropicScripts:
    """Anthropic Messages events (message_start ... message_stop, with a ping)."""

    kind = "anthropic"
    path = PATHS[kind]

    def text_reply(self, text: str, *, usage: Usage | None = DEFAULT_USAGE, pieces: int = 3) -> Sse:
        b = _AnthropicBuilder(usage)
        b.text(text, pieces)
        return Sse(b.finish("end_turn"))

    def thinking_then_text(self, thinking: str, text: str, *, usage: Usage | None = DEFAULT_USAGE,
                           pieces: int = 3, signature: str = "EqQBscripted-signature") -> Sse:
        b = _AnthropicBuilder(usage)
        b.thinking(thinking, signature, pieces)
        b.text(text, pieces)
        return Sse(b.finish("end_turn"))

    def tool_calls(self, calls: list[ToolCallSpec], *, split_args: bool = True, reasoning: str | None = None,
                   text: str | None = None, usage: Usage | None = DEFAULT_USAGE,
                   signature: str = "EqQBscripted-signature") -> Sse:
        b = _AnthropicBuilder(usage)
        if reasoning is not None:
            b.thinking(reasoning, signature, 3)
        if text:
            b.text(text, 3)
        for call_id, name, args in calls:
            b.tool_use(call_id, name, args, 3 if split_args else 1)
        return Sse(b.finish("tool_use"))

    def length_cutoff(self, text: str, *, usage: Usage | None = DEFAULT_USAGE) -> Sse:
        b = _AnthropicBuilder(usage)
        b.text(text, 3)
        return Sse(b.finish("max_tokens"))

    def refusal(self, text: str = "I can't help with that.", *, usage: Usage | None = DEFAULT_USAGE) -> Sse:
        b = _AnthropicBuilder(usage)
        b.text(text, 2)
        return Sse(b.finish("refusal"))

    def error_event(self, message: str = "Overloaded", *, partial_text: str = "Partial",
                    error_type: str = "overloaded_error") -> Sse:
        b = _AnthropicBuilder(None)
        b.ev("content_block_start", index=0, content_block={"type": "text", "text": ""})
        b.ev("content_block_delta", index=0, delta={"type": "text_delta", "text": partial_text})
        b.ev("error", error={"type": error_type, "message": message})
        return Sse(b.items)


class _AnthropicBuilder:
    def __init__(self, usage: Usage | None) -> None:
        self.usage = usage
        self.items: list[SseItem] = []
        self.index = 0
        start_usage: dict = {"input_tokens": usage.input_tokens if usage else 1, "output_tokens": 1}
        if usage is not None and usage.cache_read_tokens is not None:
            start_usage["cache_read_input_tokens"] = usage.cache_read_tokens
        if usage is not None and usage.cache_write_tokens is not None:
            start_usage["cache_creation_input_tokens"] = usage.cache_write_tokens
        self.ev("message_start", message={
            "id": f"msg_scripted_{next(_ids)}", "type": "message", "role": "assistant", "content": [],
            "model": "scripted-model", "stop_reason": None, "stop_sequence": None, "usage": start_usage})
        self.ev("ping")

    def ev(self, etype: str, **fields: Any) -> None:
        self.items.append(Ev({"type": etype, **fields}, event=etype))

    def _block(self, start: dict, deltas: list[dict]) -> None:
        self.ev("content_block_start", index=self.index, content_block=start)
        for d in deltas:
            self.ev("content_block_delta", index=self.index, delta=d)
        self.ev("content_block_stop", index=self.index)
        self.index += 1

    def text(self, text: str, pieces: int) -> None:
        self._block({"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in _pieces(text, pieces)])

    def thinking(self, thinking: str, signature: str, pieces: int) -> None:
        deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(thinking, pieces)]
        self._block({"type": "thinking", "thinking": "", "signature": ""},
                    deltas + [{"type": "signature_delta", "signature": signature}])

    def tool_use(self, call_id: str, name: str, args: str, pieces: int) -> None:
        self._block({"type": "tool_use", "id": call_id, "name": name, "input": {}},
                    [{"type": "input_json_delta", "partial_json": p} for p in _pieces(args, pieces)])

    def finish(self, stop_reason: str) -> list[SseItem]:
        self.ev("message_delta", delta={"stop_reason": stop_reason, "stop_sequence": None},
                usage={"output_tokens": self.usage.output_tokens if self.usage else 1})
        self.ev("message_stop")
        return self.items


# ---- prompt cache accounting ------------------------------------------------------------------------


class PromptCacheSim:
    """Cache tokens the way each provider family reports them, computed from the request received.

        sim = PromptCacheSim()
        provider.enqueue("anthropic", lambda rec: ANTHROPIC.text_reply("hi", usage=sim.usage("anthropic", rec.json)))

    Tokens are estimated as ceil(bytes / 4) of each prompt block's JSON (cache_control left out).
    - anthropic: the prompt is the blocks tools -> system -> messages. A lookup at each
      `cache_control` breakpoint finds the longest cached prefix ending at that block or at one of
      the 20 blocks before it; every breakpoint's prefix is then written. `cache_read_tokens` is the
      hit, `cache_write_tokens` what the newest breakpoint added beyond it, and `input_tokens`
      the rest (Anthropic's input_tokens excludes both). Below 1,024 tokens nothing is cached.
    - openai kinds: automatic prefix caching: the prompt (tools, then system/instructions, then the
      messages) shares a prefix with an earlier request of the same `prompt_cache_key` (or any, when
      there is none); from 1,024 tokens it is read in 128-token steps. input_tokens includes it;
      there is no cache write count.
    """

    MIN_TOKENS = 1024
    LOOKBACK_BLOCKS = 20

    def __init__(self) -> None:
        self._anthropic: dict[str, int] = {}
        self._openai: dict[str | None, list[bytes]] = {}

    def usage(self, kind: str, body: dict, output_tokens: int = 20) -> Usage:
        if kind == "anthropic":
            return self._anthropic_usage(body, output_tokens)
        return self._openai_usage(kind, body, output_tokens)

    @staticmethod
    def tokens(data: bytes) -> int:
        return -(-len(data) // 4)

    @staticmethod
    def _json(value: Any) -> bytes:
        return json.dumps(_without_cache_control(value), ensure_ascii=False, separators=(",", ":")).encode()

    def _anthropic_usage(self, body: dict, output_tokens: int) -> Usage:
        blocks: list[tuple[bytes, bool]] = [(self._json(t), "cache_control" in t) for t in body.get("tools") or []]
        system = body.get("system")
        for block in ([{"type": "text", "text": system}] if isinstance(system, str) else system or []):
            blocks.append((self._json(block), "cache_control" in block))
        for message in body.get("messages") or []:
            content = message["content"]
            for block in ([{"type": "text", "text": content}] if isinstance(content, str) else content):
                blocks.append((self._json({"role": message["role"], **block}), "cache_control" in block))
        digest, hashes, totals, total = hashlib.sha256(), [], [], 0
        for data, _ in blocks:
            digest.update(data)
            hashes.append(digest.copy().hexdigest())
            total += self.tokens(data)
            totals.append(total)
        breakpoints = [i for i, (_, marked) in enumerate(blocks) if marked]
        read = 0
        for b in breakpoints:
            for j in range(b, max(-1, b - self.LOOKBACK_BLOCKS - 1), -1):
                if hashes[j] in self._anthropic:
                    read = max(read, totals[j])
                    break
        written = 0
        for b in breakpoints:
            if totals[b] >= self.MIN_TOKENS:
                self._anthropic[hashes[b]] = totals[b]
        if breakpoints and totals[breakpoints[-1]] >= self.MIN_TOKENS:
            written = max(0, totals[breakpoints[-1]] - read)
        return Usage(input_tokens=total - read - written, output_tokens=output_tokens,
                     cache_read_tokens=read, cache_write_tokens=written)

    def _openai_usage(self, kind: str, body: dict, output_tokens: int) -> Usage:
        parts = [self._json(body.get("tools") or [])]
        if kind == "openai_responses":
            parts.append(self._json(body.get("instructions") or ""))
            parts += [self._json(item) for item in body.get("input") or []]
        else:
            parts += [self._json(message) for message in body.get("messages") or []]
        prompt = b"".join(parts)
        seen = self._openai.setdefault(body.get("prompt_cache_key"), [])
        common = max((common_prefix(prompt, earlier) for earlier in seen), default=0)
        seen.append(prompt)
        cached_tokens = common // 4
        cached = (cached_tokens // 128) * 128 if cached_tokens >= self.MIN_TOKENS else 0
        return Usage(input_tokens=self.tokens(prompt), output_tokens=output_tokens, cache_read_tokens=cached)


def _without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


def common_prefix(a: bytes, b: bytes) -> int:
    """How many leading bytes `a` and `b` share."""
    n = min(len(a), len(b))
    lo, hi = 0, n  # binary search on equal prefixes: fast for long prompts
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class CompletionsScripts:
    """OpenAI legacy completions chunks (`choices[0].text`, `[DONE]` last). `litellm=True` streams what
    LiteLLM 1.108.7 sends (PROTOCOL 11.1): no `finish_reason` key on content chunks, a final chunk without
    `text`, a usage of zeros on every chunk and the real usage in a `choices: [{index}]` chunk."""

    kind = "openai_completions"
    path = FIM_PATHS[kind]

    def text_reply(self, text: str, *, usage: Usage | None = DEFAULT_USAGE, pieces: int = 3, litellm: bool = False,
                   delay_s: float = 0.0, first_delay_s: float = 0.0) -> Sse:
        c = self._chunker(litellm)
        items: list[SseItem] = [c(p) for p in _pieces(text, pieces)]
        if first_delay_s and items:
            items[0] = Ev(items[0], delay_s=first_delay_s)  # type: ignore[arg-type]
        if delay_s:
            items = [items[0]] + [Ev(i, delay_s=delay_s) for i in items[1:]]  # type: ignore[arg-type]
        return Sse(items + self._tail(c, "stop", usage, litellm))

    def length_cutoff(self, text: str, *, usage: Usage | None = DEFAULT_USAGE) -> Sse:
        c = self._chunker(False)
        return Sse([c(p) for p in _pieces(text)] + self._tail(c, "length", usage, False))

    def error_event(self, message: str, *, partial_text: str = "Partial") -> Sse:
        c = self._chunker(False)
        return Sse([c(partial_text), {"error": {"message": message, "type": "server_error", "param": None, "code": None}}])

    def endless(self, text: str = "x", *, every_s: float = 0.05, count: int = 2000) -> Sse:
        """A stream that keeps sending `text` (for cancellation tests): the client must close it."""
        c = self._chunker(False)
        return Sse([c(text)] + [Ev(c(text), delay_s=every_s) for _ in range(count)] + self._tail(c, "stop", None, False))

    @staticmethod
    def _chunker(litellm: bool) -> Any:
        cid = f"cmpl-scripted-{next(_ids)}"
        zeros = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}

        def chunk(text: str | None, finish: str | None = None) -> dict:
            choice: dict = {"index": 0, "logprobs": None}
            if text is not None:
                choice["text"] = text
            if not litellm or finish is not None:
                choice["finish_reason"] = finish
            out = {"id": cid, "object": "text_completion", "created": 1700000000, "model": "scripted-fim",
                   "choices": [choice]}
            if litellm:
                out["usage"] = zeros
            return out

        return chunk

    @staticmethod
    def _tail(c: Any, finish: str, usage: Usage | None, litellm: bool) -> list[SseItem]:
        items: list[SseItem] = [c(None if litellm else "", finish)]
        if usage is not None:
            u = {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens,
                 "total_tokens": (usage.input_tokens or 0) + (usage.output_tokens or 0)}
            last = c(None)
            last["choices"] = [{"index": 0}] if litellm else []
            last["usage"] = u
            items.append(last)
        return items + ["[DONE]"]


class MistralFimScripts:
    """Mistral's `/v1/fim/completions` stream: chat-style chunks (`delta.content`), usage on the last one."""

    kind = "mistral_fim"
    path = FIM_PATHS[kind]

    def text_reply(self, text: str, *, usage: Usage | None = DEFAULT_USAGE, pieces: int = 3) -> Sse:
        cid = f"mistral-{next(_ids)}"

        def c(content: str, finish: str | None = None) -> dict:
            return {"id": cid, "object": "chat.completion.chunk", "created": 1700000000, "model": "codestral-latest",
                    "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]}

        items: list[SseItem] = [c(p) for p in _pieces(text, pieces)]
        last = c("", "stop")
        if usage is not None:
            last["usage"] = {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens,
                             "total_tokens": (usage.input_tokens or 0) + (usage.output_tokens or 0)}
        return Sse(items + [last, "[DONE]"])


CHAT = ChatScripts()
RESPONSES = ResponsesScripts()
ANTHROPIC = AnthropicScripts()
COMPLETIONS = CompletionsScripts()
MISTRAL_FIM = MistralFimScripts()
SCRIPTS: dict[str, ChatScripts | ResponsesScripts | AnthropicScripts] = {
    "openai_chat": CHAT, "openai_responses": RESPONSES, "anthropic": ANTHROPIC,
}
