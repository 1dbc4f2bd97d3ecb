"""The warm conversations: each live conversation's projection, kept between its turns.

A turn takes its conversation's projector when the client continues from the revision the last run
left (the warm path: it reads only what it appends, renders only what it adds) and gives it back
when it ends. A revision is immutable, so a projector is valid for exactly the revision it was
left at: any other base (a restart, another run or replica fenced this one off, an edit that
branches, an eviction) finds nothing here and folds the history from the store (the cold path,
which gives the same checkpoint byte for byte).

Memory is bounded: conversations are kept least recently used first out, within a budget of the
stored history they hold (`Projector.size`, the JSON bytes folded in; byok_warm_cache_mib).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from .cursor.projection import Projector


@dataclass
class WarmCache:
    budget: int = 256 << 20
    """Stored history bytes kept warm, over all conversations; 0 keeps none."""
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    _kept: OrderedDict[str, tuple[int | None, Projector]] = field(default_factory=OrderedDict)
    _size: int = 0

    def take(self, conversation_id: str, revision: int | None) -> Projector | None:
        """The conversation's projector if it was left at `revision` (the caller owns it now)."""
        kept = self._kept.pop(conversation_id, None)
        if kept is not None:
            self._size -= kept[1].size
        if kept is None or kept[0] != revision:
            self.misses += 1
            return None
        self.hits += 1
        return kept[1]

    def put(self, conversation_id: str, revision: int | None, projector: Projector) -> None:
        """Keep a projector left at `revision`: the most recently used, the last evicted."""
        old = self._kept.pop(conversation_id, None)
        if old is not None:
            self._size -= old[1].size
        if projector.size > self.budget:
            return
        projector.release()
        self._kept[conversation_id] = (revision, projector)
        self._size += projector.size
        while self._size > self.budget:
            _, (_, evicted) = self._kept.popitem(last=False)
            self._size -= evicted.size
            self.evictions += 1

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def size(self) -> int:
        """Stored history bytes kept."""
        return self._size
