"""`ServerArgs.resolve_once()` as SGLang 0.5.23 runs it, for what matters to speculative and common launches.

Order and messages follow `arg_groups/pipeline.py`: model config (line 122), context length (185), memory
settings (218), speculative decoding (306, `arg_groups/speculative_hook.py`). A refused command raises
ResolveFailure with SGLang's traceback; warnings SGLang logs on the way are returned in order.
"""

from __future__ import annotations

import os
import random
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.sglang_facts import facts_for
from specdoctor.tools.simnode import tracebacks as tb
from specdoctor.tools.simnode.failure import ResolveFailure
from specdoctor.tools.simnode.memory import MemorySettings, resolve_settings
from specdoctor.tools.simnode.model import ModelConfig, read_model
from specdoctor.tools.simnode.profile import NodeProfile

MAX_RUNNING_RESET = (
    "Max running requests is reset to 48 for speculative decoding. "
    "You can override this by explicitly setting --max-running-requests."
)
_SPEC = facts_for("0.5.23").speculative

_PHASE_DEFAULTS = {
    "tc_compiler": "eager",
    "max_context_size": None,
    "full_prefill_max_req": None,
    "full_prefill_prefix_chunk_tokens": None,
    "max_seq_len": None,
}
"""The other fields of a cuda_graph_config phase, as /server_info shows them."""

DraftSource = Literal["none", "draft", "mtp", "target"]
"""`draft`: --speculative-draft-model-path; `mtp`: the target's own MTP layer; `target`: no draft given, so
the draft worker loads the whole target checkpoint as its draft (SGLang does not refuse this)."""


class Resolved(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    args: dict[str, Any] = Field(description="Every server arg after resolution (the server_args= dump).")
    model: ModelConfig
    draft: ModelConfig | None = Field(description="The draft model as the draft worker loads it.")
    draft_source: DraftSource = Field(description="Where the draft worker's weights come from.")
    memory: MemorySettings
    context_len: int

    @property
    def algorithm(self) -> str | None:
        return self.args["speculative_algorithm"]


def resolve(
    args: dict[str, Any], profile: NodeProfile, warnings: list[str], env: dict[str, str] | None = None
) -> Resolved:
    """Appends to `warnings` as SGLang logs them, so a caller has them also when this raises."""
    env = dict(os.environ if env is None else env)
    out = dict(args)
    if out["enable_dp_attention"]:
        if out["attn_dp_size"] == 1:
            out["attn_dp_size"], out["dp_size"] = out["dp_size"], 1
        out["enable_dp_attention"] = False
    model = read_model(out["model_path"])
    context_len = _context_length(out["context_length"], model.context_len, env, warnings)
    memory = resolve_settings(out, profile.gpus.memory_mib, mla=model.mla)
    out.update(_defaults_for_cuda(out, profile, model, memory))
    draft, source = _speculative(out, model, warnings)
    return Resolved(
        args=out,
        model=model,
        draft=draft,
        draft_source=source,
        memory=memory,
        context_len=context_len,
    )


def _context_length(requested: int | None, derived: int, env: dict[str, str], warnings: list[str]) -> int:
    if requested is None or requested <= derived:
        return derived if requested is None else requested
    if env.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "").lower() in ("1", "true"):
        warnings.append(tb.context_length_message(requested, derived, allowed=True))
        return requested
    raise ResolveFailure(tb.context_length_too_long(requested, derived))


def _defaults_for_cuda(
    args: dict[str, Any], profile: NodeProfile, model: ModelConfig, memory: MemorySettings
) -> dict[str, Any]:
    """Fields resolution fills in on a CUDA host, as /server_info reports them."""
    default_backend = "fa3" if profile.gpus.compute_capability.startswith("9") else "flashinfer"
    graph = {
        "decode": {
            "backend": memory.decode_backend,
            "max_bs": memory.decode_max_bs,
            "bs": list(memory.decode_bs),
            **_PHASE_DEFAULTS,
        },
        "prefill": {
            "backend": memory.prefill_backend,
            "max_bs": memory.prefill_max_bs,
            "bs": list(memory.prefill_bs),
            **_PHASE_DEFAULTS,
        },
    }
    return {
        "device": args["device"] or "cuda",
        "tokenizer_path": args["tokenizer_path"] or args["model_path"],
        "served_model_name": args["served_model_name"] or args["model_path"],
        "page_size": args["page_size"] or 1,
        "attention_backend": args["attention_backend"] or ("flashmla" if model.mla else default_backend),
        "mem_fraction_static": memory.mem_fraction_static,
        "chunked_prefill_size": memory.chunked_prefill_size,
        "cuda_graph_config": graph,
        "random_seed": args["random_seed"] if args["random_seed"] is not None else random.randrange(2**30),
    }


def _speculative(
    out: dict[str, Any], model: ModelConfig, warnings: list[str]
) -> tuple[ModelConfig | None, DraftSource]:
    """handle_speculative_decoding; fills the speculative_* fields of `out`. Returns the draft loaded."""
    name = out["speculative_algorithm"]
    if name is None:
        return None, "none"
    algo = name.upper()
    draft_path = out["speculative_draft_model_path"]
    if draft_path is not None:
        out["speculative_draft_model_revision"] = out["speculative_draft_model_revision"] or "main"
    draft = read_model(draft_path, draft=True) if draft_path else None
    algo = _SPEC.aliases.get(algo, algo)
    out["speculative_algorithm"] = algo
    _check_draft_window(out, algo, warnings)
    if algo not in _SPEC.algorithms:
        raise ResolveFailure(tb.unknown_algorithm(name))
    if algo in ("EAGLE", "EAGLE3", "STANDALONE"):
        return _eagle_family(out, algo, model, draft, warnings)
    if algo == "NGRAM":
        _ngram(out, warnings)
        return None, "none"
    return _single_step(out, algo, draft, warnings), "draft" if draft else "none"


def _check_draft_window(out: dict[str, Any], algo: str, warnings: list[str]) -> None:
    if out["speculative_use_block_verification"] and out["device"] not in (None, "cuda"):
        raise ResolveFailure(
            tb.spec_hook_error(
                182, "ValueError: --speculative-use-block-verification only supports CUDA or ROCm."
            )
        )
    if out["speculative_use_block_verification"] and algo in ("EAGLE", "EAGLE3"):
        out["speculative_use_rejection_sampling"] = True
    window = out["speculative_draft_window_size"]
    if window is not None:
        if window <= 0:
            raise ResolveFailure(
                tb.spec_hook_error(
                    205, f"ValueError: --speculative-draft-window-size must be positive, got {window}."
                )
            )
        if algo not in ("EAGLE", "EAGLE3", "DFLASH"):
            warnings.append(
                "--speculative-draft-window-size has no effect with "
                f"speculative_algorithm={algo} (honored by DFLASH, Llama EAGLE-3, and the "
                "EAGLE/MTP/NEXTN draft-decode path on the Triton/FlashInfer draft backends)."
            )
    sink = out["speculative_draft_sink_size"]
    if sink is not None and sink < 0:
        raise ResolveFailure(
            tb.spec_hook_error(
                224, f"ValueError: --speculative-draft-sink-size must be non-negative, got {sink}."
            )
        )
    if sink is not None and window is None:
        raise ResolveFailure(
            tb.spec_hook_error(
                228, "ValueError: --speculative-draft-sink-size requires --speculative-draft-window-size."
            )
        )


def _eagle_family(
    out: dict[str, Any], algo: str, model: ModelConfig, draft: ModelConfig | None, warnings: list[str]
) -> tuple[ModelConfig, DraftSource]:
    if algo == "STANDALONE" and out["attn_dp_size"] > 1:
        raise ResolveFailure(
            tb.eagle_family_error(
                1082, "ValueError: Currently standalone speculative decoding does not support dp attention."
            )
        )
    _cap_running_requests(out, warnings)
    if out["disable_overlap_schedule"]:
        warnings.append(
            "Non-overlap (synchronous) spec v2 is used for eagle/eagle3/standalone speculative decoding."
        )
    if out["enable_mixed_chunk"] and algo == "STANDALONE":
        out["enable_mixed_chunk"] = False
        warnings.append(
            f"Mixed chunked prefill is disabled: {algo} speculative decoding does not support it."
        )
    source: DraftSource = "draft" if draft is not None else "target"
    if model.architecture in _SPEC.mtp_targets:
        if draft is None:
            out["speculative_draft_model_path"] = out["model_path"]
            draft, source = model, "mtp"
        elif model.architecture not in _SPEC.mtp_targets_with_separate_draft:
            warnings.append("DeepSeek MTP does not require setting speculative_draft_model_path.")
    _steps_topk_tokens(out, algo, model)
    steps, topk = out["speculative_num_steps"], out["speculative_eagle_topk"]
    if {out["attention_backend"], out["decode_attention_backend"]} & set(
        _SPEC.chain_only_backends
    ) and topk > 1:
        raise ResolveFailure(
            tb.eagle_family_error(
                1178, "ValueError: trtllm_mha backend only supports topk = 1 for speculative decoding."
            )
        )
    _rejection_sampling(out, algo, warnings)
    if topk == 1 and out["speculative_num_draft_tokens"] != steps + 1:
        warnings.append(
            "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
        )
        out["speculative_num_draft_tokens"] = steps + 1
    if topk is None:
        raise ResolveFailure(tb.spec_topk_none())
    if topk > 1 and out["page_size"] > 1 and out["attention_backend"] not in _SPEC.tree_paged_backends:
        raise ResolveFailure(
            tb.eagle_family_error(
                1278,
                f"ValueError: speculative_eagle_topk > 1 with page_size > 1 is only supported on "
                f"{_SPEC.tree_paged_backends}; got attention_backend={out['attention_backend']!r}. "
                "Use page_size == 1 or one of those backends.",
            )
        )
    return draft or model, source


def _steps_topk_tokens(out: dict[str, Any], algo: str, model: ModelConfig) -> None:
    if out["speculative_adaptive"] or out["speculative_num_steps"] is not None:
        return
    if out["speculative_eagle_topk"] is not None or out["speculative_num_draft_tokens"] is not None:
        raise ResolveFailure(tb.spec_steps_missing())
    # SGLang's auto choice: a wider tree for the Llama and Grok families, except for a standalone drafter.
    wide = algo != "STANDALONE" and model.architecture in (
        "LlamaForCausalLM",
        "Grok1ForCausalLM",
        "Grok1VForCausalLM",
    )
    auto = (5, 4, 8) if wide else (3, 1, 4)
    out["speculative_num_steps"], out["speculative_eagle_topk"], out["speculative_num_draft_tokens"] = auto


def _rejection_sampling(out: dict[str, Any], algo: str, warnings: list[str]) -> None:
    if not out["speculative_use_rejection_sampling"]:
        return
    if algo not in ("EAGLE", "EAGLE3"):
        raise ResolveFailure(
            tb.eagle_family_error(
                1216,
                "NotImplementedError: --speculative-use-rejection-sampling is only supported for "
                f"EAGLE / EAGLE3 / NEXTN, not speculative_algorithm={algo}.",
            )
        )
    if out["speculative_eagle_topk"] != 1:
        raise ResolveFailure(
            tb.eagle_family_error(
                1222, "ValueError: --speculative-use-rejection-sampling requires --speculative-eagle-topk=1."
            )
        )
    if out["speculative_accept_threshold_single"] != 1.0 or out["speculative_accept_threshold_acc"] != 1.0:
        raise ResolveFailure(
            tb.eagle_family_error(
                1235,
                "ValueError: --speculative-use-rejection-sampling is incompatible with "
                "--speculative-accept-threshold-single / --speculative-accept-threshold-acc; rejection sampling "
                "ignores the accept thresholds.",
            )
        )
    warnings.append(
        "Rejection sampling is enabled for speculative decoding (speculative_use_rejection_sampling=True)."
    )


def _ngram(out: dict[str, Any], warnings: list[str]) -> None:
    _cap_running_requests(out, warnings)
    out["enable_mixed_chunk"] = False
    out["speculative_eagle_topk"] = topk = out["speculative_ngram_max_bfs_breadth"]
    if out["speculative_num_draft_tokens"] is None:
        out["speculative_num_draft_tokens"] = 12
        warnings.append(
            "speculative_num_draft_tokens is set to 12 by default for ngram speculative decoding. "
            "You can override this by explicitly setting --speculative-num-draft-tokens."
        )
    if out["speculative_num_steps"] is None:
        out["speculative_num_steps"] = out["speculative_num_draft_tokens"] // topk
    warnings.append("The mixed chunked prefill are disabled because of using ngram speculative decoding.")
    if topk > 1 and out["page_size"] > 1 and out["attention_backend"] != "flashinfer":
        raise ResolveFailure(
            tb.algorithm_error(
                "NGRAM",
                1361,
                f"ValueError: speculative_eagle_topk({topk}) > 1 with page_size({out['page_size']}) > 1 is unstable "
                "and produces incorrect results for paged attention backends. This combination is only "
                "supported for the 'flashinfer' backend.",
            )
        )
    if out["attn_dp_size"] > 1:
        raise ResolveFailure(
            tb.algorithm_error(
                "NGRAM",
                1369,
                "ValueError: Currently ngram speculative decoding does not support dp attention.",
            )
        )


def _single_step(
    out: dict[str, Any], algo: str, draft: ModelConfig | None, warnings: list[str]
) -> ModelConfig | None:
    """DFLASH / DSPARK / UNO / FROZEN_KV_MTP: one verify block per step; only their basic checks."""
    if algo == "DFLASH" and draft is None:
        raise ResolveFailure(
            tb.algorithm_error(
                "DFLASH",
                325,
                "ValueError: DFLASH speculative decoding requires setting --speculative-draft-model-path.",
            )
        )
    if algo == "DSPARK" and draft is None:
        raise ResolveFailure(
            tb.algorithm_error(
                "DSPARK",
                752,
                "ValueError: DSpark dense speculative decoding requires setting --speculative-draft-model-path.",
            )
        )
    if algo == "UNO" and out["uno_lora_path"] is None:
        raise ResolveFailure(tb.algorithm_error("UNO", 459, "ValueError: UNO requires --uno-lora-path."))
    out["speculative_num_steps"], out["speculative_eagle_topk"] = 1, 1
    if out["speculative_num_draft_tokens"] is None:
        out["speculative_num_draft_tokens"] = 16 if algo == "DFLASH" else 8
    _cap_running_requests(out, warnings)
    return draft


def _cap_running_requests(out: dict[str, Any], warnings: list[str]) -> None:
    if out["max_running_requests"] is None:
        out["max_running_requests"] = 48
        warnings.append(MAX_RUNNING_RESET)
