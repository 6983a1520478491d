"""What SGLang's own log says to do about the failure it just logged: "To work around this error, add
--disable-piecewise-cuda-graph to your launch command." The engine knows its experimental paths; when it
prints one workaround next to the failure, that is the change to try. A flag of another release (the log's
SGLang, not the catalog's) is given in the catalog's spelling through the synonym table.

Not its job: the numbered "Possible solutions" list SGLang prints after every failed CUDA-graph capture
(the same four items whatever the cause; `cuda_graph.py` reads the exception instead), and sentences a
person wrote ("I tried --disable-cuda-graph").
"""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.gate import touches
from specdoctor.playbooks.naming import category_of
from specdoctor.playbooks.translate import spelled_today
from specdoctor.tools.command import Edit
from specdoctor.tools.engine_source.remedies import remedies
from specdoctor.tools.log_compact import BLOCK_MARKER

_ADVICE = re.compile(
    r"\b(?:to work ?around|work ?around|to avoid (?:this|it)|to fix (?:this|it)|you can|you may|you should|"
    r"please|consider)\b[^\n]*?(?<![\w-])--[a-z]",
    re.I,
)
_GENERIC_LIST = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s|Possible solutions", re.I)
# A person's sentence, not the engine's (`I/O` is not a person).
_FIRST_PERSON = re.compile(r"\bI\b(?!/)|\bI'm\b|\bI've\b|\bmy\b")
_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)(=[\w.-]*\w)?")
NEAR = 10
"""Advice counts within this many log lines before the failure (or inside its traceback): what SGLang
prints for the failure it is about to raise, not a hint from elsewhere in the log."""


@playbook(id="sglang.engine.advice", category="other", when=("exited", "hung", "unhealthy"), priority=66)
def engine_advice(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """SGLang printed one workaround for this failure: apply it."""
    advised: dict[str, tuple[tuple[Edit, ...], bool, str]] = {}
    for line in _next_to_the_failure(ctx):
        if not _ADVICE.search(line) or _GENERIC_LIST.search(line) or _FIRST_PERSON.search(line):
            continue
        for edits, valued in _advised_edits(ctx, line):
            if edits and not ctx.already_tried(edits):
                advised[repr(edits)] = (edits, valued, line.strip())
    if len(advised) != 1:
        return None  # nothing, or several workarounds: the rules that read the error choose
    edits, valued, line = next(iter(advised.values()))
    flags = " ".join(getattr(e, "flag", "") for e in edits)
    return fix(
        ctx,
        list(edits),
        category_of(flags),
        f"SGLang's log names the workaround for this failure: {line}",
        why="the engine prints this advice for the failure it just logged; "
        + "; ".join(e.describe() for e in edits),
        evidence=(line,),
        # A value read from log text is the log's to choose: a person confirms it.
        confidence=0.45 if valued else 0.6,
    )


def _next_to_the_failure(ctx: Context) -> list[str]:
    """The log lines just before the root cause and its traceback (all of it when there is no root)."""
    lines = ctx.log_text.splitlines()
    if not ctx.root.block:
        return lines
    at = next((i for i, line in enumerate(lines) if line.strip() == BLOCK_MARKER), None)
    before = lines[max(0, at - NEAR) : at] if at is not None else []
    return [*before, *ctx.root.block]


def _advised_edits(ctx: Context, line: str) -> list[tuple[tuple[Edit, ...], bool]]:
    """Each change the line advises, in this catalog's spelling; a change to nothing is dropped, and a
    line whose advice cannot all be spelled here advises nothing. Another release's flag is taken only as
    a switch (`add --disable-x`): a value next to it is the log's, not the engine's spelling of it. Each
    change comes with whether its value was read from the log."""
    found = [((r.edit,), bool(getattr(r.edit, "values", ()))) for r in remedies(line, ctx.catalog) if r.edit]
    for flag, value in _FLAG.findall(line):
        if ctx.catalog.get(flag) is None:
            today = () if value else spelled_today(flag, (), ctx.spec, ctx.catalog)
            if not today:
                return []  # part of the advice has no spelling here: half a workaround is none
            found.append((today, False))
    applied = ctx.spec.apply_all
    return [
        (e, valued)
        for e, valued in found
        if e and _tuning(e, ctx) and applied(list(e), ctx.catalog.canonical) != ctx.spec
    ]


def _tuning(edits: tuple[Edit, ...], ctx: Context) -> bool:
    """Log text is data anyone can write: advice read from it may only tune how the same model runs (a
    capability or identity change, `--trust-remote-code`, is a person's decision, whoever proposes it)."""
    return all(t.classed.edit_class == "tuning" for t in touches(edits, ctx.catalog, ctx.spec))
