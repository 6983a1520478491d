"""Replay a recorded session: feed its recorded outcomes and evidence to TODAY's planners and report, step by
step, whether they decide the same. A regression suite for playbooks that needs no GPU and no engine."""

from __future__ import annotations

from pydantic import BaseModel

from specdoctor.agent.diagnose import context_for, default_planner
from specdoctor.agent.events import EvidenceEvent, PreflightEvent
from specdoctor.agent.planner import Planner
from specdoctor.agent.preflight import HostFacts, preflight
from specdoctor.agent.transcript import Transcript
from specdoctor.playbooks.decision import Decision, Fix
from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.catalog_load import bundled, bundled_versions
from specdoctor.tools.command import LaunchCommand, diff


class Step(BaseModel):
    attempt: int
    what: str
    same: bool
    recorded: str
    today: str
    changes: list[str] = []
    skipped: str | None = None


def catalog_of(transcript: Transcript) -> FlagCatalog:
    start = transcript.run_start
    version = start.engine_version if start and start.engine_version in bundled_versions() else "0.5.23"
    return bundled(version)


def _describe(decision: Decision, spec: LaunchCommand, catalog: FlagCatalog) -> str:
    if isinstance(decision, Fix):
        return f"fix [{decision.category}] → {spec.apply_all(decision.edits, catalog.canonical).shell()}"
    return f"{decision.action} [{decision.category}] {decision.summary}"


def _same(a: Decision, b: Decision, spec: LaunchCommand, catalog: FlagCatalog) -> bool:
    if a.action != b.action or a.category != b.category:
        return False
    if isinstance(a, Fix) and isinstance(b, Fix):
        return spec.apply_all(a.edits, catalog.canonical) == spec.apply_all(b.edits, catalog.canonical)
    return True


def replay(transcript: Transcript, planner: Planner | None = None) -> list[Step]:
    catalog = catalog_of(transcript)
    planner = planner or default_planner()
    steps = [step for step in [_preflight_step(transcript, catalog)] if step is not None]
    tried: list[LaunchCommand] = []
    for group in transcript.attempts():
        launch, outcome, recorded = group.launch, group.outcome, group.decision
        if launch is None:
            continue
        spec = LaunchCommand.parse(launch.command)
        tried.append(spec)
        evidence = next((e for e in group.events if isinstance(e, EvidenceEvent)), None)
        if outcome is None or recorded is None:
            continue
        if evidence is None or recorded.planner.startswith("llm"):
            skipped = (
                "no evidence was recorded for this attempt"
                if evidence is None
                else "decided by an LLM; replay runs the playbooks only"
            )
            steps.append(
                Step(
                    attempt=group.number,
                    what="decision",
                    same=True,
                    recorded=_describe(recorded.decision, spec, catalog),
                    today="",
                    skipped=skipped,
                )
            )
            continue
        ctx = context_for(
            spec,
            catalog,
            [*evidence.root_cause.block, *evidence.log_text.splitlines()],
            gpus=evidence.gpus,
            outcome=outcome.outcome,
            tried=tuple(tried),
            log_text=evidence.log_text,
            root=evidence.root_cause,
            model=evidence.model,
            draft=evidence.draft,
            engine_check=evidence.engine_check,
        )
        today = planner.plan(ctx).decision
        assert today is not None
        steps.append(_compare(group.number, "decision", recorded.decision, today, spec, catalog))
    return steps


def _compare(
    attempt: int, what: str, recorded: Decision, today: Decision, spec: LaunchCommand, catalog: FlagCatalog
) -> Step:
    same = _same(recorded, today, spec, catalog)
    changes: list[str] = []
    if not same and isinstance(recorded, Fix) and isinstance(today, Fix):
        before = spec.apply_all(recorded.edits, catalog.canonical)
        after = spec.apply_all(today.edits, catalog.canonical)
        changes = [d.text() for d in diff(before, after, catalog.canonical)]
    return Step(
        attempt=attempt,
        what=what,
        same=same,
        recorded=_describe(recorded, spec, catalog),
        today=_describe(today, spec, catalog),
        changes=changes,
    )


def _preflight_step(transcript: Transcript, catalog: FlagCatalog) -> Step | None:
    """Re-run preflight on the recorded command with the host facts it recorded (config.json files,
    ports, GPUs), so a changed host-dependent check shows up as a divergence."""
    start = transcript.run_start
    recorded = next((e for e in transcript.events if isinstance(e, PreflightEvent)), None)
    if start is None or recorded is None:
        return None
    spec = LaunchCommand.parse(start.command)
    recorded_cmd = LaunchCommand.parse(recorded.corrected_command)
    if not (recorded.models or recorded.ports):
        return Step(
            attempt=0,
            what="preflight",
            same=True,
            recorded=recorded_cmd.shell(),
            today="",
            skipped="recorded without the host facts preflight read (an older specdoctor): re-record to replay it",
        )
    facts = HostFacts(models=dict(recorded.models), ports=dict(recorded.ports), live=False)
    today_cmd = preflight(spec, catalog, gpus=recorded.gpus, facts=facts).corrected
    same = today_cmd == recorded_cmd
    return Step(
        attempt=0,
        what="preflight",
        same=same,
        recorded=recorded_cmd.shell(),
        today=today_cmd.shell(),
        changes=[] if same else [d.text() for d in diff(recorded_cmd, today_cmd, catalog.canonical)],
    )
