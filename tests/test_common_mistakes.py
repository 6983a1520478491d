"""Lessons of corpus-real-engine-13 (a representative mix of common launch mistakes on the real SGLang
0.5.23, recorded blind: 6/12 on arrival), each on its blind case, with the near miss it must not take."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdoctor.agent.evaluate import flag_value
from specdoctor.playbooks.flag_checks import check_flags
from specdoctor.playbooks.gate import invalid_edits
from specdoctor.tools.command import LaunchCommand, SetFlag
from tests.recorded import blind
from tests.test_corpus_scores import CAT, contract_for

DATA = Path(__file__).parent / "data" / "corpus-real-engine-13"
PY = "python -m sglang.launch_server --model-path /models/tiny-llama --device cpu"


def _blind(name: str) -> dict:
    return blind("corpus-real-engine-13", name)


@pytest.mark.parametrize(
    ("name", "edits"),
    [
        ("lora-paths-adapter-dir-missing", [{"op": "remove", "flag": "--lora-paths"}]),
        ("max-total-tokens-too-small-rejects-prompt", [{"op": "remove", "flag": "--max-total-tokens"}]),
        (
            "lora-target-modules-comma-separated",
            [{"op": "set", "flag": "--lora-target-modules", "values": ["q_proj", "v_proj"]}],
        ),
        ("schedule-policy-fifo", [{"op": "set", "flag": "--schedule-policy", "values": ["fcfs"]}]),
    ],
)
def test_each_common_mistake_gets_its_fix(name: str, edits: list) -> None:
    assert _blind(name)["edits"] == edits


def test_a_comma_list_is_split_only_into_choices_the_flag_has() -> None:
    found = check_flags(LaunchCommand.parse(f"{PY} --lora-target-modules q_proj,v_proj"), CAT)
    (fix,) = [f for f in found if f.edits]
    assert fix.edits == (SetFlag(flag="--lora-target-modules", values=("q_proj", "v_proj")),)
    unknown = check_flags(LaunchCommand.parse(f"{PY} --lora-target-modules q_proj,nope"), CAT)
    assert not any(e.values == ("q_proj", "nope") for f in unknown for e in f.edits if isinstance(e, SetFlag))
    # The gate takes the pieces as the user's own words, and nothing else.
    command = LaunchCommand.parse(f"{PY} --lora-target-modules q_proj,v_proj")
    assert not invalid_edits(
        command, [SetFlag(flag="--lora-target-modules", values=("q_proj", "v_proj"))], CAT
    )


def test_a_list_flags_value_is_all_its_values() -> None:
    spec = LaunchCommand.parse(f"{PY} --lora-target-modules q_proj v_proj")
    assert flag_value(spec, "--lora-target-modules", CAT) == (True, "q_proj v_proj")
    assert flag_value(LaunchCommand.parse(f"{PY} --tp-size 2 --tp-size 4"), "--tp-size", CAT) == (True, "4")


def test_a_missing_model_path_is_not_taken_for_an_adapters(tmp_path: Path) -> None:
    case = json.loads((DATA / "lora-paths-adapter-dir-missing.json").read_text())
    case["command"] = case["command"].replace(
        "--lora-paths sql=/models/llama-sql-lora", "--lora-paths sql=/a/b"
    )
    path = tmp_path / "case.json"
    path.write_text(json.dumps(case))
    assert contract_for(path)["action"] == "stop"  # the error names another path than the adapter's
