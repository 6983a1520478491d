"""Launch logs as evidence: summarise a log file of any size, and compact it for a person or an LLM.

`scan_file` never loads a big log: it parses the head (startup) and the tail (where a crash ends), finds
stage lines in between with byte searches, and reads a bounded window around the last error when the
tail has none.

The pieces live in `specdoctor.tools.log_stages` (prefixes, `StageTracker`), `specdoctor.tools.log_cause`
(`extract_root_cause`) and `specdoctor.tools.log_compact` (`compact`); they are re-exported here so callers import
one module.
"""

from __future__ import annotations

import os
import re
from typing import BinaryIO

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.engines import SGLANG, EngineProfile
from specdoctor.tools.files import open_regular
from specdoctor.tools.log_cause import Frame, RootCause, extract_root_cause, usage_dump_span
from specdoctor.tools.log_compact import compact
from specdoctor.tools.log_stages import (
    StageChange,
    StageTracker,
    TrackerState,
    split_prefix,
    strip_prefix,
    track,
)

__all__ = [
    "Frame",
    "LogSummary",
    "RootCause",
    "ScanLimits",
    "StageChange",
    "StageTracker",
    "TrackerState",
    "compact",
    "extract_root_cause",
    "read_tail",
    "scan_file",
    "split_prefix",
    "strip_prefix",
    "usage_dump_span",
]

# Errors that can sit in the middle of a huge log: a crash followed by other ranks' noise, or the bind
# failure SGLang hangs after. argparse errors and kills end the log, so the tail holds them. Each anchor
# costs one pass over the file when there is none, so there are only two.
_MIDDLE_ERROR_ANCHORS = (b"Traceback (most recent call last)", b"[Errno 98]")
# A kill ends the log, so a traceback far above it is older news; these kinds do send us looking.
_WEAK_CAUSES = ("none", "message", "traceback-cut")
_OVERLAP = 256
_CUT = "[...]"


class ScanLimits(BaseModel):
    """How much of a log file `scan_file` reads; memory stays about 2 x chunk_bytes + head + tail."""

    model_config = ConfigDict(frozen=True)
    head_bytes: int = Field(default=256 << 10, gt=0, description="Parsed from the start: the startup stages.")
    tail_bytes: int = Field(default=512 << 10, gt=0, description="Parsed from the end: where a crash is.")
    chunk_bytes: int = Field(default=8 << 20, gt=4096, description="Read size when searching the middle.")
    window_bytes: int = Field(
        default=256 << 10, gt=0, description="Parsed around the last error in the middle."
    )


class LogSummary(BaseModel):
    """What one log file says about its launch."""

    model_config = ConfigDict(frozen=True)
    path: str
    size_bytes: int
    lines_parsed: int = Field(description="Lines read one by one (head, error window, tail).")
    bytes_skipped: int = Field(description="Bytes only byte-searched, never split into lines.")
    root_cause: RootCause
    stage: str = Field(description="Furthest startup stage reached (`ready` when the server came up).")
    stage_label: str
    last_stage_line: str | None
    ready: bool
    fatal_line: str | None = Field(description="A line after which the server hangs (uvicorn bind failure).")
    accept_length: float | None = Field(description="Last `accept len` in the parsed lines.")
    accept_samples: int = Field(
        description="`accept len` values in the parsed lines (not the skipped bytes)."
    )
    compact: str

    @property
    def compaction_ratio(self) -> float:
        return self.size_bytes / max(1, len(self.compact))


def read_tail(path: str | os.PathLike[str], max_bytes: int) -> list[str]:
    """The complete lines within the last `max_bytes` bytes of a file (undecodable bytes replaced)."""
    with open_regular(path, "log") as f:
        size = f.seek(0, os.SEEK_END)
        start = max(0, size - max_bytes)
        return _read_lines(f, start, size - start, partial_start=start > 0, partial_end=False)[0]


def scan_file(
    path: str | os.PathLike[str],
    *,
    limits: ScanLimits | None = None,
    budget_chars: int = 6000,
    profile: EngineProfile = SGLANG,
) -> LogSummary:
    """Summarise a launch log of any size (1 GB included) with bounded memory.

    Raises `UnreadableFile` (an OSError's reason, or a FIFO, device or directory refused)."""
    limits = limits or ScanLimits()
    with open_regular(path, "log") as f:
        size = f.seek(0, os.SEEK_END)
        if size <= limits.head_bytes + limits.tail_bytes:
            lines, skipped = _read_lines(f, 0, size, partial_start=False, partial_end=False)[0], 0
        else:
            lines, skipped = _sample(f, size, limits, profile)
    root = extract_root_cause(lines, profile)
    state = track(lines, profile)
    return LogSummary(
        path=str(path),
        size_bytes=size,
        lines_parsed=len(lines),
        bytes_skipped=skipped,
        root_cause=root,
        stage=state.stage,
        stage_label=state.stage_label,
        last_stage_line=state.last_stage_line,
        ready=state.ready,
        fatal_line=state.fatal_line,
        accept_length=state.accept_length,
        accept_samples=state.accept_samples,
        compact=compact(lines, budget_chars, root=root, state=state, source_size=size, profile=profile),
    )


def _sample(f: BinaryIO, size: int, limits: ScanLimits, profile: EngineProfile) -> tuple[list[str], int]:
    """Head and tail lines and, in file order between them, later stage lines and the last error's window."""
    head_data = _read_at(f, 0, limits.head_bytes)
    head, _, head_end = _complete_lines(head_data, 0, partial_start=False, partial_end=True)
    tail, tail_start, _ = _read_lines(
        f, size - limits.tail_bytes, limits.tail_bytes, partial_start=True, partial_end=False
    )
    reached = max((k for _, k, _ in _stage_hits(head_data[:head_end], 0, profile)), default=0)
    pieces = [
        (at, [line]) for at, line in _middle_stage_lines(f, head_end, tail_start, reached, limits, profile)
    ]
    parsed = 0
    if extract_root_cause(tail, profile).kind in _WEAK_CAUSES:
        at = _last_error_offset(f, head_end, tail_start, limits.chunk_bytes)
        if at is not None:
            lo = max(head_end, at - limits.window_bytes // 4)
            hi = min(tail_start, at + limits.window_bytes)
            window, lo, hi = _read_lines(
                f, lo, hi - lo, partial_start=lo > head_end, partial_end=hi < tail_start
            )
            pieces = [(o, p) for o, p in pieces if not lo <= o < hi]
            pieces.append((lo, window))
            parsed = hi - lo
    skipped = tail_start - head_end - parsed
    lines = [*head, f"[... {skipped:,} bytes of log not parsed ...]"]
    for _, piece in sorted(pieces, key=lambda item: item[0]):
        lines += [*piece, _CUT]
    return [*lines, *tail], skipped


def _stage_regex(profile: EngineProfile) -> re.Pattern[bytes]:
    anchors = sorted({a.encode() for s in profile.stages for a in s.anchors}, key=len, reverse=True)
    return re.compile(
        re.escape(profile.message_start.encode()) + b"(?:" + b"|".join(map(re.escape, anchors)) + b")"
    )


def _stage_hits(data: bytes, above: int, profile: EngineProfile) -> list[tuple[int, int, str]]:
    """(offset, stage index, line) of every line in `data` entering a stage later than `above`."""
    hits: list[tuple[int, int, str]] = []
    stages = profile.stages
    for m in _stage_regex(profile).finditer(data):
        line = _line_around(data, m.start())
        msg = strip_prefix(line, profile)
        for k in range(len(stages) - 1, above, -1):
            pattern = stages[k].pattern
            if pattern is not None and pattern.search(msg):
                hits.append((m.start(), k, line))
                above = k
                break
    return hits


def _middle_stage_lines(
    f: BinaryIO, start: int, end: int, reached: int, limits: ScanLimits, profile: EngineProfile
) -> list[tuple[int, str]]:
    """(offset, line) of lines in [start, end) that move past stage `reached`, found in one regex pass."""
    found: list[tuple[int, str]] = []
    last = len(profile.stages) - 1
    pos = start
    while pos < end and reached < last:
        # Read a little before `pos` so a match's log prefix is whole, and a little past the chunk so an
        # anchor cut by the chunk end is still found; only matches starting in [pos, pos+n) count.
        back = min(_OVERLAP, pos - start)
        n = min(limits.chunk_bytes, end - pos)
        data = _read_at(f, pos - back, back + min(n + _OVERLAP, end - pos))
        for at, k, line in _stage_hits(data, reached, profile):
            if back <= at < back + n:
                found.append((pos - back + at, line))
                reached = k
        pos += n
    return found


def _last_error_offset(f: BinaryIO, start: int, end: int, chunk_bytes: int) -> int | None:
    """Offset of the last error anchor in [start, end), searching backwards; None if there is none."""
    hi = end
    while hi > start:
        lo = max(start, hi - chunk_bytes)
        chunk = _read_at(f, lo, min(end, hi + _OVERLAP) - lo)
        hit = max(chunk.rfind(anchor) for anchor in _MIDDLE_ERROR_ANCHORS)
        if hit >= 0:
            return lo + hit
        hi = lo
    return None


def _read_at(f: BinaryIO, offset: int, n: int) -> bytes:
    f.seek(offset)
    return f.read(max(0, n))


def _line_around(chunk: bytes, at: int) -> str:
    lo = chunk.rfind(b"\n", 0, at) + 1
    hi = chunk.find(b"\n", at)
    return chunk[lo : hi if hi >= 0 else len(chunk)].decode("utf-8", "replace")


def _read_lines(
    f: BinaryIO, offset: int, n: int, *, partial_start: bool, partial_end: bool
) -> tuple[list[str], int, int]:
    """Complete lines of the bytes [offset, offset+n), and the byte range they came from."""
    return _complete_lines(
        _read_at(f, offset, n), offset, partial_start=partial_start, partial_end=partial_end
    )


def _complete_lines(
    data: bytes, offset: int, *, partial_start: bool, partial_end: bool
) -> tuple[list[str], int, int]:
    lo, hi = 0, len(data)
    if partial_start:
        lo = data.find(b"\n") + 1 if b"\n" in data else hi
    if partial_end:
        hi = max(lo, data.rfind(b"\n") + 1)
    return data[lo:hi].decode("utf-8", "replace").splitlines(), offset + lo, offset + hi
