"""How close a written flag is to a real one, robust to typos and to words in another order.

`--num-speculative-tokens` and `--speculative-num-draft-tokens` share every word the user wrote, in a
different order, so a plain edit distance ranks them low; a word-level match ranks them high.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher

# Shorthands people write for a word of a flag name.
_SHORT = {
    "spec": "speculative",
    "mem": "memory",
    "frac": "fraction",
    "num": "number",
    "max": "maximum",
    "min": "minimum",
    "len": "length",
    "bs": "batch",
    "tp": "tensor",
    "dp": "data",
    "pp": "pipeline",
    "ep": "expert",
    "attn": "attention",
    "kv": "kv",
    "gpu": "gpu",
    "util": "utilization",
    "tok": "tokens",
    "toks": "tokens",
}


def words(flag: str) -> list[str]:
    return [w for w in flag.lower().lstrip("-").replace("_", "-").split("-") if w]


def _word_score(a: str, b: str) -> float:
    if a == b:
        return 1.0
    if _SHORT.get(a) == b or _SHORT.get(b) == a:
        return 0.9
    if a.rstrip("s") == b.rstrip("s"):
        return 0.95
    if len(a) >= 3 and len(b) >= 3 and (a.startswith(b) or b.startswith(a)):
        return 0.8
    m = SequenceMatcher(None, a, b)
    if m.real_quick_ratio() < 0.75 or m.quick_ratio() < 0.75:
        return 0.0
    ratio = m.ratio()
    return ratio if ratio >= 0.75 else 0.0


def _word_overlap(written: list[str], real: list[str]) -> float:
    """Dice coefficient over words, each written word matched to its best unused real word."""
    if not written or not real:
        return 0.0
    unused = list(real)
    total = 0.0
    for w in written:
        best, best_i = 0.0, -1
        for i, r in enumerate(unused):
            s = _word_score(w, r)
            if s > best:
                best, best_i = s, i
        if best_i >= 0:
            total += best
            unused.pop(best_i)
    return 2 * total / (len(written) + len(real))


def score(written: str, real: str, floor: float = 0.0) -> float:
    """0..1: how likely `written` was meant to be `real`. Scores below `floor` may be returned as 0."""
    a, b = words(written), words(real)
    overlap = _word_overlap(a, b)
    m = SequenceMatcher(None, "-".join(a), "-".join(b))
    if max(overlap, m.quick_ratio()) < floor:
        return 0.0
    return round(max(m.ratio(), overlap), 3)


def only_version_differs(a: str, b: str) -> bool:
    """EAGLE3 vs EAGLE, llama4 vs llama3: names equal but for their digits are different things, not typos."""
    return re.sub(r"\d", "", a.lower()) == re.sub(r"\d", "", b.lower())
