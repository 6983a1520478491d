"""A value of the user's that led the launch onto a check which itself reads only the platform: the check's
function returns early for every other value, and the value is what to take back."""

from __future__ import annotations

from tests.recorded import blind, decided, recorded_lines

SERVE = "sglang serve --model-path /models/tiny-llama --device cpu --max-total-tokens 4096"


def test_a_kv_cache_dtype_only_cuda_runs_is_taken_back_on_a_cpu() -> None:
    contract = blind("corpus-real-engine-8", "kv-cache-dtype-fp4-on-cpu")
    assert contract["edits"] == [{"op": "remove", "flag": "--kv-cache-dtype"}]
    # The second value of the family fails a check further down the same early-returning hook.
    lines = recorded_lines("kv-cache-dtype-nvfp4-on-cpu.rc1.txt")
    decision = decided(f"{SERVE} --kv-cache-dtype nvfp4", lines)
    assert (decision["playbook"], decision["edits"]) == (
        "sglang.source.check",
        [{"op": "remove", "flag": "--kv-cache-dtype"}],
    )


def test_what_is_served_is_not_taken_back_for_a_platform_check_it_led_to() -> None:
    # The Qwen3.5 MTP check reads only `is_hip()`, under `speculative_algorithm is not None`: speculative
    # decoding stays, and the radix cache the check also needs off goes instead.
    contract = blind("corpus-fresh", "qwen35-mtp-radix-no-buffer-rocm")
    assert contract["edits"] == [{"op": "set", "flag": "--disable-radix-cache", "values": []}]


def test_a_watchdog_timeout_the_command_set_too_short_is_taken_back() -> None:
    contract = blind("corpus-real-engine-11", "watchdog-timeout-zero-kills-after-ready")
    assert contract["edits"] == [{"op": "remove", "flag": "--watchdog-timeout"}]
    lines = recorded_lines("watchdog-timeout-tiny-serve.rc137.txt")
    # At SGLang's default a step really ran 300 s: a hang to find, not a flag to change.
    at_default = [ln.replace("watchdog_timeout=0.001", "watchdog_timeout=300") for ln in lines]
    decision = decided(SERVE, at_default, "runtime-crash")
    assert (decision["playbook"], decision["action"]) == ("sglang.scheduler.watchdog", "stop")
    # A soft watchdog only dumps stacks: it is not what killed the server.
    soft = [ln.replace("self.soft=False", "self.soft=True") for ln in lines]
    assert (
        decided(f"{SERVE} --watchdog-timeout 0.001", soft, "runtime-crash")["playbook"]
        != "sglang.scheduler.watchdog"
    )


def test_a_gpu_requirement_of_the_commands_own_value_takes_the_value_back() -> None:
    # "--kv-cache-dtype mxfp8 requires an SM100+ (Blackwell) GPU": the value is the command's, not the
    # checkpoint's, so it goes back to SGLang's default rather than stopping for a newer GPU.
    contract = blind("corpus-real-engine-16", "kv-cache-dtype-mxfp8-without-blackwell")
    assert (contract["playbook"], contract["edits"]) == (
        "sglang.hardware.fp8-arch",
        [{"op": "remove", "flag": "--kv-cache-dtype"}],
    )
    lines = recorded_lines("kv-cache-dtype-mxfp8-serve.rc1.txt")
    assert decided(f"{SERVE} --kv-cache-dtype mxfp8", lines)["edits"] == [
        {"op": "remove", "flag": "--kv-cache-dtype"}
    ]
    # An FP8 checkpoint on an old GPU names no value of the command's: a stop.
    old_gpu = [
        "RuntimeError: fp8e4nv not supported in this architecture. The supported fp8 dtypes are ('fp8e5',)"
    ]
    assert decided(SERVE, old_gpu)["action"] == "stop"


def test_a_check_in_the_else_of_an_engine_variable_switches_the_variable_on() -> None:
    # "PP + speculative decoding (MTP) is only supported on prefill nodes" sits in the else branch of
    # `if envs.SGLANG_ENABLE_PP_SPEC.get()`: SGLang's own path for PP with EAGLE is behind that variable.
    contract = blind("corpus-real-engine-15", "eagle-with-pp-size-2-not-prefill-node")
    assert contract["edits"] == [{"op": "set_env", "name": "SGLANG_ENABLE_PP_SPEC", "value": "1"}]
    lines = recorded_lines("pp-size-2-with-eagle-serve.rc1.txt")
    command = (
        f"{SERVE} --speculative-algorithm EAGLE --speculative-draft-model-path /models/tiny-eagle3 "
        "--pp-size 2 --disable-overlap-schedule"
    )
    decision = decided(command, lines)
    assert (decision["edits"], decision["confidence"]) == (
        [{"op": "set_env", "name": "SGLANG_ENABLE_PP_SPEC", "value": "1"}],
        0.45,
    )
    # A person who set the variable already took that path: it is not proposed again.
    assert decided(f"SGLANG_ENABLE_PP_SPEC=0 {command}", lines)["edits"] != decision["edits"]


def test_a_draft_tree_without_its_token_count_gets_one_it_can_verify() -> None:
    # SGLang fills --speculative-num-draft-tokens in only for a chain (topk 1): a tree leaves it None.
    contract = blind("corpus-real-engine-15", "eagle3-topk-gt1-without-num-draft-tokens")
    assert contract["edits"] == [{"op": "set", "flag": "--speculative-num-draft-tokens", "values": ["12"]}]
    lines = recorded_lines("eagle-tree-without-draft-tokens-serve.rc1.txt")
    spec = "--speculative-algorithm EAGLE --speculative-draft-model-path /models/tiny-eagle3"
    tree = decided(f"{SERVE} {spec} --speculative-num-steps 2 --speculative-eagle-topk 2", lines)
    # (The EAGLE-3 draft also makes the algorithm EAGLE3: every fault preflight knows is fixed at once.)
    assert {"op": "set", "flag": "--speculative-num-draft-tokens", "values": ["4"]} in tree["edits"]
    # A chain of topk 1 is filled in by SGLang itself: no such finding.
    chain = decided(f"{SERVE} {spec} --speculative-num-steps 2 --speculative-eagle-topk 1", lines)
    assert {"op": "set", "flag": "--speculative-num-draft-tokens", "values": ["2"]} not in chain["edits"]


def test_a_setting_sglang_turned_on_for_the_users_one_takes_the_users_back() -> None:
    # handle_page_major_kv_layout: `if cfg.enable_unified_memory: declare_resolution(...,
    # enable_page_major_kv_layout=True)`, then its check on the page-major layout fails.
    contract = blind("corpus-real-engine-16", "enable-unified-memory-on-cpu-attention-backend")
    assert contract["edits"] == [{"op": "remove", "flag": "--enable-unified-memory"}]
    lines = recorded_lines("unified-memory-on-cpu-serve.rc1.txt")
    decision = decided(f"{SERVE} --enable-unified-memory", lines)
    assert (decision["playbook"], decision["edits"]) == (
        "sglang.source.check",
        [{"op": "remove", "flag": "--enable-unified-memory"}],
    )
    # Without the user's switch the same failure is SGLang's own: a stop.
    assert decided(SERVE, lines)["action"] == "stop"
