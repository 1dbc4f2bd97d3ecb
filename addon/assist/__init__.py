"""One-shot AI services beside the agent engine (DESIGN §9): Tab, commit messages, branch names, titles,
terminal completion, Cmd-K. No conversation, no tools, no checkpoints: each service is a function of
(request message, config) to provider call(s) and response messages. They use the provider layer
(addon/providers/) and never import the agent or mitmproxy; addon/transports/one_shot.py answers them.

`SERVICES` is the one, explicit list the transport serves (nothing registers itself on import).
"""

from __future__ import annotations

from .call import CallContext, OneShot
from . import cmdk, commit, names, terminal, titles  # noqa: E402 (after .call, which they import)
from .tab import SERVICES as TAB  # noqa: E402

SERVICES: tuple[OneShot, ...] = (
    *TAB, *commit.SERVICES, *names.SERVICES, *titles.SERVICES, *terminal.SERVICES, *cmdk.SERVICES,
)
"""Every one-shot RPC cursor-byok can answer, in no particular order (paths are unique)."""

__all__ = ["SERVICES", "CallContext", "OneShot"]
