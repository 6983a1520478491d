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
from specdoctor.playbooks.naming import category_of
from specdoctor.playbooks.translate import spelled_today
from specdoctor.tools.command import Edit, SetEnv, UnsetEnv
from specdoctor.tools.edit_policy import edit_policy
from specdoctor.tools.engine_source.remedies import remedies

_ADVICE = re.compile(
    r"\b(?:to work ?around|work ?around|to avoid (?:this|it)|to fix (?:this|it)|you can|you may|you should|"
    r"please|consider)\b[^\n]*?(?<![\w-])--[a-z]",
    re.I,
)
_GENERIC_LIST = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s|Possible solutions", re.I)
_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|my|we|our)\b")
_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)(?:[ =]([\w.-]+))?")


@playbook(id="sglang.engine.advice", category="other", when=("exited", "hung", "unhealthy"), priority=66)
def engine_advice(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """SGLang printed one workaround for this failure: apply it."""
    advised: dict[str, tuple[tuple[Edit, ...], str]] = {}
    for line in ctx.log_text.splitlines():
        if not _ADVICE.search(line) or _GENERIC_LIST.search(line) or _FIRST_PERSON.search(line):
            continue
        for edits in _advised_edits(ctx, line):
            if edits and not ctx.already_tried(edits):
                advised[repr(edits)] = (edits, line.strip())
    if len(advised) != 1:
        return None  # nothing, or several workarounds: the rules that read the error choose
    edits, line = next(iter(advised.values()))
    flags = " ".join(getattr(e, "flag", "") for e in edits)
    return fix(
        ctx,
        list(edits),
        category_of(flags),
        f"SGLang's log names the workaround for this failure: {line}",
        why="the engine prints this advice for the failure it just logged; "
        + "; ".join(e.describe() for e in edits),
        evidence=(line,),
        confidence=0.6,
    )


def _advised_edits(ctx: Context, line: str) -> list[tuple[Edit, ...]]:
    """Each change the line advises, in this catalog's spelling; a change to nothing is dropped, and a
    line whose advice cannot all be spelled here advises nothing."""
    found = [(r.edit,) for r in remedies(line, ctx.catalog) if r.edit is not None]
    for flag, value in _FLAG.findall(line):
        if ctx.catalog.get(flag) is None:
            today = spelled_today(flag, (value,) if value else (), ctx.spec, ctx.catalog)
            if not today:
                return []  # part of the advice has no spelling here: half a workaround is none
            found.append(today)
    applied = ctx.spec.apply_all
    return [e for e in found if e and _tuning(e, ctx) and applied(list(e), ctx.catalog.canonical) != ctx.spec]


def _tuning(edits: tuple[Edit, ...], ctx: Context) -> bool:
    """Log text is data anyone can write: advice read from it may only tune how the same model runs (a
    capability or identity change, `--trust-remote-code`, is a person's decision, whoever proposes it)."""
    policy = edit_policy()
    for edit in edits:
        if isinstance(edit, SetEnv | UnsetEnv):
            if policy.env(edit.name).edit_class != "tuning":
                return False
        elif policy.flag(ctx.catalog.canonical(getattr(edit, "flag", ""))).edit_class != "tuning":
            return False
    return True
