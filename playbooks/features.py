"""Optional features that break a launch. When SGLang crashes inside the code of a feature the command
switched on, turning that feature off is the smallest change that can work — and the error usually names
the feature, in its own words."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.cuda_graph import CAPTURE_FAILED_LINE
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.command import Edit, Option, RemoveFlag, SetFlag

# Words too common in logs to tie an error to one flag.
_GENERIC = {
    "enable",
    "disable",
    "use",
    "spec",
    "speculative",
    "cuda",
    "graph",
    "cache",
    "mode",
    "size",
    "backend",
    "attention",
    "model",
    "decode",
    "prefill",
    "server",
    "support",
    "path",
    "max",
    "min",
    "num",
    "custom",
    "kernel",
}
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


def _words(flag: str) -> list[str]:
    return [w for w in flag.lstrip("-").lower().split("-") if len(w) >= 3 and w not in _GENERIC]


def _named_in(flag: str, text: str) -> bool:
    """Most of a flag's distinctive words appear in the text (squeezed, so `expert_distribution` and
    `ExpertDistribution` both count)."""
    words = _words(flag)
    squeezed = re.sub(r"[\s_\-./]", "", text.lower())
    hits = [w for w in words if w in squeezed]
    return bool(words) and len(hits) * 2 >= len(words) and any(len(w) >= 5 for w in hits)


@playbook(
    id="sglang.feature.named-in-error", category="other", when=("exited", "hung", "unhealthy"), priority=75
)
def feature_named_in_error(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """SGLang crashed in the code of an optional feature the command switched on: switch it off."""
    if ctx.root.kind not in ("exception", "traceback-cut", "message"):
        return None
    text = ctx.root_text
    suspects = [o.name for o in ctx.spec.options() if _optional(ctx, o) and _named_in(o.name, text)]
    if len(suspects) != 1:
        return None  # none, or several equally likely: not a confident guess
    flag = suspects[0]
    category = (
        "spec-config" if ctx.view.algorithm and re.search(r"draft|spec|verify", text, re.I) else "other"
    )
    return fix(
        ctx,
        [RemoveFlag(flag=flag)],
        category,
        f"SGLang failed inside the feature {flag} switches on: {ctx.root.error_line or ''}".strip(),
        why=f"the error names {flag}'s feature; without it the launch takes SGLang's default path",
        confidence=0.6,
    )


def _optional(ctx: Context, option: Option) -> bool:
    """A feature the command switched on: an `--enable-*` switch, or a value given to a flag that is off
    unless set (its default is none: `--reasoning-parser qwen3`, `--speculative-token-map F`)."""
    if not option.values:
        return option.name.startswith(("--enable-", "--enforce-", "--use-"))
    flag = ctx.catalog.get(ctx.view.canon(option.name))
    return flag is not None and flag.default in (None, "None", "", "none")


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
    named = [f for f in switched_on if _named_in(f, stack)]
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
