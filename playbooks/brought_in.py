"""Settings SGLang changed on the user's behalf. SGLang logs when one setting brings in another ("Enable
deterministic inference because of rl_on_policy_target."). When a check then fails on what was brought in,
the check reads only fields the command left at their defaults, yet the command's own setting put the
launch there: that setting, not the engine, is what to take back."""

from __future__ import annotations

import re
from dataclasses import dataclass

from specdoctor.playbooks.base import Context
from specdoctor.playbooks.naming import named_exactly, words_of
from specdoctor.playbooks.suspects import WHAT_IS_SERVED, chosen
from specdoctor.playbooks.take_back import take_back
from specdoctor.tools.command import Edit
from specdoctor.tools.log_compact import BLOCK_MARKER

# "<what changed> because of <cause>", "... because <cause> is set", "... due to <cause>".
_BECAUSE = re.compile(r"^(?P<changed>.{4,}?)\s+(?:because(?:\s+of)?|due\s+to|since)\s+(?P<cause>.+)$", re.I)


@dataclass(frozen=True)
class BroughtIn:
    """The user's setting the engine says it acted on, the log line saying so, and the edits undoing it."""

    setting: str
    line: str
    edits: tuple[Edit, ...]


def brought_in(ctx: Context, about: str) -> BroughtIn | None:
    """The one chosen setting that a log line before the failure says brought in something `about` talks
    of (the failing check's message and fields); None when no line, or more than one setting, does."""
    found: dict[str, BroughtIn] = {}
    for line in _before_the_failure(ctx):
        said = _BECAUSE.search(_message_of(line))
        if said is None or not _shares_words(said.group("changed"), about):
            continue
        for option in ctx.spec.options():
            flag = ctx.view.canon(option.name)
            info = ctx.catalog.get(flag)
            if (
                flag in WHAT_IS_SERVED
                or not chosen(option, info)
                or not named_exactly(flag, said.group("cause"))
            ):
                continue
            edits = take_back(flag, " ".join(option.values), info, ctx)
            found.setdefault(flag, BroughtIn(setting=flag, line=line.strip(), edits=edits))
    return next(iter(found.values())) if len(found) == 1 else None


def _before_the_failure(ctx: Context) -> list[str]:
    lines = ctx.log_text.splitlines()
    at = next((i for i, line in enumerate(lines) if line.strip() == BLOCK_MARKER), len(lines))
    return lines[:at]


def _message_of(line: str) -> str:
    """The record's message: a `[time]` or `INFO ...:` prefix is not part of it."""
    return re.sub(r"^\s*(?:\[[^\]]*\]\s*)+|^\s*(?:INFO|WARNING|WARN)\b[^:]*:\s*", "", line).strip()


def _shares_words(changed: str, about: str) -> bool:
    """The changed thing is what the check is about: a distinctive word of it is in the check's words."""
    theirs = set(words_of(about))
    return any(w in theirs for w in words_of(changed))
