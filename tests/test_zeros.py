"""A zero the user chose for a count, size or interval that SGLang divides by or asserts positive: each
on its blind case, one of an earlier set, and the near misses the rule must leave alone."""

from __future__ import annotations

import pytest

from tests.recorded import PY, blind, decided

ZERO = "sglang.value.zero-chosen"


@pytest.mark.parametrize(
    ("folder", "name", "flag"),
    [
        ("corpus-real-engine-14", "decode-log-interval-zero-crashes-warmup", "--decode-log-interval"),
        ("corpus-real-engine-15", "ngram-max-bfs-breadth-zero", "--speculative-ngram-max-bfs-breadth"),
        ("corpus-real-engine-15", "cuda-graph-bs-decode-zero-on-cpu", "--cuda-graph-bs-decode"),
        ("corpus-real-engine-12", "page-size-zero", "--page-size"),
    ],
)
def test_the_zero_goes_back_to_sglangs_default(folder: str, name: str, flag: str) -> None:
    contract = blind(folder, name)
    assert (contract["playbook"], contract["edits"]) == (ZERO, [{"op": "remove", "flag": flag}])


MODULO = [
    '  File "/x/sglang/srt/managers/scheduler_components/metrics_reporter.py", line 934, in report_decode_stats',
    "    if self.forward_ct_decode % self.decode_log_interval != 0:",
    "ZeroDivisionError: integer modulo by zero",
]


def test_the_failing_code_naming_the_setting_makes_the_fix_sure() -> None:
    named = decided(
        f"{PY} --decode-log-interval 0 --random-seed 0", ["Traceback (most recent call last):", *MODULO]
    )
    assert (named["playbook"], named["confidence"]) == (ZERO, 0.6)
    assert named["edits"] == [{"op": "remove", "flag": "--decode-log-interval"}]


def test_two_unnamed_zeros_or_a_zero_that_is_no_number_are_not_guessed() -> None:
    unnamed = ["Traceback (most recent call last):", MODULO[0], "    x = a // b", MODULO[2]]
    assert decided(f"{PY} --random-seed 0 --dist-timeout 0", unnamed)["playbook"] != ZERO
    # A choice spelled 0 is a name, not a count.
    assert decided(f"{PY} --dsa-triton-union 0", unnamed)["playbook"] != ZERO
    # No zero failure: a zero elsewhere in the command is not suspected.
    other = [
        "Traceback (most recent call last):",
        MODULO[0],
        "    x = a[3]",
        "IndexError: list index out of range",
    ]
    assert decided(f"{PY} --decode-log-interval 0", other)["playbook"] != ZERO


def test_a_zero_inside_a_flags_json_or_an_engine_variable_goes_back_to_the_default() -> None:
    from tests.recorded import SERVE, blind, decided, recorded_lines

    assert blind("corpus-real-engine-48", "model-loader-extra-config-num-threads-zero")["edits"] == [
        {"op": "remove", "flag": "--model-loader-extra-config"}
    ]
    assert blind("corpus-real-engine-47", "env-logprob-chunk-size-zero-crashes-on-prompt-logprobs")[
        "edits"
    ] == [{"op": "unset_env", "name": "SGLANG_LOGPROB_CHUNK_SIZE"}]
    # Recorded on the real `sglang serve`: the key at 0 goes, the user's other key stays.
    lines = recorded_lines("serve-model-loader-extra-config-num-threads-zero.rc137.txt")
    command = (
        f"""{SERVE} --model-loader-extra-config '{{"enable_multithread_load": true, "num_threads": 0}}'"""
    )
    assert decided(command, lines)["edits"] == [
        {"op": "set", "flag": "--model-loader-extra-config", "values": ['{"enable_multithread_load": true}']}
    ]
    # `false` or an empty value is not a zero the user chose for a count.
    assert decided(f"SGLANG_ENABLE_X=false {SERVE}", lines)["action"] == "stop"


def test_a_hang_with_one_limit_at_zero_takes_that_limit_back() -> None:
    from tests.recorded import DATA, SERVE, decided

    assert blind("corpus-real-engine-52", "prefill-max-requests-zero-warmup-never-scheduled")["edits"] == [
        {"op": "remove", "flag": "--prefill-max-requests"}
    ]
    # Recorded on the real `sglang serve`: --max-prefill-tokens 0, the warm-up request never scheduled.
    lines = (DATA / "sglang-outputs" / "serve-max-prefill-tokens-zero.hang.txt").read_text().splitlines()
    # Preflight already knows this zero (static faults answer first); the hang reading agrees.
    found = decided(f"{SERVE} --max-prefill-tokens 0", lines, "hang")
    assert found["edits"] == [{"op": "remove", "flag": "--max-prefill-tokens"}]
    from specdoctor.playbooks.zeros import zero_stalls_the_server
    from tests.recorded import context

    alone = zero_stalls_the_server(context(f"{SERVE} --max-prefill-tokens 0", lines, "hang"), None)
    assert alone is not None and alone.confidence == 0.45
    # Two zeros, or none: the hang names nothing to choose by.
    assert decided(f"{SERVE} --max-prefill-tokens 0 --prefill-max-requests 0", lines, "hang")["playbook"] != (
        "sglang.value.zero-stalls"
    )
    assert decided(SERVE, lines, "hang")["playbook"] != "sglang.value.zero-stalls"


def test_a_hang_with_one_engine_variable_at_zero_takes_it_back() -> None:
    assert blind("corpus-real-engine-54", "env-uvicorn-worker-healthcheck-timeout-zero-workers-killed")[
        "edits"
    ] == [{"op": "unset_env", "name": "SGLANG_UVICORN_WORKER_HEALTHCHECK_TIMEOUT"}]


def test_a_negative_meaning_unlimited_goes_back_to_the_default_where_sglang_gives_negatives_no_meaning() -> (
    None
):
    from tests.recorded import DATA, context

    # -1 for the context length: the KV pool's "too small" assertion; the only value below 1.
    contract = blind("corpus-real-engine-56", "context-length-minus-one-pool-too-small")
    assert (contract["playbook"], contract["edits"]) == (ZERO, [{"op": "remove", "flag": "--context-length"}])
    # Recorded on the real engine: --max-prefill-tokens -1 never schedules the warm-up request.
    lines = (DATA / "sglang-outputs" / "max-prefill-tokens-minus-one.hang.txt").read_text().splitlines()
    assert decided(f"{PY} --max-prefill-tokens -1", lines, "hang")["edits"] == [
        {"op": "remove", "flag": "--max-prefill-tokens"}
    ]
    from specdoctor.playbooks.zeros import zero_stalls_the_server

    alone = zero_stalls_the_server(context(f"{PY} --max-prefill-tokens -1", lines, "hang"), None)
    assert alone is not None and "is -1" in alone.summary
    # Where SGLang's help gives -1 a meaning (chunked prefill off), -1 is the user's choice, not a suspect.
    assert zero_stalls_the_server(context(f"{PY} --chunked-prefill-size -1", lines, "hang"), None) is None


def test_a_running_server_whose_log_shows_one_timer_at_zero_gets_that_timer_back() -> None:
    # --soft-watchdog-timeout 0: every watchdog fires without pause and dumps stacks; the server serves, its
    # log floods ("watchdog timeout (self.watchdog_timeout=0.0, self.soft=True)").
    from specdoctor.playbooks.zeros import zero_stalls_the_server
    from tests.recorded import DATA, SERVE, context

    contract = blind("corpus-real-engine-61", "soft-watchdog-timeout-zero-dump-flood")
    assert contract["edits"] == [{"op": "remove", "flag": "--soft-watchdog-timeout"}]
    lines = (
        (DATA / "sglang-outputs" / "serve-soft-watchdog-timeout-zero.degraded.txt").read_text().splitlines()
    )
    found = decided(f"{SERVE} --soft-watchdog-timeout 0", lines, "runs-but-degraded")
    assert found["edits"] == [{"op": "remove", "flag": "--soft-watchdog-timeout"}]
    # A zero the log does not show at work is no lead for a server that runs.
    assert (
        zero_stalls_the_server(context(f"{SERVE} --decode-log-interval 0", lines, "runs-but-degraded"), None)
        is None
    )
