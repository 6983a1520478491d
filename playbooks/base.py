"""What a playbook sees, and how one is declared.

A playbook is a small pure function of (context, match) that returns a Decision, or None when the failure
is not the one it knows. It never guesses: when nothing is close it returns None and the next planner
(another playbook, the LLM, or a plain stop) gets its turn.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeVar

from specdoctor.playbooks.decision import Category, Decision, Finding, Fix, Stop
from specdoctor.playbooks.reported import reported as sentences_reported
from specdoctor.playbooks.view import CommandView
from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.command import Edit, LaunchCommand
from specdoctor.tools.engine_source.lookup import Located
from specdoctor.tools.gpu import GpuReport
from specdoctor.tools.log_cause import Frame, RootCause
from specdoctor.tools.outcome import Outcome, OutcomeKind
from specdoctor.tools.system import ModelFacts

__all__ = ["CommandView", "Context", "Playbook", "fix", "line_of", "playbook", "stop"]


@dataclass(frozen=True)
class Context:
    """Everything a playbook may look at. All of it is data already gathered; nothing here runs."""

    spec: LaunchCommand
    catalog: FlagCatalog
    outcome: Outcome
    root: RootCause
    log_text: str = ""
    gpus: GpuReport | None = None
    model: ModelFacts | None = None
    draft: ModelFacts | None = None
    tried: tuple[LaunchCommand, ...] = ()
    findings: tuple[Finding, ...] = field(default=())
    engine_check: Located | None = None
    """The engine statement the failure was raised at (or whose message the log shows), as the agent found
    it in the installed engine, the traceback or the bundled index."""

    @cached_property
    def view(self) -> CommandView:
        return CommandView(self.spec, self.catalog)

    @cached_property
    def reported(self) -> tuple[str, ...]:
        """Sentences a person wrote about the failure next to the log (`playbooks/reported.py`), read once."""
        return tuple(sentences_reported(self.log_text))

    @cached_property
    def root_text(self) -> str:
        """Only the root cause: its line, message, traceback block and the exceptions it was raised from."""
        parts = [self.root.error_line or "", self.root.message, *self.root.block, *self.root.chain]
        return "\n".join(p for p in parts if p)

    @cached_property
    def search_text(self) -> str:
        """The text trigger patterns are searched in: the root-cause block, then the compacted log."""
        parts = [self.root.error_line or "", *self.root.block, self.root.wrapper or "", self.log_text]
        if self.outcome.kind in ("unhealthy", "degraded"):
            # A request the server turned away says why in its answer, which the server's log never shows.
            parts.append(self.outcome.detail)
        return "\n".join(p for p in parts if p)

    def evidence(self, *patterns: str, limit: int = 4) -> tuple[str, ...]:
        """Log lines matching any pattern (the root-cause line first), for the user to see."""
        lines: list[str] = []
        if self.root.error_line:
            lines.append(self.root.error_line.strip())
        for line in self.search_text.splitlines():
            text = line.strip()
            if text and text not in lines and any(re.search(p, text) for p in patterns):
                lines.append(text)
        return tuple(lines[:limit])

    def already_tried(self, edits: Iterable[Edit]) -> bool:
        candidate = self.spec.apply_all(edits, self.view.canon)
        return candidate == self.spec or candidate in self.tried


# ---- declaring playbooks ---------------------------------------------------------------------------

PlaybookFn = Callable[[Context, "re.Match[str] | None"], Decision | None]


@dataclass(frozen=True)
class Playbook:
    id: str
    category: Category
    when: frozenset[OutcomeKind]
    pattern: re.Pattern[str] | None
    fn: PlaybookFn
    doc: str
    priority: int = 50
    source: str = "builtin"
    scope: str = "log"
    """`log`: the pattern is searched in the compacted log; `root`: only in the root-cause block."""

    def match(self, ctx: Context) -> re.Match[str] | bool | None:
        """The trigger's match, True when there is no pattern, False when it does not apply."""
        if ctx.outcome.kind not in self.when:
            return False
        if self.pattern is None:
            return True
        text = ctx.root_text if self.scope == "root" else ctx.search_text
        return self.pattern.search(text) or False

    def run(self, ctx: Context) -> Decision | None:
        m = self.match(ctx)
        if m is False:
            return None
        decision = self.fn(ctx, m if isinstance(m, re.Match) else None)
        if decision is not None and decision.playbook is None:
            decision = decision.model_copy(update={"playbook": self.id})
        return decision


REGISTRY: list[Playbook] = []
F = TypeVar("F", bound=PlaybookFn)


def playbook(
    id: str,
    category: Category,
    when: Sequence[OutcomeKind] = ("exited",),
    pattern: str | None = None,
    priority: int = 50,
    scope: str = "log",
) -> Callable[[F], F]:
    """Register a playbook: it runs when the outcome kind is in `when` and `pattern` is found."""

    def register(fn: F) -> F:
        REGISTRY.append(
            Playbook(
                id=id,
                category=category,
                when=frozenset(when),
                pattern=re.compile(pattern, re.M) if pattern else None,
                fn=fn,
                doc=(fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else "",
                priority=priority,
                scope=scope,
            )
        )
        return fn

    return register


@dataclass(frozen=True)
class StopRule:
    """A failure no flag change can fix, known by its message: a row of data, not a function."""

    id: str
    category: Category
    pattern: str
    summary: str
    advice: str
    doc: str
    priority: int = 50


def stop_rules(module: str, rules: Sequence[StopRule]) -> None:
    """Register each row as a playbook of the family `module` (family order breaks priority ties)."""
    for rule in rules:

        def decide(ctx: Context, m: re.Match[str] | None, rule: StopRule = rule) -> Decision | None:
            return stop(ctx, rule.category, rule.summary, rule.advice)

        decide.__module__, decide.__doc__ = module, rule.doc
        playbook(id=rule.id, category=rule.category, pattern=rule.pattern, priority=rule.priority)(decide)


def line_of(m: re.Match[str]) -> str:
    """The whole log line a trigger matched in."""
    text, at = m.string, m.end()
    end = text.find("\n", at)
    return text[text.rfind("\n", 0, at) + 1 : end if end >= 0 else len(text)]


def fix(
    ctx: Context,
    edits: Sequence[Edit],
    category: Category,
    summary: str,
    why: str = "",
    evidence: Sequence[str] = (),
    confidence: float = 0.9,
) -> Fix | None:
    """A Fix, unless its command was already tried (then this playbook has nothing new to offer)."""
    if not edits or ctx.already_tried(edits):
        return None
    return Fix(
        edits=tuple(edits),
        category=category,
        summary=summary,
        why=why,
        evidence=tuple(evidence) or ctx.evidence(),
        confidence=confidence,
    )


def stop(
    ctx: Context,
    category: Category,
    summary: str,
    advice: str,
    evidence: Sequence[str] = (),
    confidence: float = 0.85,
) -> Stop:
    return Stop(
        category=category,
        summary=summary,
        advice=advice,
        evidence=tuple(evidence) or ctx.evidence(),
        confidence=confidence,
        bug_report=bug_report(ctx, summary) if category == "engine-bug" else "",
    )


def bug_report(ctx: Context, summary: str) -> str:
    """What an SGLang maintainer asks for first, from what is known: version, GPUs, the command (secrets
    masked), where it raised, the last lines of the log."""
    from specdoctor.tools.redact import redact_spec, redact_text

    tail = [ln for ln in ctx.log_text.splitlines() if ln.strip()][-12:]
    lines = [
        f"**What happened**: {summary}",
        f"**SGLang**: {_version_for_report(ctx)}",
        f"**GPUs**: {ctx.gpus.summary() if ctx.gpus else 'not inspected'}",
        f"**Command**: `{redact_spec(ctx.spec).shell()}`",
        f"**Raised at**: {_raised_at(ctx)}",
        "**Last log lines**:",
        "```",
        *(redact_text(ln)[:300] for ln in tail),
        "```",
    ]
    return "\n".join(lines)


def _raised_at(ctx: Context) -> str:
    if ctx.engine_check is not None:
        site = ctx.engine_check.site
        return f"{site.file}:{site.line} ({site.function})"
    raising = sglang_frame(ctx)
    return place_of(raising) if raising else "not in the log"


def sglang_frame(ctx: Context) -> Frame | None:
    """The innermost frame of the root cause inside SGLang's code."""
    return next((f for f in reversed(ctx.root.frames) if "sglang" in f.path), None)


def place_of(frame: Frame) -> str:
    """`srt/x.py:12 (function)`: where in SGLang a frame is (no line when the log quoted none)."""
    line = f":{frame.line}" if frame.line else ""
    return f"{frame.path.rsplit('sglang/', 1)[-1]}{line} ({frame.function})"


def _version_for_report(ctx: Context) -> str:
    if not ctx.catalog.source.startswith("bundled"):
        return f"{ctx.catalog.version} ({ctx.catalog.source})"
    site = ctx.engine_check.site if ctx.engine_check else None
    near = f"; its source matches SGLang {site.release}'s" if site and site.release else ""
    return f"not known from the log (please add `pip show sglang`){near}"
