"""Tensor parallelism that cannot work: more ranks than GPUs, sizes that do not divide the model, GPUs
that cannot talk peer-to-peer."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook, stop
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.host_checks import largest_tp, visible_gpus
from specdoctor.playbooks.overrides import leftover_quantization
from specdoctor.tools.command import RemoveFlag, SetEnv, SetFlag

CUSTOM_ALLREDUCE = r"custom_all_reduce|CustomAllreduce|register_graph_buffers"
"""Frames and names of SGLang's custom all-reduce, which needs CUDA IPC between the GPUs."""


def use_nccl_allreduce(
    ctx: Context,
    summary: str,
    *,
    why: str = "custom all-reduce needs working peer-to-peer/IPC between the GPUs; NCCL's all-reduce does not",
    evidence: tuple[str, ...] = (),
    confidence: float,
) -> Decision | None:
    """Turn SGLang's custom all-reduce off, so tensor parallelism goes through NCCL."""
    return fix(
        ctx,
        [SetFlag(flag="--disable-custom-all-reduce")],
        "nccl",
        summary,
        why=why,
        evidence=evidence,
        confidence=confidence,
    )


_PARTITION = re.compile(
    r"output_partition_size = (\d+) is not divisible by weight quantization block_n = (\d+)"
)


@playbook(
    id="sglang.parallel.peer-access",
    category="nccl",
    pattern=rf"peer access is not supported|{CUSTOM_ALLREDUCE}|cudaIpcOpenMemHandle",
    priority=25,
)
def peer_access(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """Custom all-reduce needs CUDA peer-to-peer between the GPUs (GeForce cards, some VMs have none)."""
    if ctx.view.world < 2 and not re.search(r"peer access", ctx.search_text):
        return None
    return use_nccl_allreduce(
        ctx,
        "SGLang's custom all-reduce cannot use peer-to-peer access between these GPUs",
        why="--disable-custom-all-reduce makes tensor parallelism use NCCL, which works without P2P",
        confidence=0.9,
    )


@playbook(
    id="sglang.parallel.heads",
    category="tp-config",
    pattern=r"total_num_heads % tp_size|num_heads % tp_size|must be divisible by (?:--)?tp[-_]size|divisible by tensor parallel size",
    priority=30,
)
def heads_not_divisible(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The TP size does not divide the attention heads."""
    heads = ctx.model.num_attention_heads if ctx.model else None
    tp = ctx.view.tp
    best = largest_tp(tp - 1, heads) if heads else None
    if best:
        return fix(
            ctx,
            [SetFlag(flag="--tp-size", values=(str(best),))],
            "tp-config",
            f"--tp-size {tp} does not divide the model's {heads} attention heads",
            why=f"{best} divides {heads}; use pipeline or data parallelism for the other GPUs",
            confidence=0.75,
        )
    return stop(
        ctx,
        "tp-config",
        f"--tp-size {tp} does not divide the model's attention heads",
        "Pick a --tp-size that divides num_attention_heads in config.json (and the KV heads, or is divided by them).",
    )


@playbook(id="sglang.parallel.block-quant", category="tp-config", pattern=_PARTITION.pattern, priority=30)
def block_quant(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """Block-quantized (FP8) weights split by TP into shards that are not whole blocks."""
    assert m is not None
    shard, block = int(m.group(1)), int(m.group(2))
    if leftover := leftover_quantization(
        ctx, f"a {shard}-row weight is not a multiple of {block}-wide blocks"
    ):
        return leftover
    tp = ctx.view.tp
    total = shard * tp
    valid = [t for t in (1, 2, 4, 8, 16) if total % t == 0 and (total // t) % block == 0]
    return stop(
        ctx,
        "tp-config",
        f"at --tp-size {tp} a weight of {total} rows splits into {shard}-row shards, not a multiple of the "
        f"{block}-wide quantization blocks",
        f"TP sizes that keep whole blocks for this layer: {', '.join(map(str, valid)) or 'none'} (if the model "
        "fits there), or an unquantized / differently quantized checkpoint; otherwise it needs a code change "
        "in SGLang's sharding.",
    )


@playbook(
    id="sglang.parallel.too-many-ranks",
    category="tp-config",
    pattern=r"invalid device ordinal|gpu_id < num_gpus|No CUDA GPUs are available|assert gpu_id",
    priority=18,
)
def too_many_ranks(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """More TP ranks than visible GPUs."""
    visible = visible_gpus(ctx.view, ctx.gpus)
    tp = ctx.view.tp
    if visible and tp > visible:
        best = largest_tp(visible, None) or 1
        return fix(
            ctx,
            [SetFlag(flag="--tp-size", values=(str(best),))],
            "tp-config",
            f"--tp-size {tp} asks for more GPUs than the {visible} visible",
            why=f"{best} ranks fit the visible GPUs; the model must still fit in their memory",
            confidence=0.7,
        )
    return stop(
        ctx,
        "tp-config",
        f"a TP rank found no GPU (--tp-size {tp})",
        "Make --tp-size × --pp-size at most the number of visible GPUs (check CUDA_VISIBLE_DEVICES and `nvidia-smi -L`).",
    )


@playbook(id="sglang.parallel.warmup-hang", category="nccl", when=("hung",), priority=40)
def warmup_hang(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """Several GPUs, and the first forward pass never finishes: the first all-reduce between the ranks
    never completes. Custom all-reduce (CUDA IPC between the GPUs) is the usual culprit, NCCL the safe
    replacement."""
    view = ctx.view
    if view.world < 2 or view.has("--disable-custom-all-reduce") or ctx.outcome.fatal_line:
        return None
    # Grounds: the last thing the engine did was start its first batch, and no batch ever finished.
    progress = [ln for ln in ctx.log_text.splitlines() if re.search(r"Prefill batch|Decode batch", ln)]
    if not progress or "Decode batch" in progress[-1] or len(progress) > 2:
        return None
    return use_nccl_allreduce(
        ctx,
        "the server hangs in its first forward pass with tensor parallelism: a collective never completes",
        evidence=(progress[-1].strip(),),
        confidence=0.6,
    )


@playbook(id="sglang.parallel.odd-tp", category="tp-config", priority=78)
def odd_tp(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The model failed while being built across a TP size that does not divide its heads."""
    tp = ctx.view.tp
    if tp <= 2 or tp & (tp - 1) == 0 or ctx.root.kind not in ("exception", "traceback-cut"):
        return None
    if not any(
        re.search(r"/models/|__init__|divisible|heads", f.path + f.function) for f in ctx.root.frames
    ) and not re.search(r"divisible|heads", ctx.root_text):
        return None
    heads = ctx.model.num_attention_heads if ctx.model else None
    if heads is not None and heads % tp == 0 and not re.search(r"vision|visual", ctx.root_text, re.I):
        return None  # the text model divides: whatever failed, it is not this
    up = 1 << (tp - 1).bit_length()
    visible = visible_gpus(ctx.view, ctx.gpus)
    target = up if visible is None or up <= visible else 1 << (tp.bit_length() - 1)
    known = (
        f"its {heads} attention heads"
        if heads is not None
        else "its head counts (not read: no config.json here)"
    )
    return fix(
        ctx,
        [SetFlag(flag="--tp-size", values=(str(target),))],
        "tp-config",
        f"the model could not be built over --tp-size {tp}, which does not divide {known}",
        why=f"--tp-size {target} is a power of two, as head counts (vision towers too) almost always are"
        + ("; it needs that many GPUs" if target > tp else "; the model must still fit"),
        # Unread head counts make this an educated guess, not something to apply unasked.
        confidence=0.55 if heads is not None else 0.45,
    )


_GPU_FAULT_ON_ROCM = (
    r"HSA_STATUS_ERROR_EXCEPTION|HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION|Memory access fault by GPU"
)


@playbook(id="sglang.parallel.amd-allreduce", category="nccl", pattern=_GPU_FAULT_ON_ROCM, priority=40)
def amd_allreduce_fault(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A GPU fault on ROCm with tensor parallelism. SGLang runs AITER's custom all-reduce on AMD by default
    (`SGLANG_USE_AITER_AR`, default true, in device_communicators/custom_all_reduce.py), a kernel that runs
    only when TP > 1 and whose faults take down every rank's queue at once; turning it off falls back to
    SGLang's own all-reduce."""
    view = ctx.view
    if (
        view.tp <= 1
        or view.has("--disable-custom-all-reduce")
        or "SGLANG_USE_AITER_AR" in ctx.spec.env_dict()
    ):
        return None
    return fix(
        ctx,
        [SetEnv(name="SGLANG_USE_AITER_AR", value="0")],
        "nccl",
        "a GPU fault on ROCm with tensor parallelism, where AITER's all-reduce runs by default",
        why="SGLANG_USE_AITER_AR=0 replaces AMD's default AITER all-reduce with SGLang's own; the fault names "
        "no kernel, so this is the first suspect of a TP-only fault, not a finding",
        evidence=(m.group(0),) if m else (),
        confidence=0.45,
    )


# SGLang states a parallel layout it cannot build as the law and the numbers it read
# (srt/runtime_context.py `_validate_parallel`): `tp_size == moe_ep_size * moe_dp_size * moe_tp_size`
# then `  1 != 2 * 1 * 0 (= 0)`. The terms are its own names for the parallel sizes.
_LAW = re.compile(
    r"^\s*(?P<lhs>\w+) == (?P<rhs>\w+(?: \* \w+)+)\s*\n\s*(?P<have>\d+) != (?P<terms>\d+(?: \* \d+)+)", re.M
)


@playbook(
    id="sglang.parallel.inconsistent-layout",
    category="tp-config",
    pattern=r"parallel topology is inconsistent",
    priority=30,
)
def inconsistent_layout(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A parallel size the command set that the TP group cannot be split into: take it back."""
    for law in _LAW.finditer(ctx.root_text):
        values = dict(zip(law["rhs"].split(" * "), law["terms"].split(" * "), strict=False))
        chosen = [(flag, v) for term, v in values.items() if (flag := _size_flag(ctx, term, v))]
        if not chosen:
            continue
        flag, value = chosen[0]
        lhs = f"{law['lhs']} {law['have']}"
        return fix(
            ctx,
            [RemoveFlag(flag=flag)],
            "tp-config",
            f"{flag} {value} cannot split the TP group: SGLang requires {law['lhs']} == {law['rhs']} "
            f"and read {law['have']} != {law['terms']}",
            why=f"the ranks of {flag} are carved out of the TP group ({lhs}); back at its default the layout "
            "is consistent (raise --tp-size too, on enough GPUs, to keep it)",
            evidence=(law.group(0).strip(),),
            confidence=0.6,
        )
    return None


def _size_flag(ctx: Context, term: str, value: str) -> str | None:
    """The flag of the command's that SGLang's term (`moe_ep_size`) reads, when the command set it to the
    value SGLang printed: the term's own name, or without the group it sizes it for (`moe_`, `attn_`)."""
    for name in (term, term.split("_", 1)[-1]):
        info = ctx.catalog.get("--" + name.replace("_", "-"))
        if info and ctx.view.has(info.name) and ctx.view.get(info.name) == value and info.default != value:
            return info.name
    return None


_LOOPBACK = re.compile(r"^(?:\[?::1\]?|127(?:\.\d+){3}|localhost)(?::\d+)?$", re.I)


@playbook(id="sglang.parallel.peers-never-join", category="tp-config", when=("hung",), priority=41)
def peers_never_join(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A multi-node launch hangs where its ranks meet ("Init parallel begin", nothing after): the other
    nodes never joined. When the rendezvous is this host's loopback, they could only be other launches on
    this host, and none was started: the command is one node's part of a recipe for several."""
    view = ctx.view
    if view.nnodes <= 1 or ctx.outcome.fatal_line:
        return None
    steps = [
        ln
        for ln in ctx.log_text.splitlines()
        if re.search(r"Init parallel|Init torch distributed|Load weight", ln)
    ]
    if not steps or (
        "Init parallel begin" not in steps[-1] and "Init torch distributed begin" not in steps[-1]
    ):
        return None
    rendezvous = view.get("--dist-init-addr") or ""
    if not _LOOPBACK.match(rendezvous):
        return stop(
            ctx,
            "tp-config",
            f"--nnodes {view.nnodes}: this node waits where all ranks meet, and the others never joined",
            f"Start every node (--node-rank 0 … {view.nnodes - 1}) with the same command and --dist-init-addr "
            f"{rendezvous or '<node 0 host:port>'}, and check that node 0's port is reachable from the others.",
            evidence=(steps[-1].strip(),),
            confidence=0.6,
        )
    return fix(
        ctx,
        [RemoveFlag(flag="--nnodes"), RemoveFlag(flag="--node-rank"), RemoveFlag(flag="--dist-init-addr")],
        "tp-config",
        f"--nnodes {view.nnodes} over {rendezvous}, this host's loopback: the other nodes never joined",
        why="a loopback rendezvous only reaches launches on this host, and none was started for the other "
        "node ranks; as one node the same --tp-size runs here (if this host has the devices for it)",
        evidence=(steps[-1].strip(),),
        confidence=0.45,
    )
