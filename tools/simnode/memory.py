"""GPU memory as SGLang 0.5.23 sizes it: defaults by GPU size, the static budget, the KV pool, graph capture.

Sources: `arg_groups/memory_hook.py` (auto `mem_fraction_static`, chunked prefill and decode graph max bs),
`arg_groups/cuda_graph_hook.py` (captured batch sizes), `mem_cache/kv_cache_configurator.py`
(`rest = available_after_weights - pre_model_load * (1 - mem_fraction_static)`), `distributed/bootstrap.py`
(TP memory balance). All sizes are GiB (SGLang's "GB") per GPU unless named otherwise.

What the simulation keeps right is the direction: a fraction too low leaves no KV pool, a fraction too high
leaves too little outside the static budget for CUDA-graph capture, and a bigger decode max bs needs more.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from specdoctor.tools.simnode import scheduler_tracebacks as tb
from specdoctor.tools.simnode.failure import SchedulerFailure
from specdoctor.tools.simnode.profile import NodeProfile

GRAPH_BASE_GIB = 0.25
"""Fixed cost of a decode graph capture (buffers, workspace) besides the per-batch-size part."""


class MemorySettings(BaseModel):
    """What `handle_gpu_memory_settings` and the CUDA-graph config resolve to."""

    model_config = ConfigDict(frozen=True)
    mem_fraction_static: float
    chunked_prefill_size: int
    decode_backend: str
    decode_max_bs: int
    decode_bs: tuple[int, ...]
    prefill_backend: str
    prefill_max_bs: int
    prefill_bs: tuple[int, ...]


def resolve_settings(args: dict[str, Any], gpu_mib: int, *, mla: bool) -> MemorySettings:
    """The GPU-size defaults and the auto mem_fraction_static of memory_hook.py."""
    tp, pp = args["tp_size"], args["pp_size"] or 1
    decode_backend, prefill_backend = _graph_backends(args)
    chunked, max_bs = _capacity_defaults(gpu_mib, tp)
    chunked = args["chunked_prefill_size"] if args["chunked_prefill_size"] is not None else chunked
    explicit_bs = args["cuda_graph_bs_decode"]
    max_bs = args["cuda_graph_max_bs_decode"] or max_bs
    if args["cuda_graph_max_bs_decode"] is None and args["max_running_requests"] is not None:
        max_bs = min(max_bs, args["max_running_requests"])
    decode_bs = tuple(explicit_bs) if explicit_bs else _decode_batch_sizes(max_bs, args)
    max_bs = max(decode_bs)
    prefill_max = args["cuda_graph_max_bs_prefill"] or (min(8192, chunked) if mla else chunked)
    if args["max_total_tokens"] is not None:
        prefill_max = min(prefill_max, args["max_total_tokens"])
    prefill_bs = tuple(args["cuda_graph_bs_prefill"] or _prefill_batch_sizes(prefill_max))
    mfs = args["mem_fraction_static"]
    if mfs is None:
        reserved = 512 + max(chunked, 2048) * 1.5 + tp * pp / 8 * 1024
        if decode_backend != "disabled":
            reserved += max_bs * 2
        if prefill_backend != "disabled":
            reserved += 1.5 * 1024 if mla else len(prefill_bs) * 8
        if gpu_mib > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        mfs = round((gpu_mib - reserved) / gpu_mib, 3)
    return MemorySettings(
        mem_fraction_static=mfs,
        chunked_prefill_size=chunked,
        decode_backend=decode_backend,
        decode_max_bs=max_bs,
        decode_bs=decode_bs,
        prefill_backend=prefill_backend,
        prefill_max_bs=prefill_max,
        prefill_bs=prefill_bs,
    )


def _graph_backends(args: dict[str, Any]) -> tuple[str, str]:
    # Precedence of parse_cuda_graph_config: per-phase backend flags > per-phase off switches > legacy flag.
    decode, prefill = "full", "breakable"
    if args["disable_cuda_graph"]:
        decode = prefill = "disabled"
    if args["disable_prefill_cuda_graph"]:
        prefill = "disabled"
    if args["disable_decode_cuda_graph"]:
        decode = "disabled"
    return args["cuda_graph_backend_decode"] or decode, args["cuda_graph_backend_prefill"] or prefill


def _capacity_defaults(gpu_mib: int, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, decode graph max bs) by GPU memory, as memory_hook.py picks them."""
    if gpu_mib < 20 * 1024:
        return 2048, 8
    if gpu_mib < 35 * 1024:
        return 4096, 48 if tp < 4 else 160
    if gpu_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if gpu_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def _decode_batch_sizes(max_bs: int, args: dict[str, Any]) -> tuple[int, ...]:
    if args["disable_cuda_graph_padding"]:
        sizes = list(range(1, max_bs + 1))
    elif args["speculative_algorithm"] is None:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    else:
        sizes = [
            *range(1, 9),
            *range(10, 33, 2),
            *range(40, 65, 4),
            *range(72, 257, 8),
            *range(272, max_bs + 1, 16),
        ]
    sizes = [s for s in sizes if s <= max_bs]
    return tuple(sizes if max_bs in sizes else [*sizes, max_bs])


def _prefill_batch_sizes(max_bs: int) -> list[int]:
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, max_bs + 1, 512),
    ]
    return [s for s in sizes if s <= max_bs]


class KVPool(BaseModel):
    model_config = ConfigDict(frozen=True)
    tokens: int
    k_gib: float
    v_gib: float
    draft_k_gib: float
    draft_v_gib: float


class NodeMemory:
    """Free memory of each TP rank's GPU on this node through the startup, failing where SGLang fails.

    `gpus` ranks run here; the weights are split over `shards` ranks (all nodes of a multi-node launch, the
    node's own otherwise); `first_rank` is the global TP rank of this node's first GPU."""

    def __init__(
        self, profile: NodeProfile, gpus: int, base_gpu_id: int = 0, *, shards: int = 0, first_rank: int = 0
    ) -> None:
        self.profile = profile
        self.tp = shards or gpus
        self.first_rank = first_rank
        self.gpus = [base_gpu_id + r for r in range(gpus)]
        total = profile.gpus.memory_mib
        overhead = profile.context_mib + (profile.comm_mib if self.tp > 1 else 0)
        self.total_gib = total / 1024
        self.free = [(total - profile.others_mib(g) - overhead) / 1024 for g in self.gpus]
        self.pre_load = min(self.free)
        self.pytorch_gib = 0.0

    def check_balance(self) -> None:
        """bootstrap._check_tp_memory_balance: every rank compares the min over ranks with its own."""
        if self.tp == 1:
            return
        for rank, local in enumerate(self.free):
            if self.pre_load < local * 0.9:
                raise SchedulerFailure(
                    tb.unbalanced_memory(self.pre_load, local), rank=self.first_rank + rank
                )

    def load(self, weights_gib: float) -> None:
        """One model's weights, split over the ranks; a model that does not fit dies in torch."""
        per_rank = weights_gib / self.tp
        for rank, free in enumerate(self.free):
            if per_rank > free:
                tried = (per_rank - free) * 1024 + min(free * 1024, 1024.0)
                text = self.oom_text(rank, tried, free * 1024 * 0.02)
                raise SchedulerFailure(tb.load_oom(text), rank=self.first_rank + rank)
        self.free = [f - per_rank for f in self.free]
        self.pytorch_gib += per_rank

    def allocate_kv(
        self, mem_fraction_static: float, cell_bytes: int, draft_cell_bytes: int, max_total_tokens: int | None
    ) -> KVPool:
        """kv_cache_configurator._profile_available_bytes, then the pool sized from what is left."""
        available = min(self.free)
        rest = available - self.pre_load * (1 - mem_fraction_static)
        if rest <= 0:
            raise SchedulerFailure(tb.kv_no_room(mem_fraction_static, available, self.pre_load))
        tokens = int(rest * 2**30 // (cell_bytes + draft_cell_bytes))
        if max_total_tokens is not None:
            tokens = min(tokens, max_total_tokens)
        if tokens <= 0:
            raise SchedulerFailure(tb.kv_not_enough(mem_fraction_static))
        kv_gib = tokens * (cell_bytes + draft_cell_bytes) / 2**30
        self.free = [f - kv_gib for f in self.free]
        self.pytorch_gib += kv_gib
        half, draft_half = tokens * cell_bytes / 2 / 2**30, tokens * draft_cell_bytes / 2 / 2**30
        return KVPool(tokens=tokens, k_gib=half, v_gib=half, draft_k_gib=draft_half, draft_v_gib=draft_half)

    def capture(self, need_gib: float) -> float:
        """Take what a graph capture needs from outside the static budget; OOM like torch if it is not there."""
        for rank, free in enumerate(self.free):
            if need_gib > free:
                left_mib = max(free * 1024 * 0.01, 0.5)
                tried = max(need_gib * 1024 * 0.25, (need_gib - free) * 1024 + left_mib)
                text = self.oom_text(rank, tried, left_mib, graph_pool_mib=max(free * 1024 - left_mib, 0.0))
                raise SchedulerFailure(tb.capture_failed(text), rank=self.first_rank + rank)
        self.free = [f - need_gib for f in self.free]
        return need_gib

    def oom_text(self, rank: int, tried_mib: float, free_mib: float, graph_pool_mib: float = 0.0) -> str:
        gpu = self.gpus[rank]
        others = [(p.pid, float(p.memory_mib)) for p in self.profile.processes if p.gpu == gpu]
        process_gib = self.total_gib - sum(m for _, m in others) / 1024 - free_mib / 1024
        return tb.oom_message(
            tried_mib=tried_mib,
            gpu=gpu,
            total_gib=self.total_gib,
            free_mib=free_mib,
            others=others,
            process_gib=process_gib,
            pytorch_gib=self.pytorch_gib + graph_pool_mib / 1024,
            graph_pool_mib=graph_pool_mib,
            reserved_free_mib=min(64.0, free_mib * 4 + 20.0),
        )


def decode_graph_need_gib(max_bs: int, mib_per_bs: float, tokens_per_req: int) -> float:
    """Graph memory outside the static budget: grows with the decode max bs (and verify width)."""
    width = 1 + 0.5 * (tokens_per_req - 1)
    return GRAPH_BASE_GIB + max_bs * mib_per_bs * width / 1024


def prefill_graph_need_gib(num_sizes: int, mla: bool) -> float:
    return 1.5 if mla else num_sizes * 8 / 1024
