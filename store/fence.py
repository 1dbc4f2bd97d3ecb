"""Fences across replicas: a run claimed on one proxy process ends the older run of its conversation
on whichever process runs it, at once.

`Store.claim_run` sends a PostgreSQL NOTIFY when it displaces a run (delivered when the claim
commits). Every replica LISTENs with one async psycopg connection on its event loop (no thread, no
blocking) and hands each displaced request id to `on_fenced`; the runtime cancels that run if it is
one of its own. The revision fence in the database stays the guarantee: if a notification is lost
(the listening connection dropped), the older run still fails at its next write (StaleRun).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from .sql import redact_url
from .store import FENCE_CHANNEL

log = logging.getLogger("byok.fence")

RECONNECT_S = (0.5, 1, 2, 5, 10)


class FenceListener:
    def __init__(self, url: str, on_fenced: Callable[[str, str], None]) -> None:
        self.url = url
        self.on_fenced = on_fenced
        """(displaced request id, request id that displaced it) -> None; called on the event loop."""
        self.listening = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="byok fence listener")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        import psycopg

        failures = 0
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {FENCE_CHANNEL}")
                    if failures:
                        log.info("fence listener reconnected to %s", redact_url(self.url))
                    failures = 0
                    self.listening.set()
                    async for note in conn.notifies():
                        self._deliver(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the server went away: fences still hold at the next write meanwhile
                self.listening.clear()
                delay = RECONNECT_S[min(failures, len(RECONNECT_S) - 1)]
                failures += 1
                log.warning("fence listener lost PostgreSQL (%s); retrying in %g s (older runs are still fenced "
                            "at their next write)", e, delay)
                await asyncio.sleep(delay)

    def _deliver(self, payload: str) -> None:
        try:
            note = json.loads(payload)
            fenced, by = note["fenced"], note["by"]
        except (ValueError, KeyError, TypeError):
            log.warning("fence listener: unreadable notification %r", payload[:200])
            return
        try:
            self.on_fenced(fenced, by)
        except Exception:
            log.exception("fence listener: handling the fence of %s failed", fenced)
