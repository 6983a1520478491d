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
