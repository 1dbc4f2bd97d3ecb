"""The "Cursor Agent" content view: Connect frames of the agent RPCs decoded as agent.v1 messages.

mitmweb, mitmproxy and mitmdump pick it automatically (their "auto" view) for:
- RunSSE and HTTP/2 Run responses: one entry per envelope (index, flags, length, the `AgentServerMessage` branch and
  its nested branch, the ids that pair messages, compact JSON of the message); the end-stream JSON
  as JSON with its `ErrorDetails` decoded; gzip frames inflated; an incomplete tail (a stream still
  running, or cut) shown as such;
- HTTP/2 Run requests (one `AgentClientMessage` per envelope), RunSSE requests (`BidiRequestId`) and
  BidiAppend requests (request id, seqno, and the hex `data`, or the raw `data_binary` of newer
  clients, decoded as an `AgentClientMessage`), unary or enveloped;
- GetServerConfig and GetDefaultModelForCli (unary calls cursor-byok may rewrite): the message as
  JSON, unknown fields numbered;
- the one-shot calls cursor-byok can answer (`byok.assist.SERVICES`: commit messages, branch names,
  titles, terminal, Cmd-K, Tab) and NetworkService/IsConnected: unary bodies as their messages,
  server streams one entry per frame (the oneof branch, e.g. `real_response.edit_stream`).
  Tab's StreamCpp frames are summarized by what they carry (model_info / range a-b / text / done_stream),
  its request by file, cursor, contents_start_at_line and line ending; CppConfig and
  CppService/AvailableModels (answered or rewritten by tab_config.py) as their messages.
Other `application/connect+*` bodies get the envelope listing without message types.

The renderers are pure functions (bytes -> lines of `(style, text)`), testable without mitmproxy;
the `Contentview` class and the registrar addon at the bottom are the only mitmproxy-facing parts.
Bytes fields up to `INLINE_BYTES` are shown (text, or hex for ids and binary); bigger ones as
`<N bytes sha256=...>` so a blob can be matched with its id. Fields the schema does not know (newer
clients) appear as `"#<field number>"` keys and are counted in the frame's header line.
"""

from __future__ import annotations

import binascii
import hashlib
import json
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from google.protobuf import descriptor_pool, json_format, message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet
from mitmproxy import contentviews, http

from byok.proto import agent_pb2 as apb, aiserver_pb2 as spb, cpp_pb2 as cpb, features_pb2 as fpb

from .wire import connect
from .agent.cursor.bidi import append_message
from .connectivity import IS_CONNECTED_PATH
from .router import BIDI_APPEND_PATH, ONE_SHOT_PATHS, RUN_PATH, RUN_SSE_PATH

VIEW_NAME = "Cursor Agent"
"""URL-safe apart from the space (mitmweb: `/flows/<id>/response/content/Cursor%20Agent.json`)."""
PRIORITY = 3.0
"""Above every built-in view (gRPC/protobuf claim at most 1-2), so "auto" picks it."""
GENERIC_PRIORITY = 1.5
INLINE_BYTES = 256
INLINE_TEXT = 4096
TEXT_HEAD = 512
ID_PREFIX = 12
"""Hex digits of a blob id in header lines (the JSON shows them whole)."""

Line = list[tuple[str, str]]
Decode = Callable[[bytes], Message]

_SERVER_ID_LABEL = {
    "kv_server_message": "kv", "exec_server_message": "exec", "exec_server_control_message": "exec",
    "interaction_query": "interaction",
}
_CLIENT_ID_LABEL = {
    "kv_client_message": "kv", "exec_client_message": "exec", "exec_client_control_message": "exec",
    "interaction_response": "interaction",
}
# (field name, header label); `id` gets its branch's label (kv/exec/interaction)
_ID_FIELDS = (
    ("id", None), ("exec_id", "exec_id"), ("call_id", "call"), ("tool_call_id", "call"),
    ("model_call_id", "model_call"), ("blob_id", "blob"), ("request_id", "request_id"),
)


# ---- messages -> JSON ---------------------------------------------------------------------------------


def short_bytes(data: bytes) -> str:
    """Small bytes as text (when printable UTF-8) or hex; big ones as size + sha256 prefix."""
    if len(data) <= INLINE_BYTES:
        text = _printable(data)
        return text if text is not None else data.hex()
    digest = hashlib.sha256(data).hexdigest()[:16]
    text = _printable(data[:96], partial=True)
    preview = f": {_one_line(text[:64])}…" if text else ""
    return f"<{len(data)} bytes sha256={digest}{preview}>"


def short_text(text: str) -> str:
    if len(text) <= INLINE_TEXT:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return f"{text[:TEXT_HEAD]}… <{len(text)} chars sha256={digest}>"


def _printable(data: bytes, partial: bool = False) -> str | None:
    try:
        text = data.decode("utf-8", "ignore" if partial else "strict")
    except UnicodeDecodeError:
        return None
    if not text or any(ch < " " and ch not in "\n\r\t" for ch in text):
        return None
    return text


def message_json(message: Message, unknown: list[str] | None = None) -> dict:
    """`MessageToDict` (proto field names) with bytes and long strings shortened and unknown fields
    shown as `"#<number>"` keys; their paths are appended to `unknown`."""
    try:
        out = json_format.MessageToDict(message, preserving_proto_field_name=True)
    except Exception as e:  # e.g. an Any of a type we do not have
        return {"$error": f"cannot render {message.DESCRIPTOR.full_name}: {e}"}
    _patch(message, out, unknown if unknown is not None else [], "")
    return out


def _patch(message: Message, out: dict, unknown: list[str], path: str) -> None:
    if message.DESCRIPTOR.full_name.startswith("google.protobuf."):
        return  # well-known types have their own JSON shapes
    for field, value in message.ListFields():
        if field.is_extension or field.name not in out:
            continue
        key, sub_path = field.name, f"{path}.{field.name}" if path else field.name
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            for k, v in value.items():
                json_key = ("true" if k else "false") if isinstance(k, bool) else str(k)
                out[key][json_key] = _patch_value(value_field, v, out[key][json_key], unknown, sub_path)
        elif field.is_repeated:
            out[key] = [_patch_value(field, v, o, unknown, sub_path) for v, o in zip(value, out[key])]
        else:
            out[key] = _patch_value(field, value, out[key], unknown, sub_path)
    for item in UnknownFieldSet(message):
        out[f"#{item.field_number}"] = _unknown_value(item)
        unknown.append(f"{path}#{item.field_number}" if path else f"#{item.field_number}")


def _patch_value(field: FieldDescriptor, value: Any, rendered: Any, unknown: list[str], path: str) -> Any:
    if field.type == FieldDescriptor.TYPE_BYTES:
        return short_bytes(value)
    if field.type == FieldDescriptor.TYPE_STRING:
        return short_text(value)
    if field.message_type is not None and isinstance(rendered, dict):
        _patch(value, rendered, unknown, path)
    return rendered


def _unknown_value(item) -> Any:
    if item.wire_type == 2:  # length-delimited: bytes, a string or a nested message
        return short_bytes(bytes(item.data))
    if item.wire_type == 3:
        return "<group>"
    return item.data


def compact(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))


# ---- message summaries ----------------------------------------------------------------------------------


def _set_oneof(message: Message) -> str | None:
    """The first set real oneof (proto3 `optional` fields have synthetic `_name` oneofs)."""
    for oneof in message.DESCRIPTOR.oneofs:
        if oneof.name.startswith("_"):
            continue
        name = message.WhichOneof(oneof.name)
        if name:
            return name
    return None


def summarize(message: Message, id_labels: dict[str, str]) -> tuple[str, list[str]]:
    """(kind, ids): the oneof branch and its nested branch (`interaction_update.text_delta`), and the
    ids that pair messages (KV id, exec/interaction id, call ids, blob id prefixes)."""
    if isinstance(message, cpb.StreamCppResponse):
        return _cpp_frame(message), []
    if isinstance(message, cpb.StreamCppRequest):
        return "StreamCppRequest", _cpp_request(message)
    if not any(not oneof.name.startswith("_") for oneof in message.DESCRIPTOR.oneofs):  # e.g. BidiRequestId
        return message.DESCRIPTOR.name, _ids(message, None)
    branch = _set_oneof(message)
    if branch is None:
        return "empty", []
    sub = getattr(message, branch)
    if not isinstance(sub, Message):  # a scalar branch (StreamNextCursorPredictionResponse.text, say)
        return branch, []
    if branch == "run_request":
        return branch, _run_request_ids(sub)
    nested = _set_oneof(sub)
    ids = _ids(sub, id_labels.get(branch))
    if nested is not None:
        inner = getattr(sub, nested)
        if isinstance(inner, Message):
            ids += [i for i in _ids(inner, id_labels.get(branch)) if i not in ids]
    return (f"{branch}.{nested}" if nested else branch), ids


def _ids(message: Message, id_label: str | None) -> list[str]:
    out = []
    fields = message.DESCRIPTOR.fields_by_name
    for name, label in _ID_FIELDS:
        field = fields.get(name)
        if field is None or field.is_repeated or field.message_type is not None:
            continue
        value = getattr(message, name)
        if name == "id":
            if id_label is None:
                continue
            out.append(f"{id_label}={value}")
        elif value:
            out.append(f"{label}={value.hex()[:ID_PREFIX] if isinstance(value, bytes) else _one_line(value)}")
    return out


def _cpp_frame(frame: cpb.StreamCppResponse) -> str:
    """What a StreamCpp frame says, in the order the client reads it."""
    parts = [name for name in ("model_info", "begin_edit") if frame.HasField(name)]
    if frame.HasField("range_to_replace"):
        r = frame.range_to_replace
        parts.append(f"range {r.start_line_number}-{r.end_line_number_inclusive}")
    if frame.text:
        parts.append(f"text {_one_line(frame.text)!r}")
    parts += [name for name in ("cursor_prediction_target", "done_edit", "done_stream") if frame.HasField(name)]
    return " + ".join(parts) or "empty"


def _cpp_request(request: cpb.StreamCppRequest) -> list[str]:
    f = request.current_file
    out = [f"file={f.relative_workspace_path or '-'}", f"cursor={f.cursor_position.line}:{f.cursor_position.column}",
           f"lines={f.contents.count(chr(10)) + 1 if f.contents else 0}"]
    if f.contents_start_at_line:
        out.append(f"contents_start_at_line={f.contents_start_at_line}")
    if f.HasField("line_ending"):
        out.append(f"line_ending={f.line_ending!r}")
    if f.rely_on_filesync:
        out.append("rely_on_filesync")
    return out


def _run_request_ids(request: apb.AgentRunRequest) -> list[str]:
    model = request.requested_model.model_id or request.model_details.model_id
    action = _set_oneof(request.action) if request.HasField("action") else None
    return [f"{k}={v}" for k, v in (("conversation", request.conversation_id), ("model", model),
                                     ("action", action)) if v]


def _one_line(text: str) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= 80 else text[:80] + "…"


# ---- envelopes --------------------------------------------------------------------------------------------


def _inflate(payload: bytes, limit: int = connect.DEFAULT_MAX_MESSAGE_BYTES) -> bytes:
    """gunzip, bounded: a frame that inflates past the limit is shown as an error, not rendered."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = inflater.decompress(payload, limit + 1)
    if len(out) > limit:
        raise ValueError(f"inflates to more than {limit} bytes")
    if not inflater.eof:
        raise ValueError("truncated gzip data")
    return out


def _flag_text(flags: int) -> str:
    names = [n for bit, n in ((connect.FLAG_COMPRESSED, "gzip"), (connect.FLAG_END_STREAM, "end")) if flags & bit]
    return f"flags=0x{flags:02x}" + (f"({','.join(names)})" if names else "")


def iter_envelopes(data: bytes, decode: Decode | None, id_labels: dict[str, str]) -> Iterator[Line]:
    """Lines for a Connect envelope stream; `decode` turns a message payload into its protobuf
    (None = no schema: a short preview of the payload)."""
    frames, tail = connect.split_envelopes(data)
    ended = False
    for index, (flags, payload) in enumerate(frames):
        wire_len = len(payload)
        if flags & connect.FLAG_COMPRESSED:
            try:
                payload = _inflate(payload)
            except (ValueError, zlib.error) as e:
                yield [("header", f"[{index}] "), ("error", f"MSG {_flag_text(flags)} len={wire_len}: bad gzip: {e}")]
                continue
        size = f"len={wire_len}" + (f"->{len(payload)}" if len(payload) != wire_len else "")
        prefix = [("header", f"[{index}] ")]
        if ended:
            prefix.append(("error", "after end-stream! "))
        if flags & connect.FLAG_END_STREAM:
            ended = True
            yield from _end_stream_lines(prefix, flags, size, payload)
            continue
        head = prefix + [("key", "MSG "), ("text", f"{_flag_text(flags)} {size} ")]
        if decode is None:
            yield head
            yield [("text", "    "), ("text", short_bytes(payload))]
            continue
        try:
            message = decode(payload)
        except DecodeError as e:
            yield head + [("error", f"not decodable: {e}")]
            yield [("text", "    "), ("text", short_bytes(payload))]
            continue
        unknown: list[str] = []
        body = compact(message_json(message, unknown))
        kind, ids = summarize(message, id_labels)
        head.append(("highlight", kind))
        if ids:
            head.append(("text", "  " + " ".join(ids)))
        if unknown:
            head.append(("error", f"  unknown fields: {', '.join(unknown)}"))
        yield head
        yield [("text", "    "), ("text", body)]
    if tail:
        yield _tail_line(len(frames), tail)


def _tail_line(index: int, tail: bytes) -> Line:
    if len(tail) < connect.HEADER.size:
        what = f"{len(tail)} bytes of a frame header"
    else:
        flags, length = connect.HEADER.unpack_from(tail)
        what = f"{len(tail) - connect.HEADER.size} of {length} payload bytes, {_flag_text(flags)}"
    return [("header", f"[{index}] "), ("error", f"incomplete frame: {what} (stream still running, or cut)")]


def _end_stream_lines(prefix: Line, flags: int, size: str, payload: bytes) -> Iterator[Line]:
    head = prefix + [("key", "END "), ("text", f"{_flag_text(flags)} {size} ")]
    try:
        body = json.loads(payload.decode("utf-8")) if payload else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        yield head + [("error", f"end-stream is not JSON: {e}")]
        yield [("text", "    "), ("text", short_bytes(payload))]
        return
    error = body.get("error") if isinstance(body, dict) else None
    if error and not isinstance(error, dict):
        error = {"code": "?", "message": str(error)}
    if not error:
        yield head + [("highlight", "ok")]
        yield [("text", "    "), ("text", compact(body))]
        return
    code, message = error.get("code", "unknown"), error.get("message", "")
    yield head + [("error", f"error {code}: {_one_line(str(message))}")]
    yield [("text", "    "), ("text", compact(body))]
    details = error.get("details")
    for detail in details if isinstance(details, list) else []:
        if not isinstance(detail, dict):
            continue
        yield [("text", "    "), ("key", f"detail {detail.get('type')}: "), ("text", _detail_json(detail))]


def _detail_json(detail: dict) -> str:
    raw = detail.get("value", "")
    if not isinstance(raw, str):
        return f"(value is not base64 text: {compact(raw)})"
    try:
        value = connect.b64decode_lenient(raw)
    except (ValueError, binascii.Error) as e:
        return f"(bad base64: {e})"
    type_name = detail.get("type")
    if not isinstance(type_name, str):
        return short_bytes(value)
    try:
        descriptor = descriptor_pool.Default().FindMessageTypeByName(type_name)
    except KeyError:
        return short_bytes(value)
    try:
        message = message_factory.GetMessageClass(descriptor).FromString(value)
    except DecodeError as e:
        return f"(not a {descriptor.full_name}: {e})"
    return compact(message_json(message))


# ---- the RPC bodies --------------------------------------------------------------------------------------


def render_server_stream(data: bytes) -> list[Line]:
    """A RunSSE response body (whole or partial)."""
    return list(iter_envelopes(data, apb.AgentServerMessage.FromString, _SERVER_ID_LABEL))


def render_client_stream(data: bytes) -> list[Line]:
    """An HTTP/2 Run request body (whole or partial): the client's messages in stream order."""
    return list(iter_envelopes(data, apb.AgentClientMessage.FromString, _CLIENT_ID_LABEL))


def render_run_sse_request(data: bytes) -> list[Line]:
    """A RunSSE request: one envelope holding `BidiRequestId`."""
    return list(iter_envelopes(data, spb.BidiRequestId.FromString, {}))


def render_connect_stream(data: bytes) -> list[Line]:
    """Any other Connect stream: envelopes without a schema."""
    return list(iter_envelopes(data, None, {}))


def render_bidi_append(body: bytes, content_type: str | None = None) -> list[Line]:
    """A BidiAppend request: unary `application/proto`, or enveloped `application/connect+proto`.
    mitmproxy hands views the body with its content-encoding already removed; a gzip body that is
    still compressed (it could not be decoded) is tried once more here."""
    if body[:2] == b"\x1f\x8b":
        try:
            body = _inflate(body)
        except (ValueError, zlib.error):
            pass
    if content_type and content_type.startswith("application/connect+"):
        frames, tail = connect.split_envelopes(body)
        lines: list[Line] = [[("text", f"enveloped ({content_type}): {len(frames)} frame(s)")]]
        for index, (flags, payload) in enumerate(frames):
            if flags & connect.FLAG_END_STREAM:
                lines.extend(_end_stream_lines([("header", f"[{index}] ")], flags, f"len={len(payload)}", payload))
                continue
            if flags & connect.FLAG_COMPRESSED:
                try:
                    payload = _inflate(payload)
                except (ValueError, zlib.error) as e:
                    lines.append([("header", f"[{index}] "), ("error", f"bad gzip: {e}")])
                    continue
            lines.append([("header", f"[{index}] "), ("key", "MSG "), ("text", _flag_text(flags))])
            lines.extend(_append_lines(payload))
        if tail:
            lines.append(_tail_line(len(frames), tail))
        return lines
    return _append_lines(body)


def _append_lines(payload: bytes) -> list[Line]:
    try:
        request = spb.BidiAppendRequest.FromString(payload)
    except DecodeError as e:
        return [[("error", f"not a BidiAppendRequest: {e}")], [("text", short_bytes(payload))]]
    carried = " ".join(part for part, present in (
        (f"data={len(request.data)} hex chars", request.data),
        (f"data_binary={len(request.data_binary)} bytes", request.data_binary)) if present) or "no data"
    head: Line = [("key", "BidiAppend "), ("text", f"request_id={request.request_id.request_id} "
                                                     f"seqno={request.append_seqno} {carried}")]
    outer_unknown: list[str] = []
    message_json(request, outer_unknown)
    if outer_unknown:
        head.append(("error", f"  unknown fields: {', '.join(outer_unknown)}"))
    try:
        _, message, _ = append_message(request)
    except connect.ConnectError as e:
        shown = short_text(request.data[:200]) if request.data else short_bytes(request.data_binary)
        return [head, [("error", e.message + ": ")], [("text", shown)]]
    unknown: list[str] = []
    body = compact(message_json(message, unknown))
    kind, ids = summarize(message, _CLIENT_ID_LABEL)
    line: Line = [("highlight", kind)]
    if ids:
        line.append(("text", "  " + " ".join(ids)))
    if unknown:
        line.append(("error", f"  unknown fields: {', '.join(unknown)}"))
    return [head, line, [("text", "    "), ("text", body)]]


UNARY_MESSAGES: dict[str, tuple[type[Message], type[Message]]] = {
    "/aiserver.v1.ServerConfigService/GetServerConfig": (spb.GetServerConfigRequest, spb.GetServerConfigResponse),
    "/aiserver.v1.AiService/GetServerConfig": (spb.GetServerConfigRequest, spb.GetServerConfigResponse),
    "/aiserver.v1.AiService/GetDefaultModelForCli": (
        spb.GetDefaultModelForCliRequest, spb.GetDefaultModelForCliResponse),
    "/aiserver.v1.AiService/CppConfig": (cpb.CppConfigRequest, cpb.CppConfigResponse),
    "/aiserver.v1.CppService/AvailableModels": (cpb.AvailableCppModelsRequest, cpb.AvailableCppModelsResponse),
    IS_CONNECTED_PATH: (fpb.IsConnectedRequest, fpb.IsConnectedResponse),
    **{path: (s.request_type, s.response_type) for path, s in ONE_SHOT_PATHS.items() if not s.streaming},
}
"""Unary RPCs whose bodies the view decodes: path -> (request, response) message classes."""
STREAM_MESSAGES: dict[str, tuple[type[Message], type[Message]]] = {
    path: (s.request_type, s.response_type) for path, s in ONE_SHOT_PATHS.items() if s.streaming}
"""Server-streaming one-shot RPCs: path -> (request, response) message classes, one per frame."""

def render_unary(body: bytes, message_class: type[Message], content_type: str | None = None) -> list[Line]:
    """A unary Connect body: protobuf (`application/proto`), enveloped, or JSON shown as is."""
    ctype = (content_type or "").split(";", 1)[0].strip().lower()
    if ctype == "application/json":
        try:
            return [[("text", compact(json.loads(body or b"{}")))]]
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            return [[("error", f"not JSON: {e}")], [("text", short_bytes(body))]]
    if ctype.startswith("application/connect+"):
        return list(iter_envelopes(body, message_class.FromString, {}))
    try:
        message = message_class.FromString(body)
    except DecodeError as e:
        return [[("error", f"not a {message_class.DESCRIPTOR.full_name}: {e}")], [("text", short_bytes(body))]]
    unknown: list[str] = []
    rendered = message_json(message, unknown)
    head: Line = [("highlight", message_class.DESCRIPTOR.full_name), ("text", f"  {len(body)} bytes")]
    if unknown:
        head.append(("error", f"  unknown fields: {', '.join(unknown)}"))
    return [head] + [[("text", "    "), ("text", f"{key}: {compact(value)}")] for key, value in rendered.items()]


def describe_stream(data: bytes, what: str, *, request_complete: bool | None = None) -> str:
    """The view's title line: frame count, end state, incomplete tail. A client's request stream has
    no end-stream envelope (it ends with the request itself): for one, `request_complete` says
    whether the request has ended."""
    frames, tail = connect.split_envelopes(data)
    parts = [f"{what}: {len(frames)} frame(s)"]
    if request_complete is not None:
        parts.append("ended" if request_complete else "still streaming")
    elif frames and frames[-1][0] & connect.FLAG_END_STREAM:
        parts.append("ended")
    elif tail or frames:
        parts.append("no end-stream yet")
    if tail:
        parts.append(f"{len(tail)} bytes of an incomplete frame")
    return ", ".join(parts)


# ---- mitmproxy --------------------------------------------------------------------------------------------


def _request_complete(http_message: Any) -> bool | None:
    """For a request (a client stream, no end-stream envelope): whether it has ended; None for a response."""
    if isinstance(http_message, http.Request):
        return http_message.timestamp_end is not None
    return None


def _target(flow: Any, http_message: Any, content_type: str | None) -> str | None:
    """Which body this is: 'run_sse_request' | 'run_sse_response' | 'bidi_append' | 'unary_request'
    | 'unary_response' | 'stream_request' | 'stream_response' | 'connect' | None."""
    if isinstance(http_message, http.Message) and flow is not None and getattr(flow, "request", None) is not None:
        path = flow.request.path.split("?", 1)[0]
        is_request = isinstance(http_message, http.Request)
        if path == RUN_SSE_PATH:
            return "run_sse_request" if is_request else "run_sse_response"
        if path == RUN_PATH:
            return "run_request" if is_request else "run_response"
        if path == BIDI_APPEND_PATH and is_request:
            return "bidi_append"
        if path in UNARY_MESSAGES:
            return "unary_request" if is_request else "unary_response"
        if path in STREAM_MESSAGES:
            return "stream_request" if is_request else "stream_response"
    if content_type and content_type.startswith("application/connect+"):
        return "connect"
    return None


class CursorAgentView(contentviews.Contentview):
    """mitmproxy 12's content view protocol: `prettify` gives text, the title as its first line."""

    name = VIEW_NAME
    syntax_highlight = "none"

    def prettify(self, data: bytes, metadata: contentviews.Metadata) -> str:
        title, lines = self.render(data, content_type=metadata.content_type, flow=metadata.flow,
                                   http_message=metadata.http_message)
        return "\n".join([title, *("".join(text for _, text in line) for line in lines)])

    def render_priority(self, data: bytes, metadata: contentviews.Metadata) -> float:
        target = _target(metadata.flow, metadata.http_message, metadata.content_type)
        if target is None:
            return -1.0
        return GENERIC_PRIORITY if target == "connect" else PRIORITY

    def render(self, data: bytes, *, content_type: str | None = None, flow: Any = None,
               http_message: Any = None) -> tuple[str, Iterator[Line]]:
        """(title, styled lines): the pure part, for tests and `prettify`."""
        target = _target(flow, http_message, content_type)
        if target == "bidi_append":
            return "Cursor Agent: BidiAppend", iter(render_bidi_append(data, content_type))
        complete = _request_complete(http_message)
        if target == "run_sse_request":
            return (describe_stream(data, "Cursor Agent: RunSSE request", request_complete=complete),
                    iter(render_run_sse_request(data)))
        if target == "run_request":
            if not data:
                return "Cursor Agent: Run request: no bytes yet", iter([])
            return (describe_stream(data, "Cursor Agent: Run request", request_complete=complete),
                    iter(render_client_stream(data)))
        if target == "run_response":
            if not data:
                return "Cursor Agent: Run response: no bytes yet", iter([])
            lines = iter_envelopes(data, apb.AgentServerMessage.FromString, _SERVER_ID_LABEL)
            return describe_stream(data, "Cursor Agent: Run response"), lines
        if target in ("unary_request", "unary_response"):
            path = flow.request.path.split("?", 1)[0]
            message_class = UNARY_MESSAGES[path][0 if target == "unary_request" else 1]
            title = f"Cursor: {path.rsplit('/', 1)[-1]} {target.split('_')[1]}"
            return title, iter(render_unary(data, message_class, content_type))
        if target in ("stream_request", "stream_response"):
            path = flow.request.path.split("?", 1)[0]
            message_class = STREAM_MESSAGES[path][0 if target == "stream_request" else 1]
            what = f"Cursor: {path.rsplit('/', 1)[-1]} {target.split('_')[1]}"
            if not data:
                return f"{what}: no bytes yet", iter([])
            return (describe_stream(data, what, request_complete=complete),
                    iter_envelopes(data, message_class.FromString, {}))
        if target in ("run_sse_response", None) and not data:
            return "Cursor Agent: RunSSE response: no bytes yet", iter([])
        if target == "connect":
            return describe_stream(data, "Connect stream", request_complete=complete), iter_envelopes(data, None, {})
        # RunSSE response, or picked by hand for an unknown body: read it as a server stream
        lines = iter_envelopes(data, apb.AgentServerMessage.FromString, _SERVER_ID_LABEL)
        return describe_stream(data, "Cursor Agent: RunSSE response"), lines


class ContentViewRegistrar:
    """Adds the view while the addon is loaded. mitmproxy 12's registry replaces a view of the same name
    (a reloaded script) and has no removal, so `done` leaves it: the view holds no addon state."""

    def __init__(self) -> None:
        self.view = CursorAgentView()

    def load(self, loader) -> None:
        contentviews.add(self.view)
