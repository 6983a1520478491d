"""The JSON bodies of /server_info and /model_info, shaped as SGLang 0.5.23 returns them."""

from __future__ import annotations

from typing import Any

from specdoctor.tools.simnode.args import VERSION
from specdoctor.tools.simnode.stages import SchedulerReady
from specdoctor.tools.simnode.validate import Resolved


def server_info(
    resolved: Resolved, ready: SchedulerReady, launch_command: str, tokenizer_s: float
) -> dict[str, Any]:
    """Every resolved server arg, then the launch facts; `internal_states[0]` is scheduler rank 0's view."""
    args = dict(resolved.args)
    graph = dict(ready.graph_s)
    startup = {
        "load_weight": ready.timings["load_weight"],
        "kv_cache_allocation": ready.timings["kv_cache_allocation"],
        "scheduler_e2e": ready.timings["scheduler_e2e"],
        "cuda_graph": graph,
    }
    kv_gib = ready.pool.k_gib + ready.pool.v_gib + ready.pool.draft_k_gib + ready.pool.draft_v_gib
    decode_graphs = [
        p for p in ("decode", "target_verify", "draft_decode", "draft_extend") if ready.graph_gib[p]
    ]
    state = {
        **args,
        "world_size": args["tp_size"] * (args["pp_size"] or 1),
        "startup_time": startup,
        "effective_max_running_requests_per_dp": ready.max_running_requests,
        "last_gen_throughput": 0.0,
        "memory_usage": {
            "weight": round(ready.weights_per_gpu_gib, 3),
            "kvcache": round(kv_gib, 3),
            "startup_available": round(ready.startup_available_gib, 3),
            "token_capacity": ready.pool.tokens,
            "token_capacity_swa": None,
            "graph": {k: round(v, 3) for k, v in ready.graph_gib.items()},
        },
        "decode_cuda_graph_bs": ready.decode_graph_bs,
        "decode_cuda_graph_memory_gb": round(sum(ready.graph_gib[p] for p in decode_graphs), 3),
    }
    return {
        **args,
        "launch_command": launch_command,
        "status": "starting",
        "max_total_num_tokens": ready.pool.tokens,
        "max_req_input_len": min(resolved.context_len - 1, ready.pool.tokens - 1),
        "startup_time": {**startup, "tokenizer_e2e": tokenizer_s},
        "internal_states": [state],
        "version": VERSION,
        "frontend": "python",
    }


def model_info(resolved: Resolved) -> dict[str, Any]:
    args, model = resolved.args, resolved.model
    return {
        "model_path": args["model_path"],
        "served_model_name": args["served_model_name"],
        "tokenizer_path": args["tokenizer_path"],
        "is_generation": True,
        "preferred_sampling_params": args["preferred_sampling_params"],
        "weight_version": args["weight_version"],
        "load_format": args["load_format"],
        "reasoning_parser": args["reasoning_parser"],
        "tool_call_parser": args["tool_call_parser"],
        "disaggregation_mode": args["disaggregation_mode"],
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": model.model_type,
        "architectures": list(model.architectures),
    }
