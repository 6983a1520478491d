"""`specdoctor check` as a user runs it: a real subprocess, its output and exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ENTRY = ["python", "-m", "sglang.launch_server"]


def specdoctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specdoctor", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def model(tmp_path):
    (tmp_path / "config.json").write_text(
        '{"architectures": ["LlamaForCausalLM"], "num_attention_heads": 32}'
    )
    return str(tmp_path)


def test_clean_command_exits_0(model):
    proc = specdoctor("check", "--", *ENTRY, "--model-path", model)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no problems found" in proc.stdout and "bundled flag list of SGLang 0.5.23" in proc.stdout


def test_findings_exit_1_with_the_corrected_command_in_plain_text(model):
    proc = specdoctor("check", "--", *ENTRY, "--model-path", model, "--reasoning_parser", "qwen3")
    assert proc.returncode == 1
    assert "\x1b[" not in proc.stdout  # not a terminal: no colour codes
    assert "corrected command:" in proc.stdout
    assert f"python -m sglang.launch_server --model-path {model} --reasoning-parser qwen3" in proc.stdout


def test_json_output_is_one_object(model):
    line = f"python -m sglang.launch_server --model-path {model} --gpu-memory-utilization 0.9"
    proc = specdoctor("check", "--json", "--", line)
    data = json.loads(proc.stdout)
    assert proc.returncode == 1 and data["ok"] is False
    # vLLM's fraction is not SGLang's --mem-fraction-static: the value is dropped, not carried over.
    assert (
        data["command"].endswith(f"--model-path {model}") and "--mem-fraction-static" not in data["command"]
    )
    assert data["findings"][0]["code"] == "foreign-flag"
    assert data["changes"] and data["argv"][:3] == ENTRY


def test_vllm_memory_utilization_is_never_given_to_mem_fraction_static(model):
    """The tool's own note says the two quantities differ, so no fix may claim they are equal."""
    line = f"python -m sglang.launch_server --model-path {model} --gpu-memory-utilization 0.9"
    data = json.loads(specdoctor("check", "--json", "--", line).stdout)
    [finding] = data["findings"]
    assert finding["edits"] == [{"op": "remove", "flag": "--gpu-memory-utilization"}]
    assert "SGLang spells it" not in finding["message"]
    assert "not the same quantity" in finding["why"] and "by hand" in finding["why"]
    assert "0.9" not in data["command"]


def test_check_against_an_older_release(model):
    proc = specdoctor(
        "check", "--sglang-version", "0.5.4", "--", *ENTRY, "--model-path", model, "--cuda-graph-max-bs", "16"
    )
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["check"], "no launch command"),
        (["check", "--", "python -m sglang.launch_server 'oops"], "check its quotes"),
        (["check", "--", "vllm", "serve", "m"], "vLLM launches are not supported"),
        (["check", "--", "FOO=1"], "no program"),
        (["check", "--sglang-version", "9.9", "--", *ENTRY, "--model-path", "m"], "no bundled flag list"),
        (
            ["check", "--catalog", "/nonexistent/help.txt", "--", *ENTRY, "--model-path", "m"],
            "cannot read flag catalog",
        ),
        (["check", "--gpus", "banana", "--", *ENTRY, "--model-path", "m"], "--gpus"),
    ],
)
def test_bad_input_gets_one_line_and_exit_2(args, says):
    proc = specdoctor(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and says in proc.stderr
    assert "Traceback" not in proc.stderr


def test_help_lists_verbs_and_exit_codes():
    proc = specdoctor("--help")
    assert proc.returncode == 0
    assert "check -- CMD" in proc.stdout and "exit codes:" in proc.stdout


def test_help_stays_light():
    """`specdoctor --help` builds every verb's options without importing the heavy modules (pydantic, the
    loop, openai, the MCP SDK): start-up time is a benchmark figure, this keeps the cause of a regression visible."""
    code = "import sys; from specdoctor.agent.cli import build_parser; build_parser(); print(sorted(m for m in ('pydantic', 'openai', 'httpx', 'rich', 'mcp', 'specdoctor.agent.loop') if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr


@pytest.mark.parametrize("verb", ["check", "deploy", "fix"])
def test_a_missing_command_is_shown_with_the_verb_that_was_run(verb):
    proc = specdoctor(verb, "--")
    assert proc.returncode == 2
    assert f"e.g. `specdoctor {verb} -- python -m sglang.launch_server ...`" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_a_report_into_a_missing_folder_is_refused_before_anything_runs(tmp_path):
    report = tmp_path / "no-such-folder" / "report.json"
    run_dir = tmp_path / "run"
    proc = specdoctor(
        "deploy", "--simulate", "h200x8", "--report", str(report), "--run-dir", str(run_dir), "--", *ENTRY
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"the folder {report.parent} does not exist" in proc.stderr and proc.stderr.count("\n") == 1
    assert not report.parent.exists() and not run_dir.exists()


def test_a_pin_must_name_a_flag(tmp_path):
    proc = specdoctor(
        "deploy",
        "--pin",
        "nonsense",
        "--simulate",
        "h200x8",
        "--run-dir",
        str(tmp_path / "run"),
        "--",
        *ENTRY,
    )
    assert proc.returncode == 2 and "--pin nonsense: not a flag of SGLang" in proc.stderr
    assert not (tmp_path / "run").exists()  # a usage error leaves no empty run folder behind


@pytest.mark.parametrize("verb", ["deploy", "fix"])
def test_a_bad_option_leaves_no_run_folder_in_the_runs_folder(tmp_path, verb):
    runs = tmp_path / "runs"
    for bad in (("--pin", "nonsense"), ("--allow", "no-such-flag")):
        proc = specdoctor(
            verb, *bad, "--simulate", "h200x8", "--", *ENTRY, env={"SPECDOCTOR_RUNS_DIR": str(runs)}
        )
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "not a flag of SGLang" in proc.stderr and not runs.exists()
