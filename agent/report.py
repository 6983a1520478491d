"""The final report: one JSON document a script or CI job reads to learn how a run went.

`ReportBuilder` is a sink: it keeps the run's events and derives the report from them on demand, so a
report can be written at any moment (Ctrl-C mid-launch included) and is always complete for what has
happened so far. Writes are atomic (temporary file + rename) and redacted.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.agent.events import (
    ApprovalEvent,
    BudgetEvent,
    DecisionEvent,
    DetachEvent,
    EditEvent,
    Event,
    HealthEvent,
    LaunchEvent,
    OutcomeEvent,
    PreflightEvent,
    ResultKind,
    RunMode,
    RunStartEvent,
    StopEvent,
    redact_payload,
    specdoctor_version,
)
from specdoctor.playbooks.decision import Category
from specdoctor.tools.command import Edit
from specdoctor.tools.detached import DetachedServer
from specdoctor.tools.errors import UsageError
from specdoctor.tools.outcome import AcceptanceVerdict, OutcomeKind

E = TypeVar("E", bound=BaseModel)

REPORT_SCHEMA = "specdoctor-report"
REPORT_VERSION = 1


class ReportError(UsageError):
    """The report could not be written; the message says where and why."""


class Diagnosis(BaseModel):
    model_config = ConfigDict(frozen=True)
    planner: str
    action: Literal["fix", "retry", "stop"]
    category: Category
    summary: str
    playbook: str | None = Field(default=None, description="The playbook that decided; None for the LLM.")
    confidence: float


class AttemptReport(BaseModel):
    """One launch: the command, how it ended, what was concluded and changed after it."""

    model_config = ConfigDict(frozen=True)
    number: int
    command: str
    outcome: OutcomeKind | None = Field(default=None, description="None: the launch had not ended.")
    detail: str = ""
    stage: str | None = Field(default=None, description="Last startup stage reached.")
    exit_code: int | None = None
    accept_length: float | None = None
    acceptance: AcceptanceVerdict | None = Field(
        default=None, description="Speculative verdict: working, low, none or unmeasured."
    )
    diagnosis: Diagnosis | None = None
    approved: bool | None = None
    edits: tuple[Edit, ...] = Field(default=(), description="Edits applied after this attempt.")
    duration_s: float | None = Field(default=None, description="From launch to outcome.")
    decision_s: float | None = Field(default=None, description="From outcome to the decision on it.")


class PreflightSummary(BaseModel):
    model_config = ConfigDict(frozen=True)
    findings: tuple[str, ...] = Field(default=(), description="`severity code: message`, one per finding.")
    corrected_command: str
    edits: tuple[Edit, ...] = Field(default=(), description="Edits applied before the first launch.")
    elapsed_ms: float = 0.0


class Timings(BaseModel):
    model_config = ConfigDict(frozen=True)
    total_s: float = Field(description="From run start to the last event.")
    preflight_ms: float | None = None
    per_attempt_s: tuple[float | None, ...] = ()
    to_decision_s: tuple[float, ...] = Field(
        default=(), description="Seconds from run start to each decision."
    )


class Tokens(BaseModel):
    model_config = ConfigDict(frozen=True)
    prompt: int = 0
    completion: int = 0
    total: int = Field(
        default=0,
        description="The budget's count when the loop reported one (it includes calls "
        "that ended in no decision); else prompt + completion.",
    )


class RunReport(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)
    schema_name: Literal["specdoctor-report"] = Field(default=REPORT_SCHEMA, alias="schema")
    version: int = REPORT_VERSION
    specdoctor_version: str = Field(default_factory=specdoctor_version)
    complete: bool = Field(description="False: written before the run ended (interrupted or in progress).")
    result: ResultKind | Literal["incomplete"]
    message: str
    exit_code: int | None = None
    mode: RunMode | None = None
    started: str | None = Field(default=None, description="ISO 8601 UTC.")
    command: str | None = Field(default=None, description="The command as given.")
    final_command: str | None = Field(default=None, description="The command that worked, if one did.")
    last_command: str | None = Field(default=None, description="The command launched or set up last.")
    detached: DetachedServer | None = Field(
        default=None,
        description="The server left running (deploy --detach): what `specdoctor stop` checks and stops.",
    )
    preflight: PreflightSummary | None = None
    attempts: tuple[AttemptReport, ...] = ()
    launches_used: int = 0
    tokens: Tokens = Tokens()
    timings: Timings

    def to_json(self) -> str:
        """Redacted JSON text, the way `write` stores it."""
        data = redact_payload(self.model_dump(mode="json", by_alias=True))
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


class ReportBuilder:
    """A sink that keeps a run's events and turns them into a `RunReport` whenever asked."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._events: list[Event] = []
        self._lock = threading.Lock()

    def handle(self, event: Event) -> None:
        with self._lock:
            self._events.append(event)

    def close(self) -> None:
        """Write the report to the path given at construction, if any."""
        if self.path is not None:
            self.write(self.path)

    def report(self) -> RunReport:
        with self._lock:
            events = list(self._events)
        return build_report(events)

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write the report atomically: readers see the old report or the new one, never half of one."""
        return write_atomic(Path(path), self.report().to_json())


def check_report_path(path: str | os.PathLike[str]) -> Path:
    """A `--report FILE` whose folder exists, checked before the run spends anything. A folder is never
    made for it: a mistyped path must not leave a new folder somewhere (at `/` when run as root)."""
    target = Path(path)
    if target.is_dir():
        raise ReportError(f"--report {target}: that is a folder; give a file name in it")
    if not target.parent.is_dir():
        raise ReportError(
            f"--report {target}: the folder {target.parent} does not exist; create it first or give another path"
        )
    return target


def write_atomic(path: Path, text: str) -> Path:
    try:
        if not path.parent.is_dir():
            raise FileNotFoundError(2, f"the folder {path.parent} does not exist")
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise ReportError(
            f"cannot write the report {path}: {exc.strerror or exc}; choose a writable path"
        ) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise ReportError(f"cannot write the report {path}: {exc.strerror or exc}") from None
        raise
    return path


# ---- building ------------------------------------------------------------------------------------


def build_report(events: list[Event]) -> RunReport:
    start = _first(events, RunStartEvent)
    stop = _last(events, StopEvent)
    attempts = _attempts(events)
    decisions = [e for e in events if isinstance(e, DecisionEvent)]
    budget = _last(events, BudgetEvent)
    prompt = sum(d.prompt_tokens or 0 for d in decisions)
    completion = sum(d.completion_tokens or 0 for d in decisions)
    preflight = _preflight(events)
    last_command = _last_command(events)
    return RunReport(
        complete=stop is not None,
        result=stop.result if stop else "incomplete",
        message=stop.message if stop else "the run had not finished when this report was written",
        exit_code=stop.exit_code if stop else None,
        mode=start.mode if start else None,
        started=_iso(start.t) if start else None,
        command=start.command if start else None,
        final_command=stop.final_command if stop else None,
        last_command=last_command,
        detached=detach.server if (detach := _last(events, DetachEvent)) else None,
        preflight=preflight,
        attempts=tuple(attempts),
        launches_used=sum(isinstance(e, LaunchEvent) for e in events),
        tokens=Tokens(
            prompt=prompt,
            completion=completion,
            total=budget.tokens_used if budget else prompt + completion,
        ),
        timings=Timings(
            total_s=max((e.elapsed_s for e in events), default=0.0),
            preflight_ms=preflight.elapsed_ms if preflight else None,
            per_attempt_s=tuple(a.duration_s for a in attempts),
            to_decision_s=tuple(d.elapsed_s for d in decisions),
        ),
    )


def _attempts(events: list[Event]) -> list[AttemptReport]:
    out: list[AttemptReport] = []
    for launch in (e for e in events if isinstance(e, LaunchEvent)):
        mine = [e for e in events if getattr(e, "attempt", None) == launch.attempt]
        outcome = _last(mine, OutcomeEvent)
        decision = _last(mine, DecisionEvent)
        approval = _last(mine, ApprovalEvent)
        edit = _last(mine, EditEvent)
        probes = [h.accept_length for h in mine if isinstance(h, HealthEvent) and h.accept_length is not None]
        o = outcome.outcome if outcome else None
        out.append(
            AttemptReport(
                number=launch.attempt,
                command=launch.command,
                outcome=o.kind if o else None,
                detail=o.detail if o else "",
                stage=o.stage if o else None,
                exit_code=o.exit_code if o else None,
                accept_length=o.accept_length if o and o.accept_length is not None else _tail(probes),
                acceptance=o.acceptance if o else None,
                diagnosis=_diagnosis(decision),
                approved=approval.approved if approval else None,
                edits=edit.edits if edit else (),
                duration_s=_span(launch, outcome),
                decision_s=_span(outcome, decision),
            )
        )
    return out


def _diagnosis(event: DecisionEvent | None) -> Diagnosis | None:
    if event is None:
        return None
    d = event.decision
    return Diagnosis(
        planner=event.planner,
        action=d.action,
        category=d.category,
        summary=d.summary,
        playbook=d.playbook,
        confidence=d.confidence,
    )


def _preflight(events: list[Event]) -> PreflightSummary | None:
    pre = _last(events, PreflightEvent)
    if pre is None:
        return None
    before_launch = [e for e in events if isinstance(e, EditEvent) and e.attempt == 0]
    return PreflightSummary(
        findings=tuple(f"{f.severity} {f.code}: {f.message}" for f in pre.findings),
        corrected_command=pre.corrected_command,
        edits=tuple(x for e in before_launch for x in e.edits),
        elapsed_ms=pre.elapsed_ms,
    )


def _last_command(events: list[Event]) -> str | None:
    for e in reversed(events):
        if isinstance(e, EditEvent):
            return e.new_command
        if isinstance(e, LaunchEvent | RunStartEvent):
            return e.command
    return None


def _span(a: Event | None, b: Event | None) -> float | None:
    if a is None or b is None:
        return None
    return round(b.elapsed_s - a.elapsed_s, 6)


def _tail(values: list[float]) -> float | None:
    return values[-1] if values else None


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")


def _first(events: Sequence[Event], kind: type[E]) -> E | None:
    return next((e for e in events if isinstance(e, kind)), None)


def _last(events: Sequence[Event], kind: type[E]) -> E | None:
    return next((e for e in reversed(events) if isinstance(e, kind)), None)
