"""Recording: every Connect frame of the agent RPCs to the store, and streamed bodies kept on flows.

Frames are buffered in memory and written in batches by one background task, so recording never
puts a disk write on the path of a frame. A streamed RunSSE body is teed: mitmweb sees it grow while
the stream runs (throttled updates) and the flow keeps it afterwards (also in `-w` flow files).
"""

from __future__ import annotations

import asyncio
import logging
import time

from mitmproxy import ctx, http
from mitmproxy.hooks import UpdateHook

log = logging.getLogger("byok.recorder")

LIVE_UPDATE_INTERVAL_S = 0.25


class Recorder:
    def __init__(self) -> None:
        self.store = None
        self._rows: list[dict] = []
        self._seq: dict[tuple[str, str], int] = {}
        self._task: asyncio.Task | None = None
        self._tees: dict[str, bytearray] = {}

    def attach(self, store) -> None:
        self.store = store
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._flush_forever(), name="byok recorder")

    # ---- frames -> store ---------------------------------------------------------------------------

    def sink_for(self, request_id: str):
        def sink(direction: str, kind: str, payload: bytes, flags: int) -> None:
            key = (request_id, direction)
            seq = self._seq.get(key, 0)
            self._seq[key] = seq + 1
            self._rows.append({
                "request_id": request_id, "conversation_id": None, "seq": seq, "direction": direction,
                "ts_ms": time.time_ns() // 1_000_000, "kind": kind, "flags": flags, "data": payload,
            })

        return sink

    async def _flush_forever(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            await self.flush()

    async def flush(self) -> None:
        if not self._rows or self.store is None:
            return
        rows, self._rows = self._rows, []
        try:
            await self.store.record_frames(rows)
        except Exception:
            log.exception("could not record %d frames", len(rows))

    async def done(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        await self.flush()

    # ---- streamed bodies on flows ---------------------------------------------------------------------

    def tee_response(self, flow: http.HTTPFlow):
        buf = self._tees[flow.id] = bytearray()
        last = [0.0]

        def tee(chunk: bytes) -> bytes:
            buf.extend(chunk)
            now = time.monotonic()
            if chunk and now - last[0] >= LIVE_UPDATE_INTERVAL_S:
                last[0] = now
                flow.response.data.content = bytes(buf)  # partial body, for mitmweb while streaming
                ctx.master.addons.trigger(UpdateHook([flow]))
            return chunk

        return tee

    def response(self, flow: http.HTTPFlow) -> None:
        self._keep_body(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._keep_body(flow)

    def _keep_body(self, flow: http.HTTPFlow) -> None:
        buf = self._tees.pop(flow.id, None)
        if buf is not None and flow.response is not None:
            flow.response.data.content = bytes(buf)  # already streamed: kept for display and -w files
