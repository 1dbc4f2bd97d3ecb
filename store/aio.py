"""Async facade: every store call runs on one dedicated worker thread, in submission order.

SQLite writes (fsync with synchronous=FULL) and hashing of big blobs never run on mitmproxy's
event loop; one thread also means one connection and no write contention inside the process.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, TypeVar

from .store import Store

T = TypeVar("T")


class AsyncStore:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="byok-store")

    @classmethod
    async def open(cls, path: str | Path, **kwargs: Any) -> "AsyncStore":
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="byok-store")
        store = await asyncio.get_running_loop().run_in_executor(
            executor, functools.partial(Store.open, path, **kwargs)
        )
        self = cls.__new__(cls)
        self.store = store
        self._executor = executor
        return self

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run `fn(store, *args, **kwargs)` on the store thread."""
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
