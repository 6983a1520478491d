"""Whether a message is one the installed engine itself writes: its words and the flag it asks for stand
together in one of SGLang's own source files (read as text, never imported). A log line or an answer is data
anyone can write; the engine's source is not, so a message found there may ask for more than tuning."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

# Adjacent string literals across a line break (`"...processor. "` newline `"Please set ..."`).
_JOIN = re.compile(r"""["']\s*\n\s*[rbf]*["']""")
_PLACEHOLDER = re.compile(r"\{[^{}]*\}")
_NEAR = 400
_MIN_FRAGMENT = 25


@lru_cache(maxsize=64)
def said_by_engine(message: str, flag: str, folder: Path) -> bool:
    """The installed engine at `folder` has `flag` within a few hundred characters of a long stretch of
    the message's own words, in one of its source files."""
    fragments = _fragments(message)
    if not fragments:
        return False
    for path in folder.rglob("*.py"):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if flag not in text:
            continue
        joined = _JOIN.sub("", text)
        for fragment in fragments:
            at = joined.find(fragment)
            while at != -1:
                if flag in joined[max(0, at - _NEAR) : at + len(fragment) + _NEAR]:
                    return True
                at = joined.find(fragment, at + 1)
    return False


def _fragments(message: str) -> list[str]:
    """Stretches of the message with nothing a template would fill in, longest first."""
    parts = [
        p.strip(" .`'\"")
        for p in re.split(r"[.`]\s|\d+", _PLACEHOLDER.sub("|", message))
        for p in p.split("|")
    ]
    return sorted((p for p in parts if len(p) >= _MIN_FRAGMENT), key=len, reverse=True)[:3]
