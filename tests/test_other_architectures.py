"""Lessons of corpus-real-engine-40 (flags meant for another model architecture on a dense Llama; 9 of 13
on arrival), each on its blind case and a second one: an override copied from another model's recipe (an
architecture whose code reads fields the config lacks, a value the error quotes) goes; a reasoning parser
that files the whole answer as reasoning goes (-40 and -9, two parsers, two real recordings)."""

from __future__ import annotations

import pytest

from tests.recorded import blind


@pytest.mark.parametrize(
    "name",
    ["json-override-architectures-deepseek-on-llama-config", "json-override-hidden-act-unsupported-by-llama"],
)
def test_an_override_from_another_models_recipe_goes(name: str) -> None:
    found = blind("corpus-real-engine-40", name)
    assert found["playbook"] == "sglang.model.override-from-another-model"
    assert found["edits"] == [{"op": "remove", "flag": "--json-model-override-args"}]


@pytest.mark.parametrize(
    "folder, name",
    [
        ("corpus-real-engine-40", "gpt-oss-reasoning-parser-on-llama-empties-content"),
        ("corpus-real-engine-9", "reasoning-parser-on-non-reasoning-model-empty-content"),
    ],
)
def test_a_reasoning_parser_that_takes_the_whole_answer_goes(folder: str, name: str) -> None:
    found = blind(folder, name)
    assert found["playbook"] == "sglang.request.reasoning-parser-takes-the-answer"
    assert found["edits"] == [{"op": "remove", "flag": "--reasoning-parser"}]


def test_only_the_override_key_at_fault_goes() -> None:
    from specdoctor.playbooks.overrides import _without
    from specdoctor.tools.command import RemoveFlag, SetFlag

    assert _without({"hidden_act": "gelu", "rope_theta": 5}, "hidden_act") == SetFlag(
        flag="--json-model-override-args", values=('{"rope_theta": 5}',)
    )
    assert _without({"hidden_act": "gelu"}, "hidden_act") == RemoveFlag(flag="--json-model-override-args")


@pytest.mark.parametrize(
    "name",
    [
        "export-architectures-llamamodel-transformers-fallback",
        "export-architectures-sequence-classification-chat-crash",
    ],
)
def test_a_head_that_does_not_generate_becomes_the_familys_causal_lm(name: str) -> None:
    from tests.recorded import blind

    contract = blind("corpus-real-engine-44", name)
    assert contract["edits"] == [
        {
            "op": "set",
            "flag": "--json-model-override-args",
            "values": ['{"architectures": ["LlamaForCausalLM"]}'],
        }
    ]
    assert contract["confidence"] < 0.5  # what is loaded changes: the person's call


def test_the_bare_model_class_is_read_from_sglangs_fallback_line_and_nothing_else() -> None:
    from tests.recorded import DATA, SERVE, decided

    # Recorded on the real `sglang serve`: config.json names LlamaModel; completions answer 200 through the
    # transformers fallback.
    lines = DATA / "sglang-outputs" / "serve-config-architectures-llamamodel-completions.degraded.txt"
    lines = lines.read_text().splitlines()
    found = decided(SERVE, lines, "runs-but-degraded")
    assert (found["playbook"], found["edits"][0]["values"]) == (
        "sglang.model.head-does-not-generate",
        ['{"architectures": ["LlamaForCausalLM"]}'],
    )
    # An embedding server is meant to pool, and a classifier whose failure is elsewhere is not this.
    assert decided(f"{SERVE} --is-embedding", lines, "runs-but-degraded")["playbook"] != found["playbook"]
    classifier = [
        "Load weight end. elapsed=0.03 s, type=LlamaForSequenceClassification, avail mem=18.00 GB",
        "OSError: [Errno 98] Address already in use",
    ]
    assert decided(SERVE, classifier)["playbook"] != found["playbook"]


def test_a_nested_value_of_the_override_the_error_quotes_takes_its_entry_out() -> None:
    # `{"rope_scaling": {"rope_type": "ntk"}}` → "Unknown RoPE scaling type ntk": the rope block goes, the
    # user's other keys stay.
    from tests.recorded import SERVE, decided, recorded_lines

    assert blind("corpus-real-engine-56", "rope-scaling-type-ntk-unknown")["edits"] == [
        {"op": "remove", "flag": "--json-model-override-args"}
    ]
    lines = recorded_lines("serve-json-override-rope-type-ntk-by-parts.rc137.txt")
    override = (
        '{"rope_scaling": {"rope_type": "ntk-by-parts", "factor": 2.0}, "max_position_embeddings": 512}'
    )
    assert decided(f"{SERVE} --json-model-override-args '{override}'", lines)["edits"] == [
        {"op": "set", "flag": "--json-model-override-args", "values": ['{"max_position_embeddings": 512}']}
    ]
    # A word every message has is no quote of the override's value.
    from specdoctor.playbooks.overrides import _quoted_whole

    assert not _quoted_whole("auto", "ValueError: auto is not supported")
    assert not _quoted_whole("ntk", "ValueError: Unknown RoPE scaling type ntk-by-parts")
