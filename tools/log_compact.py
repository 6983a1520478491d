"""Compact a launch log into the few thousand characters worth reading, for a person or an LLM.

Root cause first (with its traceback block), then the stage reached, then the log itself: the argparse
usage dump collapsed, `server_args=` cut, runs of similar lines counted, duplicates and readiness-poll
access lines dropped, the site-packages path written once, and the middle cut to fit. Redacts nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from specdoctor.tools.engines import SGLANG, EngineProfile
from specdoctor.tools.log_cause import RootCause, extract_root_cause, usage_dump_span
from specdoctor.tools.log_stages import TrackerState, split_prefix, strip_prefix, track

_DIGITS = re.compile(r"\d+(?:\.\d+)?")
_SGLANG_TIME = re.compile(r"^\[(?:\d{4}-\d\d-\d\d )?(\d\d:\d\d:\d\d(?:[.,]\d+)?(?: [A-Z][A-Z_]*\d+)*)\] ?")
_SITE_PACKAGES = re.compile(r"/[^\s\"']*/site-packages")
_CARETS = re.compile(r"^\s*[\^~]+\s*$")
_SERVER_ARGS_CHARS = 300
_LINE_CHARS = 400
_BLOCK_LINE_CHARS = 1200


BLOCK_MARKER = "[... root-cause block, shown above ...]"
"""Where the root-cause block stood in the log: the compacted log shows it once, at the top."""


def compact(
    lines: Iterable[str],
    budget_chars: int = 6000,
    *,
    root: RootCause | None = None,
    state: TrackerState | None = None,
    source_size: int | None = None,
    profile: EngineProfile = SGLANG,
) -> str:
    """The part of a log worth reading, in at most `budget_chars` characters. Redacts nothing.

    Root cause first (with its traceback block), then the stage reached, then the log itself with the
    usage dump collapsed, `server_args=` cut, runs of similar lines counted and the middle cut to fit.
    `root`/`state` skip recomputing them; `source_size` is the size of what `lines` were taken from.
    """
    lines = list(lines)
    root = root or extract_root_cause(lines, profile)
    state = state or track(lines, profile)
    size = source_size if source_size is not None else sum(len(line) + 1 for line in lines)
    head = (
        f"== log size: {size:,}; stage reached: {state.stage} ({state.stage_label}); "
        f"ready: {'yes' if state.ready else 'no'} =="
    )
    site = _site_packages(lines)
    legend = [f"== ... = {site}"] if site else []
    cause = _render_cause(root, budget_chars // 2, site)
    last_stage = (
        [f"== last stage line: {_cut(state.last_stage_line, _LINE_CHARS)}"] if state.last_stage_line else []
    )
    top = [
        head,
        *legend,
        *cause,
        *last_stage,
        "== log (repeats counted, duplicate lines dropped, usage dump collapsed) ==",
    ]
    room = budget_chars - sum(len(t) + 1 for t in top)
    body = _fit([_unsite(b, site) for b in _body(lines, root.span, profile)], room)
    return "\n".join([*top, *body])[:budget_chars]


def _render_cause(root: RootCause, budget: int, site: str | None) -> list[str]:
    if root.kind == "none":
        return ["== root cause: none found =="]
    wrapper = f", wrapper: {root.wrapper}" if root.wrapper else ""
    out = [f"== root cause ({root.kind}{wrapper}) ==", _cut(root.error_line, _BLOCK_LINE_CHARS)]
    out += [f"(chained from: {_cut(c, _LINE_CHARS)})" for c in root.chain]
    out = [_unsite(o, site) for o in out]
    block = [_unsite(_cut(line, _BLOCK_LINE_CHARS), site) for line in root.block if not _CARETS.match(line)]
    if len(block) < 2:
        return out
    # Keep the block's first line and its innermost end (frames nearest the error, then the message).
    room = budget - sum(len(o) + 1 for o in out) - len(block[0]) - 60
    kept: list[str] = []
    for line in reversed(block[1:]):
        room -= len(line) + 1
        if room < 0:
            break
        kept.append(line)
    dropped = len(block) - 1 - len(kept)
    note = [f"  [... {dropped} more lines cut ...]"] if dropped else []
    return [*out, "-- block --", block[0], *note, *reversed(kept)]


class _Repeats:
    """Consecutive lines that differ only in numbers collapse to the first, a count and the last."""

    def __init__(self, out: list[str]) -> None:
        self.out, self.key, self.run = out, None, []

    def add(self, key: str, text: str) -> None:
        if key == self.key:
            self.run.append(text)
            return
        self.flush()
        self.out.append(text)
        self.key, self.run = key, [text]

    def flush(self) -> None:
        if len(self.run) > 2:
            self.out.append(f"  [... line above repeated {len(self.run) - 2} more times; last one below ...]")
        if len(self.run) > 1:
            self.out.append(self.run[-1])
        self.key, self.run = None, []


def _body(lines: Sequence[str], skip: tuple[int, int] | None, profile: EngineProfile) -> list[str]:
    out: list[str] = []
    repeats = _Repeats(out)
    seen: set[str] = set()
    dropping = False
    i = 0
    while i < len(lines):
        if skip and i == skip[0]:
            repeats.flush()
            out.append(BLOCK_MARKER)
            i = max(skip[1], i + 1)
            continue
        span = usage_dump_span(lines, i) if strip_prefix(lines[i]).startswith("usage: ") else None
        if span:
            repeats.flush()
            out += [
                _cut(strip_prefix(lines[i]), 160),
                f"  [... argparse usage dump: {span[1] - span[0]} lines ...]",
            ]
            i = span[1]
            continue
        prefix, msg = split_prefix(lines[i])
        i += 1
        if not msg.strip() or _CARETS.match(msg):
            continue
        indented = msg[:1] in (" ", "\t")
        if dropping and indented:
            continue
        dropping = False
        key = _DIGITS.sub("#", msg)
        # Readiness polls differ only in port and time: one of each is enough.
        seen_key = key if " HTTP/" in msg and profile.access_line.search(msg) else msg
        if (
            not indented
            and len(msg) >= 20
            and seen_key in seen
            and "Error" not in msg
            and "Traceback" not in msg
        ):
            dropping = True
            continue
        seen.add(seen_key)
        repeats.add(key, _short_prefix(prefix) + _shorten(msg))
    repeats.flush()
    return out


def _fit(body: list[str], room: int) -> list[str]:
    """Keep the start (startup) and, mostly, the end (the failure) of the body within `room` chars."""
    if sum(len(b) + 1 for b in body) <= room:
        return body
    head_room, tail_room = room * 3 // 10, room * 7 // 10 - 60
    head: list[str] = []
    used = 0
    for b in body:
        if used + len(b) + 1 > head_room:
            break
        head.append(b)
        used += len(b) + 1
    tail: list[str] = []
    used = 0
    for b in reversed(body[len(head) :]):
        if used + len(b) + 1 > tail_room:
            break
        tail.append(b)
        used += len(b) + 1
    cut = len(body) - len(head) - len(tail)
    return [*head, f"[... {cut} lines cut to fit {room} chars ...]", *reversed(tail)]


def _site_packages(lines: Sequence[str]) -> str | None:
    """The interpreter's site-packages directory, written once in the legend instead of on every frame."""
    for line in lines:
        if "site-packages" in line:
            m = _SITE_PACKAGES.search(line)
            if m:
                return m.group(0)
    return None


def _unsite(text: str, site: str | None) -> str:
    return text.replace(site, "...") if site else text


def _short_prefix(prefix: str) -> str:
    m = _SGLANG_TIME.match(prefix)
    return f"[{m.group(1)}] " if m else ""


def _shorten(msg: str) -> str:
    if msg.startswith("server_args="):
        return _cut(msg, _SERVER_ARGS_CHARS)
    return _cut(msg, _LINE_CHARS)


def _cut(text: str | None, limit: int) -> str:
    text = text or ""
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text) - limit:,} chars cut]"
