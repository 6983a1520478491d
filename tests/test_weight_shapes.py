"""A checkpoint's tensors against the shapes the model config gives: an override that resizes them is taken
back (lesson of corpus-real-engine-22), and a folder whose config.json disagrees with its weights is a stop
that says so (no flag change repairs it by itself)."""

from __future__ import annotations

from tests.recorded import PY, blind, decided, recorded_lines

RULE = "sglang.model.weights-do-not-fit-the-config"


def test_an_override_that_resizes_the_models_tensors_is_taken_back() -> None:
    contract = blind("corpus-real-engine-22", "json-override-num-heads-breaks-weight-shapes")
    assert contract["edits"] == [{"op": "remove", "flag": "--json-model-override-args"}]
    lines = recorded_lines("json-override-kv-heads-reshapes-attention.rc137.txt")
    command = f"""{PY} --json-model-override-args '{{"num_key_value_heads": 4, "rope_theta": 500000}}'"""
    first = decided(command, lines)
    # Only the field that sizes tensors goes; the rope setting the user chose stays.
    assert (first["playbook"], first["edits"]) == (
        RULE,
        [{"op": "set", "flag": "--json-model-override-args", "values": ['{"rope_theta": 500000}']}],
    )


def test_a_config_json_that_disagrees_with_its_weights_is_a_stop_that_says_so() -> None:
    lines = recorded_lines("json-override-kv-heads-reshapes-attention.rc137.txt")
    # The same crash from a launch without the override: the folder's own config.json is the fault.
    alone = decided(PY, lines)
    assert (alone["playbook"], alone["action"]) == (RULE, "stop")
    # Its blind case expects the override `{"vocab_size": 1000}`: the number is the log's (untrusted), so the
    # stop names the field and a person writes the value; the case stays scored wrong on purpose.
    blind("corpus-real-engine-22", "config-vocab-size-mismatch-with-checkpoint", solved=False)
    # With tensor parallelism the split itself may be why: not this rule's to say.
    assert decided(f"{PY} --tp-size 2", lines)["playbook"] != RULE
