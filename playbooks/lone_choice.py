"""A traceback cut before its error names no setting. When it stops inside the model's forward pass and the
command changed exactly one of the settings that choose that pass's code, that one is the only lead: a
guess, below the unattended bar, never a finding. So is an engine switch (`SGLANG_X=1`) that is the one
thing the command turned on when the forward pass crashes in words that name no setting: such switches
choose layouts and kernels the default path never takes."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.naming import category_of
from specdoctor.playbooks.suspects import TRUTHY, Suspect, chosen
from specdoctor.playbooks.take_back import take_back
from specdoctor.tools.command import SetEnv

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
    if not _on_the_forward_pass(ctx, ("traceback-cut",)):
        return None
    found = _forward_choices(ctx)
    return found[0] if len(found) == 1 else None


def lone_engine_switch(ctx: Context) -> Suspect | None:
    """The forward pass crashed, no forward-pass flag was changed, and the one engine variable the command
    sets is a switch turned on: a suspect, never a finding."""
    if not _on_the_forward_pass(ctx, ("exception", "traceback-cut")) or _forward_choices(ctx):
        return None
    engine = [(n, v) for n, v in ctx.spec.env_dict().items() if re.match(r"(?:SGLANG|SGL)_", n)]
    if len(engine) != 1 or engine[0][1] not in TRUTHY:
        return None
    name, value = engine[0]
    edits = (SetEnv(name=name, value=TRUTHY[value]),)  # off in the spelling the user turned it on
    return Suspect(setting=name, how="the one choice on a cut path", words=(name,), edits=edits)


def _on_the_forward_pass(ctx: Context, kinds: tuple[str, ...]) -> bool:
    return ctx.root.kind in kinds and any(
        _FORWARD_PASS.search(f"{f.path} {f.function}") for f in ctx.root.frames
    )


def _forward_choices(ctx: Context) -> list[Suspect]:
    """The settings the command changed among those that choose the forward pass's code."""
    found = []
    for option in ctx.spec.options():
        flag = ctx.view.canon(option.name)
        info = ctx.catalog.get(flag)
        if _FORWARD_CHOICE.search(flag) and chosen(option, info):
            edits = take_back(flag, " ".join(option.values), info, ctx)
            found.append(
                Suspect(setting=flag, how="the one choice on a cut path", words=(flag,), edits=edits)
            )
    return found


def revert_lone_choice(ctx: Context, failure: str) -> Decision | None:
    """Take back the one forward-pass choice of a cut traceback, or the one engine switch of a forward-pass
    crash (a guess: below the unattended bar)."""
    found = lone_forward_choice(ctx) or lone_engine_switch(ctx)
    if found is None:
        return None
    undo = "; ".join(e.describe() for e in found.edits)
    return fix(
        ctx,
        found.edits,
        category_of(found.setting),
        f"{failure}; {_where(ctx)} ({(ctx.root.error_line or '').strip()})",
        why=f"the failure is inside the model's forward pass, and of the settings that choose how that pass runs "
        f"{found.setting} is the only one the command changed; {undo} puts the launch back on SGLang's default path",
        confidence=0.45,
    )


def _where(ctx: Context) -> str:
    if ctx.root.kind == "traceback-cut":
        return "the log stops inside the traceback"
    return "it crashed in the model's forward pass, in words that name no setting"
