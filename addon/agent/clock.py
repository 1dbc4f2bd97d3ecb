"""Time and id sources, injectable so scenario captures are reproducible.

Runtime messages carry a timestamp and blob ids hash it, so a capture can only be regenerated
byte-for-byte with a fixed clock and a deterministic id source (`byok_deterministic` option).
"""

from __future__ import annotations

import itertools
import time
import uuid
from datetime import datetime, timezone


class Clock:
    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.wall_ms() / 1000, tz=timezone.utc)


class FixedClock(Clock):
    """Wall time starts at `start_ms` and advances 1 ms per reading; monotonic time advances 1 ms
    per reading too, so measured durations (thinking time) are reproducible. Timeouts and
    heartbeats keep using real time (asyncio's clock)."""

    def __init__(self, start_ms: int = 1_767_225_600_000) -> None:  # 2026-01-01T00:00:00Z
        self._ticks = itertools.count(start_ms)
        self._mono = itertools.count(1)

    def wall_ms(self) -> int:
        return next(self._ticks)

    def monotonic(self) -> float:
        return next(self._mono) / 1000


class Ids:
    def new(self, prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4()}"


class CountingIds(Ids):
    def __init__(self) -> None:
        self._counters: dict[str, itertools.count] = {}

    def new(self, prefix: str) -> str:
        counter = self._counters.setdefault(prefix, itertools.count(1))
        return f"{prefix}-{next(counter)}"
