"""The run transcript: a JSONL file, one event per line, that survives `kill -9` and feeds `replay`.

Line 1 is a header naming the format and its version; every later line is one event. Each line is written
with a single `os.write` and made durable with `os.fsync` before the next event, so a run killed at any
moment leaves every earlier event intact and at most its last line cut short, which the reader reports
and skips. Everything is redacted before it reaches the file.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specdoctor.agent.events import (
    EVENT_TYPE_NAMES,
    ApprovalEvent,
    DecisionEvent,
    EditEvent,
    Event,
    HealthEvent,
    LaunchEvent,
    OutcomeEvent,
    RunStartEvent,
    StageEvent,
    StopEvent,
    parse_event,
    redacted_event,
    specdoctor_version,
)
from specdoctor.tools.errors import UsageError
from specdoctor.tools.files import MiB, UnreadableFile, read_bytes

SCHEMA = "specdoctor-transcript"
VERSION = 1
TRANSCRIPT_MAX_BYTES = 256 * MiB
"""A run writes kilobytes per launch; a transcript this big is not one (and would be read whole)."""
"""The transcript format this specdoctor writes and the newest it reads."""


class TranscriptError(UsageError):
    """A transcript that cannot be written or read; the message is one line saying what and where."""


class TranscriptHeader(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)
    type: Literal["header"] = "header"
    schema_name: str = Field(default=SCHEMA, alias="schema")
    version: int = VERSION
    created: str = Field(description="When the run started, ISO 8601 UTC.")
    specdoctor: str | None = Field(default=None, description="Version of the specdoctor that wrote it.")


# ---- writing -------------------------------------------------------------------------------------


class TranscriptWriter:
    """A sink that appends each event to a JSONL transcript, durably, redacted."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        header = TranscriptHeader(
            created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            specdoctor=specdoctor_version(),
        )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Owner-only: even redacted, a transcript names models, paths and hosts.
            self._fd: int | None = os.open(
                self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600
            )
        except OSError as exc:
            raise TranscriptError(
                f"cannot write the transcript {self.path}: {exc.strerror or exc}; choose a writable path"
            ) from None
        self._end = 0
        self._pending = 0
        self._write_line(header.model_dump(mode="json", by_alias=True))

    def handle(self, event: Event) -> None:
        self._write_line(redacted_event(event))

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self) -> TranscriptWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write_line(self, data: dict[str, Any]) -> None:
        if self._fd is None:
            raise TranscriptError(f"the transcript {self.path} is closed")
        line = (json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        # A write cut short by an exception (Ctrl-C between two partial writes) would glue the next event
        # onto half a line; drop the half line first so the file only ever ends badly at its very end.
        size = os.fstat(self._fd).st_size
        if size == self._end + self._pending:
            self._end = size  # the last line was written whole; only the bookkeeping was interrupted
        elif size != self._end:
            os.ftruncate(self._fd, self._end)
        self._pending = len(line)
        view = memoryview(line)
        while view:
            view = view[os.write(self._fd, view) :]
        self._end, self._pending = self._end + len(line), 0
        os.fsync(self._fd)


# ---- reading -------------------------------------------------------------------------------------

E = TypeVar("E", bound=BaseModel)


class AttemptEvents(BaseModel):
    """The events of one launch attempt, from its launch to the decision on it."""

    model_config = ConfigDict(frozen=True)
    number: int
    events: tuple[Event, ...]

    def _last(self, kind: type[E]) -> E | None:
        found = [e for e in self.events if isinstance(e, kind)]
        return found[-1] if found else None

    @property
    def launch(self) -> LaunchEvent | None:
        return self._last(LaunchEvent)

    @property
    def outcome(self) -> OutcomeEvent | None:
        return self._last(OutcomeEvent)

    @property
    def decision(self) -> DecisionEvent | None:
        return self._last(DecisionEvent)

    @property
    def approval(self) -> ApprovalEvent | None:
        return self._last(ApprovalEvent)

    @property
    def edit(self) -> EditEvent | None:
        return self._last(EditEvent)

    @property
    def stages(self) -> tuple[StageEvent, ...]:
        return tuple(e for e in self.events if isinstance(e, StageEvent))

    @property
    def health(self) -> tuple[HealthEvent, ...]:
        return tuple(e for e in self.events if isinstance(e, HealthEvent))


class Transcript(BaseModel):
    """A transcript read back: its header, its events in order, and what was wrong with its end."""

    model_config = ConfigDict(frozen=True)
    path: str
    header: TranscriptHeader
    events: tuple[Event, ...]
    truncated: bool = Field(default=False, description="The last line was cut short (the run was killed).")
    warnings: tuple[str, ...] = ()

    def of_type(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]

    def attempts(self) -> list[AttemptEvents]:
        """Events grouped by attempt number, in order; events of no attempt (run start, preflight,
        budget, stop) and decisions before the first launch (attempt 0) are left out."""
        groups: dict[int, list[Event]] = {}
        for e in self.events:
            n = getattr(e, "attempt", None)
            if isinstance(n, int) and n >= 1:
                groups.setdefault(n, []).append(e)
        return [AttemptEvents(number=n, events=tuple(groups[n])) for n in sorted(groups)]

    def decisions(self) -> list[DecisionEvent]:
        return self.of_type(DecisionEvent)

    def outcomes(self) -> list[OutcomeEvent]:
        return self.of_type(OutcomeEvent)

    @property
    def run_start(self) -> RunStartEvent | None:
        found = self.of_type(RunStartEvent)
        return found[0] if found else None

    @property
    def stop(self) -> StopEvent | None:
        """How the run ended; None when it was killed before it could say."""
        found = self.of_type(StopEvent)
        return found[-1] if found else None


def read_transcript(path: str | os.PathLike[str]) -> Transcript:
    """Read and validate a transcript. Raises TranscriptError with one line naming what is wrong."""
    p = Path(path)
    data = _read_bytes(p)
    lines = data.split(b"\n")
    # A file written to the end has a final newline, which leaves an empty last piece.
    ends_cleanly = lines[-1] == b""
    if ends_cleanly:
        lines.pop()
    header = _read_header(p, lines[0], complete=len(lines) > 1 or ends_cleanly)
    events: list[Event] = []
    warnings: list[str] = []
    truncated = False
    last = len(lines)
    for number, raw in enumerate(lines[1:], start=2):
        if not raw.strip():
            continue
        try:
            events.append(_parse_line(raw))
        except _LineError as exc:
            if number == last and exc.cut_short:
                truncated = True
                warnings.append(
                    f"line {number} is cut short (the run was killed while writing it); it was skipped"
                )
                break
            raise TranscriptError(f"{p}: line {number}: {exc}") from None
    if events and not truncated and not any(isinstance(e, StopEvent) for e in events):
        warnings.append("the run has no stop event: it was killed or is still running")
    return Transcript(
        path=str(p), header=header, events=tuple(events), truncated=truncated, warnings=tuple(warnings)
    )


def _read_bytes(p: Path) -> bytes:
    if p.is_dir():
        raise TranscriptError(f"{p} is a directory, not a transcript: give the .jsonl file in it")
    if not p.exists() and not p.is_symlink():
        raise TranscriptError(f"no transcript at {p}: check the path")
    try:
        data = read_bytes(p, "transcript", TRANSCRIPT_MAX_BYTES)
    except UnreadableFile as exc:
        raise TranscriptError(f"cannot read the transcript {p}: {exc.reason}") from None
    if not data.strip():
        raise TranscriptError(f"{p} is empty: not a specdoctor transcript (a run writes its header first)")
    return data


def _read_header(p: Path, raw: bytes, *, complete: bool) -> TranscriptHeader:
    not_ours = f"{p} is not a specdoctor transcript"
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        if not complete:
            raise TranscriptError(
                f"{p} has no complete header: the run was killed before it wrote anything"
            ) from None
        raise TranscriptError(f"{not_ours} (its first line is not JSON)") from None
    if not isinstance(data, dict) or data.get("type") != "header" or data.get("schema") != SCHEMA:
        raise TranscriptError(f"{not_ours} (its first line is not a `{SCHEMA}` header)")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise TranscriptError(f"{p}: the transcript header has no valid version ({version!r})")
    if version > VERSION:
        writer = data.get("specdoctor")
        needed = f"specdoctor {writer} or newer" if isinstance(writer, str) else "a newer specdoctor"
        raise TranscriptError(
            f"{p} is a version-{version} transcript; this specdoctor ({specdoctor_version()}) reads "
            f"version {VERSION}: upgrade to {needed} to read it"
        )
    try:
        return TranscriptHeader.model_validate(data)
    except ValidationError as exc:
        raise TranscriptError(f"{p}: invalid transcript header: {_first_error(exc)}") from None


class _LineError(Exception):
    def __init__(self, message: str, *, cut_short: bool) -> None:
        super().__init__(message)
        self.cut_short = cut_short


def _parse_line(raw: bytes) -> Event:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        # A kill can cut a multi-byte character in half, so undecodable bytes at the end may be a cut.
        raise _LineError("not UTF-8 text", cut_short=True) from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise _LineError("not a JSON object (cut short or corrupted)", cut_short=True) from None
    if not isinstance(data, dict):
        raise _LineError(f"a JSON {type(data).__name__}, not an event object", cut_short=False)
    kind = data.get("type")
    if not isinstance(kind, str) or kind not in EVENT_TYPE_NAMES:
        what = "an event without a `type`" if kind is None else f"unknown event type {kind!r}"
        raise _LineError(what, cut_short=False)
    try:
        return parse_event(data)
    except ValidationError as exc:
        raise _LineError(f"invalid `{kind}` event: {_first_error(exc, kind)}", cut_short=False) from None
    except RecursionError:
        raise _LineError(f"invalid `{kind}` event: nested too deeply", cut_short=False) from None


def _first_error(exc: ValidationError, tag: str | None = None) -> str:
    errors = exc.errors(include_url=False)
    first = errors[0]
    loc = first["loc"]
    if tag is not None and loc[:1] == (tag,):
        loc = loc[1:]  # the union's tag: the message already names the event type
    where = ".".join(str(part) for part in loc) or "(top level)"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}"
