"""`specdoctor check` against the REAL SGLang 0.5.23 CLI: every broken command really fails in SGLang the
way the finding says, and every command check proposes really passes SGLang's own parsing (and, for the
speculative rules, SGLang's own validation)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specdoctor.tools.catalog_load import bundled, help_text

pytestmark = pytest.mark.real_sglang
PARSE_BATCH = Path(__file__).parent / "sglang_env" / "parse_batch.py"


def _check(env, args: list[str]) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "specdoctor",
            "check",
            "--json",
            "--no-host",
            "--live-catalog",
            "--",
            *env.launch_server(),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def _real_sglang(env, jobs: list[dict]) -> list[dict]:
    proc = subprocess.run(
        [env.python, str(PARSE_BATCH)],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "SGLANG_CPU_NO_VLLM_STUB": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _cases(env) -> dict[str, tuple[list[str], bool, str, str]]:
    """name -> (broken args, how far real SGLang goes (False: parse; True: resolve; "check": resolve and
    check_server_args, as a launch does), finding code expected, what real SGLang says about the broken one)."""
    m, d = env.tiny_llama, env.tiny_eagle3
    spec = ["--device", "cpu", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", d]
    cpu = ["--model-path", m, "--device", "cpu", "--max-total-tokens", "4096"]
    return {
        "seed": (
            [
                "--model-path",
                m,
                "--tp",
                "8",
                "--speculative-algorithm",
                "EAGLE3",
                "--speculative-draft-model-path",
                d,
                "--speculative-eagle-topk",
                "1",
                "--num-speculative-tokens",
                "16",
            ],
            False,
            "foreign-flag",
            "sglang serve: error: unrecognized arguments: --num-speculative-tokens 16",
        ),
        "underscore": (
            ["--model-path", m, "--reasoning_parser", "qwen3"],
            False,
            "underscore-flag",
            "unrecognized arguments: --reasoning_parser qwen3",
        ),
        "vllm-memory": (
            ["--model-path", m, "--gpu-memory-utilization", "0.85"],
            False,
            "foreign-flag",
            "unrecognized arguments: --gpu-memory-utilization 0.85",
        ),
        "vllm-max-model-len": (
            ["--model-path", m, "--max-model-len", "2048"],
            False,
            "foreign-flag",
            "unrecognized arguments: --max-model-len 2048",
        ),
        "ambiguous-prefix": (
            ["--model-path", m, "--cuda-graph-max-bs", "16"],
            False,
            "foreign-flag",
            "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill",
        ),
        "invalid-choice": (
            ["--model-path", m, "--attention-backend", "flashinfr"],
            False,
            "invalid-choice",
            "argument --attention-backend: invalid choice: 'flashinfr'",
        ),
        "vllm-kv-dtype": (
            ["--model-path", m, "--kv-cache-dtype", "fp8"],
            False,
            "invalid-choice",
            "argument --kv-cache-dtype: invalid choice: 'fp8'",
        ),
        "spec-topk-without-steps": (
            ["--model-path", m, "--max-total-tokens", "4096", *spec, "--speculative-eagle-topk", "4"],
            True,
            "spec-steps-missing",
            "AssertionError",
        ),
        "spec-draft-tokens-without-steps": (
            ["--model-path", m, "--max-total-tokens", "4096", *spec, "--speculative-num-draft-tokens", "6"],
            True,
            "spec-steps-missing",
            "AssertionError",
        ),
        "positional-model": (
            [m, "--tp-size", "1"],
            False,
            "positional-model",
            "the following arguments are required: --model-path/--model",
        ),
        # Conflicts SGLang's own argument checks declare (read from its source, judged before launch).
        "conflict-hicache-radix": (
            [*cpu, "--enable-hierarchical-cache", "--disable-radix-cache"],
            "check",
            "engine-conflict",
            "enable-hierarchical-cache and disable-radix-cache are mutually exclusive",
        ),
        "conflict-tokenizer-batching": (
            [*cpu, "--enable-tokenizer-batch-encode", "--enable-dynamic-batch-tokenizer"],
            "check",
            "engine-conflict",
            "Cannot enable both --enable-tokenizer-batch-encode and --enable-dynamic-batch-tokenizer",
        ),
        "conflict-retraction-needs-priority": (
            [*cpu, "--retraction-policy", "priority"],
            "check",
            "engine-conflict",
            "--retraction-policy priority requires --enable-priority-scheduling",
        ),
        "conflict-compile-padding": (
            [*cpu, "--enable-torch-compile", "--disable-cuda-graph-padding"],
            "check",
            "engine-conflict",
            "--disable-cuda-graph-padding is incompatible with --enable-torch-compile",
        ),
    }


@pytest.fixture(scope="module")
def verdicts(sglang_env):
    cases = _cases(sglang_env)
    checked = {name: _check(sglang_env, args) for name, (args, _, _, _) in cases.items()}
    jobs = []
    for name, (args, resolve, _, _) in cases.items():
        corrected = checked[name]["argv"][len(sglang_env.launch_server()) :]
        check = resolve == "check"
        jobs += [
            {"argv": args, "resolve": bool(resolve), "check": check},
            {"argv": corrected, "resolve": bool(resolve), "check": check},
        ]
    results = _real_sglang(sglang_env, jobs)
    return {name: (checked[name], results[2 * i], results[2 * i + 1]) for i, name in enumerate(cases)}, cases


@pytest.mark.parametrize(
    "name",
    [
        "seed",
        "underscore",
        "vllm-memory",
        "vllm-max-model-len",
        "ambiguous-prefix",
        "invalid-choice",
        "vllm-kv-dtype",
        "spec-topk-without-steps",
        "spec-draft-tokens-without-steps",
        "positional-model",
        "conflict-hicache-radix",
        "conflict-tokenizer-batching",
        "conflict-retraction-needs-priority",
        "conflict-compile-padding",
    ],
)
def test_check_fixes_what_real_sglang_rejects(verdicts, name):
    by_name, cases = verdicts
    report, broken, corrected = by_name[name]
    _, _, code, says = cases[name]
    assert broken["rc"] != 0 and says in broken["error"], broken
    assert code in [f["code"] for f in report["findings"]], report["findings"]
    assert corrected == {"rc": 0, "error": ""}, (report["command"], corrected)


def test_seed_proposal_names_the_flag_and_ties_topk_to_steps(verdicts):
    report, _, _ = verdicts[0]["seed"]
    finding = next(f for f in report["findings"] if f["code"] == "foreign-flag")
    assert finding["flag"] == "--num-speculative-tokens"
    assert "unknown to SGLang 0.5.23" in finding["message"]
    assert "--speculative-num-draft-tokens 16" in report["command"]
    assert "--speculative-num-steps 15" in report["command"]
    assert "--speculative-eagle-topk 1" in finding["why"] and "--speculative-num-steps + 1" in finding["why"]
    assert "installed SGLang 0.5.23" in report["catalog"]


def test_seed_command_really_fails_in_sglang_with_exit_2(sglang_env):
    """The founding crash, as a real launch: the usage dump and the argparse error, before any GPU work."""
    args = _cases(sglang_env)["seed"][0]
    proc = subprocess.run([*sglang_env.launch_server(), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip().splitlines()[-1]
        == "sglang serve: error: unrecognized arguments: --num-speculative-tokens 16"
    )
    assert "usage: sglang serve" in proc.stderr


def test_bundled_snapshot_equals_real_help(sglang_env):
    real = help_text(sglang_env.python)
    bundled_text = (
        Path(__file__).parent.parent / "tools" / "data" / "sglang-help" / "sglang-0.5.23.txt"
    ).read_text()
    assert real == bundled_text
    installed = [f.model_dump(exclude={"value_type", "default"}) for f in bundled("0.5.23").flags]
    from specdoctor.tools.catalog_load import from_help_text

    assert [
        f.model_dump(exclude={"value_type", "default"})
        for f in from_help_text(real, version="0.5.23", source="real").flags
    ] == installed
