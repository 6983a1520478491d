"""Optional features that break a launch. When SGLang crashes inside the code of a feature the command
switched on, turning that feature off is the smallest change that can work — and the error usually names
the feature, in its own words."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.cuda_graph import CAPTURE_FAILED_LINE
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.lone_choice import revert_lone_choice
from specdoctor.playbooks.naming import named_in
from specdoctor.playbooks.suspects import revert_prime_suspect
from specdoctor.tools.command import Edit, RemoveFlag, SetFlag

# Settings CUDA graphs cannot capture (SGLang documents each of these).
_NOT_CAPTURABLE: tuple[tuple[str, str | None, str, tuple[str, ...]], ...] = (
    (
        "--deepep-mode",
        "normal",
        "DeepEP's normal (high-throughput) mode cannot run inside a CUDA graph; auto picks "
        "low-latency kernels for decode",
        ("auto",),
    ),
)
# Diagnostics that synchronise with the host, which a CUDA-graph capture forbids.
_SYNCING = re.compile(r"metrics|recorder|distribution|debug|profil|nan-detection|dump|trace|check", re.I)


@playbook(
    id="sglang.feature.named-in-error", category="other", when=("exited", "hung", "unhealthy"), priority=75
)
def feature_named_in_error(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """SGLang crashed in the code of a setting the command chose, and the failure names it: take it back."""
    if ctx.root.kind not in ("exception", "traceback-cut", "message"):
        return None
    return revert_prime_suspect(ctx, "SGLang failed")


@playbook(
    id="sglang.feature.lone-choice", category="other", when=("exited", "hung", "unhealthy"), priority=84
)
def lone_choice(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A traceback cut before its error, after every rule that reads its words had its turn: the one
    forward-pass setting the command changed is the only lead (below the unattended bar)."""
    return revert_lone_choice(ctx, "SGLang failed")


@playbook(
    id="sglang.feature.not-capturable",
    category="cuda-graph",
    pattern=rf"{CAPTURE_FAILED_LINE}|Possible solutions:|disable cuda graph|StreamCapture|stream is capturing",
    priority=12,
)
def not_capturable(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """CUDA-graph capture failed with a setting that cannot be captured, or a diagnostic that syncs the host."""
    view = ctx.view
    for flag, value, why, replacement in _NOT_CAPTURABLE:
        if view.has(flag) and (value is None or view.get(flag) == value):
            edits: list[Edit] = (
                [SetFlag(flag=flag, values=replacement)] if replacement else [RemoveFlag(flag=flag)]
            )
            return fix(
                ctx,
                edits,
                "cuda-graph",
                f"CUDA graph capture failed with {flag} {value or ''}".strip(),
                why=why,
                confidence=0.8,
            )
    if not re.search(r"stream is capturing|StreamCapture(?:Unsupported|Invalidated)", ctx.search_text):
        return None
    switched_on = [
        o.name
        for o in view.spec.options()
        if not o.values and o.name.startswith("--enable-") and _SYNCING.search(o.name)
    ]
    # Grounds: the failing stack runs through the diagnostic's own code (its words are in the traceback).
    stack = ctx.root_text + " " + " ".join(f.path + " " + f.function for f in ctx.root.frames)
    named = [f for f in switched_on if named_in(f, stack)]
    # A stack cut short cannot show it; then the one diagnostic switched on is a suspect, not a finding.
    suspects = named or (switched_on if len(switched_on) == 1 and "[...]" in ctx.log_text else [])
    if not suspects:
        return None
    return fix(
        ctx,
        [RemoveFlag(flag=f) for f in suspects],
        "cuda-graph",
        f"an operation that is not allowed while a CUDA graph is captured ran during capture ({', '.join(suspects)})",
        why="diagnostics that read results back to the host break capture; the server runs without them",
        confidence=0.7 if named else 0.45,
    )
