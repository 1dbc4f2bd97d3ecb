"""A team user's monthly budget, checked before every provider call (team.py says how much is left).

The turn also checks it before it claims the conversation, so a run over budget changes nothing; this
hook stops a long run between its provider calls once the budget is gone.
"""

from __future__ import annotations

from ..turn_base import TurnHooks, TurnState


class Budget(TurnHooks):
    def __init__(self, turn: TurnState) -> None:
        pass

    async def before_model_call(self, turn: TurnState) -> None:
        await turn.svc.team.check_budget(turn.svc.store, turn.run.user, turn.svc.clock.wall_ms)
