"""Planners turn a failure (a Context) into a Decision. Playbooks first, then the LLM, then a plain stop."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Protocol

from agent.decision import Decision, Stop
from playbooks.base import Context, Playbook


class Planner(Protocol):
    """Anything that can decide what to do about a failed launch; None means "not mine"."""

    name: str

    def decide(self, ctx: Context) -> Decision | None: ...


class PlaybookPlanner:
    """Runs the playbooks in priority order; the first that recognises the failure decides."""

    name = "playbooks"

    def __init__(self, playbooks: Iterable[Playbook] | None = None) -> None:
        if playbooks is None:
            from playbooks.registry import all_playbooks

            playbooks = all_playbooks()
        self.playbooks: tuple[Playbook, ...] = tuple(sorted(playbooks, key=lambda p: p.priority))
        self.errors: list[str] = []

    def decide(self, ctx: Context) -> Decision | None:
        for pb in self.playbooks:
            try:
                decision = pb.run(ctx)
            except Exception as exc:  # a broken rule must not cost the diagnosis; the next rule gets its turn
                self.errors.append(f"playbook {pb.id} failed: {type(exc).__name__}: {exc}")
                continue
            if decision is not None:
                return decision
        return None


class ChainPlanner:
    """Asks each planner in turn; if none decides, stops with what is known."""

    name = "chain"

    def __init__(self, planners: Sequence[Planner], notes: Sequence[str] = ()) -> None:
        self.planners = tuple(planners)
        self.notes = tuple(notes)
        self.last_planner = ""
        """`playbooks`, `llm` or `none`: which planner made the last decision."""

    def decide(self, ctx: Context) -> Decision:
        for planner in self.planners:
            decision = planner.decide(ctx)
            if decision is not None:
                self.last_planner = planner.name
                return decision
        self.last_planner = "none"
        return no_rule_matched(ctx, self.notes)

    def take_errors(self) -> tuple[str, ...]:
        """The rule failures since the last call, from every planner that records them."""
        taken: list[str] = []
        for planner in self.planners:
            errors = getattr(planner, "errors", None)
            if errors:
                taken.extend(errors)
                errors.clear()
        return tuple(taken)


def no_rule_matched(ctx: Context, notes: Sequence[str] = ()) -> Stop:
    cause = ctx.root.error_line or ctx.outcome.detail or f"the launch ended: {ctx.outcome.kind}"
    advice = "Read the evidence lines; if a flag change can fix it, run `specdoctor fix` to try it by hand."
    if notes:
        advice += " " + " ".join(notes)
    return Stop(
        category=_guess_category(ctx),
        summary=f"no playbook recognises this failure: {cause}",
        advice=advice,
        evidence=ctx.evidence(),
        confidence=0.2,
    )


_INTERNAL_ERROR = re.compile(
    r"^(?:\w+\.)*(?:AssertionError|RuntimeError|ValueError|TypeError|AttributeError|IndexError|KeyError|NotImplementedError)\b"
)


def _guess_category(ctx: Context) -> str:
    """With no rule: an exception raised inside SGLang that names no flag is most often a bug of that
    version (the stop is the same either way; only the label differs)."""
    line = ctx.root.error_line or ""
    if ctx.root.kind == "exception" and _INTERNAL_ERROR.search(line) and "--" not in line:
        return "engine-bug"
    return "other"
