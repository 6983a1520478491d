"""Lessons of corpus-real-engine-39 (speculative decoding flag combinations; 9 of 12 on arrival), each on
its blind case: an algorithm's short name is a whole word of the check's function (`UNO` in `_handle_uno`),
so the feature is taken back, never the device; a GPU backend on a CPU host is not the first thing to fix
when SGLang stopped at a check of other settings."""

from __future__ import annotations

from tests.recorded import blind

FOLDER = "corpus-real-engine-39"


def test_an_algorithm_whose_own_check_refuses_the_device_goes_with_its_settings() -> None:
    found = blind(FOLDER, "uno-speculative-on-cpu")
    removed = {e["flag"] for e in found["edits"] if e["op"] == "remove"}
    assert "--speculative-algorithm" in removed and "--device" not in removed


def test_the_check_that_failed_is_fixed_before_a_backend_the_device_lacks() -> None:
    found = blind(FOLDER, "eagle3-rejection-sampling-deterministic-triton-on-cpu")
    assert found["playbook"] == "sglang.source.check"
    assert found["edits"] == [{"op": "remove", "flag": "--speculative-use-rejection-sampling"}]
