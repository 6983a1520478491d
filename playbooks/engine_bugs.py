"""When SGLang itself is wrong: crashes inside its own code that no launch flag explains. These run last,
after every playbook that knows a flag-level cause has declined, and they stop rather than guess."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, place_of, playbook, sglang_frame, stop
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.suspects import revert_prime_suspect
from specdoctor.tools.command import SetFlag

_INTERNAL = re.compile(
    r"^(?:TypeError|AttributeError|IndexError|KeyError|NotImplementedError|UnboundLocalError|NameError|ZeroDivisionError)\b"
    r"|^RuntimeError: (?:Sizes of tensors|shape|The size of tensor|Expected .* to have|mat1 and mat2)"
    r"|^ValueError: (?:too many|not enough) values to unpack",
)


@playbook(
    id="sglang.engine.nan",
    category="engine-bug",
    when=("exited", "unhealthy"),
    pattern=r"NaN in the logits|Detected errors during sampling",
    priority=40,
    scope="root",
)
def nan_logits(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """NaN logits: fp16 overflow is the one flag-level cause; otherwise weights or kernels are broken."""
    if ctx.view.get("--dtype") in ("float16", "half"):
        return fix(
            ctx,
            [SetFlag(flag="--dtype", values=("bfloat16",))],
            "other",
            "the logits became NaN in float16",
            why="bfloat16 has float32's range, so activations do not overflow",
            confidence=0.7,
        )
    return stop(
        ctx,
        "engine-bug",
        "the model produced NaN logits",
        "Check the checkpoint (and that the draft belongs to this target); try --kv-cache-dtype auto and another attention backend to bisect.",
    )


@playbook(
    id="sglang.engine.illegal-access",
    category="engine-bug",
    when=("exited", "unhealthy"),
    pattern=r"illegal memory access|device-side assert triggered",
    priority=70,
    scope="root",
)
def illegal_access(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A kernel read or wrote out of bounds: in code a setting of the command chose, or in SGLang's own."""
    if chosen := revert_prime_suspect(ctx, "a GPU kernel accessed memory out of bounds"):
        return chosen
    return stop(
        ctx,
        "engine-bug",
        "a GPU kernel accessed memory out of bounds (a kernel bug for this model/configuration)",
        "Rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel; bisect by switching --attention-backend, disabling "
        "CUDA graphs or speculative decoding; check dmesg for Xid errors; report it upstream.",
        confidence=0.6,
    )


@playbook(
    id="sglang.engine.static-faults", category="other", when=("exited", "hung", "unhealthy"), priority=85
)
def static_faults(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """No playbook knows this failure, but the command has faults preflight can fix: fix those first."""
    fixable = [f for f in ctx.findings if f.severity == "error" and f.edits]
    if _past_argparse(ctx):
        # The SGLang that ran took every flag: one this catalog calls unknown belongs to another release.
        fixable = [f for f in fixable if f.category != "flag-name"]
    if not fixable:
        return None
    lead = fixable[0]
    return fix(
        ctx,
        [e for f in fixable for e in f.edits],
        lead.category,
        f"the command has faults SGLang does not report clearly: {lead.message}",
        why=" ".join(f.why for f in fixable if f.why),
        confidence=min(0.7, lead.confidence),
    )


def _past_argparse(ctx: Context) -> bool:
    """The engine got beyond parsing its arguments: it printed its server args or died in its own code."""
    if ctx.outcome.parse_error:
        return False
    if not ctx.catalog.authoritative and not re.search(
        r": error: (?:unrecognized|ambiguous|argument)", ctx.search_text
    ):
        return True  # flags are judged by a stand-in catalog, and the engine did not reject any
    if ctx.outcome.stage not in (None, "launch") or "server_args=" in ctx.search_text:
        return True
    return any("/srt/" in f.path and "server_args" not in f.path for f in ctx.root.frames)


@playbook(id="sglang.engine.internal-crash", category="engine-bug", when=("exited", "unhealthy"), priority=90)
def internal_crash(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A Python error inside SGLang's code that no playbook ties to a flag: report, do not guess."""
    line = ctx.root.error_line or ""
    if not _INTERNAL.search(line):
        return None
    if (
        ctx.view.algorithm
        and ctx.view.has("--speculative-draft-model-path")
        and re.search(r"size of tensor|Sizes of tensors|shape", line)
    ):
        return stop(
            ctx,
            "spec-draft-mismatch",
            f"the draft model's tensors do not fit what SGLang feeds it for this target: {line}",
            "The draft was built for another target or another SGLang integration (hidden size, auxiliary "
            "layers, vocabulary); use a draft made for this exact target and SGLang's algorithm.",
            confidence=0.6,
        )
    if chosen := revert_prime_suspect(ctx, "SGLang crashed in its own code"):
        return chosen
    where = sglang_frame(ctx)
    place = f" in {place_of(where)}" if where else ""
    return stop(
        ctx,
        "engine-bug",
        f"SGLang crashed in its own code{place}: {line}",
        "This is an SGLang bug for this model and configuration, not a launch-flag problem. Try another SGLang "
        "release, search its issue tracker for the error line, or report it with the log.",
        confidence=0.5,
    )
