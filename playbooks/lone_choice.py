"""A traceback cut before its error names no setting. When it stops inside the model's forward pass and the
command changed exactly one of the settings that choose that pass's code, that one is the only lead: a
guess, below the unattended bar, never a finding."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.naming import category_of
from specdoctor.playbooks.suspects import Suspect, chosen
from specdoctor.playbooks.take_back import take_back

# Settings that choose the code the model's forward pass runs (kernels, dtypes, attention layout).
_FORWARD_CHOICE = re.compile(
    r"attention-backend$|^--kv-cache-dtype$|^--quantization$|^--enable-dp-attention$|"
    r"^--moe-(?:a2a|runner)-backend$|^--enable-mixed-chunk$|gemm-backend$"
)


# Where the forward pass runs: the model runner, graph capture, model and layer code.
_FORWARD_PASS = re.compile(
    r"model_executor|/models/|/layers/|cuda_graph|graph_runner|hardware_backend|forward"
)


def lone_forward_choice(ctx: Context) -> Suspect | None:
    """When a traceback is cut before its error, the one setting the command changed among those that
    choose the forward pass's code, if there is exactly one: a suspect, never a finding."""
    if ctx.root.kind != "traceback-cut" or not any(
        _FORWARD_PASS.search(f"{f.path} {f.function}") for f in ctx.root.frames
    ):
        return None
    found = []
    for option in ctx.spec.options():
        flag = ctx.view.canon(option.name)
        info = ctx.catalog.get(flag)
        if _FORWARD_CHOICE.search(flag) and chosen(option, info):
            edits = take_back(flag, " ".join(option.values), info, ctx)
            found.append(
                Suspect(setting=flag, how="the one choice on a cut path", words=(flag,), edits=edits)
            )
    return found[0] if len(found) == 1 else None


def revert_lone_choice(ctx: Context, failure: str) -> Decision | None:
    """Take back the one forward-pass choice of a cut traceback (a guess: below the unattended bar)."""
    found = lone_forward_choice(ctx)
    if found is None:
        return None
    undo = "; ".join(e.describe() for e in found.edits)
    return fix(
        ctx,
        found.edits,
        category_of(found.setting),
        f"{failure}; the log stops inside the traceback ({(ctx.root.error_line or '').strip()})",
        why=f"the log stops inside the model's forward pass, and of the settings that choose how that pass runs "
        f"{found.setting} is the only one the command changed; {undo} puts the launch back on SGLang's default path",
        confidence=0.45,
    )
