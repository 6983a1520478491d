"""What the engine's own message tells the user to do, as typed edits checked against the flag catalog.

"please use --X", "use --X instead of --Y", "--Y is deprecated, use --X", "set --X to V", "requires --Z",
"is only supported with/on ...", "should be one of [...]", "must be <= N", "try --disable-...",
"is incompatible with --Y", "set --X to a smaller value (e.g., 0.8)", "set the env var SGLANG_X=1".

A flag must be one the catalog knows (by its spelling, or as the ServerArgs field the message names); a
value must be one of the flag's choices or a number of its type or a bound the message states. Nothing
free-form is taken from the message. A message that names no catalog flag gives nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.engine_source.phrases import bounds, directions, removes, renames, sets
from specdoctor.tools.engine_source.phrases_conflicts import conflicts, envs, only, requires
from specdoctor.tools.engine_source.remedy_model import FlagReader, Remedy

__all__ = ["Remedy", "remedies"]


_EXCEPTION_CLASS = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Warning)\s*:\s*")


def remedies(
    message: str,
    catalog: FlagCatalog,
    dests: Mapping[str, str] | None = None,
    types: Mapping[str, str] | None = None,
) -> list[Remedy]:
    """Every remedy the message names that the catalog can check, in a stable order, duplicates dropped.

    `dests` maps fields to flags where the release names a flag differently, `types` gives numeric
    fields their type (`SourceIndex.dests(release)`, `.types(release)`). A template from the index can
    be given as is: its `{placeholders}` never pass as values."""
    reader = FlagReader(catalog=catalog, dests=dests or {}, types=types or {})
    msg = " ".join(message.replace("{{", "{").replace("}}", "}").split())
    # The exception's class is not part of what it says (`NotImplementedError: --x is only ...` has --x as
    # its subject).
    msg = _EXCEPTION_CLASS.sub("", msg)
    found = [
        *renames(msg, reader),
        *sets(msg, reader),
        *removes(msg, reader),
        *requires(msg, reader),
        *only(msg, reader),
        *bounds(msg, reader),
        *directions(msg, reader),
        *conflicts(msg, reader),
        *envs(msg),
    ]
    seen: set[tuple] = set()
    out: list[Remedy] = []
    for r in found:
        key = (r.action, r.flag, r.edit.model_dump_json() if r.edit else None) if r else None
        if r is not None and key not in seen:
            seen.add(key)
            out.append(r)
    return _drop_vague(out)


def _drop_vague(found: list[Remedy]) -> list[Remedy]:
    """A `set` with no value says less than any other remedy for the same flag: it goes when one exists."""
    others = {r.flag for r in found if r.edit is not None or r.action != "set"}
    return [r for r in found if r.edit is not None or r.action != "set" or r.flag not in others]
