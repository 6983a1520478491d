"""Human output: colour through rich on a terminal, plain text otherwise (and rich is then never imported)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import TextIO

from specdoctor.playbooks.decision import Finding
from specdoctor.tools.command import DiffLine
from specdoctor.tools.outcome import Outcome
from specdoctor.tools.redact import redact_text

_MARK = {"error": ("✗", "bold red"), "warning": ("!", "yellow"), "info": ("·", "cyan")}
DIFF_STYLE = {"added": "green", "removed": "red", "changed": "yellow"}
OUTCOME_STYLE = {
    "healthy": "bold green",
    "healthy, acceptance unmeasured": "bold yellow",
    "degraded": "bold yellow",
    "exited": "bold red",
    "hung": "bold red",
    "unhealthy": "bold red",
}


_UNDECIDED = {
    "none": "no rule matched",
    "llm-unreachable": "the LLM was unreachable",
    "llm-failed": "the LLM could not be asked",
}
"""Planner labels of a stop nobody decided: no confidence is shown for them."""


def decided_by(planner: str, playbook: str | None) -> tuple[str, bool]:
    """Who made a decision, for a person (`playbook X`, `the LLM (gpt-4.1-mini)`), and whether a planner
    really decided (False: no rule matched, or the LLM could not be reached or asked)."""
    if planner in _UNDECIDED:
        return _UNDECIDED[planner], False
    if playbook:
        return f"playbook {playbook}", True
    if planner.startswith("llm:"):
        return f"the LLM ({planner[4:]})", True
    return ("the LLM" if planner == "llm" else planner), True


def outcome_label(outcome: Outcome) -> str:
    """The outcome's name for a person: a server whose acceptance was not measured is not plainly healthy."""
    return "healthy, acceptance unmeasured" if outcome.acceptance == "unmeasured" else outcome.kind


class Out:
    """Writes lines with an optional style; styles are dropped when the stream is not a terminal.

    Every line is redacted unless `show_secrets`: deploy output lands in CI and systemd logs."""

    def __init__(
        self, stream: TextIO | None = None, color: bool | None = None, *, show_secrets: bool = False
    ) -> None:
        self.stream = stream or sys.stdout
        self.show_secrets = show_secrets
        self.color = self.stream.isatty() if color is None else color
        self._console = None
        if self.color:
            from rich.console import Console

            self._console = Console(file=self.stream, highlight=False, soft_wrap=True)

    def line(self, text: str = "", style: str | None = None) -> None:
        if not self.show_secrets:
            text = redact_text(text)
        if self._console is None:
            print(text, file=self.stream)
            return
        from rich.text import Text

        self._console.print(Text(text, style=style or ""))

    def lines(self, texts: Iterable[str], style: str | None = None, indent: str = "") -> None:
        for t in texts:
            self.line(indent + t, style)


def finding_lines(out: Out, f: Finding) -> None:
    mark, style = _MARK[f.severity]
    out.line(f"{mark} {f.severity:<7} {f.message}", style)
    for e in f.evidence[:2]:
        out.line(f"          evidence: {e}", "dim")
    if f.edits:
        out.line(f"          fix: {'; '.join(e.describe() for e in f.edits)}", "green")
    elif f.severity == "error":
        out.line("          fix: none known; change it by hand", "dim")
    if f.why:
        out.line(f"          why: {f.why}", "dim")


def diff_lines(out: Out, lines: Sequence[DiffLine], indent: str = "  ") -> None:
    for d in lines:
        out.line(indent + d.text(), DIFF_STYLE[d.change])
