"""Traceback frames with the source lines they quote, and the engine frame that raised."""

from __future__ import annotations

import re
from collections.abc import Iterable

from specdoctor.tools.engine_source.model import Frame
from specdoctor.tools.log_stages import strip_prefix

_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+?))?\s*$')
_TB_START = re.compile(r"Traceback \(most recent call last\):\s*$")
# Python 3.11+ marks the failing part of the quoted line with ^ and ~ on the next line.
_MARKERS = re.compile(r"^\s*[\^~]+\s*$")


def parse_frames(lines: Iterable[str]) -> list[Frame]:
    """Every frame of the last traceback in these log lines (logger prefixes and colours removed)."""
    msgs = [strip_prefix(line) for line in lines]
    start = max((i for i, m in enumerate(msgs) if _TB_START.search(m)), default=0)
    frames: list[Frame] = []
    for i in range(start, len(msgs)):
        m = _FRAME.match(msgs[i])
        if m is None:
            continue
        quoted = ""
        if i + 1 < len(msgs) and msgs[i + 1][:1] in (" ", "\t"):
            following = msgs[i + 1]
            if not _FRAME.match(following) and not _MARKERS.match(following):
                quoted = following.strip()
        frames.append(
            Frame(path=m["path"], line=int(m["line"]), function=m["func"] or "<module>", quoted=quoted)
        )
    return frames


def raising_frame(frames: Iterable[Frame]) -> Frame | None:
    """The innermost frame inside the sglang package: where the engine raised (or called what did)."""
    engine = [f for f in frames if f.engine_file is not None]
    return engine[-1] if engine else None


def frame_from_text(text: str) -> Frame | None:
    """One `File "...", line N, in f` line (optionally followed by its quoted line) as a Frame."""
    frames = parse_frames(text.splitlines())
    return frames[-1] if frames else None
