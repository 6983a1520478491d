"""Lessons of corpus-real-engine-30 (sampling defaults, generation config and scheduling; 11 of 14 on
arrival), each on its blind case and a second real launch of SGLang 0.5.23 recorded here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdoctor.agent.diagnose import decide
from specdoctor.tools.catalog_load import bundled
from tests.recorded import PY, blind, context, decided, recorded_lines

DATA = Path(__file__).parent / "data"
FLAGS = {f.name: f for f in bundled().flags}


@pytest.mark.parametrize(
    "flag, value, meant",
    [
        (
            "--sampling-defaults",
            "generation_config",
            "model",
        ),  # "'model' uses the model's generation_config.json"
        ("--tokenizer-mode", "fast", "auto"),  # "'auto' will use the fast tokenizer if available"
        ("--return-hidden-states-mode", "true", "full"),  # "'full' also allows return_hidden_states=True"
        ("--kv-canary", "fail", "raise"),  # "'raise' fails the server on the first detected mismatch"
        ("--dtype", "fp32", None),  # 'float' and 'float32' both say FP32: no one choice
        ("--dtype", "fp16", None),  # 'auto' and 'half' both say FP16
        ("--kv-cache-dtype", "fp16", None),  # no choice says it
        ("--sampling-defaults", "model", None),  # already a choice
    ],
)
def test_an_invalid_choice_is_the_one_choice_the_help_describes_in_its_words(
    flag: str, value: str, meant: str | None
) -> None:
    assert FLAGS[flag].choice_described_as(value) == meant


def test_the_choice_described_fixes_the_blind_case_below_a_spelling_fix() -> None:
    found = blind("corpus-real-engine-30", "sd-sampling-defaults-invalid-choice")
    assert [(e["flag"], e["values"]) for e in found["edits"]] == [("--sampling-defaults", ["model"])]
    assert found["confidence"] < 0.95


def test_requests_shed_by_the_commands_queue_cap_take_the_cap_back_for_a_person() -> None:
    """Two real launches: 6 and 8 concurrent requests against --max-queued-requests 1 and 2 (503 "The
    request queue is full."); the cap is taken back below the confidence an unattended run acts on, since
    shedding load is what the cap is for."""
    found = blind("corpus-real-engine-30", "sd-queue-full-under-concurrency")
    assert found["confidence"] < 0.5
    command = f"{PY} --port 32290 --max-running-requests 2 --max-queued-requests 2"
    lines = recorded_lines("max-queued-requests-two-sheds-concurrent-requests.rc137.txt")
    again = decided(command, lines, "runs-but-degraded")
    assert again["playbook"] == "sglang.serving.queue-too-small-for-warmup"
    assert again["edits"] == [{"op": "remove", "flag": "--max-queued-requests"}]
    assert again["confidence"] < 0.5


def test_a_prompt_over_the_models_context_is_a_stop_that_says_truncation_is_no_remedy() -> None:
    case = json.loads(
        (DATA / "corpus-real-engine-30" / "sd-long-prompt-over-context-no-auto-truncate.json").read_text()
    )
    decision = decide(context(case["command"], case["log"].splitlines(), case["exit_kind"]))
    assert decision.action == "stop" and "--allow-auto-truncate is no remedy" in decision.advice


def test_a_pool_the_command_capped_below_one_request_takes_the_cap_back() -> None:
    """SGLang's own start-up warning ("KV pool holds 64 tokens, fewer than --context-length 512") and an
    answer cut at 'length' short of its max_tokens: the blind case of corpus-real-engine-25 and a second
    real launch at 128 tokens."""
    found = blind("corpus-real-engine-25", "max-total-tokens-64-truncates-completion")
    assert (found["playbook"], found["edits"]) == (
        "sglang.memory.pool-below-context",
        [{"op": "remove", "flag": "--max-total-tokens"}],
    )
    # Recorded here with `--max-total-tokens 128` and one chat request for 120 tokens (it got 64).
    lines = (
        (DATA / "sglang-outputs" / "max-total-tokens-128-cuts-chat-answers.degraded.txt")
        .read_text()
        .splitlines()
    )
    again = decided(f"{PY} --port 32290".replace("4096", "128"), lines, "runs-but-degraded")
    assert again["edits"] == [{"op": "remove", "flag": "--max-total-tokens"}]
    # A pool that came out small from memory is not the command's cap: the warning is for a person.
    assert (
        decided(f"{PY} --port 32290", lines, "runs-but-degraded")["playbook"]
        != "sglang.memory.pool-below-context"
    )
