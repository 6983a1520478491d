"""`specdoctor diagnose` and `specdoctor eval` as scripts and scorers run them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import corpus_cases

DATA = Path(__file__).parent / "data"
CONTRACT_KEYS = [
    "action",
    "category",
    "summary",
    "evidence",
    "edits",
    "command",
    "env",
    "playbook",
    "confidence",
]


def specdoctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specdoctor", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("case", corpus_cases(), ids=[c["id"] for c in corpus_cases()])
def test_case_json_is_exactly_the_contract(case):
    proc = specdoctor("diagnose", "--case", str(DATA / "corpus" / f"{case['id']}.json"), "--json", "--no-llm")
    assert proc.returncode == (3 if case["action"] == "stop" else 0), proc.stderr  # a script tells them apart
    data = json.loads(proc.stdout)
    assert list(data) == CONTRACT_KEYS
    assert data["action"] == case["action"]  # categories are scored in eval (tests/test_corpus_scores.py)
    # `eval` scores exactly what `diagnose --case` answers (an outside scorer runs the latter).
    from tests.test_corpus_scores import CAT as EVAL_CATALOG
    from tests.test_corpus_scores import contract_for

    assert contract_for(DATA / "corpus" / f"{case['id']}.json", EVAL_CATALOG) == data
    assert isinstance(data["evidence"], list) and data["evidence"]
    assert 0 <= data["confidence"] <= 1


def test_log_file_and_command(tmp_path):
    log = DATA / "sglang-outputs" / "wrong-flag-num-speculative-tokens.rc2.txt"
    proc = specdoctor(
        "diagnose",
        "--log",
        str(log),
        "--json",
        "--",
        "python -m sglang.launch_server --model-path M --speculative-algorithm EAGLE3 --speculative-draft-model-path D "
        "--speculative-eagle-topk 1 --num-speculative-tokens 16",
    )
    data = json.loads(proc.stdout)
    assert data["action"] == "fix" and "--speculative-num-draft-tokens 16" in data["command"]
    assert data["evidence"][0] == "sglang serve: error: unrecognized arguments: --num-speculative-tokens 16"


def test_human_output_shows_the_diff():
    proc = specdoctor("diagnose", "--case", str(DATA / "corpus" / "reasoning-parser-underscore.json"))
    assert proc.returncode == 0
    assert "FIX [flag-name]" in proc.stdout and "corrected command:" in proc.stdout
    assert "--reasoning-parser kimi_k2" in proc.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["diagnose", "--log", "/nonexistent.log", "--", "python", "-m", "sglang.launch_server"],
            "cannot read log",
        ),
        (["diagnose", "--log", "x.log"], "give the command"),
        (["diagnose", "--case", "/nonexistent.json"], "cannot read case"),
        (["eval", "/nonexistent-dir"], "is not a folder"),
        (["eval", str(DATA / "signature-logs")], "no crash cases"),
    ],
)
def test_bad_input(args, says):
    proc = specdoctor(*args)
    assert proc.returncode == 2 and says in proc.stderr and proc.stderr.count("\n") == 1


def test_case_with_a_missing_key(tmp_path):
    case = json.loads((DATA / "corpus" / "reasoning-parser-underscore.json").read_text())
    del case["log"]
    (tmp_path / "c.json").write_text(json.dumps(case))
    proc = specdoctor("diagnose", "--case", str(tmp_path / "c.json"))
    assert proc.returncode == 2 and "log: field required" in proc.stderr


def test_corrupt_case(tmp_path):
    (tmp_path / "c.json").write_text("{not json")
    proc = specdoctor("diagnose", "--case", str(tmp_path / "c.json"))
    assert proc.returncode == 2 and "is not JSON" in proc.stderr


def test_eval_on_the_corpus_meets_the_bar():
    proc = specdoctor("eval", str(DATA / "corpus"), "--json")
    totals = json.loads(proc.stdout)["totals"]
    assert totals["fixes_solved"] / totals["fix_cases"] >= 0.9
    assert totals["stopped_correctly"] == totals["stop_cases"]
    assert totals["category_right"] / totals["cases"] >= 0.85


def test_a_log_appended_across_restarts_is_read_for_its_last_run(tmp_path):
    """A healthy run, then (appended, as `>>` does) a restart that dies capturing CUDA graphs."""
    healthy = (DATA / "sglang-outputs" / "serve-module.log").read_text()
    restart = "".join(line for line in healthy.splitlines(keepends=True) if "ready to roll" not in line)
    crash = (DATA / "signature-logs" / "row-09-oom.txt").read_text().split("# ---\n", 1)[1]
    log = tmp_path / "server.log"
    log.write_text(healthy + restart.split("The server is fired up")[0] + crash)
    proc = specdoctor(
        "diagnose",
        "--log",
        str(log),
        "--json",
        "--",
        "python -m sglang.launch_server --model-path M --mem-fraction-static 0.93",
    )
    data = json.loads(proc.stdout)
    # The first run's "ready" line must not hide the second run's startup crash.
    assert data["category"] == "cuda-graph" and data["playbook"] == "sglang.cuda-graph.capture"
    fraction = data["command"].split("--mem-fraction-static ")[1].split()[0]
    assert data["action"] == "fix" and float(fraction) < 0.93


def test_eval_scores_a_case_whose_command_is_not_a_server_launch_as_not_solved(tmp_path):
    # A benchmark script is not something specdoctor launches: the case is refused, counted, never dropped.
    case = json.loads((DATA / "corpus" / "ngram-torch-native-backend.json").read_text())
    (tmp_path / "a.json").write_text(json.dumps(case))
    bench = {**case, "id": "b", "command": "python -m sglang.bench_offline_throughput --model-path m"}
    (tmp_path / "b.json").write_text(json.dumps(bench))
    proc = specdoctor("eval", str(tmp_path), "--json")
    report = json.loads(proc.stdout)
    totals = report["totals"]
    assert (totals["cases"], totals["first_decision_right"], totals["refused"]) == (2, 1, 1), totals
    refused = next(c for c in report["cases"] if c["id"] == "b")
    assert refused["action"] == "refused" and not refused["solved"]
    assert "unknown engine" in refused["summary"]


def test_a_variable_wanted_absent_is_unset_or_empty() -> None:
    from specdoctor.agent.evaluate import satisfies
    from specdoctor.tools.catalog_load import bundled
    from specdoctor.tools.command import LaunchCommand

    catalog = bundled("0.5.23")
    wanted = {"env": "SGLANG_RUST_BUILD_MODE", "absent": True}
    base = "python -m sglang.launch_server --model-path /m"
    assert satisfies(wanted, LaunchCommand.parse(base), None, catalog)
    assert satisfies(wanted, LaunchCommand.parse(f"SGLANG_RUST_BUILD_MODE= {base}"), None, catalog)
    assert not satisfies(wanted, LaunchCommand.parse(f"SGLANG_RUST_BUILD_MODE=release {base}"), None, catalog)
    assert satisfies({"env": "X", "equals": "auto"}, LaunchCommand.parse(f"X=auto {base}"), None, catalog)
