"""SGLang's own environment variables set wrong: a value the engine names as not one of its values becomes
one that is, and a variable that makes SGLang ask for another flag is taken back (the gate lets a run unset
the engine's variables a person gave, never anyone else's)."""

from __future__ import annotations

from specdoctor.playbooks.gate import invalid_edits
from specdoctor.tools.command import LaunchCommand, UnsetEnv
from tests.recorded import SERVE, blind, decided, recorded_lines
from tests.test_corpus_scores import CAT


def test_a_value_the_engine_lists_alternatives_for_becomes_the_first_of_them() -> None:
    contract = blind("corpus-real-engine-14", "env-role-namespaces-boolean-value")
    assert contract["edits"] == [{"op": "set_env", "name": "SGLANG_ROLE_NAMESPACES", "value": "off"}]
    # `true` looks like a switch, but the engine quotes it as the wrong value: it is not turned to `false`.
    lines = recorded_lines("env-role-namespaces-on.rc1.txt")
    decision = decided(f"SGLANG_ROLE_NAMESPACES=on {SERVE}", lines)
    assert decision["edits"] == [{"op": "set_env", "name": "SGLANG_ROLE_NAMESPACES", "value": "off"}]


def test_a_variable_that_makes_sglang_ask_for_a_flag_is_taken_back() -> None:
    contract = blind("corpus-real-engine-14", "env-log-scheduler-status-target-without-metrics")
    assert contract["edits"] == [{"op": "unset_env", "name": "SGLANG_LOG_SCHEDULER_STATUS_TARGET"}]
    lines = recorded_lines("env-scheduler-status-target-dir-without-metrics.rc137.txt")
    decision = decided(f"SGLANG_LOG_SCHEDULER_STATUS_TARGET=/tmp/rec/status {SERVE}", lines)
    assert (decision["playbook"], decision["edits"], decision["confidence"]) == (
        "sglang.message.remedy",
        [{"op": "unset_env", "name": "SGLANG_LOG_SCHEDULER_STATUS_TARGET"}],
        0.45,
    )


def test_the_gate_unsets_a_persons_engine_variable_but_no_other() -> None:
    command = LaunchCommand.parse(f"SGLANG_ROLE_NAMESPACES=on HF_TOKEN=x CUDA_VISIBLE_DEVICES=1 {SERVE}")
    assert not invalid_edits(command, [UnsetEnv(name="SGLANG_ROLE_NAMESPACES")], CAT)
    for name in ("HF_TOKEN", "CUDA_VISIBLE_DEVICES", "SGLANG_NOT_GIVEN"):
        assert invalid_edits(command, [UnsetEnv(name=name)], CAT), name


def test_a_variable_the_error_quotes_with_its_value_is_the_suspect_and_is_unset() -> None:
    # "LoRA with EAGLE/NEXTN/EAGLE3 speculative decoding does not support SGLANG_ENABLE_OVERLAP_PLAN_STREAM=1":
    # the error names the variable with the command's value; LoRA and the draft stay.
    contract = blind("corpus-real-engine-20", "lora-with-eagle3-env-overlap-plan-stream")
    assert contract["edits"] == [{"op": "unset_env", "name": "SGLANG_ENABLE_OVERLAP_PLAN_STREAM"}]
    lines = recorded_lines("env-overlap-plan-stream-lora-eagle3-serve.rc1.txt")
    command = (
        f"SGLANG_ENABLE_OVERLAP_PLAN_STREAM=1 {SERVE} --enable-lora --max-lora-rank 8 --lora-target-modules q_proj "
        "--speculative-algorithm EAGLE3 --speculative-draft-model-path /models/tiny-eagle3"
    )
    assert decided(command, lines)["edits"] == [
        {"op": "unset_env", "name": "SGLANG_ENABLE_OVERLAP_PLAN_STREAM"}
    ]
