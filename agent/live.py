"""The terminal view of `specdoctor fix` (an event sink): one live status line while a launch runs or a
planner thinks, and a panel for each outcome, diagnosis and the end of the run.

Only `fix` imports this module, on a terminal, so rich is imported at the top here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.spinner import Spinner
from rich.text import Text

from specdoctor.agent.events import (
    ApprovalEvent,
    BudgetEvent,
    DecisionEvent,
    EditEvent,
    Event,
    EvidenceEvent,
    LaunchEvent,
    OutcomeEvent,
    PreflightEvent,
    RunStartEvent,
    StageEvent,
    StopEvent,
    SuperviseEvent,
    ToolCallEvent,
    masked,
)
from specdoctor.agent.render import DIFF_STYLE, OUTCOME_STYLE, decided_by, outcome_label
from specdoctor.playbooks.decision import Decision, Finding, Fix, Stop
from specdoctor.tools.command import Canon, DiffLine, LaunchCommand, diff

_SEVERITY = {"error": ("✗", "red"), "warning": ("!", "yellow"), "info": ("·", "cyan")}
_EVIDENCE_LINES = 5
_EVIDENCE_WIDTH = 200


def duration(seconds: float) -> str:
    """`4.2s`, `3m07s`, `1h02m`: short enough for a status line."""
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def diff_text(lines: list[DiffLine], indent: str = "  ") -> Text:
    """A command diff, one flag a line: red removed, green added, yellow changed."""
    text = Text()
    for i, d in enumerate(lines):
        if i:
            text.append("\n")
        text.append(indent + d.text(), style=DIFF_STYLE[d.change])
    return text


def decision_panel(
    decision: Decision,
    *,
    attempt: int,
    planner: str,
    change: list[DiffLine] | None = None,
    findings: tuple[Finding, ...] = (),
) -> Panel:
    """The diagnosis as a person reads it before deciding: what is wrong, who says so, the log lines it
    rests on, and the change proposed."""
    if findings:
        summary, who, decided = (
            f"{len(findings)} problem(s) found before launch",
            "the static check (preflight)",
            True,
        )
    else:
        summary = decision.summary
        who, decided = decided_by(planner, decision.playbook)
    sure = f" · confidence {decision.confidence:.2f}" if decided else ""
    parts: list[RenderableType] = [
        Text.assemble((f"[{decision.category}] ", "bold magenta"), (summary, "bold")),
        Text(f"by {who}{sure}", style="dim"),
    ]
    parts.extend(finding_text(f) for f in findings)
    if decision.evidence:
        evidence = Text("evidence from the log:", style="bold")
        for line in decision.evidence[:_EVIDENCE_LINES]:
            cut = line if len(line) <= _EVIDENCE_WIDTH else line[: _EVIDENCE_WIDTH - 3] + "..."
            evidence.append(f"\n  {cut}", style="dim")
        parts.append(evidence)
    if isinstance(decision, Fix):
        if decision.why and not findings:
            parts.append(Text(f"why: {decision.why}", style="italic"))
        if change:
            parts.append(Text("proposed change:", style="bold"))
            parts.append(diff_text(change))
    elif isinstance(decision, Stop):
        if decision.advice:
            parts.append(Text(f"what to do: {decision.advice}", style="yellow"))
    else:
        parts.append(
            Text("a transient failure: the same command is launched again after a pause", style="cyan")
        )
    title = "before launch" if attempt == 0 else f"diagnosis of launch {attempt}"
    border = {"fix": "yellow", "stop": "red", "retry": "cyan"}[decision.action]
    return Panel(Group(*parts), title=title, title_align="left", border_style=border)


def finding_text(f: Finding) -> Text:
    """One preflight finding: what is wrong, its fix and why."""
    mark, style = _SEVERITY[f.severity]
    text = Text(f"{mark} {f.message}", style=style)
    if f.edits:
        text.append(f"\n    fix: {'; '.join(e.describe() for e in f.edits)}", style="green")
    if f.why:
        text.append(f"\n    why: {f.why}", style="dim")
    return text


class _Status:
    """What the live line shows; rendered afresh on every refresh so the clocks move."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.started = clock()
        self.spinner = Spinner("dots", style="cyan")
        self.doing = ""
        self.stage = ""
        self.stage_since = self.started
        self.launches: tuple[int, int | None] | None = None
        self.wall_left: tuple[float, float] | None = None
        self.tokens = 0

    def budget_text(self) -> str:
        parts = []
        if self.launches is not None:
            used, left = self.launches
            parts.append(f"launches {used} used" + (f", {left} left" if left is not None else ""))
        if self.wall_left is not None:
            left_s, at = self.wall_left
            parts.append(f"{duration(left_s - (self.clock() - at))} left")
        if self.tokens:
            parts.append(f"LLM {self.tokens} tokens")
        return " · ".join(parts)

    def __rich__(self) -> Spinner:
        with self.lock:
            now = self.clock()
            text = Text.assemble(
                (self.doing, "bold cyan"),
                " · ",
                (self.stage or "starting", "bold"),
                f" {duration(now - self.stage_since)}",
                (f" · total {duration(now - self.started)}", "dim"),
            )
            budget = self.budget_text()
            if budget:
                text.append(f" · {budget}", style="dim")
        self.spinner.update(text=text)
        return self.spinner


class LiveView:
    """Receives every event of a `fix` run and draws it. Events come from the loop's thread; the live line
    redraws itself from rich's refresh thread, so the status is shared under a lock. Secrets are masked
    unless `show_secrets`."""

    def __init__(
        self,
        console: Console,
        canon: Canon | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        show_secrets: bool = False,
    ) -> None:
        self.console = console
        self.show_secrets = show_secrets
        self.canon: Canon = canon or (lambda name: name)
        self.status = _Status(clock)
        self._live: Live | None = None
        self._live_lock = threading.RLock()
        self.max_launches: int | None = None
        self.command: LaunchCommand | None = None
        self.findings: tuple[Finding, ...] = ()
        self.corrected: LaunchCommand | None = None
        self.proposed: LaunchCommand | None = None

    # ---- the sink --------------------------------------------------------------------------------
    def handle(self, event: Event) -> None:
        handler = getattr(self, f"_{event.type}", None)
        if handler is not None:
            handler(event if self.show_secrets else masked(event))

    def close(self) -> None:
        self.pause()

    def pause(self) -> None:
        """Stop the live line (before a prompt or a panel); the next launch starts it again."""
        with self._live_lock:
            live, self._live = self._live, None
            if live is not None:
                live.stop()

    def _run_live(self, doing: str, stage: str) -> None:
        with self.status.lock:
            self.status.doing, self.status.stage = doing, stage
            self.status.stage_since = self.status.clock()
        with self._live_lock:
            if self._live is None:
                self._live = Live(self.status, console=self.console, refresh_per_second=8, transient=True)
                self._live.start()

    def _print(self, renderable: RenderableType) -> None:
        self.pause()
        self.console.print(renderable)

    # ---- events ----------------------------------------------------------------------------------
    def _run_start(self, e: RunStartEvent) -> None:
        self.max_launches = e.policy.get("budget", {}).get("max_launches")
        self.command = LaunchCommand.parse(e.command)
        self.console.print(Text(f"specdoctor {e.mode} · {e.catalog_note}", style="dim"))
        self.console.print(Text(f"node: {e.gpu_summary}", style="dim"))
        self.console.print(Text(f"command: {e.command}"), soft_wrap=True)

    def _preflight(self, e: PreflightEvent) -> None:
        self.findings = tuple(f for f in e.findings if f.severity != "info")
        self.corrected = LaunchCommand.parse(e.corrected_command)
        if not self.findings:
            self.console.print(Text(f"preflight: no problems ({e.elapsed_ms:.0f} ms)", style="green"))

    def _budget(self, e: BudgetEvent) -> None:
        with self.status.lock:
            self.status.launches = (e.launches_used, e.launches_left)
            if e.wall_s_left is not None:
                self.status.wall_left = (e.wall_s_left, self.status.clock())
            self.status.tokens = max(self.status.tokens, e.tokens_used)

    def _launch(self, e: LaunchEvent) -> None:
        of = f" of {self.max_launches}" if self.max_launches else ""
        self._print(Text(f"launch {e.attempt}{of} (pid {e.pid}), log {e.log_path}", style="bold cyan"))
        with self.status.lock:
            # The budget was counted before this launch; the line counts it as spent.
            if self.status.launches is not None:
                used, left = self.status.launches
                self.status.launches = (used + 1, None if left is None else left - 1)
        self._run_live(f"launch {e.attempt}{of}", "starting")

    def _stage(self, e: StageEvent) -> None:
        with self.status.lock:
            self.status.stage = e.label or e.stage
            self.status.stage_since = self.status.clock()

    def _outcome(self, e: OutcomeEvent) -> None:
        o = e.outcome
        shown = outcome_label(o)
        line = Text(f"launch {e.attempt}: {shown.upper()} after {duration(o.elapsed_s)}: ")
        line.stylize(OUTCOME_STYLE.get(shown, "bold"))
        line.append(o.detail)
        self._print(line)

    def _supervise(self, e: SuperviseEvent) -> None:
        pid = f" (pid {e.pid})" if e.pid is not None else ""
        self._print(Text(f"serving at {e.url}{pid}", style="bold green"))
        self.console.print(Text("working command:", style="bold"))
        self.console.print(Text(e.command, style="green"), soft_wrap=True)
        self.console.print(Text("supervising; Ctrl-C to stop", style="bold"))

    def _evidence(self, e: EvidenceEvent) -> None:
        self._run_live(f"diagnosing launch {e.attempt}", "reading the log")

    def _tool_call(self, e: ToolCallEvent) -> None:
        with self.status.lock:
            self.status.stage = f"the LLM reads {e.name}"
            self.status.stage_since = self.status.clock()

    def _decision(self, e: DecisionEvent) -> None:
        with self.status.lock:
            self.status.tokens += e.tokens
        d = e.decision
        change = None
        if isinstance(d, Fix) and self.command is not None:
            preflight = e.attempt == 0 and d.playbook == "preflight" and self.corrected is not None
            self.proposed = self.corrected if preflight else self.command.apply_all(d.edits, self.canon)
            change = diff(self.command, self.proposed, self.canon)
        findings = self.findings if d.playbook == "preflight" else ()
        self._print(decision_panel(d, attempt=e.attempt, planner=e.planner, change=change, findings=findings))
        for error in e.rule_errors:
            self._print(Text(f"warning: {error} (skipped; please report it)", style="yellow"))

    def _approval(self, e: ApprovalEvent) -> None:
        if e.by == "policy":
            verdict = "applied" if e.approved else "not applied"
            self._print(Text(f"{verdict} by policy: {e.note}", style="dim"))

    def _edit(self, e: EditEvent) -> None:
        old, new = LaunchCommand.parse(e.old_command), LaunchCommand.parse(e.new_command)
        if self.proposed is not None and new != self.proposed:
            self._print(Text("the change as you edited it:", style="bold"))
            self.console.print(diff_text(diff(old, new, self.canon)))
        self.command, self.proposed = new, None

    def _stop(self, e: StopEvent) -> None:
        style = "green" if e.result == "healthy" else "red" if e.result == "error" else "yellow"
        title = f"{e.result.upper()} · exit {e.exit_code}"
        self.pause()
        if e.result == "interrupted":
            self.console.print()  # off the line where the terminal echoed ^C
        self.console.print(
            Panel(Text(e.message, style=f"bold {style}"), title=title, title_align="left", border_style=style)
        )
        if e.final_command:
            # Outside the panel and soft-wrapped, so it copies and pastes as one line.
            self.console.print(Text("working command:", style="bold"))
            self.console.print(Text(e.final_command, style="green"), soft_wrap=True)
