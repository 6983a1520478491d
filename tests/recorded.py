"""What the tests of the lessons of the blind sets share: a recorded real launch read back, a decision
taken on it as `diagnose` takes it, and a blind case scored as `eval` scores it."""

from __future__ import annotations

import json
from pathlib import Path

from specdoctor.agent.diagnose import context_for, decide, outcome_from_log
from specdoctor.agent.evaluate import score_case
from specdoctor.playbooks.base import Context
from specdoctor.tools.command import LaunchCommand
from tests.test_corpus_scores import CAT, contract_for

DATA = Path(__file__).parent / "data"
PY = "python -m sglang.launch_server --model-path /models/tiny-llama --device cpu --max-total-tokens 4096"
SERVE = "sglang serve --model-path /models/tiny-llama --device cpu --max-total-tokens 4096"


def recorded_lines(name: str) -> list[str]:
    """The output of a launch recorded in tests/data/sglang-outputs, its `# key:` header dropped."""
    return (DATA / "sglang-outputs" / name).read_text().split("---- stdout+stderr ----", 1)[1].splitlines()


def context(command: str, lines: list[str], kind: str = "startup-crash") -> Context:
    return context_for(LaunchCommand.parse(command), CAT, lines, outcome=outcome_from_log(lines, kind))


def decided(command: str, lines: list[str], kind: str = "startup-crash") -> dict:
    """The first decision on a failure: its playbook, action, edits (as JSON) and confidence."""
    decision = decide(context(command, lines, kind))
    return {
        "playbook": decision.playbook,
        "action": decision.action,
        "edits": [e.model_dump(mode="json") for e in getattr(decision, "edits", ())],
        "confidence": decision.confidence,
    }


def blind(folder: str, name: str, solved: bool = True) -> dict:
    """A blind case's contract, asserted to solve the case (or, where the project answers otherwise on
    purpose, asserted not to: the case stays scored wrong)."""
    path = DATA / folder / f"{name}.json"
    contract = contract_for(path)
    assert score_case(json.loads(path.read_text()), contract, CAT).solved is solved, contract
    return contract
