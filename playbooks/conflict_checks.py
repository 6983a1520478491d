"""Flag combinations SGLang's own argument checks reject (tools/engine_source/conflicts.py), as findings:
the engine's message, where it sits, and the smallest edit that clears it — one of the flags the command
wrote, back to its default, a tuning flag before one that changes what is served."""

from __future__ import annotations

import re

from specdoctor.playbooks.decision import Finding
from specdoctor.playbooks.naming import category_of
from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.command import Edit, LaunchCommand, RemoveFlag, SetFlag
from specdoctor.tools.edit_policy import edit_policy
from specdoctor.tools.engine_source.conflicts import Tripped, default_reading, fails, tripped

_EXCLUSIVE = re.compile(
    r"exclusive|incompatible|together|cannot be combined|not supported with|does not support|both", re.I
)
_PLACEHOLDER = re.compile(r"\{(?:cfg|self|server_args|args)\.(\w+)\}")


def check_engine_conflicts(spec: LaunchCommand, catalog: FlagCatalog) -> list[Finding]:
    # The same check written twice in a release (a hook and a model override) is one finding.
    by_message: dict[str, Finding] = {}
    for found in tripped(spec, catalog):
        finding = _finding(found, catalog)
        by_message.setdefault(finding.message, finding)
    return list(by_message.values())


def _finding(found: Tripped, catalog: FlagCatalog) -> Finding:
    conflict = found.conflict
    edit = _remedy(found, catalog)
    return Finding(
        code="engine-conflict",
        severity="error",
        category=category_of(" ".join(conflict.flags)),  # type: ignore[arg-type]
        message=f"SGLang {found.release} rejects this combination: {_said(found)}",
        flag=getattr(edit, "flag", None),
        evidence=(
            f"{conflict.where}: {'assert' if conflict.kind == 'assert' else 'raise if'} {conflict.condition}",
        ),
        edits=(edit,) if edit else (),
        why=f"SGLang's own check ({conflict.where}) passes once {edit.describe()}" if edit else "",
        confidence=0.8,
    )


def _remedy(found: Tripped, catalog: FlagCatalog) -> Edit | None:
    """The engine's own remedy when it names one that clears the check (`requires --enable-x`: set it);
    none when the first it names needs what only a person has (a certificate's path); else, for settings
    it calls exclusive, the written flag whose default clears it, tuning flags first."""
    from specdoctor.tools.engine_source.remedies import remedies  # read only when a conflict trips

    message = found.conflict.message
    reads = set(found.conflict.flags.values())
    named = [r for r in remedies(message, catalog) if r.flag in reads]
    if named and named[0].edit is None and named[0].action == "set":
        return None
    wanted = [r.edit for r in named if r.action != "remove" and r.edit is not None]
    for edit in wanted:
        if _clears(found, edit, catalog):
            return edit
    if named or _EXCLUSIVE.search(message):
        undo = _smallest_undo(found, catalog)
        return RemoveFlag(flag=undo) if undo else None
    return None


def _clears(found: Tripped, edit: Edit, catalog: FlagCatalog) -> bool:
    if not isinstance(edit, SetFlag):
        return False
    info = catalog.get(edit.flag)
    value = "true" if info is not None and info.nargs == 0 and not edit.values else " ".join(edit.values)
    return fails(found.conflict, {**found.reading(), edit.flag: value}) is False


def _smallest_undo(found: Tripped, catalog: FlagCatalog) -> str | None:
    """The written flag whose default clears the check: tuning flags first, then in the message's order."""
    message = found.conflict.message.lower()
    policy = edit_policy()

    def rank(flag: str) -> tuple[bool, int]:
        at = message.find(flag[2:])
        return (policy.flag(flag).edit_class != "tuning", at if at >= 0 else len(message))

    for flag in sorted(found.values, key=rank):
        default = default_reading(catalog, flag)
        if default is not None and fails(found.conflict, {**found.reading(), flag: default}) is False:
            return flag
    return None


def _said(found: Tripped) -> str:
    """The message with the command's values in its placeholders, as SGLang would print it."""
    values = {field: found.values.get(flag) for field, flag in found.conflict.flags.items()}
    text = _PLACEHOLDER.sub(lambda m: values.get(m[1]) or m[0], found.conflict.message)
    return text.replace("{{", "{").replace("}}", "}")
