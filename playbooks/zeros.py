"""A zero the user chose for a count, a size or an interval: SGLang divides by it, takes it modulo, or
asserts it positive. People write 0 meaning "off" or "none"; for these settings SGLang has no such value,
and its default is what they wanted."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.naming import category_of, named_exactly, named_in
from specdoctor.playbooks.take_back import its_settings
from specdoctor.playbooks.view import as_float
from specdoctor.tools.command import RemoveFlag

_ZERO_FAILURE = (
    r"ZeroDivisionError|division (?:or modulo )?by zero|modulo by zero|"
    r"should (?:contain|be) (?:a )?positive|must be (?:a )?positive|must be (?:greater than|> ?) ?0\b|"
    r"must be non-?zero"
)
_NUMERIC = frozenset({"int", "float", "human_readable_int"})


@playbook(
    id="sglang.value.zero-chosen",
    category="other",
    when=("exited", "unhealthy"),
    pattern=_ZERO_FAILURE,
    priority=60,
)
def zero_the_user_chose(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """SGLang failed on a zero, and the command set a numeric setting to 0: that setting goes back to
    its default (sure when the failing code names it, a guess when it is the command's only zero)."""
    zeros = _zero_settings(ctx)
    text = ctx.root_text
    named = [f for f in zeros if named_exactly(f, text) or named_in(f, text, every=True)]
    if len(named) > 1 or (not named and len(zeros) != 1):
        return None
    flag = (named or zeros)[0]
    said = (ctx.root.error_line or (m.group(0) if m else "")).strip()
    return fix(
        ctx,
        [RemoveFlag(flag=flag), *its_settings(flag, ctx)],
        category_of(flag),
        f'{flag} 0 is not "off" for SGLang: it failed on the zero ({said})',
        why=(f"the failing code reads {flag}" if named else f"{flag} is the only setting of the command at 0")
        + "; back at SGLang's default the launch has a value it can use",
        confidence=0.6 if named else 0.45,
    )


def _zero_settings(ctx: Context) -> list[str]:
    """Numeric settings of the command written as 0 (any of their values, for a list)."""
    found = []
    for option in ctx.spec.options():
        info = ctx.catalog.get(option.name)
        if info is None or info.choices or info.nargs == 0:
            continue
        if (info.value_type in _NUMERIC or info.value_type is None) and 0 in map(as_float, option.values):
            found.append(info.name)
    return list(dict.fromkeys(found))
