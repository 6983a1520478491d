"""Spellings SGLang does not accept but people write: vLLM's flags and SGLang's own renamed flags.

A synonym applies only when the written flag is unknown to the catalog being checked and its target is
known to it, so one table serves every SGLang version. `translate` names a rule that also rewrites values
(vLLM's `--num-speculative-tokens N` is a chain of N draft steps, not a rename).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


# A plain dataclass, not a pydantic model: this table is read on every `check`, and building ~50 models at
# import costs start-up time for nothing (the data never comes from outside).
@dataclass(frozen=True)
class Synonym:
    written: str
    origin: Literal["vllm", "sglang-renamed", "sglang-removed"]
    target: str | None
    """The SGLang flag that means the same, None when none does."""
    note: str = ""
    """What differs in meaning; shown to the user."""
    translate: str | None = None
    """Id of a value-rewriting rule in playbooks.translate."""


def _v(written: str, target: str | None, note: str = "", translate: str | None = None) -> Synonym:
    return Synonym(written=written, origin="vllm", target=target, note=note, translate=translate)


def _renamed(written: str, target: str | None, note: str = "") -> Synonym:
    return Synonym(written=written, origin="sglang-renamed", target=target, note=note)


SYNONYMS: tuple[Synonym, ...] = (
    # vLLM speculative decoding, old flags (<= v0.8) and the JSON form
    _v(
        "--num-speculative-tokens",
        "--speculative-num-draft-tokens",
        "vLLM's N proposed tokens form a single chain; in SGLang that is --speculative-num-steps N-1 with "
        "--speculative-eagle-topk 1 and --speculative-num-draft-tokens N (SGLang counts the root token)",
        translate="speculative_tokens",
    ),
    _v(
        "--speculative-model",
        "--speculative-draft-model-path",
        "`[ngram]` means --speculative-algorithm NGRAM",
        "speculative_model",
    ),
    _v(
        "--speculative-config",
        "--speculative-algorithm",
        "the JSON keys map to several SGLang flags",
        "speculative_config",
    ),
    _v("--spec-method", "--speculative-algorithm", "", "speculative_method"),
    _v("--spec-model", "--speculative-draft-model-path"),
    _v("--spec-tokens", "--speculative-num-draft-tokens", "", "speculative_tokens"),
    _v("--speculative-draft-tensor-parallel-size", None, "SGLang runs the draft with the target's TP size"),
    _v("--ngram-prompt-lookup-max", None, "SGLang's NGRAM drafter sizes its own match window"),
    _v("--ngram-prompt-lookup-min", None, "SGLang's NGRAM drafter sizes its own match window"),
    _v("--use-v2-block-manager", None, "a vLLM scheduler internal with no SGLang counterpart"),
    # vLLM common flags
    # No target on purpose: the nearest SGLang flag measures something else, so carrying the value over
    # would claim an equality the note denies. Dropping it lets SGLang size its pool; a person sets
    # --mem-fraction-static when a cap is needed.
    _v(
        "--gpu-memory-utilization",
        None,
        "its nearest flag, --mem-fraction-static, is not the same quantity (SGLang's fraction covers weights "
        "+ KV cache only; activations and CUDA graphs live outside it), so vLLM's value is not carried over: "
        "SGLang sizes its memory pool itself; to cap it, set --mem-fraction-static by hand, lower than "
        "vLLM's number",
    ),
    _v("--max-model-len", "--context-length"),
    _v("--max-num-seqs", "--max-running-requests"),
    _v("--max-num-batched-tokens", "--chunked-prefill-size", "SGLang chunks prefill at this many tokens"),
    _v("--seed", "--random-seed"),
    _v("--tokenizer", "--tokenizer-path"),
    _v("--block-size", "--page-size"),
    _v("--enforce-eager", "--cuda-graph-backend-decode", "disables CUDA graphs", "enforce_eager"),
    _v("--max-cudagraph-capture-size", "--cuda-graph-max-bs-decode"),
    _v(
        "--enable-expert-parallel",
        "--ep-size",
        "SGLang takes the EP size; vLLM's switch means EP = TP",
        "expert_parallel",
    ),
    _v("--enable-prefix-caching", None, "SGLang's radix cache is on by default"),
    _v("--no-enable-prefix-caching", "--disable-radix-cache"),
    _v("--disable-log-requests", None, "SGLang does not log requests unless --log-requests is given"),
    _v(
        "--swap-space", None, "SGLang has no CPU swap space for the KV cache; see --enable-hierarchical-cache"
    ),
    _v("--distributed-executor-backend", None, "SGLang starts its own TP workers"),
    _v("--enable-reasoning", None, "SGLang separates reasoning content with --reasoning-parser alone"),
    _v("--enable-auto-tool-choice", None, "SGLang parses tool calls whenever --tool-call-parser is given"),
    _v("--enable-chunked-prefill", None, "SGLang chunks prefill by default (--chunked-prefill-size)"),
    _v("--disable-log-stats", None, "SGLang logs throughput every --decode-log-interval steps"),
    _v("--num-scheduler-steps", None, "a vLLM scheduler setting with no SGLang counterpart"),
    _v(
        "--max-seq-len-to-capture",
        None,
        "SGLang sizes CUDA graphs by batch size (--cuda-graph-max-bs-decode)",
    ),
    _v("--guided-decoding-backend", "--grammar-backend"),
    _v("--scheduling-policy", "--schedule-policy"),
    _v("--uvicorn-log-level", "--log-level"),
    _v("--lora-modules", "--lora-paths"),
    _v("--hf-overrides", "--json-model-override-args"),
    _v("--compilation-config", None, "SGLang compiles with --enable-torch-compile"),
    _v(
        "--kv-cache-memory-bytes",
        "--max-total-tokens",
        "SGLang sizes the KV pool in tokens, not bytes",
        "drop_value",
    ),
    # SGLang's own renames between releases
    _renamed(
        "--cuda-graph-max-bs",
        "--cuda-graph-max-bs-decode",
        "removed after 0.5.18; the decode graphs are the ones it sized",
    ),
    _renamed("--speculative-dflash-draft-window-size", "--speculative-draft-window-size"),
    _renamed(
        "--enable-piecewise-cuda-graph", None, "prefill graphs are chosen with --cuda-graph-backend-prefill"
    ),
    Synonym(
        written="--disable-piecewise-cuda-graph",
        origin="sglang-renamed",
        target="--cuda-graph-backend-prefill",
        note="prefill graphs are chosen per phase since 0.5.2x; `disabled` turns them off",
        translate="prefill_graphs_off",
    ),
    _renamed("--enable-nan-detection", None, "removed from SGLang"),
    _renamed("--speculative-ngram-min-match-window-size", None, "removed in 0.5.10"),
    _renamed("--speculative-ngram-max-match-window-size", None, "removed in 0.5.10"),
    _renamed("--speculative-ngram-branch-length", None, "removed in 0.5.10"),
    _renamed("--speculative-skip-dp-mlp-sync", None, "removed in 0.5.23"),
    _renamed("--enable-beta-spec", None, "only in 0.5.4; spec v2 is chosen by SGLANG_ENABLE_SPEC_V2"),
)

BY_WRITTEN: dict[str, Synonym] = {s.written: s for s in SYNONYMS}


def vllm_names(flag: str) -> tuple[str, ...]:
    """vLLM's names for the same setting (a plain rename, values unchanged): kernels shared by both
    engines word their errors in vLLM's terms (`block_size` for SGLang's page size)."""
    return tuple(s.written for s in SYNONYMS if s.origin == "vllm" and s.target == flag and not s.translate)


# Values vLLM accepts for a flag SGLang shares, mapped to SGLang's spelling.
VALUE_SYNONYMS: dict[str, dict[str, str]] = {
    "--kv-cache-dtype": {"fp8": "fp8_e4m3", "fp8_e4m3fn": "fp8_e4m3", "float16": "auto"},
    "--speculative-algorithm": {"MTP": "NEXTN", "DEEPSEEK_MTP": "NEXTN", "DRAFT_MODEL": "STANDALONE"},
    "--dtype": {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"},
    # PEFT's name for every linear layer of the model is SGLang's `all`.
    "--lora-target-modules": {"all-linear": "all"},
    # First in, first out is first come, first served: vLLM's `fcfs`, other schedulers' `fifo`.
    "--schedule-policy": {"fifo": "fcfs"},
    # Llama 4 writes tool calls as Python-style calls; SGLang has no parser named after the model.
    "--tool-call-parser": {
        "llama4": "pythonic",
        "llama-4": "pythonic",
        "llama3.1": "llama3",
        "llama3.2": "llama3",
        # vLLM's parser names (its docs' --tool-call-parser values).
        "llama3_json": "llama3",
        "llama4_pythonic": "pythonic",
    },
}


def value_synonyms(flag: str) -> dict[str, str]:
    """Other tools' spellings of `flag`'s values. A draft model's own setting (`--speculative-draft-X`)
    takes the same values as the target's `--X`, so it reads the same spellings."""
    return VALUE_SYNONYMS.get(flag) or VALUE_SYNONYMS.get(
        "--" + flag.removeprefix("--speculative-draft-"), {}
    )
