"""Live fuzzing of a running proxy: whatever a client sends, every stream ends, nothing crashes, and
the mitmdump log holds no traceback.

One real `mitmdump -s addon/cursor_byok.py` (a scripted provider with nothing queued, so a run that
gets as far as its model call ends with the provider's error; a fake Cursor backend for runs on
Cursor's models). Each case is one run driven by a hostile client, over either transport:

  runsse  RunSSE + BidiAppends: random AgentClientMessages at chaotic seqnos (in order, repeated,
          skipped ahead, negative, huge), garbage append bodies under random content types, and the
          client's own KV ACKs; the run_request first, or not at all.
  h2      one HTTP/2 Run stream: random messages, garbage bytes (broken envelopes), ACKs, then the
          request ended, reset, or ended and reset at once.

After its actions a case behaves like an honest client that has nothing more to say (it ACKs blob
SETs), and must see its stream end within HANG_S: an end-stream, an HTTP error, or a reset all
count; only silence is a hang. Then the proxy must still be running, and its log clean.

LIVE_FUZZ_CASES (default 500) cases per transport: each is a real round trip through mitmproxy
(about 80 s for both on the 2-core development machine; the decoder targets run 10,000 each).
"""

from __future__ import annotations

import asyncio
import os
import re
import ssl
import uuid

import httpx
import pytest
from hypothesis import strategies as st

from byok.agent.cursor.bidi import encode_bidi_append
from byok.cli.client import BIDI_APPEND, RUN_SSE, user_turn_request
from byok.proto import agent_pb2 as apb, aiserver_pb2 as spb
from byok.transports.h2conn import H2Error
from byok.wire import connect
from tests.e2e.conftest import start_proxy
from tests.fuzz.test_fuzz_decoders import fuzz, proto_message
from tests.support.fake_cursor import FakeCursor
from tests.support.scripted_provider import ScriptedProvider

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(3600)]

CASES = int(os.environ.get("LIVE_FUZZ_CASES", "500"))
HANG_S = 20.0
"""Not a speed target: a case whose stream says nothing for this long is a hang."""
BAD_LOG = re.compile(r"Traceback|Addon error|Task exception was never retrieved|Exception in callback|"
                     r"Unhandled|Error logged during startup")
CONTENT_TYPES = ("application/proto", "application/json", "application/connect+proto", "text/plain", "")
SEQNOS = st.one_of(st.sampled_from(["next"] * 4 + ["same", "skip"]), st.integers(-3, 40),
                   st.integers(-2**63, 2**63 - 1))
MESSAGES = proto_message(apb.AgentClientMessage.DESCRIPTOR)
ACTION = st.one_of(
    st.tuples(st.just("message"), MESSAGES, SEQNOS),
    st.tuples(st.just("garbage"), st.binary(max_size=80), st.sampled_from(CONTENT_TYPES)),
    st.tuples(st.just("ack")),
)
OUTCOMES: dict[str, dict[str, int]] = {}


def cases(transport: str):
    return st.fixed_dictionaries({
        "user_model": st.sampled_from([True, True, True, False]),
        "start": st.sampled_from([True, True, True, False]),
        "actions": st.lists(ACTION, max_size=6),
        "end": st.sampled_from(["end", "reset", "end_and_reset"] if transport == "h2" else ["end"]),
    })


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    with ScriptedProvider() as provider, FakeCursor() as upstream:
        proxy, ids = start_proxy(tmp_path_factory.mktemp("live-fuzz"), provider, upstream,
                                 byok_route_wait_s="1", byok_ack_timeout_s="1", byok_heartbeat_s="5",
                                 byok_upstream_probe_ms="0")
        try:
            yield proxy, ids["openai_chat"]
        finally:
            log = proxy.log()
            code = proxy.stop()
        assert code == 0, f"mitmdump ended with {code}"
        bad = [line for line in log.splitlines() if BAD_LOG.search(line)]
        assert bad == [], "\n".join(bad[:20])


class Pending:
    """The blob SETs the server asked for that the client has not ACKed yet."""

    def __init__(self) -> None:
        self.sets: list[int] = []
        self.honest = asyncio.Event()
        """Set once the case's actions are done: from then on every SET is ACKed as it arrives."""

    def feed(self, frame: connect.Frame) -> None:
        if frame.end_stream:
            return
        try:
            message = apb.AgentServerMessage.FromString(frame.payload)
        except Exception:  # the proxy's frames always decode; this client must not die on one anyway
            return
        if message.WhichOneof("message") == "kv_server_message" and \
                message.kv_server_message.WhichOneof("message") == "set_blob_args":
            self.sets.append(message.kv_server_message.id)

    def acks(self) -> list[apb.AgentClientMessage]:
        out = [apb.AgentClientMessage(kv_client_message=apb.KvClientMessage(id=i, set_blob_result=apb.SetBlobResult()))
               for i in self.sets]
        self.sets.clear()
        return out


async def read_to_the_end(chunks, pending: Pending, ack) -> str:
    """Read a run's response envelopes to the end-stream ("end ok" / "end <code>"), collecting blob
    SETs; once the case is honest, `ack(message)` answers each as it comes."""
    decoder = connect.EnvelopeDecoder()
    async for chunk in chunks:
        for frame in decoder.feed(chunk):
            if frame.end_stream:
                error = connect.parse_end_stream(frame.payload)
                return "end ok" if error is None else f"end {error.code.value}"
            pending.feed(frame)
        if pending.honest.is_set():
            for message in pending.acks():
                await ack(message)
    return "closed"


async def play(case, first: apb.AgentClientMessage, pending: Pending, put, garbage) -> None:
    """The case's actions: `put(message, seqno choice)` sends a client message, `garbage(bytes,
    content type)` junk; then the client turns honest and ACKs what is pending."""
    if case["start"]:
        await put(first, "next")
    for action in case["actions"]:
        if action[0] == "message":
            await put(action[1], action[2])
        elif action[0] == "garbage":
            await garbage(action[1], action[2])
        else:
            for message in pending.acks():
                await put(message, "next")
    pending.honest.set()
    for message in pending.acks():
        await put(message, "next")


def first_message(case, model: str, conversation: str) -> apb.AgentClientMessage:
    request = user_turn_request("fuzz", model_id=model if case["user_model"] else "cursor-model",
                                conversation_id=conversation)
    return apb.AgentClientMessage(run_request=request)


# ---- RunSSE + BidiAppend -----------------------------------------------------------------------------


async def runsse_case(proxy, model: str, case) -> str:
    rid = f"fuzz-{uuid.uuid4()}"
    pending = Pending()
    async with httpx.AsyncClient(proxy=proxy.url, verify=ssl.create_default_context(cafile=proxy.ca_file),
                                 trust_env=False, timeout=httpx.Timeout(HANG_S)) as http:
        base = "https://api2.cursor.sh"
        seq = {"next": 0, "last": 0}

        def seqno(choice) -> int:
            if choice in ("next", "skip"):
                seq["next"] += 1 if choice == "next" else 3
                seq["last"] = seq["next"] - 1
            elif choice != "same":
                seq["last"] = choice
            return seq["last"]

        async def post(body: bytes, content_type: str = "application/proto") -> None:
            response = await http.post(base + BIDI_APPEND, content=body,
                                       headers={"content-type": content_type} if content_type else {})
            assert response.status_code != 500, response.text  # an internal error is a bug

        async def append(message: apb.AgentClientMessage, choice="next") -> None:
            try:
                body = encode_bidi_append(rid, seqno(choice), message)
            except ValueError:  # a seqno protobuf cannot hold: skip it
                return
            await post(body)

        async def read() -> str:
            body = connect.encode_envelope(spb.BidiRequestId(request_id=rid).SerializeToString())
            async with http.stream("POST", base + RUN_SSE, content=body,
                                   headers={"content-type": "application/connect+proto"}) as response:
                if response.status_code != 200:
                    return f"http {response.status_code}"
                return await read_to_the_end(response.aiter_raw(), pending, append)

        reader = asyncio.ensure_future(read())
        await play(case, first_message(case, model, rid), pending, append, post)
        return await reader


# ---- HTTP/2 Run ----------------------------------------------------------------------------------------


async def h2_case(proxy, model: str, case) -> str:
    from byok.cli.h2client import H2CursorClient

    rid = f"fuzz-h2-{uuid.uuid4()}"
    pending = Pending()
    async with H2CursorClient(proxy.url, proxy.ca_file) as client:
        conn = await client.connection()
        stream = await conn.request([
            (":method", "POST"), (":scheme", "https"), (":authority", "agentn.api5.cursor.sh"),
            (":path", "/agent.v1.AgentService/Run"), ("content-type", "application/connect+proto"),
            ("connect-protocol-version", "1"), ("x-request-id", rid)])
        sending = {"open": True}

        async def send(data: bytes) -> None:
            if sending["open"]:
                try:
                    await stream.send(data)
                except H2Error:
                    sending["open"] = False  # the server ended or reset the stream: fine

        async def put(message: apb.AgentClientMessage, seqno=None) -> None:  # stream order is the order
            await send(connect.encode_envelope(message.SerializeToString()))

        async def garbage(data: bytes, content_type=None) -> None:
            await send(data)

        async def read() -> str:
            try:
                headers = dict(await stream.response)
                if not headers.get("content-type", "").startswith("application/connect+proto"):
                    async for _ in stream.chunks():  # e.g. the fake Cursor's plain answer to a relayed Run
                        pass
                    return f"http {headers.get(':status')} {headers.get('content-type', '-')}"
                return await read_to_the_end(stream.chunks(), pending, put)
            except H2Error as e:
                return f"reset {type(e).__name__}"

        reader = asyncio.ensure_future(read())
        await play(case, first_message(case, model, rid), pending, put, garbage)
        if sending["open"]:
            if case["end"] == "end":
                await stream.end()
            elif case["end"] == "reset":
                stream.reset()
            else:
                stream.end_and_reset()
        return await reader


@pytest.mark.parametrize("transport", ["runsse", "h2"])
def test_live_fuzz_every_stream_ends_and_the_log_stays_clean(live, transport):
    proxy, model = live
    play = runsse_case if transport == "runsse" else h2_case
    outcomes = OUTCOMES.setdefault(transport, {})

    def check(case) -> None:
        async def bounded() -> str:
            try:
                return await asyncio.wait_for(play(proxy, model, case), HANG_S)
            except asyncio.TimeoutError:
                raise AssertionError(f"hang: no end within {HANG_S:g} s for {case}") from None

        outcome = asyncio.run(bounded())
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        assert proxy.process.poll() is None, "mitmdump died"

    fuzz(f"live_{transport}", cases(transport), check, cases=CASES)
    print(f"live {transport} outcomes: {dict(sorted(outcomes.items()))}")
