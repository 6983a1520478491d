"""A checkpoint's tensors against the shapes the model config gives: an override that resizes them is taken
back (lesson of corpus-real-engine-22), and a folder whose config.json disagrees with its weights is a stop
that says so (no flag change repairs it by itself)."""

from __future__ import annotations

import pytest

from tests.recorded import PY, blind, decided, recorded_lines

RULE = "sglang.model.weights-do-not-fit-the-config"


def test_a_vocabulary_the_checkpoint_saved_is_served_at_its_size_for_a_person_to_confirm() -> None:
    # The embedding's loader asserts config.json's vocab_size against the saved tensor's rows and prints
    # both: the checkpoint's size is proposed as an override (a whole number: no text crosses the gate).
    contract = blind("corpus-real-engine-22", "config-vocab-size-mismatch-with-checkpoint")
    assert (contract["edits"], contract["confidence"]) == (
        [{"op": "set", "flag": "--json-model-override-args", "values": ['{"vocab_size": 1000}']}],
        0.45,
    )
    # Recorded on the real `sglang serve`: config.json's vocab_size doubled (2000), the weights' 1000.
    lines = recorded_lines("serve-config-vocab-size-doubled.rc137.txt")
    serve = "sglang serve --model-path /models/tl-vocab-wide --device cpu --max-total-tokens 4096"
    found = decided(serve, lines)
    assert (found["playbook"], found["edits"][0]["values"]) == (RULE, ['{"vocab_size": 1000}'])
    # At TP 2 the rows may be a shard: not this rule's to say.
    assert decided(f"{serve} --tp-size 2", lines)["playbook"] != RULE


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
    # With tensor parallelism the split itself may be why: not this rule's to say.
    assert decided(f"{PY} --tp-size 2", lines)["playbook"] != RULE


@pytest.mark.parametrize(
    "name",
    [
        "merged-checkpoint-leftover-fp8-quantization-config",
        "merged-checkpoint-leftover-awq-quantization-config",
    ],
)
def test_a_quantization_the_weights_do_not_have_at_tp_1_is_dropped_by_override(name: str) -> None:
    from tests.recorded import blind

    contract = blind("corpus-real-engine-44", name)
    assert contract["edits"] == [
        {"op": "set", "flag": "--json-model-override-args", "values": ['{"quantization_config": null}']}
    ]
    assert contract["confidence"] < 0.5


def test_a_leftover_quantization_is_named_only_where_nothing_is_split_or_asked_for() -> None:
    from tests.recorded import decided, recorded_lines

    lines = recorded_lines("serve-leftover-fp8-block-quantization-config.rc137.txt")
    serve = "sglang serve --model-path /models/tl-fp8-dequant --device cpu --max-total-tokens 4096"
    found = decided(serve, lines)
    assert found["edits"] == [
        {"op": "set", "flag": "--json-model-override-args", "values": ['{"quantization_config": null}']}
    ]
    # The user's own override keys stay; at TP 2 the split may be the fault; an asked-for quantization is meant.
    kept = decided(f"{serve} --json-model-override-args '{{\"max_position_embeddings\": 512}}'", lines)
    assert kept["edits"][0]["values"] == ['{"max_position_embeddings": 512, "quantization_config": null}']
    assert decided(f"{serve} --tp-size 2", lines)["action"] == "stop"
    assert decided(f"{serve} --quantization fp8", lines)["action"] == "stop"
