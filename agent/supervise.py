"""After the server is proven healthy: stop it, leave it running, or watch it until it dies."""

from __future__ import annotations

import time

from specdoctor.agent.events import DetachEvent, EventBus, OutcomeEvent, SuperviseEvent
from specdoctor.agent.launcher import Engine
from specdoctor.agent.policy import Mode
from specdoctor.agent.results import Attempt, Healthy, Stopped
from specdoctor.tools.command import LaunchCommand
from specdoctor.tools.detached import DetachedServer
from specdoctor.tools.outcome import Outcome


class Supervisor:
    """Ends the run as the mode says (raises Healthy), or, supervising, returns the crash that ended a
    healthy server so the loop can decide about it like any other failure."""

    def __init__(self, mode: Mode, bus: EventBus, require_acceptance: bool = False) -> None:
        self.mode, self.bus, self.require_acceptance = mode, bus, require_acceptance
        self.healthy_for = 0.0
        """Seconds the last supervised server stayed up."""

    def after_healthy(self, engine: Engine, attempt: Attempt, command: LaunchCommand, url: str) -> Outcome:
        outcome = attempt.outcome
        assert outcome is not None
        unmeasured = outcome.acceptance == "unmeasured"
        if unmeasured and self.require_acceptance:
            raise Stopped(
                "the server generates, but its speculative acceptance could not be measured, and "
                f"--require-acceptance makes that fatal: {outcome.detail}",
                command,
            )
        caveat = ", speculative acceptance unmeasured" if unmeasured else ""
        if self.mode == "detach":
            # Named before it is let go: should that fail, the engine is still ours to stop.
            server = _detached(engine, url, command)
            engine.detach()
            self.bus.emit(DetachEvent(attempt=attempt.number, server=server))
            raise Healthy(
                f"the server is healthy{caveat} and left running (pid {engine.pid})",
                command,
                url=url,
                pid=engine.pid,
                log_path=str(engine.log_path),
            )
        if self.mode == "stop":
            raise Healthy(f"the server is healthy{caveat}: {outcome.detail}", command, url=url)
        self.bus.emit(
            SuperviseEvent(attempt=attempt.number, url=url, pid=engine.pid, command=command.shell())
        )
        return self._until_exit(engine, attempt)

    def _until_exit(self, engine: Engine, attempt: Attempt) -> Outcome:
        assert attempt.outcome is not None
        healthy_at = time.monotonic()
        code = None
        while code is None:
            code = engine.wait(1.0)
        self.healthy_for = time.monotonic() - healthy_at
        crashed = attempt.outcome.model_copy(
            update={
                "kind": "exited",
                "exit_code": code,
                "ready_seen": True,
                "detail": f"the healthy server exited (exit code {code})",
            }
        )
        attempt.outcome = crashed
        self.bus.emit(OutcomeEvent(attempt=attempt.number, outcome=crashed))
        return crashed


def _detached(engine: Engine, url: str, command: LaunchCommand) -> DetachedServer:
    rank_zero, *other_nodes = engine.launches()
    return DetachedServer(
        **rank_zero.model_dump(), url=url, command=command.shell(), other_nodes=tuple(other_nodes)
    )
