"""What the turn's parts share, so none of them imports another's module for a type.

    loop.Turn          the turn lifecycle; implements TurnState
    model_call         one provider call            -> CallResult
    tool_round         one round of tool calls
    cards              live tool cards while the model streams
    actions            which handler each ConversationAction gets
    capabilities/      the capabilities, side by side; their __init__ is the one ordered list

A capability (compaction, queued messages, subagents, ...) is a `TurnHooks` subclass: the loop
calls each capability's hooks at its points, and actions.py routes the ConversationAction branches
a capability names in `run_actions` / `mid_run_actions` to it. Nothing registers itself on import.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import httpx

from byok.prompt.assets import ModeAssets, PromptAssets
from byok.store import AsyncStore, NewMessage

from .clock import Clock, Ids
from .warm import WarmCache
from ..providers.config import ModelRoute
from ..providers.io import StreamLimits
from .team import Team

if TYPE_CHECKING:
    from byok.proto import agent_pb2 as apb

    from .cursor import projection as proj
    from ..wire.errors import RunError
    from .cursor.tools.base import RunToolContext, ToolDef
    from .cursor.tools.dispatch import ExecTable
    from ..providers.base import Done
    from .run import Run
    from ..providers.transcript import AssistantItem, ToolSpec
    from .web import WebTools


@dataclass
class Services:
    """What a turn needs from the process; built once by the backend addon."""

    store: AsyncStore
    lookup_model: Callable[[str], ModelRoute | None]
    prompts: PromptAssets
    http: httpx.AsyncClient
    clock: Clock = field(default_factory=Clock)
    ids: Ids = field(default_factory=Ids)
    verbose_llm: bool = False
    provider_limits: StreamLimits = field(default_factory=StreamLimits)
    claim_conversation: Callable[["Run", str], None] = lambda run, conversation_id: None
    web: Callable[[], "WebTools"] = lambda: _no_web()
    """The web backends as the providers file and options configure them now (web/__init__.py)."""
    replica: str | None = None
    """This proxy process's name in a team deployment (runs.replica); None for the single-user proxy."""
    team: Team = field(default_factory=Team)
    """The team file's answers (users' models, keys, budgets); without one, everyone may do anything."""
    user_models: Callable[[], list[ModelRoute]] = lambda: []
    """Every model of the providers file (subagent model choice by public id or display name)."""
    warm: WarmCache = field(default_factory=WarmCache)
    """Each live conversation's projection between its turns (byok_warm_cache_mib)."""
    live: dict = field(default_factory=dict)
    """Process-wide state capabilities share between runs, by capability name (e.g. the subagent
    registry that links a child run to the parent call that launched it)."""


def _no_web() -> "WebTools":
    from .web import WebTools

    return WebTools()


@dataclass
class CallResult:
    """One finished provider call: the assistant item it produced and how it ended."""

    item: "AssistantItem"
    done: "Done"
    usage: dict | None
    thinking_ms: int | None
    model_call_id: str
    cards: object = None


class TurnHooks:
    """A capability's entry points. Each default does nothing; override what the capability needs.
    The loop awaits the hooks of every capability in the order of capabilities/__init__.py."""

    run_actions: ClassVar[Mapping[str, Callable[[Any, "TurnState"], Awaitable[bool]]]] = {}
    """ConversationAction branches this capability starts a run with: branch -> method(self, turn),
    True when the turn is complete without a model call."""
    mid_run_actions: ClassVar[Mapping[str, Callable[[Any, "TurnState", "apb.ConversationAction"], None]]] = {}
    """Branches it handles while a run is going: branch -> method(self, turn, action); must not
    block (start a task if needed)."""

    async def before_action(self, turn: "TurnState") -> None:
        """After the run claimed its conversation, before its base is loaded and its action starts
        (e.g. choose the run's tools: a read-only child, dynamic MCP tools)."""

    async def before_model_call(self, turn: "TurnState") -> None:
        """Just before a provider request is built (e.g. compact the history, deliver queued input)."""

    async def on_call_failed(self, turn: "TurnState", error: "RunError") -> bool:
        """A provider call raised `error`. True = call the model again (the before_model_call hooks
        run first); the first hook that says so wins. Default: the run ends with the error."""
        return False

    async def after_round(self, turn: "TurnState") -> None:
        """After a tool round settled, before the next provider call."""

    async def after_turn(self, turn: "TurnState") -> bool:
        """After the final answer was settled. True = another turn follows in the same stream (the
        loop calls the model again on the history as it now is)."""
        return False


class TurnState(Protocol):
    """What model_call, tool_round and the capabilities read and call on the running turn."""

    svc: Services
    request: "apb.AgentRunRequest"
    run: "Run"
    route: ModelRoute
    mode: ModeAssets
    tools: "tuple[ToolSpec, ...]"
    """The mode's tools this run offers (minus unconfigured web tools and what the request turns off),
    in order: the stable prefix of the provider's tool list."""
    system_prompt: str
    conversation_id: str
    history: "proj.Projector"
    """The history at `revision`: its provider view, its checkpoint, what it holds (event ids,
    todos, the next prompt's size); extended as the turn appends."""
    revision: int | None
    usage_totals: dict
    call_index: int
    tool_context: "RunToolContext"
    offered_tools: dict[str, "ToolDef"]
    extra_action_context: list[str]
    """Blocks capabilities add to the run's runtime message (ACTION_CONTEXT), set before its action."""
    dynamic_tools: tuple["ToolSpec", ...]
    """Tools added after them for this run (MCP tools offered directly); counted as `mcp`."""
    execs: "ExecTable"
    prefetched: dict
    hooks: list[TurnHooks]

    async def _begin_user_turn(self, action: "apb.UserMessageAction | None" = None, *,
                               action_context: "Sequence[str]" = (), event_id: str | None = None,
                               payload_extra: dict | None = None) -> None: ...

    async def _resume(self) -> bool: ...

    async def _project(self, pending: "proj.Pending | None" = None) -> "proj.Projection": ...

    async def _publish(self, *projections: "proj.Projection", revision: int | None = None) -> None: ...

    async def _append(self, new: list[NewMessage], *, blobs: Sequence = ()) -> None: ...

    async def _complete_call(self, round_id: str, call_index: int, new: list[NewMessage], *,
                             is_error: bool) -> None: ...

    async def _initial_checkpoint(self) -> None: ...

    def use_tools(self, tools, implementations: dict[str, "ToolDef"], dynamic=()) -> None: ...

    def _cancel_initial_publish(self) -> None: ...
