"""`specdoctor check` as a user runs it: a real subprocess, its output and exit code."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

ENTRY = ["python", "-m", "sglang.launch_server"]


def specdoctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specdoctor", *args], capture_output=True, text=True, timeout=60
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
    assert data["command"].endswith("--mem-fraction-static 0.9")
    assert data["findings"][0]["code"] == "foreign-flag"
    assert data["changes"] and data["argv"][:3] == ENTRY


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
