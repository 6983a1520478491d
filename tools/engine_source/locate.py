"""From a failed launch's log to the engine check that stopped it: the raising frame when the log has a
traceback, else (or when that frame is no check) the check whose message the log's error line is."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from specdoctor.tools.engine_source.frames import parse_frames, raising_frame
from specdoctor.tools.engine_source.index import SourceIndex, bundled_index
from specdoctor.tools.engine_source.lookup import Located, site_for_frame
from specdoctor.tools.engine_source.match import match_message
from specdoctor.tools.log_cause import RootCause


def locate(
    lines: Sequence[str],
    *,
    version: str | None = None,
    installed: Path | None = None,
    index: SourceIndex | None = None,
    cause: RootCause | None = None,
) -> Located | None:
    """The check behind a log's failure, or the statement its innermost engine frame points at, or None."""
    from specdoctor.tools.log_cause import extract_root_cause

    index = index or bundled_index()
    frame = raising_frame(parse_frames(lines))
    found = site_for_frame(frame, version=version, installed=installed, index=index) if frame else None
    if found is not None and found.site.kind != "statement":
        return found
    if cause is None or cause.kind == "none":
        cause = extract_root_cause(lines)
    text = f"{cause.exception_type}: {cause.message}" if cause.exception_type else (cause.error_line or "")
    matched = match_message(text, version=version, index=index) if text else None
    if matched is None:
        return found
    how = f"the error message matches a check of sglang {matched.site.release} (score {matched.score:.2f})"
    return Located(site=matched.site, how=how, exact=False, releases=matched.releases)
