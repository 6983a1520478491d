"""How much of what the engine tells users to do the remedy parser turns into checked edits: every message
in the index that has a remedy phrase, read against the catalog of the newest release that has it."""

from __future__ import annotations

import re
from collections import Counter
from functools import cache

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.engine_source.index import SourceIndex
from specdoctor.tools.engine_source.remedies import remedies
from specdoctor.tools.engine_source.suspects import flag_for_field

REMEDY_PHRASE = re.compile(
    r"\bplease\s+(?:use|set|try|specify|add|pass|disable|enable|increase|decrease|reduce)\b"
    r"|\buse\b[^.;]{0,80}\binstead\b|\bset\s+\S+\s+to\b|\btry\b[^.;]{0,30}--|\brequires?\s+--"
    r"|\b(?:is|are)\s+only\s+supported\s+(?:with|on)\b|\bdeprecated\b[^.;]*[.;]?\s*(?:please\s+)?use\b"
    r"|\b(?:should|must)\s+be\s+one\s+of\b|\bmust\s+be\s+(?:<=?|>=?|less|greater|at most|at least|smaller|larger)"
    r"|\b(?:smaller|larger)\s+value\b|\bincompatible\s+with\s+--",
    re.I,
)
"""The phrases the issue asks for: "please use --X", "use --X instead", "set --X to a smaller value",
"try --disable-...", "requires --Z", "is only supported with/on Y", "X is deprecated, use Y",
"should be one of [...]", "must be <= N", and "is incompatible with --Y"."""
_FLAG_TOKEN = re.compile(r"--[a-z0-9][a-z0-9-]*[a-z0-9]")
_FIELD_TOKEN = re.compile(r"(?<![\w{./])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w(])")


class Miss(BaseModel):
    model_config = ConfigDict(frozen=True)
    message: str
    release: str
    reason: str


class RemedyCoverage(BaseModel):
    model_config = ConfigDict(frozen=True)
    messages: int = Field(description="Distinct index messages with a remedy phrase.")
    with_edit: int = Field(description="Messages giving at least one validated edit.")
    flag_only: int = Field(description="Messages naming a catalog flag but no value to set it to.")
    misses: tuple[Miss, ...] = Field(description="Messages giving nothing, each with why.")
    reasons: dict[str, int] = Field(default_factory=dict)


def remedy_coverage(index: SourceIndex) -> RemedyCoverage:
    """Run the parser over every distinct message of the index that has a remedy phrase."""
    seen: dict[str, str] = {}
    for check, raw in enumerate(index.checks):
        template = raw.get("template", "")
        if REMEDY_PHRASE.search(template):
            seen[template] = index.occurrences(check)[-1][0]
    with_edit = flag_only = 0
    misses: list[Miss] = []
    for template, release in sorted(seen.items()):
        found = remedies(template, _catalog(release), index.dests(release), index.types(release))
        if any(r.edit is not None for r in found):
            with_edit += 1
        elif found:
            flag_only += 1
        else:
            misses.append(
                Miss(
                    message=template,
                    release=release,
                    reason=_why(template, _catalog(release), index.dests(release)),
                )
            )
    reasons = Counter(m.reason.split(":")[0] for m in misses)
    return RemedyCoverage(
        messages=len(seen),
        with_edit=with_edit,
        flag_only=flag_only,
        misses=tuple(misses),
        reasons=dict(reasons.most_common()),
    )


@cache
def _catalog(release: str) -> FlagCatalog:
    from specdoctor.tools.catalog_load import bundled

    return bundled(release)


def _why(template: str, catalog: FlagCatalog, dests: dict[str, str]) -> str:
    flags = _FLAG_TOKEN.findall(template)
    unknown = sorted({f for f in flags if f not in catalog})
    named = [f for f in flags if f in catalog] + [
        w for w in _FIELD_TOKEN.findall(template) if flag_for_field(w, catalog, dests) is not None
    ]
    if named:
        return "names a flag, but not in a phrase the parser reads (or with a computed value)"
    if unknown:
        return f"flag not in the release's catalog: {', '.join(unknown)}"
    return "names no flag (a feature, a model, hardware, an env var or an internal value)"
