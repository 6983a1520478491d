"""Every argument check of SGLang 0.5.23 (srt/arg_groups, from the bundled index) that a command can trip
with its own flags, each turned into the failure it raises: a traceback at the check's own line and its
message, on a command that sets exactly what its condition reads. Not real logs (those are the corpora and
tests/data/sglang-outputs) but the engine's own checks, all of them: the diagnosis must change a flag the
check reads for nearly every one. It found a path that Python holds true and the checks read as false."""

from __future__ import annotations

import re

from specdoctor.agent.diagnose import context_for, decide, outcome_from_log
from specdoctor.tools.command import CommandError, LaunchCommand
from specdoctor.tools.engine_source.index import bundled_index
from specdoctor.tools.engine_source.model import Constraint, Site
from specdoctor.tools.help_parser import FlagInfo
from tests.test_corpus_scores import CAT

RELEASE = "0.5.23"


def _value(c: Constraint, info: FlagInfo) -> str | None:
    """A value that meets the failing comparison, as a command line writes it ("" for a bare switch)."""
    number = info.value_type in ("int", "float", "human_readable_int")
    if c.op in ("truthy", "is not None"):
        return "" if info.nargs == 0 else ("1" if number else "x")
    if not c.values:
        return None
    first = c.values[0]
    if c.op in ("in", "=="):
        return str(first).lower() if isinstance(first, bool) else str(first)
    bound = float(first) if isinstance(first, int | float) and not isinstance(first, bool) else None
    if bound is None:
        return None
    step = {">": 1, ">=": 0, "<": -1, "<=": 0}.get(c.op)
    return None if step is None else str(int(bound) + step)


def _tripping_command(site: Site, dests: dict[str, str]) -> tuple[str, set[str]] | None:
    parts: list[str] = []
    for c in site.constraints:
        info = CAT.get(dests.get(c.field) or "--" + c.field.replace("_", "-"))
        value = None if c.env or c.other or info is None else _value(c, info)
        if info is None or value is None or (info.nargs == 0 and value not in ("", "true", "1")):
            return None
        parts.append(info.name if info.nargs == 0 else f"{info.name} {value}")
    flags = {p.split()[0] for p in parts}
    return "python -m sglang.launch_server --model-path /m " + " ".join(parts), flags


def _decided(site: Site, command: str) -> set[str] | str:
    message = re.sub(r"\{[^{}]*\}", "X", site.template) or "check failed"
    log = [
        "Traceback (most recent call last):",
        f'  File "/usr/lib/python3/site-packages/sglang/{site.file}", line {site.line}, in '
        f"{site.function.split('.')[-1]}",
        f"    {site.text}",
        f"{site.exception or 'ValueError'}: {message}",
    ]
    ctx = context_for(LaunchCommand.parse(command), CAT, log, outcome=outcome_from_log(log, "startup-crash"))
    decision = decide(ctx)
    if decision.action != "fix":
        return decision.action
    return {n for e in decision.edits for n in (getattr(e, "flag", None), getattr(e, "to", None)) if n}


def test_nearly_every_argument_check_is_answered_on_a_flag_it_reads() -> None:
    index = bundled_index()
    dests = index.dests(RELEASE)
    tried = answered = 0
    for site in index.sites(RELEASE):
        if site.kind != "raise" or not site.file.startswith("srt/arg_groups/") or not site.constraints:
            continue
        built = _tripping_command(site, dests)
        if built is None:
            continue
        command, flags = built
        try:
            touched = _decided(site, command)
        except CommandError:
            continue
        tried += 1
        answered += isinstance(touched, set) and bool(touched & flags)
    assert tried >= 200
    # 192 of 202 when written; the rest are checks whose conditions contradict each other on one flag, or
    # model overrides that also read the checkpoint.
    assert answered >= 190, (answered, tried)
