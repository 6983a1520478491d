"""Events: every step of a run as a typed record, and the bus that hands each one to the sinks.

The loop emits events; sinks (the JSONL transcript, the terminal UI, the final report) consume them.
`specdoctor replay` reads a transcript back into the same models, so an event carries what a replay
needs: commands as shell lines and argv, outcomes, decisions and edits as the typed values the loop used.
"""

from __future__ import annotations

import contextlib
import hashlib
import platform
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, TextIO, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from specdoctor.playbooks.decision import Decision, Finding
from specdoctor.playbooks.gate import Refusal
from specdoctor.tools.command import Edit, LaunchCommand
from specdoctor.tools.detached import DetachedServer
from specdoctor.tools.engine_source.lookup import Located
from specdoctor.tools.gpu import GpuReport
from specdoctor.tools.log_cause import RootCause
from specdoctor.tools.outcome import Outcome
from specdoctor.tools.redact import redact, redact_argv, redact_env, redact_shell
from specdoctor.tools.system import ModelFacts

if TYPE_CHECKING:
    from specdoctor.agent.planner import Planned
    from specdoctor.agent.preflight import PreflightReport
    from specdoctor.agent.results import LoopResult
    from specdoctor.playbooks.base import Context

RunMode = Literal["deploy", "fix", "replay", "demo"]
ToolStatus = Literal["ok", "error", "no_data"]
ResultKind = Literal["healthy", "stopped", "budget", "interrupted", "declined"]

TOOL_TEXT_LIMIT = 4000
"""Characters of a tool's result text kept in an event; the rest is cut, so a transcript stays small."""
TOOL_SUMMARY_LIMIT = 300
STAGE_LINE_LIMIT = 1000


def bounded(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, saying how much was cut. Idempotent, so a bounded text
    read back from a transcript is unchanged."""
    if len(text) <= limit:
        return text
    marker = f" [... {len(text) - limit} more chars cut]"
    keep = max(limit - len(marker), 0)
    return (text[:keep] + marker)[:limit]


@cache
def specdoctor_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("specdoctor")
    except PackageNotFoundError:
        return "unknown"


class EnvFingerprint(BaseModel):
    """Where a run happened, enough to tell two machines apart without naming either."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    python: str = Field(description="Python version, e.g. `3.11.9`.")
    platform: str = Field(description="`platform.platform()`, e.g. `Linux-6.8.0-x86_64-with-glibc2.35`.")
    host_hash: str = Field(description="First 12 hex digits of the SHA-256 of the hostname.")

    @classmethod
    def current(cls) -> EnvFingerprint:
        host = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:12]
        return cls(python=platform.python_version(), platform=platform.platform(), host_hash=host)


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    seq: int = Field(default=0, description="Position in the run, from 1; set by the bus.")
    t: float = Field(default=0.0, description="Wall-clock time (seconds since the epoch); set by the bus.")
    elapsed_s: float = Field(default=0.0, description="Seconds since the run started; set by the bus.")


class RunStartEvent(_Event):
    """The run begins: what was asked, on what engine and node, under which policy."""

    type: Literal["run_start"] = "run_start"
    command: str = Field(description="The launch command as a shell line.")
    argv: tuple[str, ...]
    env: dict[str, str] = Field(default_factory=dict, description="Environment overrides of the launch.")
    mode: RunMode
    engine_version: str | None = Field(default=None, description="Installed SGLang version, if known.")
    catalog_note: str = Field(default="", description="Where the flag catalog came from.")
    catalog_hash: str | None = None
    gpu_summary: str = Field(default="", description="e.g. `8x NVIDIA H200 (141 GiB)`, or why none.")
    gpu_count: int = 0
    policy: dict[str, Any] = Field(default_factory=dict, description="Approval policy and budgets.")
    specdoctor_version: str = Field(default_factory=specdoctor_version)
    fingerprint: EnvFingerprint = Field(default_factory=EnvFingerprint.current)

    @classmethod
    def for_spec(cls, spec: LaunchCommand, *, mode: RunMode, **fields: Any) -> RunStartEvent:
        return cls(command=spec.shell(), argv=tuple(spec.argv()), env=spec.env_dict(), mode=mode, **fields)


class PreflightEvent(_Event):
    type: Literal["preflight"] = "preflight"
    findings: tuple[Finding, ...] = ()
    corrected_command: str = Field(description="The command with every finding's fix applied.")
    elapsed_ms: float = 0.0
    models: dict[str, ModelFacts] = Field(
        default_factory=dict,
        description="config.json facts preflight read, by path (replay re-checks with them).",
    )
    ports: dict[str, bool] = Field(
        default_factory=dict, description="`host:port` → free, as preflight found."
    )
    gpus: GpuReport | None = Field(default=None, description="The GPUs preflight checked against.")

    @classmethod
    def for_report(cls, report: PreflightReport, gpus: GpuReport | None = None) -> PreflightEvent:
        facts = report.host_facts
        return cls(
            findings=report.findings,
            corrected_command=report.corrected.shell(),
            elapsed_ms=round(report.elapsed_s * 1000, 2),
            models=facts.models if facts else {},
            ports=facts.ports if facts else {},
            gpus=gpus,
        )


class LaunchEvent(_Event):
    type: Literal["launch"] = "launch"
    attempt: int = Field(ge=1)
    command: str
    argv: tuple[str, ...]
    log_path: str | None = None
    pid: int | None = None

    @classmethod
    def for_spec(cls, spec: LaunchCommand, *, attempt: int, **fields: Any) -> LaunchEvent:
        return cls(attempt=attempt, command=spec.shell(), argv=tuple(spec.argv()), **fields)


class StageEvent(_Event):
    """The engine entered a startup stage (engines.SGLANG stage ids)."""

    type: Literal["stage"] = "stage"
    attempt: int = Field(ge=1)
    stage: str = Field(description="Stage id, e.g. `weights`.")
    label: str = Field(default="", description="What a user reads, e.g. `loading weights`.")
    line: str = Field(default="", description="The log line that entered the stage.")

    @field_validator("line")
    @classmethod
    def _bound_line(cls, v: str) -> str:
        return bounded(v, STAGE_LINE_LIMIT)


class OutcomeEvent(_Event):
    type: Literal["outcome"] = "outcome"
    attempt: int = Field(ge=1)
    outcome: Outcome


class ToolCallEvent(_Event):
    """A planner asked an evidence tool for something."""

    type: Literal["tool_call"] = "tool_call"
    attempt: int | None = None
    call_id: str | None = Field(default=None, description="Pairs a call with its result.")
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolResultEvent(_Event):
    type: Literal["tool_result"] = "tool_result"
    attempt: int | None = None
    call_id: str | None = None
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    status: ToolStatus
    summary: str = Field(default="", description="One line: what the tool found.")
    text: str = Field(
        default="", description=f"The result as given to the planner, cut at {TOOL_TEXT_LIMIT}."
    )

    @field_validator("summary")
    @classmethod
    def _bound_summary(cls, v: str) -> str:
        return bounded(v, TOOL_SUMMARY_LIMIT)

    @field_validator("text")
    @classmethod
    def _bound_text(cls, v: str) -> str:
        return bounded(v, TOOL_TEXT_LIMIT)


class DecisionEvent(_Event):
    type: Literal["decision"] = "decision"
    attempt: int = Field(ge=0, description="The attempt this decides on; 0 before the first launch.")
    planner: str = Field(description="e.g. `playbooks` or `llm:gpt-4o-mini`.")
    decision: Decision
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    rule_errors: tuple[str, ...] = Field(
        default=(), description="Playbooks that raised while deciding: a bug to report, skipped, not fatal."
    )
    refused: tuple[Refusal, ...] = Field(
        default=(), description="Fixes the gate turned down before this one."
    )
    trace: tuple[str, ...] = Field(
        default=(), description="The planner's steps (LLM tool calls, rejections)."
    )

    @property
    def tokens(self) -> int:
        return (self.prompt_tokens or 0) + (self.completion_tokens or 0)

    @classmethod
    def for_planned(cls, attempt: int, planned: Planned) -> DecisionEvent:
        return cls(
            attempt=attempt,
            planner=planned.planner,
            decision=planned.decision,
            prompt_tokens=planned.prompt_tokens,
            completion_tokens=planned.completion_tokens,
            rule_errors=planned.rule_errors,
            refused=planned.refused,
            trace=planned.trace,
        )


class ApprovalEvent(_Event):
    type: Literal["approval"] = "approval"
    attempt: int = Field(ge=0)
    approved: bool
    by: Literal["policy", "user"]
    note: str = ""
    edited_command: str | None = Field(default=None, description="The command as the person edited it.")
    refused: tuple[Refusal, ...] = Field(
        default=(),
        description="Edits turned down (invalid, or beyond what this run may change unasked), why.",
    )


class EditEvent(_Event):
    """Edits applied to the command: the next launch runs `new_command`."""

    type: Literal["edit"] = "edit"
    attempt: int = Field(ge=0)
    edits: tuple[Edit, ...] = ()
    old_command: str
    new_command: str


class HealthEvent(_Event):
    type: Literal["health"] = "health"
    attempt: int = Field(ge=1)
    probe: str = Field(description="e.g. `health_generate`, `accept_length`.")
    ok: bool
    detail: str = ""
    accept_length: float | None = None


class BudgetEvent(_Event):
    """What is spent and what is left; `None` left means no limit."""

    type: Literal["budget"] = "budget"
    launches_used: int = 0
    launches_left: int | None = None
    wall_s_used: float = 0.0
    wall_s_left: float | None = None
    tokens_used: int = 0
    tokens_left: int | None = None


class EvidenceEvent(_Event):
    """What a planner was shown after a failed launch: enough to re-run the decision anywhere (replay)."""

    type: Literal["evidence"] = "evidence"
    attempt: int = Field(ge=0)
    root_cause: RootCause
    log_text: str = Field(default="", description="The compacted log the planner read.")
    gpus: GpuReport | None = None
    model: ModelFacts | None = Field(default=None, description="The target's config.json facts.")
    draft: ModelFacts | None = Field(default=None, description="The draft's config.json facts.")
    engine_check: Located | None = Field(default=None, description="The engine check the failure stopped at.")

    @classmethod
    def for_context(cls, attempt: int, ctx: Context) -> EvidenceEvent:
        return cls(
            attempt=attempt,
            root_cause=ctx.root,
            log_text=ctx.log_text,
            gpus=ctx.gpus,
            model=ctx.model,
            draft=ctx.draft,
            engine_check=ctx.engine_check,
        )


class SuperviseEvent(_Event):
    """The server is healthy and specdoctor stays in the foreground watching it (a crash re-enters the
    loop); Ctrl-C stops it."""

    type: Literal["supervise"] = "supervise"
    attempt: int = Field(ge=1)
    url: str = Field(description="Where the server answers.")
    pid: int | None = Field(default=None, description="The engine's launcher.")
    command: str = Field(description="The working command, as a shell line.")


class DetachEvent(_Event):
    """The healthy server was left running on its own; `specdoctor stop` finds it by what this names."""

    type: Literal["detach"] = "detach"
    attempt: int = Field(ge=1)
    server: DetachedServer


class StopEvent(_Event):
    type: Literal["stop"] = "stop"
    result: ResultKind
    message: str = Field(description="One line: how the run ended and what to do next.")
    final_command: str | None = Field(default=None, description="The command that worked, if any.")
    exit_code: int

    @classmethod
    def for_result(cls, result: LoopResult) -> StopEvent:
        return cls(
            result=result.kind,
            message=result.message,
            final_command=result.final_command if result.kind == "healthy" else None,
            exit_code=result.exit_code,
        )


Event = Annotated[
    RunStartEvent
    | PreflightEvent
    | LaunchEvent
    | StageEvent
    | OutcomeEvent
    | ToolCallEvent
    | ToolResultEvent
    | DecisionEvent
    | ApprovalEvent
    | EditEvent
    | HealthEvent
    | BudgetEvent
    | EvidenceEvent
    | SuperviseEvent
    | DetachEvent
    | StopEvent,
    Field(discriminator="type"),
]
EVENT_TYPES: tuple[type[_Event], ...] = (
    RunStartEvent,
    PreflightEvent,
    LaunchEvent,
    StageEvent,
    OutcomeEvent,
    ToolCallEvent,
    ToolResultEvent,
    DecisionEvent,
    ApprovalEvent,
    EditEvent,
    HealthEvent,
    BudgetEvent,
    EvidenceEvent,
    SuperviseEvent,
    DetachEvent,
    StopEvent,
)
EVENT_TYPE_NAMES: frozenset[str] = frozenset(c.model_fields["type"].default for c in EVENT_TYPES)


@cache
def event_adapter() -> TypeAdapter[Event]:
    # Built on first use: building every event schema costs time `specdoctor --help` should not pay.
    return TypeAdapter(Event)


def parse_event(data: Any) -> Event:
    """A JSON-like dict as its typed event; raises pydantic.ValidationError when it is not one."""
    return event_adapter().validate_python(data)


# ---- redaction -----------------------------------------------------------------------------------


SHELL_FIELDS = frozenset(
    {"command", "original", "old_command", "new_command", "corrected_command", "final_command"}
    | {"edited_command", "last_command"}
)
"""Fields that hold a launch command as a shell line: read as one, so a quoted secret is masked whole."""


def redact_payload(data: Any) -> Any:
    """JSON-like data ready to be written or shown: `specdoctor.tools.redact.redact` over every string, after
    masking the secrets only the data's shape reveals (an argv token after `--api-key`, an edit setting
    `--api-key`, `set_env HF_TOKEN`, a quoted value in a command line), which a string-by-string pass
    cannot see."""
    return redact(_mask_by_shape(data))


def _mask_by_shape(data: Any) -> Any:
    if isinstance(data, list | tuple):
        return [_mask_by_shape(v) for v in data]
    if not isinstance(data, dict):
        return data
    out = {
        k: redact_shell(v) if k in SHELL_FIELDS and isinstance(v, str) else _mask_by_shape(v)
        for k, v in data.items()
    }
    argv = out.get("argv")
    if _is_str_list(argv):
        out["argv"] = redact_argv(list(argv))
    values = out.get("values")
    if _is_str_list(values):
        for key in ("flag", "to", "name"):
            flag = out.get(key)
            if isinstance(flag, str):
                values = redact_argv([flag, *values])[1:]
        out["values"] = values
    name, value = out.get("name"), out.get("value")
    if isinstance(name, str) and isinstance(value, str):
        out["value"] = redact_env({name: value})[name]
    return out


def _is_str_list(v: Any) -> bool:
    return isinstance(v, list | tuple) and all(isinstance(x, str) for x in v)


def redacted_event(event: Event) -> dict[str, Any]:
    """The event as JSON-ready data with every secret masked."""
    return redact_payload(event.model_dump(mode="json"))


def masked(event: E) -> E:
    """The same event with every secret masked, for a sink that shows it (the terminal)."""
    return parse_event(redacted_event(event))  # type: ignore[return-value]


# ---- bus -----------------------------------------------------------------------------------------


class Sink(Protocol):
    """Receives every event of a run, in order."""

    def handle(self, event: Event) -> None: ...

    def close(self) -> None: ...


E = TypeVar("E", bound=_Event)


class EventBus:
    """Stamps each event (seq, wall time, elapsed) and hands it to every sink.

    A sink that raises is reported once on stderr and detached: a full disk or a broken terminal must not
    end a launch that is going well. Thread-safe: the watcher and the loop emit from different threads.
    """

    def __init__(
        self,
        sinks: Iterable[Sink] = (),
        *,
        wall: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
        stderr: TextIO | None = None,
    ) -> None:
        self._sinks: list[Sink] = list(sinks)
        self._wall = wall
        self._clock = clock
        self._start = clock()
        self._seq = 0
        self._stderr = stderr
        self._lock = threading.RLock()

    @property
    def sinks(self) -> tuple[Sink, ...]:
        return tuple(self._sinks)

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self._start

    def subscribe(self, sink: Sink) -> None:
        with self._lock:
            self._sinks.append(sink)

    def emit(self, event: E) -> E:
        """Stamp `event` and deliver it; returns the stamped copy (events are frozen)."""
        with self._lock:
            self._seq += 1
            stamped = event.model_copy(
                update={"seq": self._seq, "t": self._wall(), "elapsed_s": round(self.elapsed_s, 6)}
            )
            for sink in list(self._sinks):
                try:
                    sink.handle(stamped)  # type: ignore[arg-type]
                except Exception as exc:
                    self._detach(sink, "failed", exc)
            return stamped

    def close(self) -> None:
        """Close every sink; one that fails to close is reported and the others still close."""
        with self._lock:
            sinks, self._sinks = self._sinks, []
            for sink in sinks:
                try:
                    sink.close()
                except Exception as exc:
                    self._report(sink, "failed to close", exc)

    def __enter__(self) -> EventBus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _detach(self, sink: Sink, what: str, exc: Exception) -> None:
        self._sinks.remove(sink)
        self._report(sink, what, exc)
        # Already reported as detached; its close failing too adds nothing.
        with contextlib.suppress(Exception):
            sink.close()

    def _report(self, sink: Sink, what: str, exc: Exception) -> None:
        err = self._stderr or sys.stderr
        name = type(sink).__name__
        detail = redact(str(exc).splitlines()[0]) if str(exc) else type(exc).__name__
        tail = "; the run goes on without it" if what == "failed" else ""
        # When stderr itself is gone there is nobody left to tell.
        with contextlib.suppress(Exception):
            print(f"specdoctor: event sink {name} {what} ({detail}){tail}", file=err, flush=True)
