"""How a run ends: a typed result, and the exceptions that carry each way out of the loop with its message."""

from __future__ import annotations

from pydantic import BaseModel, Field

from specdoctor.agent import exitcodes
from specdoctor.agent.events import ResultKind
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.command import LaunchCommand
from specdoctor.tools.outcome import Outcome

_EXIT = {
    "healthy": exitcodes.OK,
    "stopped": exitcodes.STOPPED,
    "budget": exitcodes.BUDGET,
    "interrupted": exitcodes.INTERRUPTED,
    "declined": exitcodes.INTERRUPTED,
}


class Attempt(BaseModel):
    number: int
    command: str
    outcome: Outcome | None = None
    decision: Decision | None = None
    decided_in_s: float | None = Field(None, description="From the end of the launch to the decision.")


class LoopResult(BaseModel):
    kind: ResultKind
    message: str
    final_command: str | None = None
    attempts: list[Attempt] = []
    url: str | None = None
    pid: int | None = None
    log_path: str | None = None

    @property
    def exit_code(self) -> int:
        return _EXIT[self.kind]


class LoopExit(Exception):
    """A way out of the loop; `command` is the last command (None: the message says it all)."""

    kind: ResultKind

    def __init__(self, message: str, command: LaunchCommand | None = None, **extra: str | int | None) -> None:
        super().__init__(message)
        self.message, self.command, self.extra = message, command, extra

    def result(self, attempts: list[Attempt]) -> LoopResult:
        return LoopResult(
            kind=self.kind,
            message=self.message,
            final_command=self.command.shell() if self.command else None,
            attempts=attempts,
            **self.extra,  # type: ignore[arg-type]
        )


class Healthy(LoopExit):
    """The server is healthy (and stopped, or left running, as the mode says)."""

    kind = "healthy"


class Stopped(LoopExit):
    """No flag change is left to try, a change was refused, or the engine cannot be started."""

    kind = "stopped"


class BudgetSpent(LoopExit):
    """Launches, wall time or GPU-minutes ran out before the server was healthy."""

    kind = "budget"


class Interrupted(LoopExit):
    """Ctrl-C or SIGTERM: the engine was stopped and the transcript closed."""

    kind = "interrupted"


class Declined(LoopExit):
    """The person at a `fix` prompt quit: the change was declined and nothing more is launched."""

    kind = "declined"
