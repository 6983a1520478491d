"""Lessons of corpus-real-engine-24 (LoRA serving, recorded blind, 7/14 on arrival), each on its blind case
and a second real launch: an entry of --lora-paths the error names goes alone, the engine's "specify both"
is never half-done, and PEFT's `all-linear` is SGLang's `all`."""

from __future__ import annotations

from tests.recorded import PY, SERVE, blind, decided, recorded_lines


def test_the_adapter_the_error_names_goes_and_the_others_stay() -> None:
    assert blind("corpus-real-engine-24", "lora-loha-adapter-next-to-lora")["edits"] == [
        {"op": "set", "flag": "--lora-paths", "values": ["sql=/adapters/sql-r8"]}
    ]
    # The same name twice: SGLang loaded the first and refused the later one.
    assert blind("corpus-real-engine-24", "lora-paths-duplicate-adapter-name")["edits"] == [
        {"op": "set", "flag": "--lora-paths", "values": ["sql=/adapters/sql-r8"]}
    ]
    lines = recorded_lines("lora-paths-same-name-twice.rc1.txt")
    command = f"{PY} --lora-paths chat=/adapters/chat-r8 chat=/adapters/sql-r8"
    assert decided(command, lines)["edits"] == [
        {"op": "set", "flag": "--lora-paths", "values": ["chat=/adapters/chat-r8"]}
    ]
    # Nothing in the list is named: the list is not guessed at.
    other = decided(f"{PY} --lora-paths a=/adapters/a b=/adapters/b", lines)["edits"]
    assert {"op": "set", "flag": "--lora-paths", "values": ["a=/adapters/a"]} not in other


def test_both_settings_the_engine_asks_for_or_none() -> None:
    # "specify both --max-lora-rank and --lora-target-modules": the rank has no value to give, so setting the
    # modules alone is half a fix; --enable-lora with nothing to serve goes back.
    assert blind("corpus-real-engine-24", "enable-lora-without-paths-rank-or-targets")["edits"] == [
        {"op": "remove", "flag": "--enable-lora"}
    ]
    # With the rank given, the modules are the half left: SGLang's `all`.
    lines = recorded_lines("enable-lora-with-rank-but-no-targets.rc1.txt")
    assert decided(f"{PY} --enable-lora --max-lora-rank 8", lines)["edits"] == [
        {"op": "set", "flag": "--lora-target-modules", "values": ["all"]}
    ]


def test_pefts_all_linear_is_sglangs_all() -> None:
    assert blind("corpus-real-engine-24", "lora-target-modules-peft-all-linear")["edits"] == [
        {"op": "set", "flag": "--lora-target-modules", "values": ["all"]}
    ]
    lines = recorded_lines("lora-target-modules-peft-all-linear-serve.rc2.txt")
    command = f"{SERVE} --enable-lora --max-lora-rank 8 --lora-target-modules all-linear"
    assert decided(command, lines, "parse-error")["edits"] == [
        {"op": "set", "flag": "--lora-target-modules", "values": ["all"]}
    ]


def test_a_number_in_a_list_is_no_entry_to_take_out() -> None:
    # "Unsupported --prompt-tokens-buckets rule type: '128'": the list lacks its rule name; 128 is not at fault.
    contract = blind("corpus-real-engine-3", "metrics-buckets-without-rule-name")
    assert contract["edits"] != [{"op": "set", "flag": "--prompt-tokens-buckets", "values": ["512", "2048"]}]
