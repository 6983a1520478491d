"""A model config's architecture that SGLang does not register but respells one it does: set through
--json-model-override-args from the engine's own registry (EntryClass of each srt/models file, read into the
bundled source index), on two blind cases and a second real launch."""

from __future__ import annotations

from specdoctor.playbooks.architectures import respelled_architecture
from specdoctor.playbooks.gate import invalid_edits
from specdoctor.tools.command import LaunchCommand, SetFlag
from specdoctor.tools.engine_source.architectures import registered_architectures
from tests.recorded import PY, blind, decided, recorded_lines
from tests.test_corpus_scores import CAT

OVERRIDE = {
    "op": "set",
    "flag": "--json-model-override-args",
    "values": ['{"architectures": ["LlamaForCausalLM"]}'],
}


def test_the_index_holds_the_architectures_each_release_registers() -> None:
    registered = registered_architectures("0.5.23")
    assert {"LlamaForCausalLM", "Qwen2ForCausalLM", "DeepseekV3ForCausalLM"} <= registered
    assert "LLaMAForCausalLM" not in registered


def test_a_respelled_or_prefixed_architecture_is_set_to_the_registered_one() -> None:
    assert blind("corpus-real-engine-22", "config-architecture-typo-fixed-by-override")["edits"] == [OVERRIDE]
    assert blind("corpus-real-engine-4", "config-architecture-not-registered")["edits"] == [OVERRIDE]
    lines = recorded_lines("config-architecture-lowercase-suffix.rc137.txt")
    assert decided(PY.replace("tiny-llama", "tiny-llama-arch-lowercase"), lines)["edits"] == [OVERRIDE]
    # An override of the user's keeps its other keys.
    command = f"""{PY} --json-model-override-args '{{"rope_theta": 500000}}'"""
    assert decided(command, lines)["edits"] == [
        {
            "op": "set",
            "flag": "--json-model-override-args",
            "values": ['{"rope_theta": 500000, "architectures": ["LlamaForCausalLM"]}'],
        }
    ]


def test_nothing_close_is_no_guess() -> None:
    registered = registered_architectures("0.5.23")
    assert respelled_architecture("FooBarModel", registered) is None
    assert respelled_architecture("LlamaForCausalLM", registered) is None  # registered: another fault


def test_the_gate_takes_only_registered_names_and_the_users_own_keys() -> None:
    spec = LaunchCommand.parse(f"""{PY} --json-model-override-args '{{"rope_theta": 500000}}'""")
    flag = "--json-model-override-args"
    ok = SetFlag(flag=flag, values=('{"rope_theta": 500000, "architectures": ["LlamaForCausalLM"]}',))
    assert not invalid_edits(spec, [ok], CAT)
    for value in (
        '{"architectures": ["EvilForCausalLM"]}',
        '{"rope_theta": 9, "architectures": ["LlamaForCausalLM"]}',
    ):
        assert invalid_edits(spec, [SetFlag(flag=flag, values=(value,))], CAT)
