"""The speculative draft's own files cannot be read: serve the target without speculative decoding, for a
person to confirm. Lessons of corpus-real-engine-29 (3 of its 11 on arrival) and -18, each a real SGLang
0.5.23 launch recorded blind: a draft config that is not JSON or that transformers cannot read, an
architecture SGLang does not register or none, a folder without weights or with Git LFS pointers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdoctor.agent.diagnose import decide
from specdoctor.tools.command import LaunchCommand
from tests.recorded import blind, context

DATA = Path(__file__).parent / "data"
RULE = "sglang.speculative.draft-unreadable"
DRAFTS = [
    ("corpus-real-engine-29", "sc-eagle3-draft-dir-without-weights", "names the draft's folder"),
    ("corpus-real-engine-29", "sc-eagle3-speculators-format-draft", "names the draft's folder"),
    ("corpus-real-engine-29", "sc-eagle3-draft-vllm-architecture-name", "reads the draft"),
    ("corpus-real-engine-18", "eagle3-draft-config-json-trailing-comma", "names the draft's folder"),
    ("corpus-real-engine-18", "eagle3-draft-config-model-type-eagle3", "reads the draft"),
    ("corpus-real-engine-18", "eagle3-draft-config-without-architectures", "reads the draft"),
    ("corpus-real-engine-18", "eagle3-draft-safetensors-is-git-lfs-pointer", "reads the draft"),
]


def _case(folder: str, name: str) -> dict:
    return json.loads((DATA / folder / f"{name}.json").read_text())


@pytest.mark.parametrize("folder, name, why", DRAFTS, ids=[n for _, n, _ in DRAFTS])
def test_an_unreadable_draft_is_taken_out_for_the_person_to_confirm(folder: str, name: str, why: str) -> None:
    found = blind(folder, name)
    assert found["playbook"] == RULE and found["confidence"] < 0.5
    command = LaunchCommand.parse(found["command"])
    assert not any(o.name.startswith("--speculative-") for o in command.options())
    case = _case(folder, name)
    decision = decide(context(case["command"], case["log"].splitlines(), case["exit_kind"]))
    assert why in decision.why and "Git LFS pointer is not weights" in decision.why


def test_without_a_draft_the_same_failure_is_not_the_drafts() -> None:
    """The same unreadable config with speculative decoding off is the target's: this rule stays out."""
    case = _case("corpus-real-engine-29", "sc-eagle3-speculators-format-draft")
    plain = " ".join(
        part
        for part in case["command"].split()
        if not part.startswith("--speculative") and part not in ("EAGLE3", "dummy") and "drafts/" not in part
    )
    decision = decide(context(plain, case["log"].splitlines(), case["exit_kind"]))
    assert decision.playbook != RULE


def test_an_error_naming_the_targets_folder_is_not_the_drafts() -> None:
    case = _case("corpus-real-engine-29", "sc-eagle3-draft-dir-without-weights")
    lines = [ln.replace("models/tiny-eagle3`", "models/tiny-llama`") for ln in case["log"].splitlines()]
    decision = decide(context(case["command"], lines, case["exit_kind"]))
    assert decision.playbook != RULE
