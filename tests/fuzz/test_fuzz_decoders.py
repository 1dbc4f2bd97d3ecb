"""Fuzzed decoders: every bad input is a typed error, never an unhandled exception.

Targets (each at least FUZZ_CASES generated cases, counted and asserted):
  envelope       connect.EnvelopeDecoder (any chunking) + parse_end_stream      -> ConnectError
  bidi_append    cursor.bidi.decode_bidi_append / decode_run_sse (unary, enveloped) -> ConnectError
  live_run       AgentClientMessage sequences delivered to a live Run with pending KV and exec ids
                                                                                  -> a RunError that is not InternalError
  sse_<kind>     the provider SSE folds, the three chat dialects and the FIM kinds' (bytes -> lines -> events
                 -> ModelCycle)                                                    -> ProviderError
  contentview    the Cursor Agent content view renderers                          -> never raise
  providers      the providers-file parser                                        -> ConfigFileError

Run: `pytest -m fuzz tests/fuzz` (CI runs it as its own step). FUZZ_CASES (default 10000) scales it.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import string
import struct

import pytest
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import HealthCheck, given, settings, strategies as st

from byok.wire import connect
from byok.providers.config import ConfigFileError, parse_providers
from byok.agent.cursor.bidi import decode_bidi_append, decode_run_sse
from byok.wire.errors import InternalError, ProviderError, RunError
from byok.proto import agent_pb2 as apb, aiserver_pb2 as spb

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(1800)]

CASES = int(os.environ.get("FUZZ_CASES", "10000"))
COUNTS: dict[str, int] = {}


def fuzz(name: str, strategy, check, *, cases: int = CASES) -> None:
    """Run `check` on `cases` generated values and assert that many really ran."""
    count = 0

    @settings(max_examples=cases, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def body(value):
        nonlocal count
        count += 1
        check(value)

    body()
    COUNTS[name] = count
    print(f"fuzz {name}: {count} cases")
    assert count >= cases


# ---- strategies ------------------------------------------------------------------------------------

small_ints = st.one_of(st.integers(0, 6), st.integers(-2**31, 2**63 - 1))
texts = st.text(max_size=12)


@st.composite
def proto_message(draw, descriptor, depth: int = 0):
    """A message of `descriptor` with random fields set (oneofs pick one branch), up to depth 3."""
    cls = _class_of(descriptor)
    message = cls()
    fields = [f for f in descriptor.fields if f.containing_oneof is None or
              f.containing_oneof.name.startswith("_")]
    for oneof in descriptor.oneofs:
        if oneof.name.startswith("_"):
            continue
        choice = draw(st.sampled_from([None, *oneof.fields]))
        if choice is not None:
            fields.append(choice)
    for fd in fields:
        if not draw(st.booleans()):
            continue
        _set_field(draw, message, fd, depth)
    if draw(st.integers(0, 9)) == 0:  # now and then a field newer than our schema
        message.MergeFromString(_tag(draw(st.integers(1000, 5000)), 0) + b"\x01")
    return message


def _class_of(descriptor):
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(descriptor)


def _scalar(draw, fd):
    t = fd.type
    if t == FieldDescriptor.TYPE_STRING:
        return draw(texts)
    if t == FieldDescriptor.TYPE_BYTES:
        return draw(st.binary(max_size=40))
    if t == FieldDescriptor.TYPE_BOOL:
        return draw(st.booleans())
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return draw(st.floats(allow_nan=False, width=32))
    if t == FieldDescriptor.TYPE_ENUM:
        return draw(st.sampled_from([v.number for v in fd.enum_type.values]))
    if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return draw(st.one_of(st.integers(0, 6), st.integers(0, 2**32 - 1)))
    if t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return draw(st.one_of(st.integers(0, 6), st.integers(0, 2**64 - 1)))
    if t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32):
        return draw(st.one_of(st.integers(0, 6), st.integers(-2**31, 2**31 - 1)))
    return draw(st.one_of(st.integers(0, 6), st.integers(-2**63, 2**63 - 1)))


def _set_field(draw, message, fd, depth):
    is_message = fd.type == FieldDescriptor.TYPE_MESSAGE
    if is_message and fd.message_type.GetOptions().map_entry:
        key_fd, value_fd = fd.message_type.fields_by_name["key"], fd.message_type.fields_by_name["value"]
        target = getattr(message, fd.name)
        for _ in range(draw(st.integers(0, 2))):
            key = _scalar(draw, key_fd)
            if value_fd.type == FieldDescriptor.TYPE_MESSAGE:
                if depth < 3:
                    target[key].CopyFrom(draw(proto_message(value_fd.message_type, depth + 1)))
            else:
                target[key] = _scalar(draw, value_fd)
        return
    if fd.is_repeated:
        target = getattr(message, fd.name)
        for _ in range(draw(st.integers(0, 2))):
            if is_message:
                if depth < 3:
                    target.add().CopyFrom(draw(proto_message(fd.message_type, depth + 1)))
            else:
                target.append(_scalar(draw, fd))
        return
    if is_message:
        if depth < 3:
            getattr(message, fd.name).CopyFrom(draw(proto_message(fd.message_type, depth + 1)))
        else:
            getattr(message, fd.name).SetInParent()
        return
    setattr(message, fd.name, _scalar(draw, fd))


def _tag(number: int, wire_type: int) -> bytes:
    from google.protobuf.internal import encoder

    return encoder._VarintBytes((number << 3) | wire_type)


def envelope(payload: bytes, flags: int = 0) -> bytes:
    return struct.pack(">BI", flags, len(payload)) + payload


@st.composite
def envelope_streams(draw):
    parts = []
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.integers(0, 5))
        if kind == 0:
            parts.append(draw(st.binary(max_size=30)))  # junk
        elif kind == 1:
            parts.append(envelope(draw(st.binary(max_size=30)), draw(st.integers(0, 255))))
        elif kind == 2:
            parts.append(envelope(gzip.compress(draw(st.binary(max_size=30))), 1 | draw(st.sampled_from([0, 2]))))
        elif kind == 3:
            end = draw(st.one_of(st.binary(max_size=30), json_values.map(lambda v: json.dumps(v).encode()),
                                 error_json.map(lambda v: json.dumps(v).encode())))
            parts.append(envelope(end, 2))
        elif kind == 4:
            parts.append(struct.pack(">BI", draw(st.integers(0, 3)), draw(st.integers(0, 2**32 - 1))))
        else:
            parts.append(envelope(draw(st.binary(max_size=10)), 1))  # "compressed" but not gzip
    data = b"".join(parts)
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=4)))
    return data, cuts


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 2**40), st.floats(allow_nan=False), texts)
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(texts, inner, max_size=3)), max_leaves=8)
error_json = st.fixed_dictionaries({"error": st.one_of(json_values, st.fixed_dictionaries({
    "code": st.one_of(st.sampled_from([c.value for c in connect.Code]), json_values),
    "message": json_values,
    "details": st.one_of(json_values, st.lists(st.fixed_dictionaries({"type": json_values, "value": json_values}),
                                                max_size=2))}))})


# ---- targets ---------------------------------------------------------------------------------------


def test_fuzz_envelope_decoder():
    def check(value):
        data, cuts = value
        decoder = connect.EnvelopeDecoder(max_message_bytes=1 << 16)
        try:
            start = 0
            for cut in [*cuts, len(data)]:
                for frame in decoder.feed(data[start:cut]):
                    if frame.end_stream:
                        connect.parse_end_stream(frame.payload)
                start = cut
            decoder.close()
        except connect.ConnectError:
            pass

    fuzz("envelope", envelope_streams(), check)


@st.composite
def append_bodies(draw):
    choice = draw(st.integers(0, 4))
    if choice == 0:
        body = draw(st.binary(max_size=60))
    else:
        message = draw(proto_message(apb.AgentClientMessage.DESCRIPTOR))
        data = message.SerializeToString().hex()
        if choice == 2:
            data = draw(st.text(alphabet=string.hexdigits + "xyz ", max_size=30))
        request = spb.BidiAppendRequest(data=data, append_seqno=draw(small_ints))
        if draw(st.booleans()):
            request.request_id.request_id = draw(texts)
        body = request.SerializeToString()
        if choice == 3:
            body = body + draw(st.binary(max_size=8))
    content_type = draw(st.sampled_from(["application/proto", "application/connect+proto"]))
    if content_type == "application/connect+proto" and draw(st.booleans()):
        body = envelope(body) + (envelope(b"{}", 2) if draw(st.booleans()) else b"")
    return body, content_type


def test_fuzz_bidi_append_bodies():
    def check(value):
        body, content_type = value
        try:
            append = decode_bidi_append(body, content_type)
            assert append.request_id and isinstance(append.message, apb.AgentClientMessage)
        except connect.ConnectError:
            pass
        try:
            assert decode_run_sse(body, content_type)
        except connect.ConnectError:
            pass

    fuzz("bidi_append", append_bodies(), check)


def test_fuzz_agent_client_messages_on_a_live_run():
    from byok.agent.cursor.tools.dispatch import ExecTable
    from byok.agent.run import PendingKv, Run, RunSettings

    loop = asyncio.new_event_loop()
    internal: list[RunError] = []

    async def scenario(messages):
        run = Run("req-fuzz", RunSettings(ack_timeout_s=5, heartbeat_s=60))
        run.execs = ExecTable(emit=run.emit, fail=run.fail)
        run.execs.issue("exec", "read_args", "call-1", "Read", frozenset({"read_result"}))
        run.execs.issue("interaction", "ask_question", "call-2", "AskQuestion", frozenset({"ask_question_result"}))
        future = loop.create_future()
        run._kv[0] = PendingKv(future, b"\x00" * 32, "blob", False)
        run._kv[1] = PendingKv(loop.create_future(), b"\x11" * 32, "blob", True, 3)
        run._next_kv_id = 2
        for message in messages:
            run.deliver(message)
            if isinstance(run._fail_with, InternalError):
                internal.append(run._fail_with)
                return
        await asyncio.sleep(0)

    def check(messages):
        loop.run_until_complete(scenario(messages))
        assert not internal, f"a client message crashed the run: {internal[0].message}"

    try:
        fuzz("live_run", st.lists(proto_message(apb.AgentClientMessage.DESCRIPTOR), min_size=1, max_size=4), check)
    finally:
        loop.close()


SSE_VOCABULARY = {
    "openai_chat": (["", "message"], ["id", "object", "choices", "delta", "content", "role", "tool_calls", "index",
                                       "function", "name", "arguments", "finish_reason", "usage", "prompt_tokens",
                                       "completion_tokens", "reasoning_content", "reasoning", "reasoning_details",
                                       "error", "message", "type", "text", "refusal", "prompt_tokens_details", "thinking_blocks",
                                       "thinking", "signature", "summary", "data",
                                       "cached_tokens"]),
    "openai_responses": (["response.created", "response.output_item.added", "response.output_text.delta",
                          "response.function_call_arguments.delta", "response.output_item.done",
                          "response.completed", "response.failed", "response.incomplete", "error",
                          "response.reasoning_summary_text.delta", "response.content_part.added"],
                         ["type", "response", "item", "output_index", "delta", "id", "call_id", "name",
                          "arguments", "output", "usage", "input_tokens", "output_tokens", "status", "error",
                          "summary", "text", "content", "sequence_number", "incomplete_details", "reason"]),
    "anthropic": (["message_start", "content_block_start", "content_block_delta", "content_block_stop",
                   "message_delta", "message_stop", "ping", "error"],
                  ["type", "message", "index", "content_block", "delta", "text", "thinking", "signature",
                   "partial_json", "id", "name", "input", "stop_reason", "usage", "input_tokens", "output_tokens",
                   "error", "tool_use", "text_delta", "input_json_delta", "thinking_delta", "content"]),
    # the fill-in-the-middle kinds' one fold (legacy choices[].text and Mistral's delta.content)
    "openai_completions": (["", "message"], ["id", "object", "choices", "text", "delta", "content", "index",
                                              "finish_reason", "usage", "prompt_tokens", "completion_tokens",
                                              "prompt_tokens_details", "cached_tokens", "error", "message", "logprobs"]),
}


def sse_streams(kind: str):
    names, keys = SSE_VOCABULARY[kind]
    values = st.recursive(
        st.one_of(json_scalars, st.sampled_from(names + keys)),
        lambda inner: st.one_of(st.lists(inner, max_size=3),
                                st.dictionaries(st.sampled_from(keys), inner, max_size=4)),
        max_leaves=12)
    event = st.tuples(st.sampled_from(names), st.one_of(
        st.dictionaries(st.sampled_from(keys), values, max_size=5).map(json.dumps),
        st.just("[DONE]"), texts, values.map(json.dumps)))
    line_noise = st.sampled_from([": keep-alive\n", "retry: 10\n", "\n", "data\n", "event: x\n"])

    @st.composite
    def stream(draw):
        out = []
        for name, data in draw(st.lists(event, max_size=8)):
            if draw(st.integers(0, 5)) == 0:
                out.append(draw(line_noise))
            out.append((f"event: {name}\n" if name else "") + "".join(f"data: {d}\n" for d in data.split("\n"))
                       + "\n")
        raw = "".join(out).encode()
        if draw(st.integers(0, 7)) == 0:
            raw += draw(st.binary(max_size=6))
        return raw

    return stream()


def fold_bytes(kind: str, raw: bytes) -> None:
    import codecs

    from httpx_sse._decoders import SSEDecoder, SSELineDecoder

    from byok.providers import adapter_for
    from byok.providers.base import ModelCycle
    from byok.providers.io import _feed

    if kind == "openai_completions":
        from byok.providers.openai_completions import Fold

        fold = Fold("fuzz")
    else:
        fold = adapter_for(kind).new_fold("fuzz")
    cycle = ModelCycle()
    lines, sse = SSELineDecoder(), SSEDecoder()
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(raw, final=True)
    except UnicodeDecodeError:
        return  # io.py turns this into a ProviderProtocolError before any fold sees it
    for line in lines.decode(text) + lines.flush():
        for event in _feed(fold, sse, line):
            cycle.feed(event)
    for event in fold.finish():
        cycle.feed(event)
    done = cycle.finish()  # no final event: a ProviderError (caught by the caller), never a silent success
    # a fold that succeeded handed the loop a complete answer: every tool call it started also ended
    # with its arguments, and a tool_use stop names at least one call
    assert done.reason in ("stop", "tool_use")
    assert all(isinstance(c["arguments"], str) for c in cycle.calls.values()), cycle.calls
    assert done.reason != "tool_use" or cycle.calls


@pytest.mark.parametrize("kind", sorted(SSE_VOCABULARY))
def test_fuzz_provider_sse_folds(kind):
    def check(raw):
        try:
            fold_bytes(kind, raw)
        except ProviderError:
            pass

    fuzz(f"sse_{kind}", sse_streams(kind), check)


def test_fuzz_content_view():
    from byok import contentview as cv

    @st.composite
    def bodies(draw):
        choice = draw(st.integers(0, 3))
        if choice == 0:
            return draw(st.binary(max_size=80))
        if choice == 1:
            return draw(envelope_streams())[0]
        if choice == 2:
            message = draw(proto_message(apb.AgentServerMessage.DESCRIPTOR))
            return envelope(message.SerializeToString()) + draw(st.sampled_from([b"", envelope(b"{}", 2), b"\x00"]))
        return draw(append_bodies())[0]

    def check(body):
        for render in (cv.render_server_stream, cv.render_run_sse_request, cv.render_connect_stream):
            assert isinstance(render(body), list)
        for content_type in (None, "application/proto", "application/connect+proto"):
            assert isinstance(cv.render_bidi_append(body, content_type), list)

    fuzz("contentview", bodies(), check)


PROVIDER_KEYS = ["name", "kind", "base_url", "api_key_env", "api_key", "extra_headers", "models", "bogus"]
MODEL_KEYS = ["id", "display_name", "context_tokens", "max_output_tokens", "reasoning_effort",
              "thinking_budget_tokens", "extra_body", "supports_images", "supports_thinking", "prices", "bogus"]
PRICE_KEYS = ["input", "output", "cache_read", "cache_write", "cache"]


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if value == value and value not in (float("inf"), float("-inf")) else "nan"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    return '""'


_TOML_SCALAR = st.one_of(st.booleans(), st.integers(-3, 10**6), st.floats(allow_nan=False, allow_infinity=False),
                        st.sampled_from(["openai_chat", "anthropic", "openai_responses", "https://x.example/v1",
                                         "http://", "KEY_VAR", "", "high"]), texts)
_TOML_VALUE = st.one_of(_TOML_SCALAR, st.lists(_TOML_SCALAR, max_size=2),
                        st.dictionaries(st.sampled_from(PRICE_KEYS + ["a"]), _TOML_SCALAR, max_size=4))


@st.composite
def providers_files(draw):
    value = _TOML_VALUE
    lines = []
    for _ in range(draw(st.integers(0, 3))):
        lines.append("[[providers]]")
        for key in draw(st.lists(st.sampled_from(PROVIDER_KEYS[:-2] + ["bogus"]), max_size=6, unique=True)):
            lines.append(f"{key} = {toml_value(draw(value))}")
        for _ in range(draw(st.integers(0, 2))):
            lines.append("[[providers.models]]")
            for key in draw(st.lists(st.sampled_from(MODEL_KEYS), max_size=6, unique=True)):
                lines.append(f"{key} = {toml_value(draw(value))}")
    text = "\n".join(lines) + "\n"
    if draw(st.integers(0, 6)) == 0:  # raw mutations: TOML syntax errors, odd characters
        position = draw(st.integers(0, len(text)))
        text = text[:position] + draw(st.text(max_size=5)) + text[position:]
    return text


def test_fuzz_providers_file_parser():
    def check(text):
        try:
            config, warnings = parse_providers(text, "fuzz.toml")
            assert all(isinstance(w, str) for w in warnings)
            for m in config.models:
                assert len(m.public_id) == 8
        except ConfigFileError as e:
            assert str(e).startswith("fuzz.toml")

    fuzz("providers", providers_files(), check)


def test_zz_counts_are_reported():
    """Prints the per-target counts together (docs/reliability.md records them)."""
    if COUNTS:
        print("fuzz cases: " + ", ".join(f"{k}={v}" for k, v in sorted(COUNTS.items())))
