"""The loop: preflight → launch → watch → evidence → planner → approve → apply, until healthy or stopped.

`run` reads as the story; each choice is asked of a small object (RestartPolicy, Supervisor, Spending,
Reviewer, the Planner), and every way out is a LoopExit carrying its message. Every step is an event.
"""

from __future__ import annotations

import time
from pathlib import Path

from specdoctor.agent.approve import Approver
from specdoctor.agent.attempt import base_url, start, watch_attempt
from specdoctor.agent.events import (
    DecisionEvent,
    EventBus,
    EvidenceEvent,
    PreflightEvent,
    RunStartEvent,
    StopEvent,
)
from specdoctor.agent.gpu_release import free_stray_gpus, stop_and_release
from specdoctor.agent.launcher import Engine, Launcher
from specdoctor.agent.planner import Planned, Planner
from specdoctor.agent.policy import LoopSettings, Relaunch, RestartPolicy
from specdoctor.agent.preflight import preflight
from specdoctor.agent.results import Attempt, Interrupted, LoopExit, LoopResult, Stopped
from specdoctor.agent.review import Reviewer
from specdoctor.agent.spending import Spending
from specdoctor.agent.supervise import Supervisor
from specdoctor.playbooks.decision import Decision, Fix, Stop
from specdoctor.playbooks.view import CommandView
from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.command import LaunchCommand
from specdoctor.tools.engine_source.match import warm_in_background
from specdoctor.tools.outcome import Outcome
from specdoctor.tools.process import StopRequested, interrupt_requested


class Loop:
    def __init__(
        self,
        command: LaunchCommand,
        catalog: FlagCatalog,
        launcher: Launcher,
        planner: Planner,
        approver: Approver,
        bus: EventBus,
        settings: LoopSettings,
        *,
        mode: str = "deploy",
        catalog_note: str = "",
        llm: Planner | None = None,
        token_budget: int | None = None,
    ) -> None:
        self.command, self.catalog, self.launcher, self.planner = command, catalog, launcher, planner
        self.bus, self.settings, self.mode, self.catalog_note = bus, settings, mode, catalog_note
        self.attempts: list[Attempt] = []
        self.tried: list[LaunchCommand] = []
        self.engine: Engine | None = None
        self.spending = Spending(settings.budget, token_budget)
        self.restarts = RestartPolicy(settings.backoff, supervise=settings.when_healthy == "supervise")
        self.supervisor = Supervisor(settings.when_healthy, bus, settings.require_acceptance)
        self.reviewer = Reviewer(approver, catalog, bus, llm, self._record, frozenset(settings.pinned))

    def run(self) -> LoopResult:
        try:
            self._begin()
            while True:
                self.command = self.step(self.command)
        except (KeyboardInterrupt, StopRequested):
            end: LoopExit = Interrupted("interrupted: the engine was stopped and the transcript closed")
        except LoopExit as exit_:
            end = exit_
        except Exception:
            if not interrupt_requested():
                raise
            end = Interrupted("interrupted: the engine was stopped and the transcript closed")
        if not (end.kind == "healthy" and self.settings.when_healthy == "detach"):
            self._stop_engine()
        result = end.result(self.attempts)
        self.bus.emit(StopEvent.for_result(result))
        return result

    def _begin(self) -> None:
        warm_in_background()
        gpus = self.reviewer.gpus = self.launcher.gpus()
        self.bus.emit(
            RunStartEvent.for_spec(
                self.command,
                mode=self.mode,
                catalog_note=self.catalog_note,
                engine_version=self.catalog.version,
                gpu_summary=gpus.summary(),
                gpu_count=gpus.count,
                policy=self.settings.model_dump(mode="json"),
            )
        )
        if self.settings.preflight:
            self.command = self._preflight(self.command)

    def step(self, command: LaunchCommand) -> LaunchCommand:
        """One launch, watched to its end and decided on; returns the command to launch next."""
        self.bus.emit(self.spending.event())
        self.spending.check(self.tried[-1] if self.tried else None)
        attempt = Attempt(number=len(self.attempts) + 1, command=command.shell())
        self.attempts.append(attempt)
        self.tried.append(command)
        self.engine = start(self.launcher, command, attempt, self.settings, self.bus)
        self.spending.launches += 1
        view = CommandView(command, self.catalog)
        outcome = watch_attempt(self.engine, view, attempt, self.settings, self.bus, self.spending)
        if outcome.kind == "healthy":
            outcome = self.supervisor.after_healthy(self.engine, attempt, command, base_url(view))
            self.spending.restart()
            self.restarts.was_healthy_for(self.supervisor.healthy_for)
        elif outcome.kind != "degraded":
            self.spending.check_wall_after(outcome, command)
        # Decide first (the log is complete once the engine ended or hung), then clean up.
        decision = self._decide(command, outcome, attempt)
        self._stop_engine(hung=outcome.kind == "hung")
        if (
            isinstance(decision, Stop)
            and decision.category == "stale-gpu-process"
            and self._free_gpus(command)
        ):
            self.restarts.freed_gpus()
            return command
        action = self.restarts.after(outcome, decision, command)
        if isinstance(action, Relaunch):
            time.sleep(max(0.0, min(action.delay_s, self.spending.wall_left())))
            return command
        return self._apply(command, action, attempt.number)

    def _preflight(self, command: LaunchCommand) -> LaunchCommand:
        report = preflight(
            command, self.catalog, gpus=self.reviewer.gpus, host=True, catalog_note=self.catalog_note
        )
        self.bus.emit(PreflightEvent.for_report(report, self.reviewer.gpus))
        decision = report.decision()
        if decision is None:
            return command
        self._record(0, Planned(decision=decision, planner="preflight"))
        if isinstance(decision, Stop):
            raise Stopped(f"before launch: {report.unfixed[0].message}", command)
        return self._apply(command, decision, 0, corrected=report.corrected)

    def _decide(self, command: LaunchCommand, outcome: Outcome, attempt: Attempt) -> Decision:
        from specdoctor.agent.diagnose import context_from_file

        began = time.monotonic()
        log = Path(outcome.log_path or self.settings.log_dir / f"attempt-{attempt.number}.log")
        ctx = context_from_file(
            command, self.catalog, log, gpus=self.reviewer.gpus, outcome=outcome, tried=tuple(self.tried)
        )
        self.bus.emit(EvidenceEvent.for_context(attempt.number, ctx))
        self.reviewer.last_ctx = ctx
        planned = self.planner.plan(ctx)
        assert planned.decision is not None
        attempt.decision = planned.decision
        attempt.decided_in_s = round(time.monotonic() - began, 4)
        self._record(attempt.number, planned)
        return planned.decision

    def _apply(
        self, command: LaunchCommand, fix: Fix, attempt: int, corrected: LaunchCommand | None = None
    ) -> LaunchCommand:
        new = self.reviewer.next_command(command, fix, attempt, self.tried, corrected)
        self.restarts.changed()
        return new

    def _record(self, attempt: int, planned: Planned) -> None:
        self.spending.tokens += planned.total_tokens
        assert planned.decision is not None
        self.bus.emit(DecisionEvent.for_planned(attempt, planned))

    def _free_gpus(self, command: LaunchCommand) -> bool:
        view, allowed = CommandView(command, self.catalog), self.settings.allow_kill
        if not free_stray_gpus(
            self.launcher, self.reviewer.approver, self.bus, view, len(self.attempts), allowed
        ):
            return False
        self.reviewer.gpus = self.launcher.gpus()
        return True

    def _stop_engine(self, hung: bool = False) -> None:
        if self.engine is not None:
            engine, self.engine = self.engine, None
            stop_and_release(engine, self.launcher, self.settings.grace_s, self.settings.gpu_release_s, hung)
