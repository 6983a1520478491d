"""Which flags SGLang's own messages say need another flag ("--kv-canary-sweep-interval requires
--kv-canary", "--ssl-keyfile requires --ssl-certfile to be specified as well"): taking the needed flag
off a command leaves these behind, and the engine then rejects them."""

from __future__ import annotations

import re
from functools import cache

from specdoctor.tools.engine_source.index import bundled_index

_NEEDS = re.compile(
    r"(--[a-z][a-z0-9-]+)[^.]{0,40}?\b(?:requires|needs|must be used with|can only be used with|"
    r"is only valid with)\s+`?(--[a-z][a-z0-9-]+)"
)


@cache
def needing(version: str | None) -> dict[str, frozenset[str]]:
    """Flag → the flags whose checks in this release (the nearest indexed one) say they need it."""
    index = bundled_index()
    release = index.release(version)
    if release is None:
        return {}
    found: dict[str, set[str]] = {}
    for site in index.sites(release):
        for m in _NEEDS.finditer(site.template):
            if m.group(1) != m.group(2):
                found.setdefault(m.group(2), set()).add(m.group(1))
    return {needed: frozenset(names) for needed, names in found.items()}
