"""Waiting on observable state with a deadline: the only way tests synchronise (never a fixed sleep).

`wait_until` polls a predicate from sync code, `until` from async code; both return the predicate's
first truthy value and fail with `what` when the deadline passes. The poll interval is only how often
the state is looked at, never a guess of how long something takes.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")
POLL_S = 0.02


def wait_until(predicate: Callable[[], T], what: str, timeout: float = 10.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(POLL_S)


async def until(predicate: Callable[[], T] | Callable[[], Awaitable[T]], what: str, timeout: float = 10.0) -> T:
    """`predicate` may be a coroutine function (it is awaited each time)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(POLL_S)


def log_has(proxy, text: str, since: int = 0) -> bool:
    """Whether the proxy's log (from offset `since`) contains `text`."""
    return text in proxy.log()[since:]
