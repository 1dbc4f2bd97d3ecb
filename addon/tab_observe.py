"""Observe mode for Tab: what Cursor's own StreamCpp answers say about the line conventions.

`cursor_position.line` may count lines of `contents` or of the whole file (PROTOCOL 11.1; the facts
do not say). Cursor's own answer replaces a range that holds the cursor's line, so in observe mode
each StreamCpp is read whole (request) and teed (response, passed on unchanged as it streams), and
one log line says which reading the answer fits:

    Tab observed: cursor 12:8, contents_start_at_line 40, 30 lines, line ending '\\n'; Cursor replaced
    53-53: cursor_position.line counts lines of the contents

Nothing is changed or answered. The numbers (never contents) also go to the store's `tab_positions`
(with `byok_record`), which `cursor-byok verify` checks (assumption `tab.positions`).
"""

from __future__ import annotations

import logging

from google.protobuf.message import DecodeError
from mitmproxy import ctx, http

from byok.assist.tab import STREAM_CPP, position_row
from byok.assist.tab_edit import cursor_file_lines
from byok.proto import cpp_pb2 as cpb
from byok.wire import connect

from .models import is_cursor_host

log = logging.getLogger("byok.tab")
MARK = "byok_tab_observe"


def verdict(request: cpb.StreamCppRequest, frames: list[cpb.StreamCppResponse]) -> str:
    """One log line: the request's cursor and window, the range Cursor replaced, the reading it fits."""
    f = request.current_file
    head = (f"Tab observed: cursor {f.cursor_position.line}:{f.cursor_position.column}, contents_start_at_line "
            f"{f.contents_start_at_line}, {f.contents.count(chr(10)) + 1 if f.contents else 0} lines"
            + (f", line ending {f.line_ending!r}" if f.HasField("line_ending") else ""))
    ranges = [fr.range_to_replace for fr in frames if fr.HasField("range_to_replace")]
    if not ranges:
        return head + "; Cursor sent no range (no suggestion)"
    r = ranges[0]
    fits = [name for name, line in cursor_file_lines(f).items()
            if r.start_line_number <= line <= r.end_line_number_inclusive]
    readings = {"contents": "lines of the contents", "file": "lines of the whole file"}
    said = ("both readings fit (contents_start_at_line is 0)" if len(fits) == 2
            else f"cursor_position.line counts {readings[fits[0]]}" if fits
            else "neither reading puts the cursor in the range")
    return f"{head}; Cursor replaced {r.start_line_number}-{r.end_line_number_inclusive}: {said}"


class TabObserver:
    def __init__(self, backend=None) -> None:
        self.backend = backend
        """Its store gets a `tab_positions` row per observed StreamCpp (None: the log line only)."""

    def _ours(self, flow: http.HTTPFlow) -> bool:
        return (getattr(ctx.options, "byok_mode", "intercept") == "observe"
                and flow.request.path.split("?", 1)[0] == STREAM_CPP
                and (is_cursor_host(flow.request.pretty_host) or is_cursor_host(flow.request.host)))

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if self._ours(flow):
            flow.request.stream = False  # one small message: read whole, passed on unchanged
            flow.metadata[MARK] = bytearray()

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        body = flow.metadata.get(MARK)
        if body is None or flow.response is None:
            return

        def tee(chunk: bytes) -> bytes:
            body.extend(chunk)
            return chunk

        flow.response.stream = tee

    async def response(self, flow: http.HTTPFlow) -> None:
        body = flow.metadata.pop(MARK, None)
        if body is None:
            return
        try:
            requests = [f for f in connect.decode_all(flow.request.get_content(strict=False) or b"") if not f.end_stream]
            request = cpb.StreamCppRequest.FromString(requests[0].payload)
            answers = [cpb.StreamCppResponse.FromString(f.payload)
                       for f in connect.EnvelopeDecoder().feed(bytes(body)) if not f.end_stream]
        except (connect.ConnectError, DecodeError, IndexError, ValueError) as e:
            log.info("Tab observed: a StreamCpp that does not decode (%s)", e)
            return
        log.info("%s", verdict(request, answers))
        store = getattr(self.backend, "store", None)
        if store is not None and getattr(getattr(self.backend, "settings", None), "record", True):
            row = position_row(flow.metadata.get("byok_request_id") or flow.request.headers.get("x-request-id", "-"),
                               request.current_file, flow.request.headers, "observed")
            ranges = [a.range_to_replace for a in answers if a.HasField("range_to_replace")]
            if ranges:
                row.update(range_start=ranges[0].start_line_number, range_end=ranges[0].end_line_number_inclusive)
            try:
                await store.record_tab_position(row)
            except Exception as e:  # the observation is a by-product: it never fails the flow
                log.warning("Tab observation not recorded: %s", e)
