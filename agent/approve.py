"""Approvers decide whether a proposed change is applied: a policy when unattended, a person in `fix`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.playbooks.decision import Fix
from specdoctor.playbooks.gate import Refusal, Touch, needing_a_person
from specdoctor.tools.command import LaunchCommand
from specdoctor.tools.edit_policy import Allowance


class Review(BaseModel):
    model_config = ConfigDict(frozen=True)
    approved: bool
    spec: LaunchCommand | None = Field(
        default=None, description="The command to launch (a person may have edited it)."
    )
    by: str = "policy"
    note: str = ""
    ask_llm: bool = Field(default=False, description="The person wants the LLM's opinion instead.")
    refused: tuple[Refusal, ...] = Field(default=(), description="Edits the policy would not make unasked.")
    skip: bool = Field(default=False, description="Launch the command as it is, with no change.")
    declined: bool = Field(default=False, description="The person quit: the run ends, declined (exit 130).")


class Approver(Protocol):
    kind: str
    """`policy` or `user`: who decides, as the transcript records it."""

    def confirm(self, question: str) -> bool: ...

    def review(
        self,
        old: LaunchCommand,
        decision: Fix,
        new: LaunchCommand,
        attempt: int,
        note: str = "",
        touches: Sequence[Touch] = (),
        alternative: LaunchCommand | None = None,
    ) -> Review:
        """`touches`: the policy class of every flag and variable the change touches (and whether it is
        pinned). `alternative`: the person's last edit as the static check fixed it (as typed when it
        could not), offered beside the proposal `new`."""
        ...


class PolicyApprover:
    """Unattended: apply a fix when it touches only tuning (or what the user allowed) and the planner is
    confident enough; otherwise stop and say why."""

    kind = "policy"

    def __init__(self, min_confidence: float = 0.5, allowance: Allowance | None = None) -> None:
        self.min_confidence = min_confidence
        self.allowance = allowance or Allowance()

    def confirm(self, question: str) -> bool:
        """Unattended, leave was given up front (--allow-kill), which is why it is asked at all."""
        return True

    def review(
        self,
        old: LaunchCommand,
        decision: Fix,
        new: LaunchCommand,
        attempt: int,
        note: str = "",
        touches: Sequence[Touch] = (),
        alternative: LaunchCommand | None = None,
    ) -> Review:
        refused = needing_a_person(touches, self.allowance)
        if refused:
            return Review(
                approved=False,
                note=f"{decision.summary}; the fix needs a person: " + "; ".join(r.reason for r in refused),
                refused=tuple(refused),
            )
        if decision.confidence < self.min_confidence:
            return Review(
                approved=False,
                note=f"the fix's confidence {decision.confidence:.2f} is under the policy's {self.min_confidence:.2f} "
                f"({decision.summary}); run `specdoctor fix` to decide yourself",
            )
        return Review(approved=True, spec=new, note=f"confidence {decision.confidence:.2f}")
