"""What a run may spend and how it behaves after each launch: budgets, backoff, the restart policy.

The loop asks `RestartPolicy` what to do after an outcome and its decision (Kubernetes-style: relaunch the
same command after a backoff, apply a fix, or stop), so the loop itself holds no counters.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.agent.results import Stopped
from specdoctor.agent.watch import WatchSettings
from specdoctor.playbooks.decision import Decision, Fix, Retry, Stop
from specdoctor.tools.command import LaunchCommand
from specdoctor.tools.outcome import Outcome

Mode = Literal["stop", "supervise", "detach"]
"""What happens once the server is proven healthy: stop it (does this command work?), keep watching it in
the foreground (a crash re-enters the loop), or leave it running on its own and return."""


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
    when_healthy: Mode = Field("stop", description="Once the server is healthy: stop, supervise or detach.")
    preflight: bool = Field(True, description="Check and fix the command statically before the first launch.")
    require_acceptance: bool = Field(
        False,
        description="A speculative server whose accept length cannot be measured stops the run (exit 3) "
        "instead of counting as healthy with its acceptance unmeasured.",
    )
    allow_kill: bool = Field(
        False, description="May stop processes we did not start that hold the GPUs (after a confirm)."
    )
    grace_s: float = Field(10.0, ge=0, description="SIGTERM → SIGKILL grace when stopping the engine.")
    gpu_release_s: float = Field(
        120.0, ge=0, description="How long to wait for our old processes to leave the GPUs."
    )
    pinned: tuple[str, ...] = Field(
        (),
        description="Flags (canonical names) no automatic decision may change, --allow included: `--pin FLAG`, "
        "and deploy's --port and --host unless --no-pin.",
    )
    log_dir: Path = Field(description="Where each launch's log is written.")


class Relaunch(BaseModel):
    """Launch the same command again after `delay_s` (a transient failure, a crashed healthy server)."""

    model_config = ConfigDict(frozen=True)
    delay_s: float


class RestartPolicy:
    """After each launch: relaunch as is, apply a fix, or stop — and count the relaunches of one command."""

    def __init__(self, backoff: Backoff, supervise: bool) -> None:
        self.backoff, self.supervise = backoff, supervise
        self.restarts = 0
        """Relaunches of the current command since it last changed."""

    def after(self, outcome: Outcome, decision: Decision, command: LaunchCommand) -> Relaunch | Fix:
        """What to do next; raises Stopped (with `command`, the last one) when nothing is left to try."""
        if isinstance(decision, Stop):
            decision = self._crashed_while_supervised(outcome, decision, command)
        if isinstance(decision, Retry):
            self.restarts += 1
            if self.restarts > self.backoff.max_restarts:
                raise Stopped(
                    f"{decision.summary}; it kept failing after {self.restarts - 1} relaunches", command
                )
            return Relaunch(delay_s=self.backoff.delay(self.restarts))
        return decision

    def _crashed_while_supervised(self, outcome: Outcome, decision: Stop, command: LaunchCommand) -> Retry:
        if not (outcome.ready_seen and self.supervise):
            raise Stopped(f"{decision.summary}. {decision.advice}".strip(), command)
        if self.restarts >= self.backoff.max_restarts:
            raise Stopped(
                f"the server kept crashing after it was healthy ({self.restarts + 1} times): "
                f"{decision.summary}. {decision.advice}",
                command,
            )
        # A server that was healthy and then crashed is restarted as it was (CrashLoopBackOff).
        return Retry(
            category=decision.category,
            summary=f"the healthy server crashed: {decision.summary}",
            evidence=decision.evidence,
        )

    def freed_gpus(self) -> None:
        """Stray processes were stopped: the same command goes again, and that counts as a restart."""
        self.restarts += 1

    def changed(self) -> None:
        """A fix was applied: the new command starts with a clean slate."""
        self.restarts = 0

    def was_healthy_for(self, seconds: float) -> None:
        """A long healthy stretch forgives earlier restarts."""
        if seconds >= self.backoff.max_s:
            self.restarts = 0
