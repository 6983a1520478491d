"""The terminal view of a run (an event sink): one line per step, the diagnosis and the change as a diff.

Plain text when stdout is not a terminal (scripts, CI); colour through rich when it is.
"""

from __future__ import annotations

from specdoctor.agent.events import (
    BudgetEvent,
    DecisionEvent,
    EditEvent,
    Event,
    LaunchEvent,
    OutcomeEvent,
    PreflightEvent,
    RunStartEvent,
    StageEvent,
    StopEvent,
    SuperviseEvent,
    masked,
)
from specdoctor.agent.render import (
    OUTCOME_STYLE,
    Out,
    decided_by,
    diff_lines,
    finding_lines,
    outcome_label,
)
from specdoctor.tools.command import LaunchCommand, diff


class ConsoleSink:
    """Shows each event, its secrets masked unless the `Out` was made with `show_secrets`."""

    def __init__(self, out: Out | None = None, stages: bool = True, canon=None) -> None:
        self.out = out or Out()
        self.canon = canon or (lambda name: name)
        self.stages = stages
        self.max_launches: int | None = None
        self.last_outcome = ""

    def handle(self, event: Event) -> None:
        handler = getattr(self, f"_{event.type}", None)
        if handler is not None:
            handler(event if self.out.show_secrets else masked(event))

    def close(self) -> None:
        return None

    def _t(self, event: Event) -> str:
        return f"[{event.elapsed_s:7.1f}s]"

    def _run_start(self, e: RunStartEvent) -> None:
        budget = e.policy.get("budget", {}) if isinstance(e.policy, dict) else {}
        self.max_launches = budget.get("max_launches")
        self.out.line(f"specdoctor {e.mode} · {e.catalog_note}", "dim")
        self.out.line(f"node: {e.gpu_summary}", "dim")
        self.out.line(f"command: {e.command}")

    def _preflight(self, e: PreflightEvent) -> None:
        problems = [f for f in e.findings if f.severity != "info"]
        if not problems:
            self.out.line(f"{self._t(e)} preflight: no problems ({e.elapsed_ms:.0f} ms)", "green")
            return
        self.out.line(
            f"{self._t(e)} preflight found {len(problems)} problem(s) before any launch ({e.elapsed_ms:.0f} ms):",
            "bold",
        )
        for f in problems:
            finding_lines(self.out, f)

    def _launch(self, e: LaunchEvent) -> None:
        left = f" of {self.max_launches}" if self.max_launches else ""
        self.out.line(f"{self._t(e)} launch {e.attempt}{left} (pid {e.pid}), log {e.log_path}", "bold cyan")

    def _stage(self, e: StageEvent) -> None:
        if self.stages:
            self.out.line(f"{self._t(e)}   · {e.label}", "dim")

    def _outcome(self, e: OutcomeEvent) -> None:
        o = e.outcome
        self.last_outcome = o.detail
        shown = outcome_label(o)
        self.out.line(f"{self._t(e)} {shown.upper()}: {o.detail}", OUTCOME_STYLE.get(shown))

    def _decision(self, e: DecisionEvent) -> None:
        d = e.decision
        if d.playbook == "preflight" and d.action == "fix":
            return  # its findings were just shown one by one
        who, decided = decided_by(e.planner, d.playbook)
        sure = f", confidence {d.confidence:.2f}" if decided else ""
        self.out.line(f"{self._t(e)} diagnosis [{d.category}] ({who}{sure}): {d.summary}", "bold")
        for line in d.evidence[:3]:
            self.out.line(f"          log: {line if len(line) <= 160 else line[:157] + '...'}", "dim")
        advice = getattr(d, "advice", "")
        if advice:
            self.out.line(f"          what to do: {advice}", "yellow")
        if getattr(d, "bug_report", ""):
            self.out.line(
                "          a bug report to paste upstream is in the report (decision.bug_report)", "dim"
            )
        why = getattr(d, "why", "")
        if why:
            self.out.line(f"          why: {why}", "dim")
        for error in e.rule_errors:
            self.out.line(f"          warning: {error} (skipped; please report it)", "yellow")

    def _edit(self, e: EditEvent) -> None:
        old, new = LaunchCommand.parse(e.old_command), LaunchCommand.parse(e.new_command)
        self.out.line(f"{self._t(e)} change:", "bold")
        diff_lines(self.out, diff(old, new, self.canon), indent="          ")

    def _budget(self, e: BudgetEvent) -> None:
        return None

    def _supervise(self, e: SuperviseEvent) -> None:
        pid = f" (pid {e.pid})" if e.pid is not None else ""
        self.out.line(f"{self._t(e)} serving at {e.url}{pid}", "bold green")
        self.out.line("working command:", "bold")
        self.out.line(f"  {e.command}", "bold green")
        self.out.line("supervising; Ctrl-C to stop", "bold")

    def _stop(self, e: StopEvent) -> None:
        style = "bold green" if e.result == "healthy" else "bold yellow"
        message = e.message
        if self.last_outcome and message.endswith(f": {self.last_outcome}"):
            message = message[: -len(self.last_outcome) - 2]  # the outcome line just said it
        self.out.line(f"{self._t(e)} {e.result.upper()}: {message}", style)
        if e.final_command:
            self.out.line("working command:", "bold")
            self.out.line(f"  {e.final_command}", "bold green")
