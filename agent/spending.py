"""What a run has spent against its Budget: launches, wall time, GPU-minutes, LLM tokens."""

from __future__ import annotations

import time

from specdoctor.agent.events import BudgetEvent
from specdoctor.agent.policy import Budget
from specdoctor.agent.results import BudgetSpent
from specdoctor.tools.command import LaunchCommand
from specdoctor.tools.outcome import Outcome


class Spending:
    """Counts what the run used; `check` raises BudgetSpent once any budget is gone."""

    def __init__(self, budget: Budget, token_budget: int | None = None) -> None:
        self.budget, self.token_budget = budget, token_budget
        self.started = time.monotonic()
        self.launches = 0
        self.gpu_seconds = 0.0
        self.tokens = 0

    @property
    def deadline(self) -> float:
        """The monotonic time the wall budget runs out."""
        return self.started + self.budget.wall_time_s

    def wall_left(self) -> float:
        return self.deadline - time.monotonic()

    def event(self) -> BudgetEvent:
        used = time.monotonic() - self.started
        return BudgetEvent(
            launches_used=self.launches,
            launches_left=self.budget.max_launches - self.launches,
            wall_s_used=round(used, 2),
            wall_s_left=round(self.budget.wall_time_s - used, 2),
            tokens_used=self.tokens,
            tokens_left=None if self.token_budget is None else max(self.token_budget - self.tokens, 0),
        )

    def check(self, last: LaunchCommand | None) -> None:
        b = self.budget
        if self.launches >= b.max_launches:
            raise BudgetSpent(f"{b.max_launches} launches used and the server is still not healthy", last)
        if self.wall_left() <= 0:
            raise BudgetSpent(f"the wall-time budget ({b.wall_time_s:.0f} s) ran out", last)
        if b.gpu_minutes is not None and self.gpu_seconds / 60 >= b.gpu_minutes:
            raise BudgetSpent(f"the GPU-minutes budget ({b.gpu_minutes}) ran out", last)

    def check_wall_after(self, outcome: Outcome, command: LaunchCommand) -> None:
        """A launch that ended unhealthy after the wall budget ran out is the last one."""
        if self.wall_left() <= 0:
            raise BudgetSpent(
                f"the wall-time budget ({self.budget.wall_time_s:.0f} s) ran out before the server was "
                f"healthy (last: {outcome.detail})",
                command,
            )

    def launched(self, seconds: float, gpus: int) -> None:
        self.gpu_seconds += seconds * max(gpus, 1)

    def restart(self) -> None:
        """Budgets are for reaching healthy: a crash after a healthy stretch starts launches and time afresh
        (the launch that crashed counts as the first)."""
        self.started, self.launches = time.monotonic(), 1
