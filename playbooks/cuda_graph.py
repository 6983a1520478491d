"""CUDA graph capture failed. SGLang prints the same generic "Possible solutions" whatever happened;
the exception inside it says what really did, and each cause has its own fix:

- out of memory: graphs live outside --mem-fraction-static, so lower it if it was raised, else capture
  fewer batch sizes (--cuda-graph-max-bs-decode);
- custom all-reduce / peer access: --disable-custom-all-reduce;
- torch.compile (inductor, dynamo, triton compile): drop --enable-torch-compile;
- anything else with memory to spare: a bug in SGLang's capture path; no flag fixes it.
"""

from __future__ import annotations

import math
import re

from specdoctor.playbooks.base import Context, fix, playbook, stop
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.lone_choice import revert_lone_choice
from specdoctor.playbooks.parallel import CUSTOM_ALLREDUCE, use_nccl_allreduce
from specdoctor.playbooks.suspects import revert_prime_suspect
from specdoctor.tools.command import Edit, RemoveFlag, SetFlag

CAPTURE_FAILED_LINE = r"Capture (?:cuda|CUDA) graph failed"
"""SGLang's own message when graph capture raised."""
CAPTURE_FAILED = (
    rf"{CAPTURE_FAILED_LINE}|Capture cuda graph begin|capture\(\)|cuda_graph_runner|Capturing batches"
)
_OOM = re.compile(r"out of memory|OutOfMemoryError", re.I)
_ALLREDUCE = re.compile(rf"{CUSTOM_ALLREDUCE}|peer access|IPC", re.I)
_COMPILE = re.compile(
    r"torch\._dynamo|torch\._inductor|inductor|SubprocException|triton.*compil|BackendCompilerFailed|torch\.compile",
    re.I,
)
_AVAIL = re.compile(r"avail mem=([0-9.]+) GB")
_TRIED = re.compile(r"Tried to allocate ([0-9.]+) (GiB|MiB)")
_TOTAL = re.compile(r"total capacity of ([0-9.]+) GiB of which ([0-9.]+) (GiB|MiB) is free")
FLOOR_FRACTION = 0.7
HIGH_FRACTION = 0.85
MAX_BS_STEPS = (64, 32, 16, 8)


def _max_bs_flag(ctx: Context) -> str:
    """The flag the installed SGLang uses for the decode graph batch-size cap."""
    for name in ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"):
        if name in ctx.catalog:
            return name
    return "--cuda-graph-max-bs-decode"


@playbook(id="sglang.cuda-graph.capture", category="cuda-graph", pattern=CAPTURE_FAILED, priority=15)
def capture_failed(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """Classify the real cause behind "Capture cuda graph failed" instead of following the generic advice."""
    text = ctx.search_text
    # Every healthy startup logs "Capture cuda graph begin": only a failed capture, or a traceback that
    # runs through the capture code, is this playbook's, and never a crash after the server was ready.
    failed = re.search(CAPTURE_FAILED_LINE, text)
    in_capture = re.search(r"cuda_graph_runner|graph_runner\.py|capture\(\)|in capture\w*", ctx.root_text)
    lines = [ln for ln in ctx.log_text.splitlines() if ln.strip()]
    died_capturing = ctx.outcome.stage == "cuda_graph" or bool(
        lines and re.search(r"Capturing batches|Capture .*graph begin", lines[-1])
    )
    in_capture = in_capture or (died_capturing and ctx.outcome.kind == "exited")
    if ctx.outcome.ready_seen or not (failed or in_capture):
        return None
    if _ALLREDUCE.search(text):
        return use_nccl_allreduce(
            ctx,
            "CUDA graph capture failed inside SGLang's custom all-reduce (CUDA IPC between GPUs)",
            why="custom all-reduce needs peer-to-peer/IPC between the GPUs; NCCL's all-reduce does not",
            confidence=0.85,
        )
    if _COMPILE.search(text) and ctx.view.has("--enable-torch-compile"):
        return fix(
            ctx,
            [RemoveFlag(flag="--enable-torch-compile")],
            "cuda-graph",
            "CUDA graph capture failed while torch.compile was compiling kernels",
            why="torch.compile is experimental in SGLang; without it graphs are captured from the eager model",
            confidence=0.85,
        )
    if _OOM.search(text):
        return _capture_oom(ctx)
    if ctx.view.has("--enable-torch-compile"):
        return fix(
            ctx,
            [RemoveFlag(flag="--enable-torch-compile")],
            "cuda-graph",
            "CUDA graph capture failed with --enable-torch-compile on",
            why="torch.compile is the experimental part of capture; try without it first",
            confidence=0.6,
        )
    if chosen := revert_prime_suspect(ctx, "CUDA graph capture failed") or revert_lone_choice(
        ctx, "CUDA graph capture failed"
    ):
        return chosen
    avail = [float(x) for x in _AVAIL.findall(text)]
    room = f" with {min(avail):.1f} GB still free" if avail else ""
    return stop(
        ctx,
        "engine-bug",
        f"CUDA graph capture failed in SGLang's own code{room}, not for lack of memory",
        "This is a bug of this SGLang version for this model; try another SGLang release, or run with "
        "--cuda-graph-backend-decode disabled to confirm (much slower), and report it upstream with the log.",
        confidence=0.6,
    )


def _size_gib(number: str, unit: str) -> float:
    return float(number) / (1024 if unit.startswith("M") else 1)


def _shortfall(text: str) -> tuple[float, float] | None:
    """(GiB the capture lacked, GPU total GiB) from PyTorch's OOM message, when it gives them."""
    alloc = _TRIED.search(text)
    total = _TOTAL.search(text)
    if not alloc or not total:
        return None
    free = _size_gib(total.group(2), total.group(3))
    return max(_size_gib(alloc.group(1), alloc.group(2)) - free, 0.0), float(total.group(1))


def _capture_oom(ctx: Context) -> Decision | None:
    current = ctx.view.float("--mem-fraction-static")
    if current is not None and current > HIGH_FRACTION:
        short = _shortfall(ctx.search_text)
        # Graphs are captured largest batch first, so the failed allocation is the big one; leave room
        # for it plus a third for the smaller ones and fragmentation.
        step = (short[0] * 1.3 + 1.0) / short[1] if short else 0.07
        wanted = current - max(step, 0.03)
        lower = math.floor(round(max(wanted, FLOOR_FRACTION) * 100, 6)) / 100
        edits: list[Edit] = [SetFlag(flag="--mem-fraction-static", values=(f"{lower:g}",))]
        why = "CUDA graphs are allocated outside mem_fraction_static; " + (
            f"the capture lacked {short[0]:.1f} GiB of {short[1]:.0f} GiB, so the static share drops by {current - lower:.2f}"
            if short
            else "a smaller static share leaves them room"
        )
        if wanted < FLOOR_FRACTION:
            # Lowering the static share that far would starve the KV cache: capture fewer batch sizes too.
            edits.append(SetFlag(flag=_max_bs_flag(ctx), values=(str(MAX_BS_STEPS[0]),)))
            why += f", but not below {FLOOR_FRACTION} (the KV cache needs it); the largest graphs go instead"
        decision = fix(
            ctx,
            edits,
            "cuda-graph",
            f"CUDA graph capture ran out of memory: --mem-fraction-static {current:g} leaves too little outside the static pool",
            why=why,
            confidence=0.85,
        )
        if decision is not None:
            return decision
    flag = _max_bs_flag(ctx)
    now = ctx.view.int(flag)
    steps = [bs for bs in MAX_BS_STEPS if now is None or bs < now]
    if now is not None and now // 2 not in steps and now // 2 >= 1:
        steps.insert(0, now // 2)
    for bs in steps:
        edits: list[Edit] = [SetFlag(flag=flag, values=(str(bs),))]
        decision = fix(
            ctx,
            edits,
            "cuda-graph",
            "CUDA graph capture ran out of memory: the largest captured batch needs more than is left after weights and KV cache",
            why=f"{flag} {bs} captures fewer, smaller decode graphs (speculative decoding multiplies tokens per request)",
            confidence=0.8,
        )
        if decision is not None:
            return decision
    return None
