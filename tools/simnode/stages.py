"""The scheduler side of a startup, stage by stage, with SGLang 0.5.23's log lines and failures.

Format strings are the source's: distributed/bootstrap.py (Init parallel, Memory baseline),
model_executor/model_runner.py (Load weight), mem_cache/memory_pool.py and kv_cache_configurator.py (KV
Cache, Memory pool end), model_runner_components/cuda_graph_setup.py and speculative/eagle_worker_v2.py
(Capture ... CUDA graph), managers/scheduler.py (max_total_num_tokens=...).
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.simnode import scheduler_tracebacks as tb
from specdoctor.tools.simnode.failure import SchedulerFailure
from specdoctor.tools.simnode.logging_fmt import Log
from specdoctor.tools.simnode.memory import KVPool, NodeMemory, decode_graph_need_gib, prefill_graph_need_gib
from specdoctor.tools.simnode.pacing import Pacer
from specdoctor.tools.simnode.peers import NodePlace
from specdoctor.tools.simnode.plan import LaunchPlan
from specdoctor.tools.simnode.profile import NodeProfile
from specdoctor.tools.simnode.validate import Resolved

# Nominal seconds of each step at SPECDOCTOR_SIM_SPEED=1.0.
INIT_S, WEIGHTS_S, DRAFT_S, KV_S, GRAPH_S, SCHEDULER_S = 0.4, 1.2, 0.3, 0.3, 0.8, 0.1


GRAPH_PHASES = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend")
"""The CUDA graphs SGLang captures, in the order /server_info lists them."""


class SchedulerReady(BaseModel):
    """What the scheduler reports to the launcher once its model runner is up."""

    model_config = ConfigDict(frozen=True)
    pool: KVPool
    max_running_requests: int
    decode_graph_bs: list[int]
    graph_gib: dict[str, float]
    graph_s: dict[str, float] = Field(description="Capture seconds per graph phase, in GRAPH_PHASES order.")
    timings: dict[str, float]
    weights_per_gpu_gib: float
    startup_available_gib: float


class SchedulerStartup:
    """The schedulers of this node: every TP rank of a one-node launch, this node's share of a multi-node
    one (`place`), which first meets the other nodes (`meet`) in init_parallel_runtime."""

    def __init__(
        self,
        log: Log,
        pacer: Pacer,
        resolved: Resolved,
        plan: LaunchPlan,
        profile: NodeProfile,
        place: NodePlace | None = None,
        meet: Callable[[], None] = lambda: None,
    ) -> None:
        self.log, self.pacer, self.resolved, self.plan, self.profile = log, pacer, resolved, plan, profile
        self.place, self.meet = place, meet
        self.args = resolved.args
        self.tp = self.args["tp_size"]
        first = place.tp_ranks[0] if place else 0
        self.ranks = range(first, first + len(place.tp_ranks)) if place else range(self.tp)
        self.memory = NodeMemory(
            profile, len(self.ranks), self.args["base_gpu_id"], shards=self.tp, first_rank=first
        )
        self.custom_all_reduce = self.tp > 1 and not self.args["disable_custom_all_reduce"]
        self._graphs_entered = False
        self.decode_bs: list[int] = []
        self.graph_gib = dict.fromkeys(GRAPH_PHASES, 0.0)
        self.graph_s = dict.fromkeys(GRAPH_PHASES, 0.0)

    def run(self) -> SchedulerReady:
        self._init_parallel()
        startup_available = self.memory.pre_load
        self._load_weights()
        pool = self._kv_cache()
        running = _max_running_requests(
            self.args["max_running_requests"], pool.tokens, self.resolved.context_len
        )
        # get_batch_sizes_to_capture: no graph for a batch larger than the request pool can hold.
        self.decode_bs = [bs for bs in self.resolved.memory.decode_bs if bs <= running]
        self._graphs()
        return self._scheduler_line(pool, running, startup_available)

    # ---- stages ------------------------------------------------------------------------------
    def _init_parallel(self) -> None:
        self.log.ranks("Init parallel begin.", self.ranks)
        self.pacer.enter("init")
        gpus, base = self.profile.gpus.count, self.args["base_gpu_id"]
        if base + self._gpus_on_node() > gpus:
            local = max(0, gpus - base)
            rank = self.ranks[0] + local
            context = f"Context: device=cuda gpu_id={base + local} CUDA_VISIBLE_DEVICES=None tp_rank={rank}"
            raise SchedulerFailure(tb.invalid_device_ordinal(), rank=rank, before=(context,))
        self.meet()
        if self.custom_all_reduce and not self.profile.gpus.p2p and self.args["enable_p2p_check"]:
            self.custom_all_reduce = False
            self.log.ranks(
                "Custom allreduce is disabled because your platform lacks GPU P2P capability or P2P test failed. "
                "To silence this warning, specify disable_custom_all_reduce=True explicitly.",
                self.ranks,
            )
        self.pacer.pause(INIT_S)
        self.log.ranks(f"Init parallel ends. elapsed={INIT_S:.2f} s", self.ranks)
        self.memory.check_balance()
        self.log.ranks("Memory baseline taken. mem usage=0.00 GB", self.ranks)

    def _gpus_on_node(self) -> int:
        if self.place is not None:
            return self.place.gpus  # the profile describes one node; each node of the launch is alike
        return self.tp * (self.args["pp_size"] or 1) * (self.args["dp_size"] or 1)

    def _load_weights(self) -> None:
        model, args = self.resolved.model, self.args
        self._load(model.architecture, self.plan.target_weights_gib, WEIGHTS_S, first=True)
        draft = self.resolved.draft
        if draft is None:
            return
        self.log.ranks("SPECULATIVE_MOE_RUNNER_BACKEND is not initialized, using auto backend", self.ranks)
        if args["speculative_draft_load_format"]:
            self.log.ranks(
                f"Using draft model load_format: '{args['speculative_draft_load_format']}'", self.ranks
            )
        self.log.ranks("Memory baseline taken. mem usage=0.00 GB", self.ranks)
        arch = "DeepseekV3ForCausalLMNextN" if self.resolved.draft_source == "mtp" else draft.architecture
        self._load(arch, self.plan.draft_weights_gib, DRAFT_S, first=False)

    def _load(self, arch: str, weights_gib: float, seconds: float, *, first: bool) -> None:
        before = list(self.memory.free)
        for rank, free in zip(self.ranks, before, strict=True):
            self.log.info(f"Load weight begin. avail mem={free:.2f} GB", rank)
        if first:
            self.pacer.enter("weights")
            heads = self.resolved.model.num_attention_heads
            if heads % self.tp:
                raise SchedulerFailure(tb.heads_not_divisible(arch))
        self.pacer.pause(seconds)
        self.memory.load(weights_gib)
        for rank, was, after in zip(self.ranks, before, self.memory.free, strict=True):
            self.log.info(
                f"Load weight end. elapsed={seconds:.2f} s, type={arch}, avail mem={after:.2f} GB, "
                f"mem usage={was - after:.2f} GB.",
                rank,
            )

    def _kv_cache(self) -> KVPool:
        pool = self.memory.allocate_kv(
            self.resolved.memory.mem_fraction_static,
            self.plan.cell_bytes,
            self.plan.draft_cell_bytes,
            self.args["max_total_tokens"],
        )
        dtype = _kv_dtype(self.args["kv_cache_dtype"], self.resolved.model.dtype)
        draft = self.resolved.draft
        self.pacer.pause(KV_S)
        for rank, free in zip(self.ranks, self.memory.free, strict=True):
            self.log.info(_kv_line(self.resolved.model.mla, dtype, pool.tokens, pool.k_gib, pool.v_gib), rank)
            if draft is not None:
                self.log.info(
                    _kv_line(draft.mla, dtype, pool.tokens, pool.draft_k_gib, pool.draft_v_gib), rank
                )
            self.log.info(f"Memory pool end. avail mem={free:.2f} GB", rank)
        self.pacer.enter("kv_cache")
        return pool

    def _graphs(self) -> None:
        settings = self.resolved.memory
        if settings.prefill_backend == "disabled":
            self.log.ranks(
                "Disable prefill CUDA graph because cuda_graph_config resolved prefill.backend='disabled' "
                "(e.g. via --cuda-graph-backend-prefill=disabled or auto-disable rules).",
                self.ranks,
            )
        else:
            tokens = list(settings.prefill_bs)
            self._capture(
                f"Capture target prefill CUDA graph begin. backend={settings.prefill_backend}, num_tokens={tokens}, ",
                "Capture target prefill CUDA graph end. ",
                prefill_graph_need_gib(len(tokens), self.resolved.model.mla),
                "prefill",
            )
        if settings.decode_backend == "disabled" or not self.decode_bs:
            return
        spec = self.plan.spec
        per_req = spec.num_draft_tokens if spec else 1
        name = "target verify" if spec else "target decode"
        bs = self.decode_bs
        need = decode_graph_need_gib(max(bs), self.plan.graph_mib_per_bs, per_req)
        self._capture(
            f"Capture {name} CUDA graph begin. backend={settings.decode_backend}, num_tokens_per_req={per_req}, ",
            f"Capture {name} CUDA graph end. bs={bs}, ",
            need,
            "target_verify" if spec else "decode",
            decode=True,
        )
        if spec is not None and spec.algorithm in ("EAGLE", "EAGLE3", "STANDALONE"):
            self._draft_graphs(settings.decode_backend, bs, need * 0.15)

    def _draft_graphs(self, backend: str, bs: list[int], need: float) -> None:
        spec = self.plan.spec
        assert spec is not None
        self._capture(
            f"Capture draft decode CUDA graph begin. backend={backend}, num_tokens_per_req={spec.topk}, bs={bs}, ",
            "Capture draft decode CUDA graph end. ",
            need,
            "draft_decode",
        )
        self._capture(
            f"Capture draft extend CUDA graph begin. backend={backend}, "
            f"num_tokens_per_req={spec.num_draft_tokens}, bs={bs}, ",
            "Capture draft extend CUDA graph end. ",
            need,
            "draft_extend",
        )

    def _capture(self, begin: str, end: str, need_gib: float, phase: str, *, decode: bool = False) -> None:
        avail = list(self.memory.free)
        for rank, free in zip(self.ranks, avail, strict=True):
            self.log.info(f"{begin}avail mem={free:.2f} GB", rank)
        if not self._graphs_entered:
            self._graphs_entered = True
            self.pacer.enter("cuda_graph")
        if decode and self.custom_all_reduce and not self.profile.gpus.p2p:
            self.log.info(f"Registering {len(self.decode_bs) * 3} cuda graph addresses", self.ranks[0])
            raise SchedulerFailure(tb.peer_access_in_capture())
        used = self.memory.capture(need_gib)
        seconds = GRAPH_S * (1.0 if decode else 0.25)
        self.pacer.pause(seconds)
        self.graph_gib[phase], self.graph_s[phase] = used, seconds
        for rank, was, after in zip(self.ranks, avail, self.memory.free, strict=True):
            self.log.info(
                f"{end}elapsed={seconds:.2f} s, mem usage={was - after:.2f} GB, avail mem={after:.2f} GB.",
                rank,
            )

    def _scheduler_line(self, pool: KVPool, running: int, startup_available: float) -> SchedulerReady:
        args, settings = self.args, self.resolved.memory
        available = self.memory.free[0]
        if self.ranks[0] == 0:  # TP0 reports the pool; other nodes' schedulers only build their cache
            self.log.info(
                f"max_total_num_tokens={pool.tokens}, chunked_prefill_size={settings.chunked_prefill_size}, "
                f"max_prefill_tokens={args['max_prefill_tokens']}, max_running_requests={running}, "
                f"context_len={self.resolved.context_len}, available_gpu_mem={available:.2f} GB",
                0,
            )
        self.pacer.enter("scheduler")
        self.log.info(
            "Tree cache initialized: source=default impl=UnifiedRadixCache hybrid_swa=False hybrid_ssm=False "
            "hicache_attached=False",
            self.ranks[0],
        )
        self.pacer.pause(SCHEDULER_S)
        graph_time = self.graph_s
        timings = {
            "load_weight": WEIGHTS_S + (DRAFT_S if self.resolved.draft is not None else 0.0),
            "kv_cache_allocation": KV_S,
            "scheduler_e2e": INIT_S + WEIGHTS_S + KV_S + sum(graph_time.values()) + SCHEDULER_S,
        }
        return SchedulerReady(
            pool=pool,
            max_running_requests=running,
            decode_graph_bs=self.decode_bs if settings.decode_backend != "disabled" else [],
            graph_s=dict(graph_time),
            graph_gib=dict(self.graph_gib),
            timings=timings,
            weights_per_gpu_gib=(self.plan.target_weights_gib + self.plan.draft_weights_gib) / self.tp,
            startup_available_gib=startup_available,
        )


def _max_running_requests(requested: int | None, tokens: int, context_len: int) -> int:
    """KVCacheConfigurator.resolve_max_num_reqs (per DP worker)."""
    if requested is not None:
        return max(1, min(requested, tokens // 2))
    estimated = max(min(int(tokens / max(1, context_len) * 512), 4096), 2048)
    return max(1, min(estimated, tokens // 2))


def _kv_line(mla: bool, dtype: str, tokens: int, k_gib: float, v_gib: float) -> str:
    # memory_pool._finalize_allocation_log: an MLA pool holds one latent tensor, logged as `KV size`.
    if mla:
        return f"KV Cache is allocated. dtype: {dtype}, #tokens: {tokens}, KV size: {k_gib + v_gib:.2f} GB"
    return f"KV Cache is allocated. dtype: {dtype}, #tokens: {tokens}, K size: {k_gib:.2f} GB, V size: {v_gib:.2f} GB"


def _kv_dtype(kv_cache_dtype: str | None, model_dtype: str) -> str:
    named = {"fp8_e4m3": "torch.float8_e4m3fn", "fp8_e5m2": "torch.float8_e5m2", "bf16": "torch.bfloat16"}
    if kv_cache_dtype in named:
        return named[kv_cache_dtype]
    return "torch.float16" if model_dtype in ("float16", "half") else "torch.bfloat16"
