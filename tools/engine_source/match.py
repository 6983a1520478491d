"""Which check in the index wrote this message: a pasted error line matched against the templates.

Placeholders match anything; quotes, case and spacing do not count; a message cut short still matches the
part of the template it shows. A weak or partial likeness returns nothing: never a confident guess.
"""

from __future__ import annotations

import re
import threading
from functools import cache

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.engine_source.index import SourceIndex, bundled_index, version_key
from specdoctor.tools.engine_source.model import Site
from specdoctor.tools.engine_source.template import segments
from specdoctor.tools.log_stages import strip_prefix

MATCH_MIN = 0.75
"""Below this score no site is returned."""
MIN_LITERAL = 12
"""Templates with less fixed text than this (`{e}`, `Error: {msg}`) identify nothing."""
FULL_EVIDENCE = 30
"""Matched fixed characters at which the evidence counts in full."""
_TAIL = 8
_VALUE_MAX = 120
_VALUE_WORDS = 12
_QUOTES = re.compile(r"[\"'`‘’“”]")
_SPACE = re.compile(r"\s+")
_AFTER_STOP = re.compile(r"([.,;:!?]) ")
_EXCEPTION = re.compile(
    r"^\s*(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Warning))\s*:\s*"
)
_ELLIPSIS = ("...", "…")


class MessageMatch(BaseModel):
    """The check that most likely wrote a message, and how sure the match is."""

    model_config = ConfigDict(frozen=True)
    site: Site = Field(description="The check, with its lines in the release preferred (or the newest).")
    score: float = Field(description="0..1: share of the template's fixed text found, in order.")
    truncated: bool = Field(default=False, description="The message stops before the template ends.")
    releases: tuple[str, ...] = Field(default=(), description="Every indexed release that has this check.")
    alternatives: tuple[Site, ...] = Field(
        default=(), description="Other checks that match as well (the same message raised elsewhere)."
    )


def normalize(text: str) -> str:
    # Spaces after punctuation do not count: messages built from f-strings often lose or gain one at a
    # seam ("no_buffer." "To use" → `no_buffer.To use`), and logs wrap lines there.
    return _AFTER_STOP.sub(r"\1", _SPACE.sub(" ", _QUOTES.sub("", text))).strip().lower()


def split_message(text: str) -> tuple[str | None, str]:
    """(exception type, message) of an error line: `ValueError: x` → (`ValueError`, `x`)."""
    text = strip_prefix(text.strip())
    if m := _EXCEPTION.match(text):
        return m["type"].rsplit(".", 1)[-1], text[m.end() :]
    return None, text


@cache
def _prepared(index: SourceIndex) -> list[tuple[int, list[tuple[str, bool]], int, str]]:
    """Each check's normalized template pieces, their length, and its first literal piece."""
    found = []
    for check, raw in enumerate(index.checks):
        segs = [(normalize(lit), after) for lit, after in segments(raw.get("template", ""))]
        segs = [(lit, after) for lit, after in segs if lit or after]
        total = sum(len(lit) for lit, _ in segs)
        if total >= MIN_LITERAL:
            found.append((check, segs, total, next(lit for lit, _ in segs if lit)))
    return found


def warm_in_background() -> None:
    """Read the bundled index and prepare its templates while the engine starts (a quarter of a second,
    otherwise paid by the first diagnosis after a crash)."""
    threading.Thread(target=lambda: _prepared(bundled_index()), name="warm-templates", daemon=True).start()


def score(message: str, segs: list[tuple[str, bool]], total: int) -> tuple[float, bool]:
    """How well a normalized message fits a template's normalized pieces: (score, truncated)."""
    pos: int | None = None
    matched, truncated = 0, False
    for lit, after in segs:
        if not lit:
            continue
        if pos is None or after:
            idx = message.find(lit, pos or 0)
        else:
            idx = pos if message.startswith(lit, pos) else -1
        if idx >= 0:
            matched, pos = matched + len(lit), idx + len(lit)
            continue
        shown = _shown_prefix(message, lit, pos or 0, anchored=pos is not None and not after)
        if shown is None and pos is not None and after and _cut_in_value(message, pos, matched, total):
            shown = 0
        if shown is None or matched + shown < MIN_LITERAL:
            return 0.0, False
        matched, pos, truncated = matched + shown, len(message), True
        break
    if pos is None:
        return 0.0, False
    ends_open = bool(segs) and segs[-1][0] == "" and segs[-1][1]
    unexplained = 0 if truncated or ends_open else len(message) - pos
    evidence = min(1.0, matched / FULL_EVIDENCE)
    value = evidence * (1 - unexplained / max(len(message), 1))
    if truncated:
        value *= 0.8 + 0.2 * matched / total
    return value, truncated


def _cut_in_value(message: str, pos: int, matched: int, total: int) -> bool:
    """The message may stop inside a value (`... supported on ['flashinfer', 'fa3', 'tri`): only believed
    when much of the template was already seen and what is left is value-sized."""
    rest = message[pos:]
    return (
        matched >= FULL_EVIDENCE
        and matched >= 0.4 * total
        and len(rest) <= _VALUE_MAX
        and len(rest.split()) <= _VALUE_WORDS
    )


def _shown_prefix(message: str, lit: str, pos: int, anchored: bool) -> int | None:
    """How much of `lit` the message shows before it stops (it was cut short), or None if it does not stop
    inside `lit` (it says something else)."""
    rest = message[pos:]
    if anchored:
        return len(rest) if lit.startswith(rest) else None
    tail = rest[-_TAIL:]
    if len(tail) >= _TAIL:
        j = lit.find(tail)
        while j >= 0:
            if rest.endswith(lit[: j + len(tail)]):
                return j + len(tail)
            j = lit.find(tail, j + 1)
    if rest.endswith(_ELLIPSIS):
        return 0
    return None


def match_message(
    text: str,
    *,
    version: str | None = None,
    index: SourceIndex | None = None,
    min_score: float = MATCH_MIN,
) -> MessageMatch | None:
    """The check whose message this is (an error line, `ValueError: ...` or bare), or None when no
    template fits well enough. `version` prefers that release's lines and checks."""
    found = rank_messages(text, version=version, index=index, limit=6)
    if not found or found[0].score < min_score:
        return None
    best, rest = found[0], found[1:]
    same = tuple(
        m.site for m in rest if m.score >= best.score - 0.02 and m.site.template == best.site.template
    )
    return best.model_copy(update={"alternatives": same})


def rank_messages(
    text: str, *, version: str | None = None, index: SourceIndex | None = None, limit: int = 10
) -> list[MessageMatch]:
    """Every check whose template fits the message at all, best first (scores may be low)."""
    index = index or bundled_index()
    exc_type, message = split_message(text)
    message = normalize(message)
    if len(message) < MIN_LITERAL:
        return []
    release = index.release(version)
    scored = []
    tail, open_end = message[-_TAIL:], message.endswith(_ELLIPSIS)
    for check, segs, total, first in _prepared(index):
        # What `score` needs of the first piece, tested in C first: the message holds it, or stops in it.
        if first not in message and not open_end and (len(tail) < _TAIL or tail not in first):
            continue
        value, truncated = score(message, segs, total)
        if value <= 0:
            continue
        raw = index.checks[check]
        if exc_type and raw.get("exception") not in (None, exc_type):
            value *= 0.9
        places = index.occurrences(check)
        in_release = any(p[0] == release for p in places)
        newest = places[-1][0] if places else ""
        scored.append((value, total, in_release, newest, check, truncated))
    scored.sort(key=lambda s: (-s[0], -s[1], not s[2], _neg_version(s[3]), s[4]))
    return [_as_match(index, s[4], s[0], s[5], release) for s in scored[:limit]]


def _neg_version(version: str) -> tuple[int, ...]:
    return tuple(-x for x in version_key(version))


def _as_match(
    index: SourceIndex, check: int, value: float, truncated: bool, release: str | None
) -> MessageMatch:
    places = index.occurrences(check)
    return MessageMatch(
        site=index.site(check, release),
        score=round(value, 3),
        truncated=truncated,
        releases=tuple(p[0] for p in places),
    )


def search_sites(
    query: str, *, version: str | None = None, index: SourceIndex | None = None, limit: int = 6
) -> list[MessageMatch]:
    """Checks for a query: the messages it matches when it reads as one (score >= 0.5), else the checks
    whose message, condition or file hold every word of it (score 0), the engine's release first."""
    index = index or bundled_index()
    found = [m for m in rank_messages(query, version=version, index=index, limit=limit) if m.score >= 0.5]
    if found:
        return found
    words = [w for w in normalize(query).split() if len(w) > 1]
    if not words:
        return []
    release = index.release(version)
    hits = []
    for check, raw in enumerate(index.checks):
        text = normalize(" ".join((raw.get("template", ""), raw.get("condition") or "", raw["file"])))
        if all(w in text for w in words):
            places = index.occurrences(check)
            hits.append((not any(p[0] == release for p in places), _neg_version(places[-1][0]), check))
    hits.sort()
    return [_as_match(index, check, 0.0, False, release) for _, _, check in hits[:limit]]
