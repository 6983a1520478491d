"""The loop: preflight → launch → watch → evidence → planner → approve → apply, until healthy or stopped.

Every exit is a LoopResult with a message; every step is an event (transcript, UI, report).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agent import exitcodes
from agent.approve import Approver, Review
from agent.decision import Decision, Fix, Retry, Stop
from agent.events import (
    ApprovalEvent,
    BudgetEvent,
    DecisionEvent,
    EditEvent,
    EventBus,
    EvidenceEvent,
    HealthEvent,
    LaunchEvent,
    OutcomeEvent,
    PreflightEvent,
    RunStartEvent,
    StageEvent,
    StopEvent,
)
from agent.launcher import Launcher
from agent.outcome import Outcome
from agent.planner import Planner
from agent.preflight import preflight
from agent.spec import LaunchSpec
from agent.watch import WatchSettings, watch
from playbooks.host_checks import launch_gpus
from playbooks.view import SpecView
from tools.catalog import FlagCatalog
from tools.gpu import GpuReport
from tools.process import EngineProcess, EngineStartError, StopRequested

ResultKind = Literal["healthy", "stopped", "budget", "interrupted", "error"]
_EXIT = {
    "healthy": exitcodes.OK,
    "stopped": exitcodes.STOPPED,
    "budget": exitcodes.BUDGET,
    "interrupted": exitcodes.INTERRUPTED,
    "error": exitcodes.STOPPED,
}


class Budget(BaseModel):
    """What one run may spend before it gives up (exit code 4)."""

    model_config = ConfigDict(frozen=True)
    max_launches: int = Field(6, ge=1, description="Launches, the first included.")
    wall_time_s: float = Field(3600.0, gt=0, description="Seconds for the whole run, launches and waits.")
    gpu_minutes: float | None = Field(
        None, gt=0, description="GPU-minutes (GPUs used × minutes running); None: no cap."
    )


class Backoff(BaseModel):
    """Relaunching the SAME command: only after a transient failure or a crash of a healthy server,
    with capped exponential backoff (Kubernetes' CrashLoopBackOff)."""

    model_config = ConfigDict(frozen=True)
    initial_s: float = Field(10.0, ge=0, description="Wait before the first relaunch of the same command.")
    factor: float = Field(2.0, ge=1)
    max_s: float = Field(300.0, ge=0, description="The wait never grows past this.")
    max_restarts: int = Field(5, ge=0, description="Relaunches of the same command before the run stops.")

    def delay(self, restarts: int) -> float:
        return min(self.initial_s * self.factor ** max(restarts - 1, 0), self.max_s)


class LoopSettings(BaseModel):
    model_config = ConfigDict(frozen=True)
    budget: Budget = Budget()
    backoff: Backoff = Backoff()
    watch: WatchSettings = WatchSettings()
    supervise: bool = Field(False, description="After healthy, keep watching; a crash re-enters the loop.")
    stop_when_healthy: bool = Field(
        True, description="Stop the server once it is proven healthy (demo, tests)."
    )
    detach: bool = Field(False, description="Once healthy, leave the server running on its own and return.")
    preflight: bool = Field(True, description="Check and fix the command statically before the first launch.")
    allow_kill: bool = Field(
        False, description="May stop processes we did not start that hold the GPUs (after a confirm)."
    )
    grace_s: float = Field(10.0, ge=0, description="SIGTERM → SIGKILL grace when stopping the engine.")
    gpu_release_s: float = Field(
        120.0, ge=0, description="How long to wait for our old processes to leave the GPUs."
    )
    log_dir: Path = Field(description="Where each launch's log is written.")


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


class Loop:
    def __init__(
        self,
        spec: LaunchSpec,
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
    ) -> None:
        self.spec, self.catalog, self.launcher = spec, catalog, launcher
        self.planner, self.approver, self.bus, self.settings = planner, approver, bus, settings
        self.mode, self.catalog_note = mode, catalog_note
        self.attempts: list[Attempt] = []
        self.tried: list[LaunchSpec] = []
        self.engine: EngineProcess | None = None
        self.gpu_seconds = 0.0
        self._started = time.monotonic()
        self.gpus: GpuReport | None = None
        self.llm = llm
        self._last_ctx = None
        self._launch_base = 0
        self._healthy_for = 0.0
        self.tokens_used = 0

    # ---- the loop ------------------------------------------------------------------------------
    def run(self) -> LoopResult:
        try:
            return self._finish(self._run())
        except (KeyboardInterrupt, StopRequested):
            self._stop_engine()
            return self._finish(
                self._result("interrupted", "interrupted: the engine was stopped and the transcript closed")
            )

    def _run(self) -> LoopResult:
        self.gpus = self.launcher.gpus()
        self.bus.emit(
            RunStartEvent.for_spec(
                self.spec,
                mode=self.mode,
                catalog_note=self.catalog_note,
                engine_version=self.catalog.version,
                gpu_summary=self.gpus.summary(),
                gpu_count=self.gpus.count,
                policy=self.settings.model_dump(mode="json"),
            )
        )
        spec = self._preflight(self.spec) if self.settings.preflight else self.spec
        if isinstance(spec, LoopResult):
            return spec
        restarts = 0
        while True:
            if (over := self._over_budget()) is not None:
                return over
            attempt = Attempt(number=len(self.attempts) + 1, command=spec.shell())
            self.attempts.append(attempt)
            self.tried.append(spec)
            outcome = self._launch_and_watch(spec, attempt)
            if isinstance(outcome, LoopResult):
                return outcome
            if outcome.kind == "healthy":
                healthy = self._healthy(spec, attempt)
                if healthy is not None:
                    return healthy
                outcome = attempt.outcome or outcome  # a supervised crash after ready
                # Budgets are for reaching healthy: a crash after a healthy stretch starts them afresh, and
                # a long healthy stretch forgives earlier restarts.
                self._started, self._launch_base = time.monotonic(), len(self.attempts) - 1
                if self._healthy_for >= self.settings.backoff.max_s:
                    restarts = 0
            elif (
                outcome.kind != "degraded"
                and time.monotonic() - self._started >= self.settings.budget.wall_time_s
            ):
                self._stop_engine(hung=outcome.kind == "hung")
                return self._result(
                    "budget",
                    f"the wall-time budget ({self.settings.budget.wall_time_s:.0f} s) ran out before the server was "
                    f"healthy (last: {outcome.detail})",
                    spec,
                )
            # Decide first (the log is complete once the engine ended or hung), then clean up.
            decision = self._decide(spec, outcome, attempt)
            self._stop_engine(hung=outcome.kind == "hung")
            if isinstance(decision, Stop) and decision.category == "stale-gpu-process" and self._free_gpus():
                restarts += 1
                continue
            if isinstance(decision, Stop):
                if not (outcome.ready_seen and self.settings.supervise):
                    return self._result("stopped", f"{decision.summary}. {decision.advice}".strip(), spec)
                if restarts >= self.settings.backoff.max_restarts:
                    return self._result(
                        "stopped",
                        f"the server kept crashing after it was healthy ({restarts + 1} times): {decision.summary}. {decision.advice}",
                        spec,
                    )
                # A server that was healthy and then crashed is restarted as it was (CrashLoopBackOff).
                decision = Retry(
                    category=decision.category,
                    summary=f"the healthy server crashed: {decision.summary}",
                    evidence=decision.evidence,
                )
            if isinstance(decision, Retry):
                restarts += 1
                if restarts > self.settings.backoff.max_restarts:
                    return self._result(
                        "stopped",
                        f"{decision.summary}; it kept failing after {restarts - 1} relaunches",
                        spec,
                    )
                self._sleep(self.settings.backoff.delay(restarts))
                continue
            reviewed = self._review(spec, decision, attempt.number)
            if isinstance(reviewed, LoopResult):
                return reviewed
            spec, restarts = reviewed, 0

    # ---- steps ---------------------------------------------------------------------------------
    def _preflight(self, spec: LaunchSpec) -> LaunchSpec | LoopResult:
        report = preflight(spec, self.catalog, gpus=self.gpus, host=True, catalog_note=self.catalog_note)
        self.bus.emit(
            PreflightEvent(
                findings=report.findings,
                corrected_command=report.corrected.shell(),
                elapsed_ms=round(report.elapsed_s * 1000, 2),
            )
        )
        if report.unfixed:
            f = report.unfixed[0]
            decision = Stop(
                category=f.category,
                summary=f.message,
                advice="Fix it by hand; `specdoctor check` shows the details.",
                evidence=f.evidence,
                playbook="preflight",
            )
            self.bus.emit(DecisionEvent(attempt=0, planner="preflight", decision=decision))
            return self._result("stopped", f"before launch: {f.message}", spec)
        edits = report.edits()
        if not edits:
            return spec
        lead = report.problems[0]
        decision = Fix(
            category=lead.category,
            summary=f"{len(report.problems)} problem(s) found before launch: {lead.message}",
            edits=edits,
            why=" ".join(f.why for f in report.problems if f.why),
            evidence=lead.evidence,
            playbook="preflight",
            confidence=min(f.confidence for f in report.problems),
        )
        self.bus.emit(DecisionEvent(attempt=0, planner="preflight", decision=decision))
        return self._review(spec, decision, 0, corrected=report.corrected)

    def _launch_and_watch(self, spec: LaunchSpec, attempt: Attempt) -> Outcome | LoopResult:
        log_path = self.settings.log_dir / f"attempt-{attempt.number}.log"
        try:
            self.engine = self.launcher.start(spec, log_path, to_file=self.settings.detach)
        except EngineStartError as exc:
            return self._result("stopped", f"cannot start the engine: {exc}", spec)
        self.bus.emit(
            LaunchEvent.for_spec(spec, attempt=attempt.number, log_path=str(log_path), pid=self.engine.pid)
        )
        view = SpecView(spec, self.catalog)
        started = time.monotonic()
        outcome = watch(
            self.engine,
            base_url(view),
            self.settings.watch,
            speculative=view.algorithm,
            on_stage=lambda c: self.bus.emit(
                StageEvent(attempt=attempt.number, stage=c.stage, label=c.label, line=c.line)
            ),
            deadline_at=self._started + self.settings.budget.wall_time_s,
        )
        self.gpu_seconds += (time.monotonic() - started) * max(view.world, 1)
        attempt.outcome = outcome
        self.bus.emit(OutcomeEvent(attempt=attempt.number, outcome=outcome))
        if outcome.kind in ("healthy", "degraded"):
            self.bus.emit(
                HealthEvent(
                    attempt=attempt.number,
                    probe="generation",
                    ok=outcome.kind == "healthy",
                    detail=outcome.detail,
                    accept_length=outcome.accept_length,
                )
            )
        return outcome

    def _healthy(self, spec: LaunchSpec, attempt: Attempt) -> LoopResult | None:
        """Healthy: done, unless supervising, where a later crash returns None to re-enter the loop."""
        assert self.engine is not None
        url = base_url(SpecView(spec, self.catalog))
        if self.settings.detach:
            engine, self.engine = self.engine, None
            engine.detach()
            return self._result(
                "healthy",
                f"the server is healthy and left running (pid {engine.pid})",
                spec,
                url=url,
                pid=engine.pid,
                log_path=str(engine.log_path),
            )
        if not self.settings.supervise:
            result = self._result(
                "healthy",
                f"the server is healthy: {attempt.outcome.detail if attempt.outcome else ''}",
                spec,
                url=url,
            )
            if self.settings.stop_when_healthy:
                self._stop_engine()
            return result
        code = None
        healthy_at = time.monotonic()
        while code is None:
            code = self.engine.wait(1.0)
        self._healthy_for = time.monotonic() - healthy_at
        assert attempt.outcome is not None
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
        return None

    def _decide(self, spec: LaunchSpec, outcome: Outcome, attempt: Attempt) -> Decision:
        from agent.diagnose import context_from_file

        began = time.monotonic()
        log = (
            Path(outcome.log_path)
            if outcome.log_path
            else self.settings.log_dir / f"attempt-{attempt.number}.log"
        )
        ctx = context_from_file(
            spec, self.catalog, log, gpus=self.gpus, outcome=outcome, tried=tuple(self.tried)
        )
        self.bus.emit(
            EvidenceEvent(
                attempt=attempt.number,
                root_cause=ctx.root,
                log_text=ctx.log_text,
                gpus=ctx.gpus,
                model=ctx.model,
                draft=ctx.draft,
            )
        )
        self._last_ctx = ctx
        decision = self.planner.decide(ctx)
        assert decision is not None
        attempt.decision = decision
        attempt.decided_in_s = round(time.monotonic() - began, 4)
        self._emit_decision(attempt.number, decision)
        return decision

    def _review(
        self, spec: LaunchSpec, decision: Fix, attempt: int, corrected: LaunchSpec | None = None
    ) -> LaunchSpec | LoopResult:
        new = corrected or spec.apply_all(decision.edits, self.catalog.canonical)
        note = ""
        while True:
            review: Review = self.approver.review(spec, decision, new, attempt, note=note)
            if not review.ask_llm:
                checked = self._check_edit(review, new)
                if checked is None:
                    break
                new, note = checked
                continue
            other, note = self._second_opinion()
            if isinstance(other, Fix):
                self._emit_decision(attempt, other, "llm")
                decision, new, note = other, spec.apply_all(other.edits, self.catalog.canonical), ""
            elif other is not None:
                self._emit_decision(attempt, other, "llm")
                note = f"the LLM says: {other.summary}"
        self.bus.emit(
            ApprovalEvent(
                attempt=attempt,
                approved=review.approved,
                by=review.by,
                note=review.note,
                edited_command=review.spec.shell()
                if review.spec is not None and review.spec != new
                else None,
            )
        )
        if not review.approved or review.spec is None:
            return self._result("stopped", f"the change was not applied: {review.note}", spec)
        if review.spec in self.tried:
            return self._result(
                "stopped",
                f"{decision.summary}; the fix leads to a command already tried, so no flag change is left to try",
                spec,
            )
        self.bus.emit(
            EditEvent(
                attempt=attempt,
                edits=decision.edits,
                old_command=spec.shell(),
                new_command=review.spec.shell(),
            )
        )
        return review.spec

    def _free_gpus(self) -> bool:
        """With the user's leave, stop the processes we did not start that hold GPU memory; True if any went."""
        report = self.launcher.gpus()
        used = launch_gpus(SpecView(self.tried[-1], self.catalog), report) if self.tried else None
        foreign = (
            [
                p
                for p in report.processes
                if (p.used_memory_mib or 0) > 0
                and (used is None or p.gpu_index is None or p.gpu_index in used)
            ]
            if report.ok
            else []
        )
        if not foreign:
            return False
        names = ", ".join(
            f"{p.pid} ({p.process_name}, {p.used_memory_mib} MiB on GPU {p.gpu_index})" for p in foreign
        )
        if not (
            self.settings.allow_kill
            and self.approver.confirm(f"stop {names}, which hold GPU memory this launch needs?")
        ):
            return False
        message = self.launcher.free_gpus(foreign)
        self.bus.emit(
            ApprovalEvent(
                attempt=len(self.attempts),
                approved=True,
                by=self.approver.kind,
                note=f"freed the GPUs: {message}",
            )
        )
        self.gpus = self.launcher.gpus()
        return True

    def _check_edit(self, review: Review, proposed: LaunchSpec) -> tuple[LaunchSpec, str] | None:
        """A command a person typed goes through preflight before it costs a launch; found problems are
        shown and the fixed command proposed (accepting the same command again overrides the check)."""
        edited = review.spec
        if review.by != "user" or not review.approved or edited is None or edited == proposed:
            return None
        report = preflight(edited, self.catalog, gpus=self.gpus, host=True)
        errors = [f for f in report.findings if f.severity == "error"]
        if not errors:
            return None
        note = "your edit has problems: " + "; ".join(f.message for f in errors[:3])
        if report.corrected != edited:
            note += " (the command below fixes them)"
        return report.corrected, note

    def _second_opinion(self) -> tuple[Decision | None, str]:
        """The LLM's decision on the last failure, when a person asked for it instead of the playbook's."""
        if self.llm is None:
            return (
                None,
                "no LLM endpoint is configured (set SPECDOCTOR_LLM_BASE_URL and SPECDOCTOR_LLM_MODEL)",
            )
        if self._last_ctx is None:
            return None, "there is no failure to ask about yet (this change comes from the static check)"
        decision = self.llm.decide(self._last_ctx)
        if decision is None:
            return None, f"the LLM gave no answer: {getattr(self.llm, 'note', '')}"
        return decision, ""

    def _emit_decision(self, attempt: int, decision: Decision, planner: str | None = None) -> None:
        planner = planner or getattr(self.planner, "last_planner", None) or "playbooks"
        usage = getattr(self.llm, "last_usage", None) if planner == "llm" else None
        take_errors = getattr(self.planner, "take_errors", None)
        if usage is not None:
            self.tokens_used += getattr(usage, "total_tokens", 0)
        self.bus.emit(
            DecisionEvent(
                attempt=attempt,
                planner=planner,
                decision=decision,
                prompt_tokens=getattr(usage, "prompt_tokens", None),
                completion_tokens=getattr(usage, "completion_tokens", None),
                rule_errors=take_errors() if take_errors else (),
            )
        )

    # ---- helpers -------------------------------------------------------------------------------
    def _over_budget(self) -> LoopResult | None:
        b = self.settings.budget
        used = time.monotonic() - self._started
        launches = len(self.attempts) - self._launch_base
        tokens_left = getattr(getattr(self.llm, "config", None), "token_budget", None)
        self.bus.emit(
            BudgetEvent(
                launches_used=launches,
                launches_left=b.max_launches - launches,
                wall_s_used=round(used, 2),
                wall_s_left=round(b.wall_time_s - used, 2),
                tokens_used=self.tokens_used,
                tokens_left=None if tokens_left is None else max(tokens_left - self.tokens_used, 0),
            )
        )
        last = self.tried[-1] if self.tried else None
        if launches >= b.max_launches:
            return self._result(
                "budget", f"{b.max_launches} launches used and the server is still not healthy", last
            )
        if used >= b.wall_time_s:
            return self._result("budget", f"the wall-time budget ({b.wall_time_s:.0f} s) ran out", last)
        if b.gpu_minutes is not None and self.gpu_seconds / 60 >= b.gpu_minutes:
            return self._result("budget", f"the GPU-minutes budget ({b.gpu_minutes}) ran out", last)
        return None

    def _stop_engine(self, hung: bool = False) -> None:
        if self.engine is None:
            return
        engine, self.engine = self.engine, None
        ours = {p.pid for p in engine.processes()} | {engine.pid}
        # A hung SGLang ignores SIGTERM (it waits on a server that never started): no point waiting long.
        engine.stop(min(self.settings.grace_s, 3.0) if hung else self.settings.grace_s)
        self._wait_gpu_release(ours)

    def _wait_gpu_release(self, pids: set[int]) -> None:
        """Before a relaunch: wait until nvidia-smi no longer lists our old processes on any GPU."""
        deadline = time.monotonic() + self.settings.gpu_release_s
        while time.monotonic() < deadline:
            report = self.launcher.gpus()
            if not report.ok or not {p.pid for p in report.processes} & pids:
                return
            time.sleep(1.0)

    def _sleep(self, seconds: float) -> None:
        left = self._started + self.settings.budget.wall_time_s - time.monotonic()
        time.sleep(max(0.0, min(seconds, left)))

    def _result(
        self, kind: ResultKind, message: str, spec: LaunchSpec | None = None, **extra: object
    ) -> LoopResult:
        return LoopResult(
            kind=kind,
            message=message,
            final_command=spec.shell() if spec else None,
            attempts=self.attempts,
            **extra,
        )  # type: ignore[arg-type]

    def _finish(self, result: LoopResult) -> LoopResult:
        if result.kind != "healthy" or self.settings.stop_when_healthy:
            self._stop_engine()
        self.bus.emit(
            StopEvent(
                result=result.kind,
                message=result.message,
                final_command=result.final_command if result.kind == "healthy" else None,
                exit_code=result.exit_code,
            )
        )
        return result


def base_url(view: SpecView) -> str:
    host = (view.get("--host") or "127.0.0.1").strip("[]")
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal needs brackets in a URL
    return f"http://{host}:{view.int('--port') or 30000}"
