"""Lessons of corpus-real-engine-35 (launch lines written for older SGLang releases; 5 of 11 on arrival):
what an older bundled release had and 0.5.23 dropped goes, for a person to confirm where it changes what is
served; chunked prefill turned off is what made SGLang's own memory share negative. Each on its blind case."""

from __future__ import annotations

import pytest

from specdoctor.playbooks.flag_checks import check_flags, older_release_with_choice
from specdoctor.tools.command import LaunchCommand, RemoveFlag
from tests.recorded import blind
from tests.test_corpus_scores import CAT

FOLDER = "corpus-real-engine-35"


@pytest.mark.parametrize(
    "name, flag, below_unattended",
    [
        ("kv-cache-dtype-fp4-e2m1-renamed", "--kv-cache-dtype", True),  # numerics: the person's call
        ("quantization-marlin-removed-choice", "--quantization", True),
        ("reasoning-parser-nano-v3-removed-choice", "--reasoning-parser", True),
        ("old-flag-disable-flashinfer-ambiguous-prefix", "--disable-flashinfer", False),
        ("old-recipe-chunked-prefill-minus-one-with-mixed-chunk", "--chunked-prefill-size", False),
    ],
)
def test_what_an_older_release_had_goes(name: str, flag: str, below_unattended: bool) -> None:
    found = blind(FOLDER, name)
    assert found["edits"] == [{"op": "remove", "flag": flag}]
    assert (found["confidence"] < 0.5) is below_unattended


def test_a_dropped_choice_is_known_from_the_bundled_releases() -> None:
    assert older_release_with_choice("--kv-cache-dtype", "fp4_e2m1", "0.5.23") is not None
    assert older_release_with_choice("--kv-cache-dtype", "no-such-dtype", "0.5.23") is None
    found = check_flags(
        LaunchCommand.parse("python -m sglang.launch_server --model-path /m --quantization marlin"), CAT
    )
    assert any("this release dropped" in f.message and f.edits for f in found)
    # A choice no release had goes back to the default too, for the person to confirm (not unattended).
    unknown = check_flags(
        LaunchCommand.parse("python -m sglang.launch_server --model-path /m --quantization nf5"), CAT
    )
    assert [(f.edits, f.confidence) for f in unknown if f.code == "invalid-choice"] == [
        ((RemoveFlag(flag="--quantization"),), 0.45)
    ]
