"""Places SGLang writes to that cannot be written (a file where a folder belongs, a read-only folder, an
unexpanded `~`, a URL for a path): the setting holding the quoted path is taken back, with the switch that
needs it. On the blind cases of corpus-real-engine-67 and a launch recorded on the real `sglang serve`."""

from __future__ import annotations

import pytest

from tests.recorded import SERVE, blind, decided, recorded_lines

RULE = "sglang.path.output-unwritable"


@pytest.mark.parametrize(
    ("name", "removed"),
    [
        ("crash-dump-folder-is-existing-file", ["--crash-dump-folder"]),
        ("crash-dump-folder-tilde-readonly-cwd", ["--crash-dump-folder"]),
        (
            "export-metrics-relative-dir-readonly-cwd",
            ["--export-metrics-to-file-dir", "--export-metrics-to-file"],
        ),
        ("export-metrics-to-file-readonly-dir", ["--export-metrics-to-file-dir", "--export-metrics-to-file"]),
    ],
)
def test_the_setting_holding_an_unwritable_path_goes(name: str, removed: list[str]) -> None:
    contract = blind("corpus-real-engine-67", name)
    assert contract["playbook"] == RULE
    assert [e["flag"] for e in contract["edits"]] == removed


def test_a_file_given_as_the_request_log_target_is_taken_back() -> None:
    lines = recorded_lines("serve-log-requests-target-is-a-file.rc1.txt")
    found = decided(f"{SERVE} --log-requests --log-requests-target /tmp/rec/requests-notes.txt", lines)
    assert (found["playbook"], found["confidence"]) == (RULE, 0.45)
    assert {"op": "remove", "flag": "--log-requests-target"} in found["edits"]
    # A path the command does not name (or names twice) is not guessed at.
    assert decided(f"{SERVE} --log-requests", lines)["playbook"] != RULE
