"""--trust-remote-code on a folder whose auto_map names code files it does not ship (left over from a
conversion): on its blind case and a launch recorded on the real `sglang serve`."""

from __future__ import annotations

from tests.recorded import blind, decided, recorded_lines

RULE = "sglang.model.remote-code-missing"
SERVE = "sglang serve --model-path /models/tl-automap-gone --device cpu --max-total-tokens 4096"


def test_trusting_code_the_folder_does_not_ship_is_taken_back_for_a_person() -> None:
    contract = blind("corpus-real-engine-59", "auto-map-points-to-missing-file-with-trust-remote-code")
    assert (contract["playbook"], contract["edits"], contract["confidence"]) == (
        RULE,
        [{"op": "remove", "flag": "--trust-remote-code"}],
        0.45,
    )
    lines = recorded_lines("serve-auto-map-code-file-missing-trust-remote-code.rc1.txt")
    assert decided(f"{SERVE} --trust-remote-code", lines)["edits"] == [
        {"op": "remove", "flag": "--trust-remote-code"}
    ]
    # Without --trust-remote-code transformers never looked for the file: another failure, not this one.
    assert decided(SERVE, lines)["playbook"] != RULE
