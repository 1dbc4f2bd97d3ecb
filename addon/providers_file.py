"""The providers file inside mitmproxy: follows the `byok_config` option and reloads the file.

Owns one `ProvidersFile` (byok.providers.config) that the router (lookup by public id) and the model
list injector (the picker) share. Reloads happen on access (one `stat`) and, so edits are reported
promptly, from a polling task started in `running`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from mitmproxy import ctx
from mitmproxy.utils.asyncio_utils import create_task

from byok.providers.config import ProvidersFile


class ProvidersFileAddon:
    """Points the shared `ProvidersFile` at `byok_config` (declared by options.Options) and keeps it fresh."""

    def __init__(self, providers: ProvidersFile | None = None) -> None:
        self.providers = providers or ProvidersFile()
        # docs/providers.md: a broken file at start leaves the proxy running with no user models, but
        # mitmproxy exits on any error logged while it starts; so until `running`, a warning
        self.providers.error_level = logging.WARNING
        self._task: asyncio.Task | None = None

    def load(self, loader) -> None:
        loader.add_option(
            "byok_config_poll_ms", int, 2000,
            "How often to check the providers file and the team file for changes, in milliseconds "
            "(0: only when a model list or a run needs them).",
        )

    def configure(self, updated: set[str]) -> None:
        if "byok_config" in updated and hasattr(ctx.options, "byok_config"):
            self.providers.set_path(ctx.options.byok_config or None)
        if "byok_config_poll_ms" in updated and self._task is not None:
            self._restart()

    async def running(self) -> None:
        self.configure({"byok_config"})  # no-op when configure already saw the option
        self.providers.error_level = logging.ERROR
        self._restart()

    async def done(self) -> None:
        await self._stop()

    def _restart(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        interval_ms = ctx.options.byok_config_poll_ms
        if interval_ms > 0:
            # keep the reference: a bare task may be garbage-collected mid-flight
            self._task = create_task(self.providers.watch(interval_ms / 1000), keep_ref=True,
                                     name="byok providers file watcher")

    async def _stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
