"""A server told to wait for something from outside before it serves: its --help says so ("the server will
wait for initial weights ... before serving"). When the server then hangs with nothing failing, that wait
is the lead: whatever it waits for never came (a trainer that pushes another way, or not yet)."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.suspects import chosen
from specdoctor.tools.command import RemoveFlag

_WAITS = re.compile(r"\b(?:will wait|waits) for\b[^.]*\bbefore\b", re.I)


@playbook(id="sglang.serving.waits-for-outside", category="other", when=("hung",), priority=85)
def waits_for_outside(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The server hangs (or stays unready) with nothing failing, and the command turned on exactly one switch
    whose help says the server waits for something before serving: taken back for a person to confirm (the
    deployment may mean it; then whatever it waits for must arrive)."""
    if ctx.outcome.fatal_line or ctx.root.kind not in ("none", "message"):
        return None
    waiting = []
    for option in ctx.spec.options():
        info = ctx.catalog.get(ctx.view.canon(option.name))
        if info and info.nargs == 0 and chosen(option, info) and _WAITS.search(info.help or ""):
            waiting.append(info)
    if len(waiting) != 1:
        return None
    flag = waiting[0]
    return fix(
        ctx,
        [RemoveFlag(flag=flag.name)],
        "other",
        f"the server never became ready: {flag.name} makes it wait, and what it waits for never came",
        why=f"SGLang's help for {flag.name}: {flag.help.strip()} Without it the server serves once it has "
        "started; keep it only if what it waits for (a trainer's first weights) is sent the way it expects",
        confidence=0.45,
    )
