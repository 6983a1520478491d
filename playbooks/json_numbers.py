"""A number written as a string inside a flag's JSON (`{"max_position_embeddings": "2048"}`,
`{"rope_scaling": {"factor": "4.0"}}`). SGLang and transformers read the override's values as they are:
a strict config field refuses the string, and arithmetic on it fails far away (`"4.0" * 512` is a string
of 512 copies, which `int()` then refuses). The same JSON with its numbers written as numbers is what the
user meant."""

from __future__ import annotations

import json
import re

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.json_values import json_container, numbers_unquoted, reads_json
from specdoctor.tools.command import SetFlag

# How a string where a number belongs fails: a strict field, int() of a repeated string, a comparison.
_STRING_FOR_NUMBER = (
    r"expected (?:int|float), got str|invalid literal for int\(\) with base 10: '[\d.]+|"
    r"not supported between instances of 'str' and '(?:int|float)'|"
    r"can't multiply sequence by non-int of type 'float'|must be real number, not str"
)


@playbook(id="sglang.flag.json-number-quoted", category="other", pattern=_STRING_FOR_NUMBER, priority=44)
def json_number_quoted(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A flag's JSON holds a number as a string, and the failure is a string where a number belongs."""
    found = []
    for option in ctx.spec.options():
        info = ctx.catalog.get(option.name)
        parsed = json_container(" ".join(option.values))
        if info is None or not reads_json(info) or parsed is None:
            continue
        fixed = numbers_unquoted(parsed)
        if fixed != parsed:
            found.append((info.name, json.dumps(fixed)))
    if len(found) != 1:
        return None
    flag, value = found[0]
    return fix(
        ctx,
        [SetFlag(flag=flag, values=(value,))],
        "other",
        f"{flag} writes a number as a string, and SGLang failed on a string where a number belongs",
        why=f"the same JSON with its numbers as numbers ({value}); the engine reads the values as written",
        evidence=(m.group(0),) if m else (),
        confidence=0.6,
    )
