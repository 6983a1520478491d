"""What a fix may change, learnt from corpus-real-engine-6 (6/11 on arrival): a draft model is made for one
speculative algorithm, the device is the machine's, a path is true, and the package a flag needs is that
flag's. Each on its blind case and on a second real launch of SGLang 0.5.23 recorded here."""

from __future__ import annotations

import pytest

from specdoctor.playbooks.gate import invalid_edits
from specdoctor.tools.command import LaunchCommand, SetFlag
from specdoctor.tools.engine_source.model import Constraint
from specdoctor.tools.engine_source.suspects import _meets
from tests.recorded import PY, SERVE, blind, decided, recorded_lines
from tests.test_corpus_scores import CAT

SPEC = "--speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3"


def _lines(name: str) -> list[str]:
    return recorded_lines(name)


def _decided(command: str, name: str) -> dict:
    return decided(command, recorded_lines(name))


def _blind(name: str) -> dict:
    return blind("corpus-real-engine-6", name)


def _removed(*flags: str) -> list[dict]:
    return [{"op": "remove", "flag": f} for f in flags]


# A draft model is made for one algorithm ---------------------------------------------------------------


def test_the_gate_refuses_running_a_draft_with_an_algorithm_it_was_not_made_for() -> None:
    eagle3 = LaunchCommand.parse(
        f"{PY} --speculative-algorithm EAGLE3 --speculative-draft-model-path /models/tiny-eagle3 {SPEC}"
    )
    (refused,) = invalid_edits(eagle3, [SetFlag(flag="--speculative-algorithm", values=("EAGLE",))], CAT)
    assert "made for EAGLE3" in refused.reason
    plain = LaunchCommand.parse(
        f"{PY} --speculative-algorithm STANDALONE --speculative-draft-model-path /models/tiny-llama {SPEC}"
    )
    assert invalid_edits(plain, [SetFlag(flag="--speculative-algorithm", values=("EAGLE3",))], CAT)


def test_the_gate_lets_a_draft_run_with_the_algorithm_its_name_says() -> None:
    # An EAGLE-3 head run as EAGLE (accept length 1): EAGLE3 is what it was made for.
    wrong = LaunchCommand.parse(
        f"{PY} --speculative-algorithm EAGLE --speculative-draft-model-path /models/tiny-eagle3 {SPEC}"
    )
    assert not invalid_edits(wrong, [SetFlag(flag="--speculative-algorithm", values=("EAGLE3",))], CAT)
    # NEXTN is SGLang's alias of EAGLE: the same draft.
    eagle = LaunchCommand.parse(
        f"{PY} --speculative-algorithm EAGLE --speculative-draft-model-path /models/draft {SPEC}"
    )
    assert not invalid_edits(eagle, [SetFlag(flag="--speculative-algorithm", values=("NEXTN",))], CAT)


@pytest.mark.parametrize(
    ("blind", "recorded", "command"),
    [
        (
            "eagle3-with-pipeline-parallel-size-2",
            "pp-size-2-with-standalone-draft.rc1.txt",
            f"{PY} --port 32290 --pp-size 2 --speculative-algorithm STANDALONE "
            f"--speculative-draft-model-path /models/tiny-llama {SPEC}",
        ),
        ("lora-with-standalone-speculative", None, None),
    ],
)
def test_a_check_that_allows_only_other_algorithms_takes_speculative_decoding_back_whole(
    blind: str, recorded: str | None, command: str | None
) -> None:
    contract = _blind(blind)
    assert contract["edits"][0] == {"op": "remove", "flag": "--speculative-algorithm"}
    assert {"op": "remove", "flag": "--speculative-draft-model-path"} in contract["edits"]
    if recorded and command:
        second = _decided(command, recorded)
        assert second["playbook"] == "sglang.source.check"
        assert second["edits"] == _removed(
            "--speculative-algorithm",
            "--speculative-draft-model-path",
            "--speculative-num-steps",
            "--speculative-eagle-topk",
            "--speculative-num-draft-tokens",
        )


def test_a_device_check_in_a_features_own_code_takes_the_feature_back() -> None:
    contract = _blind("dflash-speculative-on-cpu")
    assert contract["edits"] == _removed("--speculative-algorithm", "--speculative-draft-model-path")
    second = _decided(
        f"{SERVE} --port 32290 --speculative-algorithm DFLASH --speculative-draft-model-path /models/tiny-eagle3",
        "dflash-serve-on-cpu.rc1.txt",
    )
    assert second["edits"] == _removed("--speculative-algorithm", "--speculative-draft-model-path")
    assert second["confidence"] < 0.7
    # Without a feature the check's own code names, the device check has nothing else to point at.
    bare = _decided(f"{SERVE} --port 32290", "dflash-serve-on-cpu.rc1.txt")
    assert {"op": "remove", "flag": "--speculative-algorithm"} not in bare["edits"]


# A path is true; the package a flag needs is that flag's -------------------------------------------------


def test_a_path_is_true_to_a_truthiness_check() -> None:
    truthy = Constraint(field="ssl_keyfile", op="truthy")
    assert _meets(truthy, "/etc/ssl/server.key", unset=False) is True
    assert _meets(truthy, "0", unset=False) is False
    assert _meets(truthy, "", unset=False) is False
    assert _meets(truthy, "none", unset=False) is True  # the text "none", not Python's None


@pytest.mark.parametrize(
    ("blind", "recorded", "command", "flag"),
    [
        (
            "ssl-keyfile-without-certfile",
            "ssl-certfile-without-keyfile.rc1.txt",
            f"{PY} --port 32290 --ssl-certfile /tmp/rec/none.crt",
            "--ssl-certfile",
        ),
        (
            "enable-http2-without-granian",
            "enable-http2-serve-without-granian.rc1.txt",
            f"{SERVE} --port 32290 --enable-http2",
            "--enable-http2",
        ),
    ],
)
def test_a_flag_the_engine_names_as_needing_what_is_missing_is_taken_back(
    blind: str, recorded: str, command: str, flag: str
) -> None:
    _blind(blind)
    assert _decided(command, recorded)["edits"] == _removed(flag)


def test_a_missing_package_no_flag_of_the_command_needs_is_a_stop() -> None:
    assert _decided(f"{SERVE} --port 32290", "enable-http2-serve-without-granian.rc1.txt")["action"] == "stop"
