"""The two ways a simulated launch fails, as SGLang fails."""

from __future__ import annotations


class ResolveFailure(Exception):
    """Raised in `ServerArgs.resolve_once()`: SGLang prints the traceback and exits 1."""

    def __init__(self, traceback: str) -> None:
        super().__init__(traceback.rstrip().splitlines()[-1])
        self.traceback = traceback


class SchedulerFailure(Exception):
    """Raised in a scheduler process: `Scheduler hit an exception: <traceback>`, then the launcher
    SIGKILLs its tree and itself (exit 137). `before` are log lines the rank printed first."""

    def __init__(self, traceback: str, rank: int = 0, before: tuple[str, ...] = ()) -> None:
        super().__init__(traceback.rstrip().splitlines()[-1])
        self.traceback = traceback
        self.rank = rank
        self.before = before
