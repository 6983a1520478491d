"""How a failure is read before anyone decides: frames in every form Python and issue threads print them,
a kernel's message that goes on after a blank line, vLLM's name for a setting in a shared kernel's error,
what the person reporting it wrote, and which backend takes a launch off a failing one. Every log here is a
real one from the tracker (the development corpora); each rule is also run with the setting it blames left
out of the command, where the answer must not blame it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdoctor.agent.diagnose import context_for, decide
from specdoctor.agent.planner import gate
from specdoctor.playbooks.base import fix
from specdoctor.playbooks.naming import named_exactly
from specdoctor.playbooks.take_back import take_back
from specdoctor.tools.command import LaunchCommand, SetFlag
from specdoctor.tools.log_cause import extract_root_cause
from tests.test_corpus_scores import CAT, contract_for

DATA = Path(__file__).parent / "data"


def _case(name: str) -> dict:
    found = sorted(DATA.glob(f"corpus-*/{name}.json"))
    assert len(found) == 1, name
    return json.loads(found[0].read_text())


def _decide(tmp_path: Path, name: str, command: str | None = None) -> dict:
    case = _case(name)
    if command is not None:
        case["command"] = command
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(case))
    return contract_for(path)


def _touched(contract: dict) -> set[str]:
    return {e.get("flag") or e.get("name") for e in contract.get("edits") or []}


def test_a_frame_quoted_without_its_line_number_is_a_frame() -> None:
    root = extract_root_cause(_case("mamba-radix-cache-extra-buffer-on-non-mamba-model")["log"].splitlines())
    assert root.kind == "exception"
    assert [f.function for f in root.frames] == ["_mamba_radix_cache_v2_req_prepare_for_extend"]


def test_faulthandler_frames_are_frames() -> None:
    # `File "...", line 100 in resolve_forward_inputs`: no comma before `in`.
    root = extract_root_cause(_case("mlx-mixed-chunk-mps-cat-segfault")["log"].splitlines())
    assert "resolve_forward_inputs" in {f.function for f in root.frames}


def test_a_kernel_message_goes_on_after_a_blank_line() -> None:
    root = extract_root_cause(_case("ascend-npu-fia-page-size-1-block-size-align-16")["log"].splitlines())
    assert "block_size should aligned to 16, but got 1" in root.message


def test_a_log_record_after_a_blank_line_is_not_part_of_the_message() -> None:
    lines = [
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "",
        "[2025-01-01 00:00:00] Received sigquit from a child process. It usually means the child failed.",
    ]
    assert "sigquit" not in extract_root_cause(lines).message


def test_vllm_s_name_for_the_page_size_in_a_kernel_error_names_page_size(tmp_path: Path) -> None:
    name = "ascend-npu-fia-page-size-1-block-size-align-16"
    contract = _decide(tmp_path, name)
    assert contract["action"] == "fix" and _touched(contract) == {"--page-size"}, contract
    # Without a chosen page size nothing the user chose is named: no fix invents one.
    command = (
        "python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --device npu --attention-backend ascend"
    )
    assert "--page-size" not in _touched(_decide(tmp_path, name, command))


def test_a_name_shared_by_another_setting_is_not_vllm_s_name() -> None:
    assert named_exactly("--block-size", "block_size should be aligned to 16")
    assert not named_exactly("--block-size", "weight_block_size must divide the shard")


@pytest.mark.parametrize(
    ("case", "setting"),
    [
        # "Server crashes ... when using Triton attention backend with pipeline parallelism."
        ("pp-with-triton-attention-backend-layer0-indexerror", "--attention-backend"),
        # "... error when add --enable-dp-attention option ..., and without it everything ok."
        ("dp-attention-multinode-allgather-size-mismatch", "--enable-dp-attention"),
    ],
)
def test_what_the_reporter_says_they_chose_is_the_suspect(tmp_path: Path, case: str, setting: str) -> None:
    contract = _decide(tmp_path, case)
    assert contract["action"] == "fix" and setting in _touched(contract), contract


def test_the_reporter_naming_the_algorithm_does_not_blame_its_tuning(tmp_path: Path) -> None:
    # "When serving Kimi-K2.5 with EAGLE3 speculative decoding enabled ...": EAGLE3 is the algorithm, which
    # defines what is served; --speculative-eagle-topk shares a word with it and nothing more.
    contract = _decide(tmp_path, "kimi-k25-eagle3-draft-clobbers-chunked-prefix-cache-assert")
    assert contract["action"] == "stop", contract


def test_a_failing_attention_backend_gives_way_to_the_portable_one(tmp_path: Path) -> None:
    # Removing --attention-backend trtllm_mha lets SGLang choose again, and on Blackwell it may choose it.
    contract = _decide(tmp_path, "llama4-trtllm-mha-fp8-kv-missing-context-kernel")
    assert contract["action"] == "fix", contract
    assert {"op": "set", "flag": "--attention-backend", "values": ["triton"]} in contract["edits"]


def test_a_failing_triton_backend_is_taken_back(tmp_path: Path) -> None:
    contract = _decide(tmp_path, "pp-with-triton-attention-backend-layer0-indexerror")
    assert {"op": "remove", "flag": "--attention-backend"} in contract["edits"], contract


def test_an_mla_model_s_backend_is_left_to_sglang(tmp_path: Path) -> None:
    # A DeepSeek-family model (its forward is in deepseek_common) runs on backends of its own kind.
    contract = _decide(tmp_path, "glm5-fp8-mi325x-forced-aiter-backend-mha-k-triton-compile-error")
    assert {"op": "remove", "flag": "--attention-backend"} in contract["edits"], contract


@pytest.mark.parametrize(
    ("case", "edit"),
    [
        # Capture cut inside the forward pass; --attention-backend flashinfer is the one forward choice.
        (
            "exaone-head-dim-80-flashinfer-unsupported-use-triton",
            {"op": "set", "flag": "--attention-backend", "values": ["triton"]},
        ),
        # Cut in init_all_cuda_graphs; --quantization modelopt_fp4 on a bf16 checkpoint is the one.
        (
            "gemma4-bf16-checkpoint-forced-modelopt-fp4-tuple-index",
            {"op": "remove", "flag": "--quantization"},
        ),
        # A faulthandler dump (no exception line); --enable-mixed-chunk is the one.
        ("mlx-mixed-chunk-mps-cat-segfault", {"op": "remove", "flag": "--enable-mixed-chunk"}),
    ],
)
def test_a_cut_traceback_with_one_forward_choice_takes_it_back_unsure(
    tmp_path: Path, case: str, edit: dict
) -> None:
    contract = _decide(tmp_path, case)
    assert contract["action"] == "fix" and contract["edits"] == [edit], contract
    assert contract["confidence"] < 0.5, "a guess must not be applied unattended"


def test_a_cut_traceback_with_two_forward_choices_is_no_guess(tmp_path: Path) -> None:
    # flashmla and an fp8 KV cache: either could be why; neither is taken back on a guess.
    contract = _decide(tmp_path, "flashmla-fp8-kv-cache-graph-capture-exception")
    assert contract["action"] == "stop", contract
    name = "exaone-head-dim-80-flashinfer-unsupported-use-triton"
    command = _case(name)["command"].replace(" --attention-backend flashinfer", "")
    assert _decide(tmp_path, name, command)["action"] == "stop"


def test_taking_back_what_is_served_is_never_applied_unasked(tmp_path: Path) -> None:
    # The error names LoRA (the adapters are what this server is for): dropping --enable-lora is for a
    # person to decide, so the fix stays below the unattended bar.
    contract = _decide(tmp_path, "gemma4-e2b-peft-lora-missing-v-proj-kv-sharing-layers")
    assert contract["action"] == "fix" and contract["confidence"] < 0.5, contract
    assert {e["flag"] for e in contract["edits"]} <= {"--enable-lora", "--lora-paths"}


def test_a_check_that_does_not_show_the_value_failing_is_a_guess(tmp_path: Path) -> None:
    # chunked_prefill_size must be divisible by page_size, with --chunked-prefill-size -1: the check as
    # SGLang now writes it skips -1, so blaming --page-size is not a finding.
    contract = _decide(tmp_path, "chunked-prefill-disabled-minus-one-page-size-divisibility-assert")
    assert contract["action"] != "fix" or contract["confidence"] < 0.5, contract


def test_a_traceback_cut_outside_the_forward_pass_blames_no_forward_choice(tmp_path: Path) -> None:
    # Cut in the tokenizer manager while serving a request (a preprocessing call lost an argument after a
    # transformers upgrade): the NPU attention backend chosen in the command has nothing to do with it.
    contract = _decide(tmp_path, "ascend-sgl-kernel-npu-update-transformers-interpolation-warmup")
    assert contract["action"] == "stop", contract


def test_an_npu_backend_is_never_swapped_for_a_gpu_one() -> None:
    case = _case("ascend-npu-fia-page-size-1-block-size-align-16")
    ctx = context_for(LaunchCommand.parse(case["command"]), CAT, case["log"].splitlines())
    edits = take_back("--attention-backend", "ascend", CAT.get("--attention-backend"), ctx)
    assert [e.describe() for e in edits] == ["remove --attention-backend"]


def test_a_draft_and_target_in_two_dtypes_get_one_dtype(tmp_path: Path) -> None:
    # PR sgl-project/sglang#3431: "explicitly specify --dtype when the target model and draft model use
    # different dtype"; the case's capture failed with "mat1 and mat2 must have the same dtype".
    name = "eagle-draft-fp16-target-bf16-dtype-mismatch-capture"
    contract = _decide(tmp_path, name)
    assert contract["playbook"] == "sglang.spec.draft-dtype", contract
    assert contract["edits"] == [{"op": "set", "flag": "--dtype", "values": ["float16"]}]
    # Without a draft there is no second checkpoint dtype: not this rule.
    plain = "python3 -m sglang.launch_server --model-path meta-llama/Meta-Llama-3-8B-Instruct"
    assert _decide(tmp_path, name, plain)["playbook"] != "sglang.spec.draft-dtype"


def test_the_newer_torch_wording_of_a_dtype_clash_is_the_same_failure() -> None:
    # sgl-project/SpecForge#348 (an EAGLE3 draft loaded as float16): its log and its title's error line.
    log = [
        "[2025-12-03 10:45:44] Load weight end. type=LlamaForCausalLMEagle3, dtype=torch.float16, avail mem=44.20 GB, mem usage=2.21 GB.",
        "[2025-12-03 10:45:45] Capture draft cuda graph begin. This can take up to several minutes. avail mem=44.21 GB",
        "RuntimeError: expected mat1 and mat2 to have the same dtype, but got: float != c10::Half",
    ]
    command = LaunchCommand.parse(
        "python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --speculative-algorithm "
        "EAGLE3 --speculative-draft-model-path /drafts/llama31-eagle3"
    )
    decision = decide(context_for(command, CAT, log))
    assert decision.playbook == "sglang.spec.draft-dtype", decision


def test_a_tokenizer_without_a_chat_template_gets_a_built_in_one(tmp_path: Path) -> None:
    contract = _decide(tmp_path, "base-model-no-chat-template-openai-chat")
    assert contract["edits"] == [{"op": "set", "flag": "--chat-template", "values": ["chatml"]}], contract
    assert contract["confidence"] < 0.5, "a base model was not trained on any chat format: a person decides"
    # sgl-project/sglang#3385, its error as the server logged it (the same base model, another release).
    log = [
        "ValueError: Cannot use chat template functions because tokenizer.chat_template is not set and no "
        "template argument was passed!"
    ]
    base = "python3 -m sglang.launch_server --model-path meta-llama/Llama-3.2-1B --port 8000"
    assert (
        decide(context_for(LaunchCommand.parse(base), CAT, log)).playbook == "sglang.serving.no-chat-template"
    )
    chosen = LaunchCommand.parse(f"{base} --chat-template /templates/mine.jinja")
    assert decide(context_for(chosen, CAT, log)).playbook != "sglang.serving.no-chat-template"


def test_the_gate_takes_a_template_sglang_registers_and_no_invented_one() -> None:
    command = LaunchCommand.parse("python3 -m sglang.launch_server --model-path meta-llama/Llama-3.2-1B")
    ctx = context_for(command, CAT, ["ValueError: boom"])
    built_in = fix(ctx, [SetFlag(flag="--chat-template", values=("chatml",))], "other", "s", why="w")
    invented = fix(ctx, [SetFlag(flag="--chat-template", values=("/tmp/evil.jinja",))], "other", "s", why="w")
    assert not gate(ctx, built_in)
    assert gate(ctx, invented)


_PCG_NSA_LOG = [
    # sgl-project/sglang PR #23351 (piecewise CUDA graphs with NSA), as its comment quotes the server log.
    "[2026-05-22 04:54:32 TP6] Piecewise CUDA Graph failed with error: Tensor match failed for "
    "Tensor<8>[strides=<1>, dtype=int64, device=cuda:6] at /actions-runner/_work/sglang/sglang/python/sglang/"
    "jit_kernel/csrc/dsa/fused_store_index_cache.cuh:107",
    "- Root cause: Size mismatch for shape#0('num_tokens'): expected 6 but got 8",
    "Piecewise CUDA Graph is enabled by default as an experimental feature.",
    "To work around this error, add --disable-piecewise-cuda-graph to your launch command.",
    "Please report this issue at https://github.com/sgl-project/sglang/issues/new/choose",
    "[2026-05-22 04:54:32 TP6] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/actions-runner/_work/sglang/sglang/python/sglang/srt/managers/scheduler.py", line 3811, in '
    "run_scheduler_process",
    "    scheduler.run_event_loop()",
]


def test_the_engine_s_own_workaround_is_taken_in_today_s_spelling(tmp_path: Path) -> None:
    # "To work around this error, add --disable-piecewise-cuda-graph": a flag of the log's release, which
    # 0.5.23 spells --cuda-graph-backend-prefill disabled.
    want = [{"op": "set", "flag": "--cuda-graph-backend-prefill", "values": ["disabled"]}]
    contract = _decide(tmp_path, "amd-piecewise-cuda-graph-forward-context-regression")
    assert contract["playbook"] == "sglang.engine.advice" and contract["edits"] == want, contract
    command = LaunchCommand.parse(
        "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8"
    )
    decision = decide(context_for(command, CAT, _PCG_NSA_LOG))
    assert decision.playbook == "sglang.engine.advice", decision
    assert [e.model_dump(mode="json") for e in decision.edits] == want


def test_half_of_a_workaround_is_none(tmp_path: Path) -> None:
    # "please use --mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1": the flag has no
    # spelling in 0.5.23's catalog, so setting only the variable would be half the advice.
    contract = _decide(tmp_path, "qwen35-mtp-radix-no-buffer-rocm")
    assert contract["playbook"] != "sglang.engine.advice", contract


def test_a_default_feature_the_report_names_is_switched_off(tmp_path: Path) -> None:
    # "... EAGLE speculative decoding, and the default overlap schedule enabled, ... hangs."
    contract = _decide(tmp_path, "dsv4-flash-dp-attention-eagle-overlap-chat-hang")
    assert contract["edits"] == [{"op": "set", "flag": "--disable-overlap-schedule", "values": []}], contract
    assert contract["confidence"] < 0.5
    # A report that names no default feature gets no switch (its EAGLE3 is what is served).
    other = _decide(tmp_path, "kimi-k25-eagle3-draft-clobbers-chunked-prefix-cache-assert")
    assert other["playbook"] != "sglang.feature.default-named", other


@pytest.mark.parametrize(
    "case",
    [
        "rocm-aiter-custom-allreduce-graph-capture-hsa-exception-hy3",  # MI300X, during graph capture
        "rocm-mi325x-qwen35-aiter-custom-allreduce-hsa-0x1016",  # MI325X, under load
    ],
)
def test_a_gpu_fault_on_rocm_with_tensor_parallelism_turns_off_aiter_s_all_reduce(
    tmp_path: Path, case: str
) -> None:
    contract = _decide(tmp_path, case)
    assert contract["edits"] == [{"op": "set_env", "name": "SGLANG_USE_AITER_AR", "value": "0"}], contract
    assert contract["confidence"] < 0.5
    # One GPU runs no all-reduce: the fault is something else.
    single = _case(case)["command"].replace("--tp-size 8", "").replace("--tp 8", "")
    assert _decide(tmp_path, case, single)["playbook"] != "sglang.parallel.amd-allreduce"


def test_a_gpu_aiter_has_no_kernels_for_gets_triton_attention(tmp_path: Path) -> None:
    contract = _decide(tmp_path, "rdna-gfx1151-default-aiter-arch-unsupported-use-triton")
    assert contract["edits"] == [{"op": "set", "flag": "--attention-backend", "values": ["triton"]}], contract
    # gpustack/gpustack#3345: the same refusal worded by AITER's chip table, on an RX 7800-class gfx1101.
    log = [
        '  File "/usr/local/lib/python3.12/dist-packages/aiter/jit/utils/chip_info.py", line 65, in '
        "get_gfx_custom_op_core",
        "    raise KeyError(",
        "KeyError: \"Unknown GPU architecture: gfx1101. Supported architectures: ['native', 'gfx90a', 'gfx908', "
        "'gfx940', 'gfx941', 'gfx942', 'gfx945', 'gfx1100', 'gfx950']\"",
    ]
    command = LaunchCommand.parse("python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B")
    assert decide(context_for(command, CAT, log)).playbook == "sglang.backend.aiter-arch"
    # A backend the user chose that is not AITER is not this rule's to change.
    chosen = LaunchCommand.parse(
        "python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --attention-backend wave"
    )
    assert decide(context_for(chosen, CAT, log)).playbook != "sglang.backend.aiter-arch"


@pytest.mark.parametrize(
    ("case", "env"),
    [
        # "Crashes at `Try DeepGEMM JIT Compiling ...`": the warm-up precompile, not DeepGEMM itself.
        ("dsv4-deepgemm-242-jit-warmup-m-indices-typeerror", "SGLANG_JIT_DEEPGEMM_PRECOMPILE"),
        # "Qwen3 FP8 models crash at startup without `SGL_ENABLE_JIT_DEEPGEMM=0`" (an issue's title).
        ("qwen3-fp8-deepgemm-jit-startup-crash-env-off", "SGLANG_ENABLE_JIT_DEEPGEMM"),
    ],
)
def test_a_failure_in_deepgemm_turns_the_default_off(tmp_path: Path, case: str, env: str) -> None:
    contract = _decide(tmp_path, case)
    assert contract["edits"] == [{"op": "set_env", "name": env, "value": "0"}], contract
    assert contract["confidence"] < 0.5


def test_a_deepgemm_switch_the_user_set_is_the_suspects_rule_s() -> None:
    # The user's own SGL_ENABLE_JIT_DEEPGEMM=1 is turned back in its own spelling, not a second variable.
    case = _case("glm5-fp8-b300-deepgemm-tma-capture-illegal-address-0512")
    ctx = context_for(LaunchCommand.parse(case["command"]), CAT, case["log"].splitlines())
    assert decide(ctx).playbook != "sglang.default.deepgemm"


def test_a_value_that_is_the_model_s_family_is_no_evidence(tmp_path: Path) -> None:
    # "... fails on FP8 versions of Qwen3 models": qwen3 there is the model, not --reasoning-parser qwen3.
    contract = _decide(tmp_path, "qwen3-fp8-deepgemm-jit-startup-crash-env-off")
    assert "--reasoning-parser" not in _touched(contract), contract


def test_deepgemm_called_by_sparse_attention_is_not_the_gemm_switch_s(tmp_path: Path) -> None:
    # DSA's indexer calls DeepGEMM's paged-MQA kernels directly ("deepgemm/csrc/apis/attention.hpp ...
    # Unsupported architecture" from dsa_backend.py): turning JIT DeepGEMM off does not reach it.
    contract = _decide(tmp_path, "glm51-nvfp4-sm120-dsa-deepgemm-unsupported-arch")
    assert contract["playbook"] != "sglang.default.deepgemm", contract


def test_an_oom_beside_a_raised_static_share_lowers_it(tmp_path: Path) -> None:
    # GB200 decode workers, --mem-fraction-static 0.95: the process holds 181.77 of 184 GiB and a 4 GiB
    # buffer finds no room. The static pool took what the user gave it; the weights are not the question.
    name = "gb200-fp4-decode-mem-fraction-095-symm-mem-prealloc-oom"
    contract = _decide(tmp_path, name)
    assert contract["action"] == "fix", contract
    (edit,) = contract["edits"]
    assert edit["flag"] == "--mem-fraction-static" and float(edit["values"][0]) < 0.95
    # At SGLang's own share the same numbers say the weights alone fill the GPUs.
    default = _case(name)["command"].replace(" --mem-fraction-static 0.95", "")
    assert _decide(tmp_path, name, default)["action"] == "stop"
