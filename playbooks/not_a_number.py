"""SGLang reads a setting with a bare `int()` or `float()` (engine variables such as
SGLANG_HEALTH_CHECK_TIMEOUT when a module is imported, values passed on as text) and Python refuses the text
the user wrote: `invalid literal for int() with base 10: '20s'`. The text Python quotes is the user's own
value; written as the plain number SGLang's own count flags read (`64k` → 64000, `20s` → 20 for a time), it
is read; with no plain number in it, the setting goes back to SGLang's default."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.view import plain_number
from specdoctor.tools.command import Edit, RemoveFlag, SetEnv, SetFlag, UnsetEnv

_REFUSED = (
    r"invalid literal for (?P<int>int)\(\) with base 10: '(?P<text>[^'\n]*)'"
    r"|could not convert string to (?P<float>float): '(?P<ftext>[^'\n]*)'"
)
_TIME = re.compile(r"TIMEOUT|SECONDS|INTERVAL|DELAY|WAIT|_SECS?\b|_S\b", re.I)


@playbook(id="sglang.value.not-a-number", category="other", pattern=_REFUSED, priority=45, scope="root")
def not_a_number(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    if m is None:
        return None
    text, kind = (m["text"], "int") if m["int"] else (m["ftext"], "float")
    owners = _settings_written_as(ctx, text)
    if len(owners) != 1 or not text.strip():
        return None  # nobody's, or several settings share the text: not a confident guess
    name, is_env = owners[0]
    plain = plain_number(text, kind, in_seconds=bool(_TIME.search(name)))
    edit: Edit
    # `64k` is 64000 as SGLang's own count flags read it, 65536 to many who write it: a person's call.
    sure = 0.45 if re.search(r"\d\s*[kKMGT]\s*$", text) else 0.7
    if plain is not None:
        edit = SetEnv(name=name, value=plain) if is_env else SetFlag(flag=name, values=(plain,))
        how = f"{plain} is the plain number `{text}` stands for"
    else:
        edit = UnsetEnv(name=name) if is_env else RemoveFlag(flag=name)
        how = "there is no plain number in it; without it SGLang uses its default"
    return fix(
        ctx,
        [edit],
        "other",
        f"SGLang reads {name} as {'an integer' if kind == 'int' else 'a number'} and `{text}` is not one",
        why=f"Python's {kind}() refuses `{text}`, the value of {name}; {how}",
        evidence=(m.group(0),),
        confidence=sure if plain is not None else 0.5,
    )


def _settings_written_as(ctx: Context, text: str) -> list[tuple[str, bool]]:
    """The engine variables and flags whose value is exactly the text Python quotes."""
    found = [(name, True) for name, value in ctx.spec.env_dict().items() if value == text]
    found += [(o.name, False) for o in ctx.spec.options() if len(o.values) == 1 and o.values[0] == text]
    return found
