"""The agent capabilities the loop calls at its named points (`turn_base.TurnHooks`).

Each entry makes one capability's hooks for a turn; the loop awaits them in this order at each
point (before a provider call, after a tool round, after the turn's final answer).
"""

from __future__ import annotations

from collections.abc import Callable

from .budget import Budget
from .compaction import Compaction
from .queued import Queue
from .turn_base import TurnHooks, TurnState

CAPABILITIES: list[Callable[[TurnState], TurnHooks]] = [
    Budget,  # before a call: a team user over their monthly budget ends the run (first: compaction calls too)
    Compaction,  # before a call: compact a prompt that would not fit; after an overflow: compact once, retry
    Queue,  # before a call: deliver messages sent mid-run; at turn end: run them as the next turn
]

# Capability modules append themselves (and their ConversationAction branches) when imported.
from . import subagents, mcp  # noqa: E402,F401  (subagents first: a child's tool set decides MCP's)
