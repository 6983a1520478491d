"""Attention backends: when the error says which backends this model or GPU supports, or which one a
feature requires, use one of those (preferring the most widely supported)."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook, stop
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.command import SetFlag
from specdoctor.tools.system import ModelFacts

# Most portable first: triton runs everywhere SGLang runs, flashinfer on every recent NVIDIA GPU.
PREFERENCE = ("triton", "flashinfer", "fa4", "trtllm_mha", "fa3", "flashmla", "trtllm_mla", "cutlass_mla")
_LISTED = re.compile(r"Only \{?([\w', ]+?)\}? backends? (?:are|is) supported")
_GOT = re.compile(r"Got prefill=(\w+), decode=(\w+)")
_REQUIRES = re.compile(r"requires (?:--attention-backend[ =])?(\w+?)(?:AttnBackend|Backend)?\b(?! to)", re.I)
_CLASS_TO_NAME = {
    "triton": "triton",
    "flashinfer": "flashinfer",
    "flashattention": "fa3",
    "torchnative": "torch_native",
}


def _choices(ctx: Context, flag: str) -> tuple[str, ...]:
    info = ctx.catalog.get(flag)
    return info.choices if info and info.choices else ()


def _pick(ctx: Context, flag: str, allowed: list[str]) -> str | None:
    known = _choices(ctx, flag)
    valid = [b for b in allowed if not known or b in known]
    ranked = sorted(valid, key=lambda b: PREFERENCE.index(b) if b in PREFERENCE else len(PREFERENCE))
    return ranked[0] if ranked else None


@playbook(id="sglang.backend.only-listed", category="attention-backend", pattern=_LISTED.pattern, priority=22)
def only_listed(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The error lists the attention backends this model supports on this GPU."""
    assert m is not None
    allowed = [b.strip(" '\"") for b in m.group(1).split(",") if b.strip(" '\"")]
    got = _GOT.search(ctx.search_text)
    flag = "--attention-backend"
    if not ctx.view.has(flag) and got:
        flag = "--prefill-attention-backend" if got.group(1) not in allowed else "--decode-attention-backend"
    target = _pick(ctx, flag, allowed)
    if target is None:
        return stop(
            ctx,
            "attention-backend",
            f"none of the backends this model allows ({', '.join(allowed)}) exists here",
            "Use an SGLang build with one of them.",
        )
    return fix(
        ctx,
        [SetFlag(flag=flag, values=(target,))],
        "attention-backend",
        f"this model runs only on the {', '.join(allowed)} attention backends here",
        why=f"{target} is the most widely supported of them",
        confidence=0.8,
    )


@playbook(
    id="sglang.backend.required",
    category="attention-backend",
    pattern=r"requires \w*(?:AttnBackend|Backend)\b|requires --attention-backend",
    priority=45,
)
def required_backend(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A log line says a feature of this model requires a specific attention backend."""
    for match in _REQUIRES.finditer(ctx.search_text):
        name = _CLASS_TO_NAME.get(match.group(1).lower(), match.group(1).lower())
        if name in _choices(ctx, "--attention-backend") and ctx.view.get("--attention-backend") != name:
            return fix(
                ctx,
                [SetFlag(flag="--attention-backend", values=(name,))],
                "attention-backend",
                f"this model needs the {name} attention backend ({match.group(0)})",
                why=f"the log says the model's attention path is implemented for {name}",
                evidence=(match.string[max(0, match.start() - 80) : match.end()].splitlines()[-1],),
                confidence=0.7,
            )
    return None


@playbook(
    id="sglang.backend.fa3-not-here",
    category="attention-backend",
    pattern=r"FlashAttention v3 Backend requires SM|'fa3' backend is not supported|fa3.* not supported on|FA3 .*only supports",
    priority=25,
)
def fa3_not_here(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """FA3 runs on Ampere/Hopper only. On Blackwell its successor is FA4."""
    user_fa3 = [
        f
        for f in ("--attention-backend", "--prefill-attention-backend", "--decode-attention-backend")
        if ctx.view.get(f) == "fa3"
    ]
    if user_fa3:
        return fix(
            ctx,
            [SetFlag(flag=user_fa3[0], values=("flashinfer",))],
            "attention-backend",
            "the fa3 attention backend does not run on this GPU",
            why="flashinfer supports every recent NVIDIA GPU",
            confidence=0.8,
        )
    # The command did not ask for fa3, so a default chose it: when the error names the flag to use, follow
    # it; otherwise the default that is fa3 is the vision encoder's.
    if suggested := re.search(r"use `?--attention-backend[ =](\w+)", ctx.search_text):
        return fix(
            ctx,
            [SetFlag(flag="--attention-backend", values=(suggested.group(1),))],
            "attention-backend",
            "the default fa3 attention backend does not run on this GPU",
            why="the error names the backend to use",
            confidence=0.8,
        )
    in_encoder = _VISION.search(ctx.root_text) or any(
        _VISION.search(f.path + f.function) for f in ctx.root.frames
    )
    text_only = ctx.model is not None and ctx.model.has_config and not _multimodal(ctx.model)
    if text_only and not in_encoder:
        target = _pick(ctx, "--attention-backend", ["flashinfer", "triton"])
        return fix(
            ctx,
            [SetFlag(flag="--attention-backend", values=(target,))] if target else [],
            "attention-backend",
            "the default fa3 attention backend does not run on this GPU",
            why=f"this model has no vision encoder, so the fa3 default is its own; {target} runs on this GPU",
            confidence=0.7,
        )
    blackwell = bool(re.search(r"Blackwell|sm_?10\d|SM10\d|sm_?12\d", ctx.search_text)) or bool(
        ctx.gpus and ctx.gpus.ok and any((g.compute_capability or (0, 0))[0] >= 10 for g in ctx.gpus.gpus)
    )
    target = "fa4" if blackwell and "fa4" in _choices(ctx, "--mm-attention-backend") else "sdpa"
    return fix(
        ctx,
        [SetFlag(flag="--mm-attention-backend", values=(target,))],
        "attention-backend",
        "the vision encoder asks for FlashAttention-3, which this GPU does not run",
        why=f"--mm-attention-backend {target} gives the encoder a backend this GPU supports",
        # Without a traceback through the encoder or a model config saying it has one, this is a guess.
        confidence=0.7 if in_encoder or (ctx.model is not None and _multimodal(ctx.model)) else 0.45,
    )


_VISION = re.compile(r"vision|visual|\bvit\b|siglip|multimodal|mm_|image_encoder|encoder", re.I)


def _multimodal(model: ModelFacts) -> bool:
    names = " ".join([*model.architectures, model.model_type or ""])
    return bool(re.search(r"ConditionalGeneration|VL|Vision|Llava|_vl\b|omni", names, re.I))


_ONLY_ON = re.compile(r"(\w[\w ]*?) backend(?: for \w+)? is only supported on ([^.]+)", re.I)


@playbook(
    id="sglang.backend.not-on-this-gpu", category="attention-backend", pattern=_ONLY_ON.pattern, priority=26
)
def not_on_this_gpu(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A backend the command asked for does not run on this GPU generation."""
    for flag in ("--attention-backend", "--prefill-attention-backend", "--decode-attention-backend"):
        chosen = ctx.view.get(flag)
        if chosen and chosen.replace("_", " ").lower() in (m.group(1).replace("_", " ").lower() if m else ""):
            target = _pick(
                ctx, flag, [b for b in PREFERENCE if b != chosen and not b.startswith(chosen.split("_")[0])]
            )
            if target:
                return fix(
                    ctx,
                    [SetFlag(flag=flag, values=(target,))],
                    "attention-backend",
                    f"{flag} {chosen} is only supported on {m.group(2) if m else 'other GPUs'}",
                    why=f"{target} runs on this GPU generation",
                    confidence=0.6,
                )
    return stop(
        ctx,
        "attention-backend",
        f"a default attention backend does not run on this GPU: {ctx.root.error_line or ''}",
        "Pick a backend for this GPU with --attention-backend (triton runs everywhere), or use an SGLang build that supports it.",
    )


@playbook(id="sglang.backend.draft-worker", category="attention-backend", priority=70)
def draft_worker_backend(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The draft worker fails to build: a draft of another architecture (a Llama-style EAGLE head on an MLA
    target) inherits the target's attention backend, which it cannot use."""
    if ctx.view.algorithm is None or ctx.view.has("--speculative-draft-attention-backend"):
        return None
    if "--speculative-draft-attention-backend" not in ctx.catalog:
        return None
    if not re.search(
        r"init_draft_worker|DraftWorker|draft_worker|eagle_worker\w*\.py\S*, line \d+, in __init__",
        ctx.root_text,
    ):
        return None
    if _OTHER_CAUSE.search(ctx.search_text):
        return None  # the draft failed for a reason of its own (its path, its memory, its weights)
    attention = _ATTENTION.search(ctx.root_text) or any(
        "layers/attention" in f.path or "attn" in f.function for f in ctx.root.frames
    )
    if not attention and ctx.root.kind != "traceback-cut":
        return None  # a complete traceback that does not run through attention is not this
    amd = bool(
        ctx.gpus and ctx.gpus.ok and any(re.search(r"AMD|MI\d{3}|Instinct", g.name) for g in ctx.gpus.gpus)
    )
    target = "triton" if amd else "flashinfer"  # flashinfer is SGLang's standard backend on NVIDIA GPUs
    return fix(
        ctx,
        [SetFlag(flag="--speculative-draft-attention-backend", values=(target,))],
        "attention-backend",
        "the speculative draft worker failed to build",
        why=f"the draft inherits the target's attention backend, which a draft of another architecture may not "
        f"support; {target} serves any standard attention",
        # A cut traceback says only where it failed, not why: not enough to change the command unasked.
        confidence=0.6 if attention else 0.45,
    )


_OTHER_CAUSE = re.compile(
    r"out of memory|OutOfMemoryError|No such file|FileNotFoundError|OSError|Repository Not Found|"
    r"HFValidationError|does not appear to have a file|config\.json|load_weights|weight_loader|KeyError: '[\w.]+weight",
    re.I,
)
_ATTENTION = re.compile(r"attention|attn|backend|mla|kv_lora_rank|rope_head_dim|head_dim", re.I)


_AITER_ARCH = (
    r"One of GPU archs of \[[^\]]*\] is invalid or not supported|Unknown GPU architecture: gfx\w+\. Supported"
)


@playbook(id="sglang.backend.aiter-arch", category="attention-backend", pattern=_AITER_ARCH, priority=24)
def aiter_arch(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """AITER, SGLang's default attention kernels on ROCm, does not build for this GPU (a Radeon or an
    Instinct it has no kernels for); the Triton backend runs on every ROCm GPU."""
    chosen = ctx.view.get("--attention-backend")
    if chosen not in (None, "aiter") or "triton" not in _choices(ctx, "--attention-backend"):
        return None
    return fix(
        ctx,
        [SetFlag(flag="--attention-backend", values=("triton",))],
        "attention-backend",
        "AITER has no kernels for this GPU's architecture",
        why="on ROCm SGLang picks AITER for attention unless told otherwise; --attention-backend triton "
        "compiles for any ROCm GPU",
        evidence=(m.group(0),) if m else (),
        confidence=0.6,
    )
