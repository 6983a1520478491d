"""What a person wrote about the failure, next to the log they pasted: an issue's sentences name what they
changed to make it fail (`when using the Triton attention backend with pipeline parallelism`, `error when
add --enable-dp-attention, without it everything ok`). Log records and the launch command are not that."""

from __future__ import annotations

import re

_SENTENCE = re.compile(r"^[A-Z][\w'.-]*(?: +\S+){7,}")
_ABOUT_FAILURE = re.compile(
    r"\b(?:crash\w*|error|fail\w*|hangs?|exception|breaks?|only when|when (?:using|adding|enabling))\b",
    re.I,
)
# An issue's markdown around a sentence: headings, quotes, bullets, a `[Bug]` tag.
_MARKUP = re.compile(r"^\s*(?:[#>*-]+\s*)*(?:\[[\w -]{1,20}\]\s*)?")
# A log record, not a sentence: a level word first (`INFO 01-01 ...`, `WARNING: ...`).
_RECORD = re.compile(r"^(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)\b")
_LAUNCH_ECHO = re.compile(r"launch_server|sglang serve|(?:\s--[a-z][\w-]*(?:[ =]\S+)?){3,}")


def reported(log: str) -> list[str]:
    """Sentences a person wrote about the failure (an issue's prose pasted with its log): they name what
    they changed to make it fail (`when using the Triton attention backend with pipeline parallelism`,
    `error when add --enable-dp-attention, without it everything ok`). Not log records, not the command."""
    said = (_MARKUP.sub("", line) for line in log.splitlines())
    return [
        line
        for line in said
        if _SENTENCE.match(line)
        and not _RECORD.match(line)
        and _ABOUT_FAILURE.search(line)
        and not _LAUNCH_ECHO.search(line)
    ]
