"""Lessons of corpus-real-engine-31 (--config files and engine variables; 1 of 11 on arrival): a config file
read as its author meant it (a list of command-line words, one section, an empty key, a value argparse
refuses before the command line's wins, `~` SGLang does not expand, YAML broken in one value, two files), a
near-named file beside a missing one, and an engine variable Python's int() refuses. Each on its blind case,
the files written again with the contents the recordings used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdoctor.agent.diagnose import decide
from specdoctor.playbooks.config_read import read_settings
from tests.recorded import blind, context

DATA = Path(__file__).parent / "data" / "corpus-real-engine-31"
SERVE = "max-running-requests: 8\nenable-metrics: true\nlog-level: info\n"
FILES = {
    "serve.yaml": SERVE,
    "nested.yaml": "server:\n  max-running-requests: 8\n  enable-metrics: true\n  log-level: info\n",
    "root-list.yaml": "- --max-running-requests=8\n- --enable-metrics\n- --log-level=info\n",
    "null-value.yaml": "max-running-requests: 8\nchunked-prefill-size:\nenable-metrics: true\n",
    "mtt-4e3.yaml": "max-total-tokens: 4e3\nmax-running-requests: 8\nenable-metrics: true\n",
    "malformed.yaml": "max-running-requests: 8\nenable-metrics: true\n"
    'json-model-override-args: {"rope_scaling": {"type": "linear", "factor": 2.0}\nlog-level: info\n',
    "tilde-model.yaml": "model-path: ~/.cache/specdoctor/sglang-0.5.23-cpu/models/tiny-llama\ndevice: cpu\nmax-total-tokens: 4096\nenable-metrics: true\n",
}
WRITTEN_OUT = ["remove --config", "set --max-running-requests 8", "set --enable-metrics"]


def _decided(name: str, folder: Path) -> tuple[list[str], float, str]:
    for file, text in FILES.items():
        (folder / file).write_text(text)
    case = json.loads((DATA / f"{name}.json").read_text())
    command = case["command"].replace("/tmp/harvest-SE/cfg", str(folder))
    lines = [ln.replace("/tmp/harvest-SE/cfg", str(folder)) for ln in case["log"].splitlines()]
    decision = decide(context(command, lines, case["exit_kind"]))
    assert decision.playbook == "sglang.flag.config-file", decision
    return [e.describe() for e in decision.edits], decision.confidence, decision.why


@pytest.mark.parametrize(
    "name, also, repaired",
    [
        ("config-yaml-nested-section", ["set --log-level info"], False),
        ("config-yaml-root-is-list-of-cli-args", ["set --log-level info"], True),
        ("config-yaml-empty-value-becomes-none", [], False),  # the empty key sets nothing
        ("config-yaml-invalid-value-not-overridden-by-cli", [], False),  # the command line's value stays
        ("config-flag-given-twice", ["set --log-level info"], False),  # both files, the later winning
        ("config-yaml-malformed-flow-mapping", ["set --log-level info"], True),
    ],
)
def test_the_files_settings_are_written_out_as_its_author_meant_them(
    tmp_path: Path, name: str, also: list[str], repaired: bool
) -> None:
    edits, confidence, why = _decided(name, tmp_path)
    assert edits[:3] == WRITTEN_OUT and set(also) <= set(edits)
    assert "--chunked-prefill-size" not in " ".join(edits) and "4e3" not in " ".join(edits)
    assert (confidence < 0.5) is repaired and (
        "read line by line" in why or "command-line words" in why
    ) is repaired


def test_a_broken_json_value_is_closed_and_kept(tmp_path: Path) -> None:
    edits, _, _ = _decided("config-yaml-malformed-flow-mapping", tmp_path)
    override = '{"rope_scaling": {"type": "linear", "factor": 2.0}}'
    assert f"set --json-model-override-args {override}" in edits


def test_a_home_path_sglang_does_not_expand_is_expanded(tmp_path: Path) -> None:
    edits, _, _ = _decided("config-yaml-model-path-with-tilde", tmp_path)
    assert (
        f"set --model-path {Path('~/.cache/specdoctor/sglang-0.5.23-cpu/models/tiny-llama').expanduser()}"
        in edits
    )


def test_a_missing_file_is_the_near_named_one_beside_it(tmp_path: Path) -> None:
    edits, confidence, _ = _decided("config-file-path-typo-not-found", tmp_path)
    assert edits == [f"set --config {tmp_path / 'serve.yaml'}"] and confidence < 0.6


def test_a_list_that_is_not_command_line_words_is_still_no_mapping(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("- not a flag\n- --max-running-requests=8\n")
    assert isinstance(read_settings(str(path)), str)
    path.write_text("max-running-requests: 8\n  indented: nonsense: here\n")
    assert isinstance(read_settings(str(path)), str)


@pytest.mark.parametrize(
    "name, edit, sure",
    [
        ("env-health-check-timeout-with-unit-suffix", "set env SGLANG_HEALTH_CHECK_TIMEOUT=20", True),
        # 64k is 64000 as SGLang's own count flags read it; 65536 to the recording's author: not confident.
        ("env-detokenizer-max-states-si-suffix", "set env SGLANG_DETOKENIZER_MAX_STATES=64000", False),
    ],
)
def test_an_engine_variable_int_refuses_is_written_as_its_plain_number(
    name: str, edit: str, sure: bool
) -> None:
    found = blind("corpus-real-engine-31", name, solved=sure)
    assert found["playbook"] == "sglang.value.not-a-number"
    assert (found["confidence"] >= 0.5) is sure
    case = json.loads((DATA / f"{name}.json").read_text())
    decision = decide(context(case["command"], case["log"].splitlines(), case["exit_kind"]))
    assert [e.describe() for e in decision.edits] == [edit]
