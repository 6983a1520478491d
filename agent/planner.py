"""Planners turn a failure (a Context) into a Decision. Playbooks first, then the LLM, then a plain stop."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.playbooks.base import Context, Playbook
from specdoctor.playbooks.decision import Decision, Fix, Stop
from specdoctor.playbooks.gate import Refusal, invalid_edits


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
    refused: tuple[Refusal, ...] = Field(
        default=(), description="Fixes the gate turned down on the way (an invalid edit), with why."
    )
    note: str = Field(default="", description="Why there is no decision, when there is none.")
    trace: tuple[str, ...] = Field(
        default=(), description="What the planner did, a line a step (LLM tool calls)."
    )

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
        refused: list[Refusal] = []
        for pb in self.playbooks:
            try:
                decision = pb.run(ctx)
            except Exception as exc:  # a broken rule must not cost the diagnosis; the next rule gets its turn
                errors.append(f"playbook {pb.id} failed: {type(exc).__name__}: {exc}")
                continue
            if decision is not None and (turned_down := gate(ctx, decision)):
                refused.extend(turned_down)  # the next rule may know a valid fix
                continue
            if decision is not None:
                return Planned(
                    decision=decision, planner=self.name, rule_errors=tuple(errors), refused=tuple(refused)
                )
        return Planned(decision=None, planner=self.name, rule_errors=tuple(errors), refused=tuple(refused))


class ChainPlanner:
    """Asks each planner in turn; if none decides, stops with what is known."""

    name = "chain"

    def __init__(self, planners: Sequence[Planner], notes: Sequence[str] = ()) -> None:
        self.planners = tuple(planners)
        self.notes = tuple(notes)

    def plan(self, ctx: Context) -> Planned:
        errors: list[str] = []
        refused: list[Refusal] = []
        for planner in self.planners:
            planned = planner.plan(ctx)
            errors.extend(planned.rule_errors)
            refused.extend(planned.refused)
            if planned.decision is not None and (turned_down := gate(ctx, planned.decision)):
                refused.extend(turned_down)
                continue
            if planned.decision is not None:
                return planned.model_copy(update={"rule_errors": tuple(errors), "refused": tuple(refused)})
        notes = (*self.notes, *_refusal_notes(refused))
        return Planned(
            decision=no_rule_matched(ctx, notes),
            planner="none",
            rule_errors=tuple(errors),
            refused=tuple(refused),
        )


def gate(ctx: Context, decision: Decision) -> list[Refusal]:
    """The validity half of the one gate, for a planner's decision about this failure."""
    if not isinstance(decision, Fix):
        return []
    original = ctx.tried[0] if ctx.tried else ctx.spec
    return invalid_edits(ctx.spec, decision.edits, ctx.catalog, original)


def _refusal_notes(refused: Sequence[Refusal]) -> tuple[str, ...]:
    return tuple(f"Refused as invalid: {r.edit} ({r.reason})." for r in refused[:3])


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
