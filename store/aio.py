"""Async facade: every store call runs on a worker thread, never on mitmproxy's event loop.

SQLite: one thread, so one connection, calls in submission order and no write contention inside the
process (writes fsync with synchronous=FULL). PostgreSQL: as many threads as the pool has
connections, so one slow round trip does not queue every run behind it; callers that need an order
await each call (the engine does), and the row lock of the revision fence orders writers of one
conversation, across processes too.
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


def _workers(target: object) -> int:
    return dbmod.POOL_MAX_SIZE if is_postgres_url(target) else 1


class AsyncStore:
    def __init__(self, store: Store) -> None:
        self.store = store
        workers = dbmod.POOL_MAX_SIZE if store.dialect == "postgresql" else 1
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="byok-store")

    @classmethod
    async def open(cls, target: str | Path, **kwargs: Any) -> "AsyncStore":
        """`target`: a SQLite path or a postgresql:// URL."""
        executor = ThreadPoolExecutor(max_workers=_workers(target), thread_name_prefix="byok-store")
        store = await asyncio.get_running_loop().run_in_executor(
            executor, functools.partial(Store.open, target, **kwargs)
        )
        self = cls.__new__(cls)
        self.store = store
        self._executor = executor
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

        async def bound(*args: Any, **kwargs: Any) -> Any:
            return await self.call(method, *args, **kwargs)

        return bound

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self.store.close)
        self._executor.shutdown(wait=True)
