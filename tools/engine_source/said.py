"""Whether a message is one the engine itself writes: one statement of SGLang's own source (read as text,
never imported) names the flag the message asks for, and the message holds nearly all of that statement's
words. A log line or an answer is data anyone can write; the engine's source is not, so a message found there
may ask for more than tuning. A phrase around the flag ("when launching the server") proves nothing: many
messages share it, and anyone who writes the flag writes it too."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

_FIELD = re.compile(r"\{\}")
_SPACE = re.compile(r"\s+")
# How much of the statement's own words (outside its filled-in fields) the message must hold.
_HELD = 0.8
_LONGEST_WORDS = 20


def covers(text: str, message: str) -> bool:
    """The message holds the statement's text, its fields filled in any way: nearly all of the literal words,
    and at least one stretch long enough not to be a common phrase."""
    said = _SPACE.sub(" ", message)
    chunks = [c.strip() for c in _FIELD.split(_SPACE.sub(" ", text)) if c.strip()]
    total = sum(len(c) for c in chunks)
    held = [c for c in chunks if c in said]
    return bool(held) and max(map(len, held)) >= _LONGEST_WORDS and sum(map(len, held)) >= _HELD * total


@lru_cache(maxsize=64)
def said_by_engine(message: str, flag: str, folder: Path) -> bool:
    """The installed engine at `folder` writes the message, and that statement names `flag`."""
    from specdoctor.tools.engine_source.asks import messages, names

    for path in (folder / "srt").rglob("*.py"):
        try:
            source = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if flag not in source:
            continue
        found = messages({path.name: source})
        if any(names(text, flag) and covers(text, message) for _, _, text in found):
            return True
    return False
