"""Upstream ordering for one request: BidiAppends by `append_seqno`, not by arrival.

Appends may arrive concurrently and out of order. `push` returns the messages that are now
deliverable in seqno order; duplicates (already delivered or already held) are dropped; early
ones are held until the gap fills, up to `max_held` (then the client is misbehaving).
"""

from __future__ import annotations

from typing import Generic, TypeVar

from ..wire.errors import ProtocolError

T = TypeVar("T")


class Inbox(Generic[T]):
    def __init__(self, *, first_seqno: int = 0, max_held: int = 4096) -> None:
        self.next_seqno = first_seqno
        self.max_held = max_held
        self._held: dict[int, T] = {}
        self.duplicates = 0

    @property
    def held(self) -> int:
        return len(self._held)

    def awaits(self, seqno: int) -> bool:
        """Whether `seqno` is still to come (neither delivered nor held)."""
        return seqno >= self.next_seqno and seqno not in self._held

    def push(self, seqno: int, item: T) -> list[T]:
        if seqno < self.next_seqno or seqno in self._held:
            self.duplicates += 1
            return []
        if len(self._held) >= self.max_held:
            raise ProtocolError(f"more than {self.max_held} appends held waiting for seqno {self.next_seqno}")
        self._held[seqno] = item
        ready: list[T] = []
        while self.next_seqno in self._held:
            ready.append(self._held.pop(self.next_seqno))
            self.next_seqno += 1
        return ready
