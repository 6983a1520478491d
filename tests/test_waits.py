"""A switch whose --help says the server waits for something from outside before it serves, when the server
then never becomes ready: on the two blind cases (two sets, two trainers that never sent what it waited
for) and a launch recorded on the real `sglang serve` that nothing was sent to."""

from __future__ import annotations

import pytest

from tests.recorded import DATA, SERVE, blind, decided

RULE = "sglang.serving.waits-for-outside"
WAIT = "--checkpoint-engine-wait-weights-before-ready"


@pytest.mark.parametrize(
    ("folder", "name"),
    [
        ("corpus-real-engine-61", "checkpoint-engine-wait-weights-without-pusher-hang"),
        ("corpus-real-engine-62", "checkpoint-engine-wait-weights-but-trainer-uses-update-from-disk"),
    ],
)
def test_a_wait_for_what_never_came_is_taken_back_for_a_person(folder: str, name: str) -> None:
    contract = blind(folder, name)
    assert (contract["playbook"], contract["edits"], contract["confidence"]) == (
        RULE,
        [{"op": "remove", "flag": WAIT}],
        0.45,
    )


def test_a_hang_without_such_a_switch_is_not_put_on_a_wait() -> None:
    lines = (
        DATA / "sglang-outputs" / "serve-checkpoint-engine-wait-weights-nothing-sent.hang.txt"
    ).read_text()
    found = decided(f"{SERVE} {WAIT}", lines.splitlines(), "hang")
    assert (found["playbook"], found["edits"]) == (RULE, [{"op": "remove", "flag": WAIT}])
    # The same hang from a command with no waiting switch: not this rule's.
    assert decided(SERVE, lines.splitlines(), "hang")["playbook"] != RULE
