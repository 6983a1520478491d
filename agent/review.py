"""The one way a proposed fix becomes the next command: the approver sees it, a person's own edit is
checked before it costs a launch, the LLM may be asked instead, a pinned flag is never changed unasked, and
a command already tried is refused."""

from __future__ import annotations

from collections.abc import Callable

from specdoctor.agent.approve import Approver, Review
from specdoctor.agent.events import ApprovalEvent, EditEvent, EventBus
from specdoctor.agent.planner import Planned, Planner
from specdoctor.agent.preflight import preflight
from specdoctor.agent.results import Declined, Stopped
from specdoctor.playbooks.base import Context
from specdoctor.playbooks.decision import Fix
from specdoctor.playbooks.gate import Touch, invalid_edits, touches
from specdoctor.playbooks.host_checks import port_of
from specdoctor.playbooks.view import CommandView
from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.command import LaunchCommand, SetFlag, SetFreePort
from specdoctor.tools.gpu import GpuReport
from specdoctor.tools.port_owner import held_by
from specdoctor.tools.system import find_free_port

Record = Callable[[int, Planned], None]
"""Records a decision made during review (the LLM's second opinion) in the run's events and budget."""


class Reviewer:
    def __init__(
        self,
        approver: Approver,
        catalog: FlagCatalog,
        bus: EventBus,
        llm: Planner | None,
        record: Record,
        pinned: frozenset[str] = frozenset(),
    ) -> None:
        self.approver, self.catalog, self.bus, self.llm, self.record = approver, catalog, bus, llm, record
        self.pinned = pinned
        """Canonical flags no automatic decision may change (`--pin`, deploy's --port and --host)."""
        self.last_ctx: Context | None = None
        """The last failure, for a second opinion."""
        self.gpus: GpuReport | None = None

    def next_command(
        self,
        command: LaunchCommand,
        decision: Fix,
        attempt: int,
        tried: list[LaunchCommand],
        corrected: LaunchCommand | None = None,
    ) -> LaunchCommand:
        """The command to launch next; raises Stopped when the change is refused or leads nowhere new."""
        invalid = invalid_edits(command, decision.edits, self.catalog, tried[0] if tried else command)
        if invalid:
            review = Review(
                approved=False, note=f"{decision.summary}; the change is invalid", refused=tuple(invalid)
            )
            proposed = command
        else:
            decision, review, proposed = self._approve(command, decision, attempt, corrected)
        self.bus.emit(
            ApprovalEvent(
                attempt=attempt,
                approved=review.approved,
                by=review.by,
                note=review.note,
                edited_command=review.spec.shell()
                if review.spec is not None and review.spec != proposed
                else None,
                refused=review.refused,
            )
        )
        if review.declined:
            raise Declined(f"declined by the user at the prompt: {decision.summary}", command)
        if review.skip:
            return command
        if not review.approved or review.spec is None:
            raise Stopped(f"the change was not applied: {review.note}", command)
        if review.spec in tried:
            raise Stopped(
                f"{decision.summary}; the fix leads to a command already tried, so no flag change is left to try",
                command,
            )
        self.bus.emit(
            EditEvent(
                attempt=attempt,
                edits=decision.edits,
                old_command=command.shell(),
                new_command=review.spec.shell(),
            )
        )
        return review.spec

    def _approve(
        self, command: LaunchCommand, decision: Fix, attempt: int, corrected: LaunchCommand | None
    ) -> tuple[Fix, Review, LaunchCommand]:
        """Ask until the approver settles (the decision, the review, and the command it was shown): a
        person's edit with problems goes round again with the proposal and the edit as the static check
        fixed it both offered, and a request for the LLM's opinion goes round with the LLM's proposal."""
        proposed = resolve_ports(
            corrected or command.apply_all(decision.edits, self.catalog.canonical), decision
        )
        note, alternative = "", None
        while True:
            found = touches(decision.edits, self.catalog, command, self.pinned)
            holder = self._port_holder(command, found)
            review = self.approver.review(
                command,
                decision,
                proposed,
                attempt,
                note="; ".join(x for x in (note, holder) if x),
                touches=found,
                alternative=alternative,
            )
            if review.ask_llm:
                other, note = self._second_opinion(attempt)
                if isinstance(other, Fix):
                    decision = other
                    proposed = resolve_ports(command.apply_all(other.edits, self.catalog.canonical), other)
                continue
            if holder and any(r.pinned for r in review.refused):
                review = review.model_copy(update={"note": f"{review.note}; {holder}"})
            checked = self._check_edit(review, proposed, alternative)
            if checked is None:
                return decision, review, proposed
            alternative, note = checked

    def _check_edit(
        self, review: Review, proposed: LaunchCommand, alternative: LaunchCommand | None
    ) -> tuple[LaunchCommand, str] | None:
        """A command a person typed goes through preflight before it costs a launch. With problems, the
        edit as the check fixes it is offered beside the proposal (as typed when the check cannot fix it,
        or its fix would move a pinned flag); accepting an offered command launches it as it is."""
        edited = review.spec
        if review.by != "user" or not review.approved or edited is None or edited in (proposed, alternative):
            return None
        report = preflight(edited, self.catalog, gpus=self.gpus, host=True)
        errors = [f for f in report.findings if f.severity == "error"]
        if not errors:
            return None
        fixed = report.corrected
        if any(t.pinned for t in touches(report.edits(), self.catalog, edited, self.pinned)):
            fixed = edited
        note = "your edit has problems: " + "; ".join(f.message for f in errors[:3])
        return fixed, note

    def _port_holder(self, command: LaunchCommand, found: list[Touch]) -> str:
        """Who holds the command's port, when the change would move a pinned --port (empty otherwise)."""
        if not any(t.pinned and t.classed.name == "--port" for t in found):
            return ""
        port, host = port_of(CommandView(command, self.catalog))
        return held_by(host, port) or ""

    def _second_opinion(self, attempt: int) -> tuple[Fix | None, str]:
        """The LLM's decision on the last failure, when a person asked for it instead of the playbook's."""
        if self.llm is None:
            return (
                None,
                "no LLM endpoint is configured (set SPECDOCTOR_LLM_BASE_URL and SPECDOCTOR_LLM_MODEL)",
            )
        if self.last_ctx is None:
            return None, "there is no failure to ask about yet (this change comes from the static check)"
        planned = self.llm.plan(self.last_ctx)
        if planned.decision is None:
            return None, f"the LLM gave no answer: {planned.note}"
        self.record(attempt, planned)
        if isinstance(planned.decision, Fix):
            return planned.decision, ""
        return None, f"the LLM says: {planned.decision.summary}"


def resolve_ports(command: LaunchCommand, decision: Fix) -> LaunchCommand:
    """Give each "a free port from N" edit a port that is free on this host now."""
    for edit in decision.edits:
        if isinstance(edit, SetFreePort):
            host = command.value("--host") or "127.0.0.1"
            port = find_free_port(edit.start, host)
            if port is not None:
                command = command.apply(SetFlag(flag=edit.flag, values=(str(port),)))
    return command
