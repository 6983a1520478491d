"""Planners turn a failure (a Context) into a Decision. Playbooks first, then the LLM, then a plain stop."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.playbooks.base import Context, Playbook
from specdoctor.playbooks.decision import Decision, Stop


class Planned(BaseModel):
    """A planner's answer with what it took: which planner decided, the tokens it spent, the rules that
    broke on the way, and (when it did not decide) why."""

    model_config = ConfigDict(frozen=True)
    decision: Decision | None
    planner: str = Field(description="`playbooks`, `llm`, `none` (no rule matched) or `preflight`.")
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    rule_errors: tuple[str, ...] = Field(
        default=(), description="Rules that raised (skipped), one line each."
    )
    note: str = Field(default="", description="Why there is no decision, when there is none.")

    @property
    def total_tokens(self) -> int:
        return (self.prompt_tokens or 0) + (self.completion_tokens or 0)


class Planner(Protocol):
    """Anything that can decide what to do about a failed launch; a None decision means "not mine"."""

    name: str

    def plan(self, ctx: Context) -> Planned: ...


class PlaybookPlanner:
    """Runs the playbooks in priority order; the first that recognises the failure decides."""

    name = "playbooks"

    def __init__(self, playbooks: Iterable[Playbook] | None = None) -> None:
        if playbooks is None:
            from specdoctor.playbooks.registry import all_playbooks

            playbooks = all_playbooks()
        self.playbooks: tuple[Playbook, ...] = tuple(sorted(playbooks, key=lambda p: p.priority))

    def plan(self, ctx: Context) -> Planned:
        errors: list[str] = []
        for pb in self.playbooks:
            try:
                decision = pb.run(ctx)
            except Exception as exc:  # a broken rule must not cost the diagnosis; the next rule gets its turn
                errors.append(f"playbook {pb.id} failed: {type(exc).__name__}: {exc}")
                continue
            if decision is not None:
                return Planned(decision=decision, planner=self.name, rule_errors=tuple(errors))
        return Planned(decision=None, planner=self.name, rule_errors=tuple(errors))


class ChainPlanner:
    """Asks each planner in turn; if none decides, stops with what is known."""

    name = "chain"

    def __init__(self, planners: Sequence[Planner], notes: Sequence[str] = ()) -> None:
        self.planners = tuple(planners)
        self.notes = tuple(notes)

    def plan(self, ctx: Context) -> Planned:
        errors: list[str] = []
        for planner in self.planners:
            planned = planner.plan(ctx)
            errors.extend(planned.rule_errors)
            if planned.decision is not None:
                return planned.model_copy(update={"rule_errors": tuple(errors)})
        return Planned(decision=no_rule_matched(ctx, self.notes), planner="none", rule_errors=tuple(errors))


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
