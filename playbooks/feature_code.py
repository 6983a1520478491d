"""A check that sits in the code of a value the command chose: SGLang's `_handle_dflash` for
`--speculative-algorithm DFLASH`, `GGUFModelLoader._prepare_weights` for `--load-format gguf`. The check
reads no setting of the user's (or only the device, which is the machine's), yet it runs only because of
that choice: taking the choice back, with its own settings, leaves the check's path."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.naming import category_of
from specdoctor.playbooks.take_back import its_settings
from specdoctor.tools.command import RemoveFlag
from specdoctor.tools.engine_source.suspects import SiteReading

_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def identifier_words(name: str) -> set[str]:
    """The words of code names, lower case: `GGUFModelLoader._prepare_weights` → gguf, model, loader,
    prepare, weights; `handle_kv4` → handle, kv4."""
    words: set[str] = set()
    for part in re.split(r"[^A-Za-z0-9]+", name):
        if part.islower() or part.isupper() or part.isdigit():
            words.add(part.lower())
        else:
            words.update(w.lower() for w in _CAMEL.findall(part))
    return words - {""}


def in_a_features_code(ctx: Context, reading: SiteReading) -> Decision | None:
    """The one chosen value (not the device) that the check's function names as a word (its message's words
    are too common: `info`, `auto`)."""
    site = reading.site
    if site.kind != "raise" or ctx.root.kind != "exception":
        return None  # an explicit refusal in the feature's code, not a crash inside it (that may be a bug)
    said = identifier_words(site.function)
    named = [
        o
        for o in ctx.spec.options()
        if ctx.view.canon(o.name) != "--device"
        and len(o.values) == 1
        and len(o.values[0]) >= 3  # an algorithm's short name (`UNO` in `_handle_uno`) is a whole word
        and o.values[0].lower() in said
    ]
    if len(named) != 1:
        return None
    flag, value = ctx.view.canon(named[0].name), named[0].values[0]
    device = ctx.view.get("--device")
    on = (
        f" on --device {device}"
        if device and "device" in said | {w for r in reading.reads for w in [r.field]}
        else ""
    )
    return fix(
        ctx,
        [RemoveFlag(flag=flag), *its_settings(flag, ctx)],
        category_of(flag),
        f"SGLang's check at {site.file}:{site.line} ({site.function}) is in {value}'s own code and fails{on}: "
        f"{ctx.root.error_line or site.template}".strip(),
        why=f"that code runs only because {flag} {value} was chosen; without it (and its own settings) the "
        "launch does not reach the check",
        evidence=(ctx.root.error_line or site.template,),
        confidence=0.45,
    )
