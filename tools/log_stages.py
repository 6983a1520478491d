"""Read a launch log line by line: strip the logger prefix, follow the startup stages, notice fatal lines.

`StageTracker` is what the launch loop feeds each line of output to while the server starts. It keeps
no clock of its own: time comes from the `now` argument or an injected `clock`, so it is pure.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.engines import SGLANG, EngineProfile

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# vLLM: `(EngineCore_DP0 pid=12) ERROR 05-06 07:08:09 [core.py:700] ` (either half may be missing).
_VLLM_PREFIX = re.compile(
    r"^(?:\(\w+ pid=\d+\) )?(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] ?)?"
)
_VLLM_STARTS = ("(", "DEBUG ", "INFO ", "WARNING ", "ERROR ", "CRITICAL ")
# torch.distributed tags every line a rank prints, tracebacks included, with `[rank0]: `: a tag on each line
# of one record, not a logger prefix that starts a new one. One space is the tag's; the rest is the line's.
_RANK_TAG = re.compile(r"^\[rank\d+\]: ?")


def split_prefix(line: str, profile: EngineProfile = SGLANG) -> tuple[str, str]:
    """(prefix, message) of one log line, ANSI colours and the line ending removed from both."""
    line = line.rstrip("\r\n")
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if line.startswith("[rank") and (tag := _RANK_TAG.match(line)):
        line = line[tag.end() :]
    if line.startswith("["):
        m = profile.log_prefix.match(line)
        if m:
            return line[: m.end()], line[m.end() :]
    elif line.startswith(_VLLM_STARTS):
        m = _VLLM_PREFIX.match(line)
        if m and m.end():
            return line[: m.end()], line[m.end() :]
    return "", line


def strip_prefix(line: str, profile: EngineProfile = SGLANG) -> str:
    """The message of a log line: without `[2026-12-03 08:10:59 TP1] ` (or vLLM's prefix) and colours."""
    return split_prefix(line, profile)[1]


class StageChange(BaseModel):
    """The tracker entered a later startup stage."""

    model_config = ConfigDict(frozen=True)
    previous: str = Field(description="Stage id before this line.")
    stage: str = Field(description="Stage id entered.")
    label: str
    at: float = Field(description="Time the line was fed (the tracker's clock).")
    line: str = Field(description="The prefix-stripped line that moved the stage.")


class TrackerState(BaseModel):
    """A copy of what the tracker knows, to log or hand to a planner."""

    model_config = ConfigDict(frozen=True)
    stage: str
    stage_label: str
    stage_started_at: float
    last_progress_at: float
    last_stage_line: str | None = Field(
        description="Last line matching any stage, also repeats (the draft model)."
    )
    ready: bool
    fatal_line: str | None = Field(description="A line after which the server hangs instead of exiting.")
    wrapper_line: str | None = Field(
        description="First failure wrapper seen (`Scheduler hit an exception`...)."
    )
    accept_length: float | None = Field(description="Last `accept len` of a Decode batch line.")
    accept_samples: int
    accept_length_mean: float | None
    lines: int


class StageTracker:
    """Follows one launch's output. Stages only move forward; a skipped stage (no CUDA graphs on CPU) is fine."""

    def __init__(
        self,
        profile: EngineProfile = SGLANG,
        *,
        clock: Callable[[], float] = time.monotonic,
        started_at: float | None = None,
    ) -> None:
        self._profile = profile
        self._clock = clock
        start = clock() if started_at is None else started_at
        self._index = 0
        self._stage_started_at = start
        self._last_progress_at = start
        self._last_stage_line: str | None = None
        self._previous: str | None = None
        self._fatal: str | None = None
        self._wrapper: str | None = None
        self._accept_last: float | None = None
        self._accept_sum = 0.0
        self._accept_n = 0
        self._lines = 0

    def feed(self, line: str, now: float | None = None) -> StageChange | None:
        """Take one line of output; returns the change when it moves the launch to a later stage."""
        now = self._clock() if now is None else now
        msg = strip_prefix(line, self._profile)
        if not msg.strip():
            return None
        self._lines += 1
        if self._is_progress(msg):
            self._last_progress_at = now
        self._previous = msg
        self._read_accept_length(msg)
        if self._fatal is None and any(f.pattern.search(msg) for f in self._profile.fatal_no_exit):
            self._fatal = msg
        if self._wrapper is None and any(w.pattern.search(msg) for w in self._profile.wrappers):
            self._wrapper = msg
        return self._advance(msg, now)

    def _is_progress(self, msg: str) -> bool:
        # Our own readiness polls (and identical repeated lines) must not look like a launch moving on.
        if msg == self._previous:
            return False
        if " HTTP/" in msg:
            m = self._profile.access_line.search(msg)
            if m and m["method"] == "GET" and m["path"] in self._profile.probe_paths:
                return False
        return True

    def _read_accept_length(self, msg: str) -> None:
        if "accept" not in msg:
            return
        m = self._profile.accept_length.search(msg)
        if m:
            self._accept_last = float(m.group(1))
            self._accept_sum += self._accept_last
            self._accept_n += 1

    def _advance(self, msg: str, now: float) -> StageChange | None:
        stages = self._profile.stages
        if self._index == len(stages) - 1:
            return None  # startup is over; later `POST /generate` lines are traffic, not warm-up
        found: int | None = None
        for i in range(1, len(stages)):
            pattern = stages[i].pattern
            if pattern is not None and pattern.search(msg):
                found = i
                self._last_stage_line = msg
        if found is None or found <= self._index:
            return None
        previous = stages[self._index].id
        self._index = found
        self._stage_started_at = now
        return StageChange(
            previous=previous, stage=stages[found].id, label=stages[found].label, at=now, line=msg
        )

    @property
    def stage(self) -> str:
        return self._profile.stages[self._index].id

    @property
    def stage_label(self) -> str:
        return self._profile.stages[self._index].label

    @property
    def stage_started_at(self) -> float:
        return self._stage_started_at

    @property
    def last_progress_at(self) -> float:
        return self._last_progress_at

    @property
    def ready(self) -> bool:
        return self.stage == "ready"

    @property
    def fatal_line(self) -> str | None:
        return self._fatal

    @property
    def accept_length(self) -> float | None:
        return self._accept_last

    @property
    def accept_samples(self) -> int:
        return self._accept_n

    def seconds_in_stage(self, now: float | None = None) -> float:
        return (self._clock() if now is None else now) - self._stage_started_at

    def seconds_since_progress(self, now: float | None = None) -> float:
        return (self._clock() if now is None else now) - self._last_progress_at

    def state(self) -> TrackerState:
        return TrackerState(
            stage=self.stage,
            stage_label=self.stage_label,
            stage_started_at=self._stage_started_at,
            last_progress_at=self._last_progress_at,
            last_stage_line=self._last_stage_line,
            ready=self.ready,
            fatal_line=self._fatal,
            wrapper_line=self._wrapper,
            accept_length=self._accept_last,
            accept_samples=self._accept_n,
            accept_length_mean=self._accept_sum / self._accept_n if self._accept_n else None,
            lines=self._lines,
        )


def track(lines: Sequence[str], profile: EngineProfile = SGLANG) -> TrackerState:
    """The state a recorded log reached. A log appended to across restarts holds several runs, and only the
    last one's stage, readiness and accept length describe the crash at its end."""
    first = next((s.pattern for s in profile.stages if s.pattern is not None), None)
    start = 0
    if first is not None:
        start = next(
            (i for i in range(len(lines) - 1, -1, -1) if first.search(strip_prefix(lines[i], profile))), 0
        )
    tracker = StageTracker(profile, clock=lambda: 0.0)
    for line in lines[start:]:
        tracker.feed(line)
    return tracker.state()
