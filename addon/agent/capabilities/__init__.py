"""The agent's capabilities, side by side: each a `turn_base.TurnHooks` subclass in its own module,
importing only the turn's parts below it, never the loop or each other.

CAPABILITIES is the one ordered list. For every run the loop makes each capability's hooks and
awaits them in this order at each point (before the action, before a provider call, after a tool
round, after the turn's final answer); actions.py routes the ConversationAction branches each one
names to it.
"""

from __future__ import annotations

from .. import actions
from ..turn_base import TurnHooks
from .budget import Budget
from .compaction import Compaction
from .mcp import McpCapability
from .queued import Queue
from .subagents import Subagents

CAPABILITIES: list[type[TurnHooks]] = [
    Budget,  # before a call: a team user over their monthly budget ends the run (first: compaction calls too)
    Compaction,  # before a call: compact a prompt that would not fit; after an overflow: compact once, retry
    Queue,  # before a call: deliver messages sent mid-run; at turn end: run them as the next turn
    Subagents,  # before the action: a child's binding and tool set (before MCP: it decides MCP's tools)
    McpCapability,  # before the action: the request's MCP tools, offered directly when few
]

RUN_ACTIONS = actions.handled_at_start(CAPABILITIES)
"""Every ConversationAction branch a run can start with."""
MID_RUN_ACTIONS = actions.handled_mid_run(CAPABILITIES)
"""Every branch a running run takes (cancel_action besides: the run's own)."""
