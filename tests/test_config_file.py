"""A launch that fails on its own --config file (SGLang's ConfigArgumentMerger): the file's settings written
out on the command line in SGLang's spelling. Real logs: corpus-real-engine-4's four config cases (recorded
blind on SGLang 0.5.23) and a YAML with a vLLM key recorded here; the files are written again for each
test, with the contents the recordings used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdoctor.agent.diagnose import context_for, decide, outcome_from_log
from specdoctor.playbooks.config_file import as_flags, read_config
from specdoctor.playbooks.gate import invalid_edits
from specdoctor.tools.command import LaunchCommand, SetFlag
from tests.test_corpus_scores import CAT

DATA = Path(__file__).parent / "data"
SERVE_YAML = "max-running-requests: 8\nenable-metrics: true\nlog-level: info\n"
WRITTEN_OUT = [
    {"op": "remove", "flag": "--config"},
    {"op": "set", "flag": "--max-running-requests", "values": ["8"]},
    {"op": "set", "flag": "--enable-metrics", "values": []},
    {"op": "set", "flag": "--log-level", "values": ["info"]},
]


def _decide(case: str, config: Path | None, text: str | None) -> dict:
    data = json.loads((DATA / "corpus-real-engine-4" / f"{case}.json").read_text())
    command = data["command"]
    if config is not None:
        if text is not None:
            config.write_text(text)
        command = command.replace(command.split("--config ", 1)[1].split()[0], str(config))
    lines = data["log"].splitlines()
    ctx = context_for(
        LaunchCommand.parse(command), CAT, lines, outcome=outcome_from_log(lines, data["exit_kind"])
    )
    decision = decide(ctx)
    return {
        "playbook": decision.playbook,
        "action": decision.action,
        "summary": decision.summary,
        "edits": [e.model_dump(mode="json") for e in getattr(decision, "edits", ())],
    }


@pytest.mark.parametrize(
    ("case", "name", "text", "edits"),
    [
        ("config-yaml-underscore-keys", "serve.yaml", SERVE_YAML.replace("-", "_"), WRITTEN_OUT),
        (
            "config-yaml-store-true-flag-quoted-string",
            "quoted.yaml",
            SERVE_YAML.replace("true", '"true"'),
            WRITTEN_OUT,
        ),
        (
            "config-file-json-extension",
            "serve.json",
            '{"max_running_requests": 8, "enable_metrics": true, "log_level": "info"}',
            WRITTEN_OUT,
        ),
        (
            "config-yaml-deprecated-disable-cuda-graph",
            "graph.yaml",
            "max-running-requests: 8\ndisable-cuda-graph: true\nenable-metrics: true\n",
            [
                {"op": "remove", "flag": "--config"},
                {"op": "set", "flag": "--max-running-requests", "values": ["8"]},
                {"op": "set", "flag": "--disable-cuda-graph", "values": []},
                {"op": "set", "flag": "--enable-metrics", "values": []},
            ],
        ),
    ],
)
def test_a_config_file_sglang_cannot_apply_is_written_out(
    tmp_path: Path, case: str, name: str, text: str, edits: list
) -> None:
    decided = _decide(case, tmp_path / name, text)
    assert decided["playbook"] == "sglang.flag.config-file"
    assert decided["edits"] == edits


def test_a_config_file_that_cannot_be_read_here_is_named_not_guessed(tmp_path: Path) -> None:
    decided = _decide("config-file-json-extension", tmp_path / "gone.json", None)
    assert decided["action"] == "stop"
    assert "cannot be read here" in decided["summary"]
    # Keys argparse rejected are named with their SGLang spelling by the argparse rule.
    underscored = _decide("config-yaml-underscore-keys", tmp_path / "gone.yaml", None)
    assert underscored["playbook"] == "sglang.argparse" and underscored["action"] == "stop"


def test_the_command_line_keeps_what_it_gives_and_unknown_keys_stop(tmp_path: Path) -> None:
    command = LaunchCommand.parse("sglang serve --model-path /m --max-running-requests 4 --config c.yaml")
    edits, unknown = as_flags(
        {"max_running_requests": 8, "no_such_setting": 1, "enable_metrics": False}, CAT, command
    )
    assert edits == [] and unknown == ["no_such_setting"]
    edits, _ = as_flags({"lora_target_modules": ["q_proj", "v_proj"]}, CAT, command)
    assert edits == [SetFlag(flag="--lora-target-modules", values=("q_proj", "v_proj"))]


def test_the_recorded_vllm_key_in_a_config_file(tmp_path: Path) -> None:
    text = (DATA / "sglang-outputs" / "config-yaml-unknown-key.rc2.txt").read_text()
    lines = text.split("---- stdout+stderr ----", 1)[1].splitlines()
    config = tmp_path / "bad-config.yaml"
    config.write_text("model-path: /models/tiny-llama\nnum-speculative-tokens: 4\n")
    ctx = context_for(
        LaunchCommand.parse(f"python -m sglang.launch_server --config {config}"),
        CAT,
        lines,
        outcome=outcome_from_log(lines, "parse-error"),
    )
    decision = decide(ctx)
    assert decision.playbook == "sglang.flag.config-file"
    assert decision.action == "fix"
    flags = [getattr(e, "flag", None) for e in decision.edits]
    assert flags[0] == "--config" and "--model-path" in flags
    assert "--num-speculative-tokens" not in flags  # written as SGLang spells the setting


def test_the_gate_takes_values_from_the_commands_own_config_file_only(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(SERVE_YAML)
    command = LaunchCommand.parse(f"sglang serve --model-path /m --config {config}")
    assert not invalid_edits(command, [SetFlag(flag="--log-level", values=("info",))], CAT)
    assert invalid_edits(command, [SetFlag(flag="--log-level", values=("debug",))], CAT)
    config.write_text("- not a mapping\n")
    assert isinstance(read_config(str(config)), str)
