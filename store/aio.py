"""Async facade: every store call runs on a worker thread, never on mitmproxy's event loop.

SQLite: one writer thread, so one connection, writes in submission order and no write contention
inside the process (writes fsync with synchronous=FULL); and one reader thread with a connection of
its own (`READS`), which WAL lets read while a write commits: a run's reads on its way to the
provider never queue behind another run's (or the recorder's) fsync. A read sees every write the
caller awaited. PostgreSQL: as many threads as the pool has connections, so one slow round trip
does not queue every run behind it; callers that need an order await each call (the engine does),
and the row lock of the revision fence orders writers of one conversation, across processes too.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, TypeVar

from . import db as dbmod
from .sql import is_postgres_url
from .store import Store

T = TypeVar("T")

READS = frozenset({
    "get_blob", "get_blobs", "conversation", "run", "run_replica", "runtime_event", "messages", "messages_since",
    "revision_conversation", "find_published", "find_anchor", "queued_inputs", "subagent_of_call", "head_revision",
    "head_messages", "next_frame_seq", "usage_since", "count",
})
"""Store methods that only read: on SQLite they run on the reader connection."""


def _workers(target: object) -> int:
    return dbmod.POOL_MAX_SIZE if is_postgres_url(target) else 1


class AsyncStore:
    def __init__(self, store: Store, reader: Store | None = None) -> None:
        self.store = store
        workers = dbmod.POOL_MAX_SIZE if store.dialect == "postgresql" else 1
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="byok-store")
        self._reader = reader
        self._read_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="byok-store-read") \
            if reader is not None else None

    @classmethod
    async def open(cls, target: str | Path, **kwargs: Any) -> "AsyncStore":
        """`target`: a SQLite path or a postgresql:// URL."""
        executor = ThreadPoolExecutor(max_workers=_workers(target), thread_name_prefix="byok-store")
        loop = asyncio.get_running_loop()
        store = await loop.run_in_executor(executor, functools.partial(Store.open, target, **kwargs))
        self = cls.__new__(cls)
        self.store = store
        self._executor = executor
        self._reader = self._read_executor = None
        if store.dialect == "sqlite" and str(target) != ":memory:":
            self._read_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="byok-store-read")
            self._reader = await loop.run_in_executor(
                self._read_executor, lambda: Store(dbmod.connect_sqlite_reader(target), clock_ms=store.clock_ms))
        return self

    @property
    def dialect(self) -> str:
        return self.store.dialect

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run `fn(store, *args, **kwargs)` on a store thread."""
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(fn, self.store, *args, **kwargs)
        )

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(Store, name)
        if not callable(method):
            raise AttributeError(name)
        if name in READS and self._reader is not None:
            reader, executor = self._reader, self._read_executor

            async def read(*args: Any, **kwargs: Any) -> Any:
                return await asyncio.get_running_loop().run_in_executor(
                    executor, functools.partial(method, reader, *args, **kwargs))

            return read

        async def bound(*args: Any, **kwargs: Any) -> Any:
            return await self.call(method, *args, **kwargs)

        return bound

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        if self._reader is not None:
            await loop.run_in_executor(self._read_executor, self._reader.close)
            self._read_executor.shutdown(wait=True)
        await loop.run_in_executor(self._executor, self.store.close)
        self._executor.shutdown(wait=True)
