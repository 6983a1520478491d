"""GPU and host memory failures. The direction matters: SGLang's `--mem-fraction-static` is the share
for weights + KV cache, so "Not enough memory" (no room left for the KV pool) means RAISE it, while an
out-of-memory in activations or CUDA graphs (outside that share) means LOWER it."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook, stop
from specdoctor.playbooks.cuda_graph import CAPTURE_FAILED_LINE
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.host_checks import launch_gpus, visible_gpus
from specdoctor.tools.command import Edit, RemoveFlag, SetEnv, SetFlag
from specdoctor.tools.edit_policy import edit_policy
from specdoctor.tools.gpu_parse import processes_in_text

MAX_FRACTION = 0.95
"""Above this nothing is left for activations and CUDA graphs."""
AUTO_FRACTION = 0.85
"""Roughly SGLang's automatic choice on large GPUs, used when the command does not set one."""

NOT_ENOUGH = r"Not enough memory\. Please try to increase --mem-fraction-static|Loaded weights leave no GPU memory for the KV cache"
CUDA_OOM = r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory"
_ABOVE = re.compile(r"Raise --mem-fraction-static above ([0-9.]+)")
_PROCESS_USE = re.compile(
    r"total capacity of ([0-9.]+) GiB.*?this process has ([0-9.]+) GiB memory in use", re.S
)


def _fraction(ctx: Context) -> float | None:
    return ctx.view.float("--mem-fraction-static")


def _busy_gpus(ctx: Context) -> list[int]:
    """GPUs where a process we did not start holds memory (from nvidia-smi)."""
    if ctx.gpus is None or not ctx.gpus.ok:
        return []
    used = launch_gpus(ctx.view, ctx.gpus)
    return sorted(
        {
            p.gpu_index
            for p in ctx.gpus.processes
            if p.gpu_index is not None
            and (p.used_memory_mib or 0) > 1024
            and (used is None or p.gpu_index in used)
        }
    )


@playbook(id="sglang.memory.kv-pool-empty", category="oom", pattern=NOT_ENOUGH, priority=20)
def kv_pool_empty(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """Weights filled the static share and no KV cache fits: raise --mem-fraction-static if there is room."""
    if (budget := ctx.view.float("--max-total-tokens")) is not None and budget < 1:
        return fix(
            ctx,
            [RemoveFlag(flag="--max-total-tokens")],
            "oom",
            f"--max-total-tokens {ctx.view.get('--max-total-tokens')} leaves the KV cache no token",
            why="the pool is empty because the command capped it at nothing, not for lack of memory; without "
            "the cap SGLang sizes it from the memory left after the weights",
            confidence=0.8,
        )
    if (off := _chunked_prefill_off(ctx)) is not None:
        return off
    current = _fraction(ctx)
    suggested = _ABOVE.search(ctx.search_text)
    target = float(suggested.group(1)) + 0.03 if suggested else max((current or AUTO_FRACTION) + 0.05, 0.88)
    # SGLang's stated minimum can sit below any sensible share (an activation reserve that ate the auto
    # value): the lowest share the edit policy allows is then the smallest raise that clears it.
    lowest = edit_policy().ranges.get("--mem-fraction-static", (0.0, 1.0))[0]
    target = round(min(max(target, lowest), MAX_FRACTION), 2)
    busy = _busy_gpus(ctx)
    if busy:
        return stop(
            ctx,
            "stale-gpu-process",
            f"other processes hold memory on GPU {', '.join(map(str, busy))}, so the weights leave no room for the KV cache",
            "Stop those processes (see nvidia-smi), or run on other GPUs with CUDA_VISIBLE_DEVICES.",
        )
    if (current is not None and current >= MAX_FRACTION) or target <= (current or 0):
        return stop(
            ctx,
            "oom",
            "the weights do not leave room for a KV cache even at the highest safe --mem-fraction-static",
            "Give each GPU less to hold: a larger --tp-size (more GPUs), a quantized checkpoint, or a smaller "
            "draft model; or free memory other processes hold.",
        )
    return fix(
        ctx,
        [SetFlag(flag="--mem-fraction-static", values=(f"{target:g}",))],
        "oom",
        f"after loading the weights no GPU memory is left for the KV cache (--mem-fraction-static {current or 'auto'})",
        why="mem_fraction_static is the share for weights AND KV cache; raising it gives the KV pool room "
        f"(counter-intuitive but what the message asks){'; SGLang computed the minimum' if suggested else ''}",
        confidence=0.85,
    )


_AUTO_SHARE_BELOW_ZERO = re.compile(r"--mem-fraction-static=(-[\d.]+|0(?:\.0*)?)\b")


def _chunked_prefill_off(ctx: Context) -> Decision | None:
    """SGLang's own share came out at or below zero because the command turned chunked prefill off: then
    it reserves activations for a whole --max-prefill-tokens prompt (16384 by default; memory_hook.py), more
    than a small device holds. Chunked prefill back at its default reserves for one chunk."""
    chunk = ctx.view.int("--chunked-prefill-size")
    if chunk is None or chunk > 0 or ctx.view.has("--mem-fraction-static"):
        return None
    if not _AUTO_SHARE_BELOW_ZERO.search(ctx.search_text):
        return None
    return fix(
        ctx,
        [RemoveFlag(flag="--chunked-prefill-size")],
        "oom",
        f"--chunked-prefill-size {chunk} turns chunked prefill off, and the activation reserve for a whole "
        "prompt left SGLang's memory share below zero",
        why="with chunked prefill off SGLang reserves activations for --max-prefill-tokens tokens at once; "
        "with it on (the default) only for one chunk (or lower --max-prefill-tokens)",
        confidence=0.6,
    )


def _more_gpus(ctx: Context, visible: int | None) -> Decision | None:
    """The weights do not fit: spread them over more of the node's GPUs, or stop."""
    tp = ctx.view.tp
    heads = ctx.model.num_attention_heads if ctx.model else None
    bigger = next(
        (
            t
            for t in (2 * tp, 4 * tp, 8 * tp)
            if visible and t <= visible and (heads is None or heads % t == 0)
        ),
        None,
    )
    if bigger:
        return fix(
            ctx,
            [SetFlag(flag="--tp-size", values=(str(bigger),))],
            "oom",
            f"the weights do not fit on {tp} GPU(s)",
            why=f"--tp-size {bigger} splits the weights over {bigger} GPUs; the node has {visible}",
            confidence=0.7,
        )
    return stop(
        ctx,
        "oom",
        "the model's weights alone do not fit in this GPU memory; lowering --mem-fraction-static cannot help",
        "Use more GPUs (--tp-size) on a larger node, a smaller or more strongly quantized checkpoint "
        "(e.g. AWQ/GPTQ 4-bit), or a GPU with more memory.",
        confidence=0.75,
    )


@playbook(id="sglang.memory.weights-do-not-fit", category="oom", pattern=CUDA_OOM, priority=60)
def weights_do_not_fit(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """CUDA OOM outside graph capture: while loading (weights too big for the GPUs) or right after."""
    text = ctx.search_text
    if re.search(CAPTURE_FAILED_LINE, text) or ctx.outcome.stage == "cuda_graph":
        return None  # cuda_graph playbooks own this
    usage = _PROCESS_USE.search(text)
    view = ctx.view
    visible = visible_gpus(view, ctx.gpus)
    # Loading: the stage says so, the weights began but never finished, or the traceback is in the loader.
    loading = (
        ctx.outcome.stage in ("weights", "init", "args")
        or ("Load weight begin" in text and "Load weight end" not in text)
        or re.search(r"load_weights|weight_loader|safetensors|load_model", ctx.root_text)
    )
    pool_placed = ctx.outcome.ready_seen or re.search(r"KV Cache is allocated|Memory pool end", text)
    own_share = None
    if usage and not pool_placed:
        total, used = float(usage.group(1)), float(usage.group(2))
        own_share = used / total if total else None
    current = _fraction(ctx)
    # A static share the user raised above SGLang's own leaves the rest of the GPU short whatever the
    # weights weigh: the process using more than it is then the pool plus what runs beside it.
    raised = current is not None and current > AUTO_FRACTION
    if (loading and not pool_placed) or (
        own_share is not None and own_share > (current or AUTO_FRACTION) and not raised
    ):
        return _more_gpus(ctx, visible)
    lower = round(max((current or AUTO_FRACTION) - 0.07, 0.5), 2)
    edits = [SetFlag(flag="--mem-fraction-static", values=(f"{lower:g}",))]
    if ctx.already_tried(edits):
        edits = [SetFlag(flag="--chunked-prefill-size", values=("2048",))]
    return fix(
        ctx,
        edits,
        "oom",
        "CUDA ran out of memory after the weights and KV cache were placed",
        why="activations live outside --mem-fraction-static; a smaller static share (or smaller prefill chunks) leaves them room",
        confidence=0.6,
    )


@playbook(
    id="sglang.memory.unbalanced",
    category="stale-gpu-process",
    pattern=r"The memory capacity is unbalanced",
    priority=20,
)
def unbalanced(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """One GPU has much less free memory than the others: another process sits on it."""
    busy = set(_busy_gpus(ctx))
    if ctx.gpus is not None and ctx.gpus.ok and busy and not ctx.view.env("CUDA_VISIBLE_DEVICES"):
        free = [g.index for g in ctx.gpus.gpus if g.index not in busy]
        need = ctx.view.world
        if len(free) >= need:
            devices = ",".join(str(i) for i in free[:need])
            return fix(
                ctx,
                [SetEnv(name="CUDA_VISIBLE_DEVICES", value=devices)],
                "stale-gpu-process",
                f"GPU {', '.join(map(str, sorted(busy)))} is partly taken by another process",
                why=f"GPUs {devices} are free; the launch uses only those",
                confidence=0.8,
            )
    return stop(
        ctx,
        "stale-gpu-process",
        "free memory differs between the GPUs of this launch: another process holds memory on one of them",
        "Find it with `nvidia-smi --query-compute-apps=pid,used_memory --format=csv` and stop it (deploy "
        "--allow-kill does that for you), or pick idle GPUs with CUDA_VISIBLE_DEVICES.",
    )


@playbook(
    id="sglang.memory.host-ram",
    category="oom",
    pattern=r"Exit code: -9|^Killed$|Out of memory: Killed process",
    priority=40,
)
def host_ram(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A process vanished with SIGKILL and no traceback: the Linux OOM killer (host RAM)."""
    if ctx.root.kind not in ("killed", "none", "message"):
        return None
    return stop(
        ctx,
        "oom",
        "a SGLang process was killed by the operating system (exit code -9): host RAM ran out, not GPU memory",
        "Check `dmesg | grep -i 'killed process'`; add RAM or swap, load fewer ranks per node, or use a "
        "checkpoint format that does not materialise full weights in RAM.",
        confidence=0.7,
    )


@playbook(
    id="sglang.memory.request-slots",
    category="oom",
    when=("exited", "unhealthy"),
    pattern=r"alloc_req_slots runs out of memory",
    priority=30,
)
def request_slots(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """Request slots ran out at runtime."""
    current = ctx.view.int("--max-running-requests")
    target = max((current or 64) // 2, 1)
    return fix(
        ctx,
        [SetFlag(flag="--max-running-requests", values=(str(target),))],
        "oom",
        "SGLang ran out of request slots",
        why="fewer concurrent requests need fewer slots",
        confidence=0.7,
    )


_LISTING = r"^\|\s*Processes:|^\s*GPU\s+(?:GI\s+CI\s+)?PID\s+"
_BIG_MIB = 1024


@playbook(id="sglang.memory.stale-holders", category="stale-gpu-process", pattern=_LISTING, priority=30)
def stale_holders(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The log shows an nvidia-smi process listing with compute processes holding GPU memory."""
    big = [
        p
        for p in processes_in_text(ctx.search_text)
        if (p.used_memory_mib or 0) >= _BIG_MIB and p.kind != "G"
    ]
    if not big:
        return None
    names = ", ".join(
        f"{p.pid} ({p.process_name}, {p.used_memory_mib} MiB on GPU {p.gpu_index})" for p in big[:4]
    )
    evidence = tuple(
        line.strip() for line in ctx.search_text.splitlines() if any(str(p.pid) in line for p in big[:4])
    )[:4]
    return stop(
        ctx,
        "stale-gpu-process",
        f"other processes hold the GPUs' memory: {names}",
        "Stop them (often a previous server's orphaned scheduler processes; `deploy --allow-kill` can do it), or "
        "use other GPUs with CUDA_VISIBLE_DEVICES.",
        evidence=evidence,
        confidence=0.75,
    )


_HOST_SHORT = re.compile(
    r"Not enough host memory available\. Requesting ([\d.]+) GB but only have ([\d.]+) GB free"
)


@playbook(id="sglang.memory.hicache-host-too-small", category="oom", pattern=_HOST_SHORT.pattern, priority=30)
def hicache_host_too_small(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The hierarchical cache's host pool asks for more RAM than the host has free. --hicache-size is in GB
    (it overrides --hicache-ratio); half of what is free leaves room for everything else the host
    runs, and without --hicache-size the pool is sized by --hicache-ratio from the GPU pool instead."""
    if m is None:
        return None
    asked, free = float(m.group(1)), float(m.group(2))
    size = int(free // 2)
    if ctx.view.has("--hicache-size") and size >= 1:
        edit: Edit = SetFlag(flag="--hicache-size", values=(str(size),))
        why = f"{size} GB is half of the {free:g} GB the host has free"
    elif ctx.view.has("--hicache-ratio"):
        edit, why = (
            RemoveFlag(flag="--hicache-ratio"),
            "SGLang's default ratio (2.0 in cache mode) sizes the host pool from the GPU pool",
        )
    else:
        return None
    return fix(
        ctx,
        [edit],
        "oom",
        f"the hierarchical cache asks for {asked:g} GB of host memory; the host has {free:g} GB free",
        why=why,
        evidence=(m.group(0),),
        confidence=0.6,
    )


_POOL_BELOW_CONTEXT = re.compile(r"KV pool holds (\d+) tokens, fewer than --context-length (\d+)")


@playbook(
    id="sglang.memory.pool-below-context",
    category="context-length",
    when=("degraded", "unhealthy"),
    pattern=_POOL_BELOW_CONTEXT.pattern,
    priority=45,
)
def pool_below_context(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """SGLang warns at start that the KV pool holds fewer tokens than one full-length request, then cuts or
    refuses answers that do not fit: when the pool is the command's own --max-total-tokens (a per-request
    cap by mistake: it sizes the whole pool), the cap goes."""
    assert m is not None
    pool, context = int(m.group(1)), int(m.group(2))
    if ctx.view.int("--max-total-tokens") != pool:
        return None  # the pool came out small from memory: the warning's own advice is for a person
    return fix(
        ctx,
        [RemoveFlag(flag="--max-total-tokens")],
        "context-length",
        f"--max-total-tokens {pool} sizes the whole KV pool below one {context}-token request, so answers "
        "are cut short or refused",
        why="--max-total-tokens is the pool every running request shares, not a per-request limit (that is "
        "the request's max_tokens); without it SGLang sizes the pool from the memory left",
        evidence=(m.group(0),),
        confidence=0.6,
    )
