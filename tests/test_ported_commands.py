"""Commands copied from vLLM, TGI, older SGLang or other tools' habits: a count written with another
suffix case or as `1e7`, lists with commas, seconds with a unit, flags renamed or split since, a /metrics
route SGLang serves only when asked (each on its blind case and a second real log)."""

from __future__ import annotations

import pytest

from specdoctor.playbooks.flag_checks import check_flags
from specdoctor.playbooks.gate import invalid_edits
from specdoctor.playbooks.json_values import as_json
from specdoctor.playbooks.view import as_int, human_spelling, plain_number
from specdoctor.tools.command import LaunchCommand, RenameFlag, SetFlag
from tests.recorded import PY, SERVE, blind, decided, recorded_lines
from tests.test_corpus_scores import CAT


def test_a_count_with_another_tools_suffix_case_is_respelled_as_sglang_reads_it() -> None:
    contract = blind("corpus-real-engine-19", "max-prefill-tokens-uppercase-k-suffix")
    assert contract["edits"] == [{"op": "set", "flag": "--max-prefill-tokens", "values": ["16Ki"]}]
    lines = recorded_lines("context-length-uppercase-k-serve.rc2.txt")
    command = SERVE.replace("--max-total-tokens 4096", "--context-length 2K --max-total-tokens 4096")
    assert decided(command, lines, "parse-error")["edits"] == [
        {"op": "set", "flag": "--context-length", "values": ["2Ki"]}
    ]
    # SGLang's own suffixes, exactly: SI k M G T, IEC Ki Mi Gi Ti, no decimals with IEC.
    assert [as_int(v) for v in ("16k", "2G", "1Ki", "16K", "1.5Ki", "2.5k")] == [
        16000,
        2 * 10**9,
        1024,
        None,
        None,
        2500,
    ]
    assert [human_spelling(v) for v in ("16K", "16KB", "4m", "16k", "2G")] == [
        "16Ki",
        "16Ki",
        "4M",
        None,
        None,
    ]
    # The gate takes a suffixed count as the number it is.
    spec = LaunchCommand.parse(f"{SERVE} --max-prefill-tokens 16K")
    assert not invalid_edits(spec, [SetFlag(flag="--max-prefill-tokens", values=("16Ki",))], CAT)


def test_a_metrics_scrape_that_gets_404_adds_enable_metrics() -> None:
    contract = blind("corpus-real-engine-19", "metrics-endpoint-404-without-enable-metrics")
    assert contract["edits"] == [{"op": "set", "flag": "--enable-metrics", "values": []}]
    lines = recorded_lines("metrics-404-without-enable-metrics-serve.rc137.txt")
    assert decided(SERVE, lines, "runs-but-degraded")["playbook"] == "sglang.request.metrics-off"
    # With the flag given, a 404 there is something else's.
    assert (
        decided(f"{SERVE} --enable-metrics", lines, "runs-but-degraded")["playbook"]
        != "sglang.request.metrics-off"
    )


def test_openai_names_in_the_default_sampling_parameters_become_sglangs() -> None:
    # SamplingParams has no `max_tokens`: every request built on the defaults gets a 500, the warm-up first.
    contract = blind("corpus-real-engine-19", "preferred-sampling-params-openai-max-tokens-key")
    assert contract["edits"] == [
        {
            "op": "set",
            "flag": "--preferred-sampling-params",
            "values": ['{"temperature": 0.6, "top_p": 0.95, "max_new_tokens": 512}'],
        }
    ]
    lines = recorded_lines("preferred-sampling-openai-seed-key-serve.rc137.txt")
    command = f'{SERVE} --preferred-sampling-params \'{{"seed": 7, "temperature": 0.7}}\''
    assert decided(command, lines)["edits"] == [
        {
            "op": "set",
            "flag": "--preferred-sampling-params",
            "values": ['{"sampling_seed": 7, "temperature": 0.7}'],
        }
    ]
    # The gate takes the user's own values under SGLang's names, and nothing added.
    spec = LaunchCommand.parse(command)
    renamed = SetFlag(flag="--preferred-sampling-params", values=('{"sampling_seed": 7}',))
    assert not invalid_edits(spec, [renamed], CAT)
    added = SetFlag(flag="--preferred-sampling-params", values=('{"sampling_seed": 8}',))
    assert invalid_edits(spec, [added], CAT)


def test_a_choice_nothing_is_close_to_goes_back_to_sglangs_pick_for_a_tuning_setting() -> None:
    # "tc_piecewise was removed" (an older release's value), vLLM's "xformers": no choice is close, and a
    # backend is how the same model runs, so SGLang's own pick replaces it.
    contract = blind("corpus-real-engine-19", "removed-cuda-graph-backend-tc-piecewise")
    assert contract["edits"] == [{"op": "remove", "flag": "--cuda-graph-backend-prefill"}]
    lines = recorded_lines("attention-backend-vllm-xformers-serve.rc2.txt")
    decision = decided(f"{SERVE} --attention-backend xformers", lines, "parse-error")
    assert (decision["edits"], decision["confidence"]) == (
        [{"op": "remove", "flag": "--attention-backend"}],
        0.6,
    )
    # A choice of what is loaded is the person's: a quantization nothing is close to goes back to the
    # default only below the confidence an unattended run acts on.
    quantized = decided(f"{SERVE} --quantization int3", lines, "parse-error")
    assert (quantized["edits"], quantized["confidence"]) == (
        [{"op": "remove", "flag": "--quantization"}],
        0.45,
    )


def test_an_older_releases_switch_gets_this_releases_enable_spelling() -> None:
    # 0.4.3's --return-hidden-states is 0.5.23's --enable-return-hidden-states; argparse would otherwise
    # expand it to --return-hidden-states-mode and ask for a value.
    contract = blind("corpus-real-engine-19", "old-flag-return-hidden-states-prefix-of-mode")
    renamed = {
        "op": "rename",
        "flag": "--return-hidden-states",
        "to": "--enable-return-hidden-states",
        "values": None,
    }
    assert contract["edits"] == [renamed]
    lines = recorded_lines("return-hidden-states-old-switch-launch-server.rc2.txt")
    assert decided(f"{PY} --return-hidden-states", lines, "parse-error")["edits"] == [renamed]
    # The gate renames only to the same name's --enable- switch.
    spec = LaunchCommand.parse(f"{PY} --return-hidden-states")
    assert invalid_edits(spec, [RenameFlag(flag="--return-hidden-states", to="--enable-metrics")], CAT)


def test_vllms_tool_call_parser_names_become_sglangs() -> None:
    contract = blind("corpus-real-engine-21", "tool-call-parser-vllm-llama3-json-name")
    assert contract["edits"] == [{"op": "set", "flag": "--tool-call-parser", "values": ["llama3"]}]
    lines = recorded_lines("tool-call-parser-vllm-llama4-pythonic-serve.rc2.txt")
    assert decided(f"{SERVE} --tool-call-parser llama4_pythonic", lines, "parse-error")["edits"] == [
        {"op": "set", "flag": "--tool-call-parser", "values": ["pythonic"]}
    ]


def test_a_value_after_a_switch_that_argparse_expanded_drops_the_option_it_meant() -> None:
    # TGI's `--quantize awq`: argparse expands `--quantize` to the switch --quantize-and-serve and leaves the
    # value over; the checkpoint declares its own quantization, so leaving the option out is the fix.
    contract = blind("corpus-real-engine-19", "tgi-quantize-flag-prefix-of-quantize-and-serve")
    assert contract["edits"] == [{"op": "remove", "flag": "--quantize"}]
    lines = recorded_lines("tgi-quantize-fp8-abbreviates-quantize-and-serve.rc2.txt")
    first = decided(f"{PY} --quantize fp8", lines, "parse-error")
    assert first["edits"] == [{"op": "remove", "flag": "--quantize"}]
    assert first["action"] == "fix"
    # `--trust-remote true` meant the switch: it keeps it, written alone.
    truthy = decided(f"{PY} --trust-remote true", lines, "parse-error")
    assert {"op": "remove", "flag": "--trust-remote"} not in truthy["edits"]


def test_a_value_the_flags_own_parser_refuses_sends_a_tuning_flag_back_to_its_default() -> None:
    # vLLM's compilation-config keys in SGLang's --cuda-graph-config: its type function names the bad key.
    contract = blind("corpus-real-engine-19", "cuda-graph-config-with-vllm-compilation-config-keys")
    assert contract["edits"] == [{"op": "remove", "flag": "--cuda-graph-config"}]
    lines = recorded_lines("cuda-graph-config-unknown-key-in-phase.rc2.txt")
    command = f"""{PY} --cuda-graph-config '{{"decode": {{"max_batch_size": 8}}}}'"""
    assert decided(command, lines, "parse-error")["edits"] == [
        {"op": "remove", "flag": "--cuda-graph-config"}
    ]
    # A refused value of a flag that changes what is served is the person's to fix.
    served = [*lines[:-1], "sglang serve: error: argument --served-model-name: bad name"]
    assert decided(f"{PY} --served-model-name x", served, "parse-error")["action"] == "stop"


def test_a_draft_models_setting_reads_the_same_spellings_as_the_targets() -> None:
    # vLLM's `fp8` for SGLang's fp8_e4m3 holds for --speculative-draft-kv-cache-dtype as for --kv-cache-dtype.
    contract = blind("corpus-real-engine-22", "eagle3-draft-kv-cache-dtype-fp8-vllm-spelling")
    assert contract["edits"] == [
        {"op": "set", "flag": "--speculative-draft-kv-cache-dtype", "values": ["fp8_e4m3"]}
    ]
    lines = recorded_lines("draft-kv-cache-dtype-fp8-e4m3fn-serve.rc2.txt")
    command = (
        f"{SERVE} --speculative-algorithm EAGLE3 --speculative-draft-model-path /models/tiny-eagle3 "
        "--speculative-draft-kv-cache-dtype fp8_e4m3fn"
    )
    assert decided(command, lines, "parse-error")["edits"] == [
        {"op": "set", "flag": "--speculative-draft-kv-cache-dtype", "values": ["fp8_e4m3"]}
    ]


NUMBERS = [
    # (blind case of corpus-real-engine-23, its edit; a second real launch, its flag and value, the edit there)
    (
        "chunked-prefill-size-k-suffix",
        ["8000"],
        "max-running-requests-k-suffix.rc2.txt",
        "--max-running-requests 1k",
        ["1000"],
    ),
    (
        "ngram-capacity-scientific-notation",
        ["10000000"],
        "max-queued-requests-scientific-serve.rc2.txt",
        "--max-queued-requests 1e4",
        ["10000"],
    ),
    (
        "cuda-graph-bs-decode-comma-separated",
        ["1", "2", "4", "8"],
        "cuda-graph-bs-prefill-comma-separated.rc2.txt",
        "--cuda-graph-bs-prefill 1,2,4",
        ["1", "2", "4"],
    ),
    (
        "watchdog-timeout-with-seconds-suffix",
        ["30"],
        "dist-timeout-seconds-suffix-serve.rc2.txt",
        "--dist-timeout 60s",
        ["60"],
    ),
]


@pytest.mark.parametrize(("case", "values", "recorded", "given", "fixed"), NUMBERS)
def test_a_number_written_another_way_is_respelled_as_argparse_reads_it(
    case: str, values: list[str], recorded: str, given: str, fixed: list[str]
) -> None:
    # A count suffix on a plain int flag, scientific notation, a comma list, a unit of seconds: the number
    # the user meant, in the digits the flag's type takes.
    contract = blind("corpus-real-engine-23", case)
    assert [e.get("values") for e in contract["edits"]] == [values]
    flag = given.split()[0]
    edits = decided(f"{SERVE} {given}", recorded_lines(recorded), "parse-error")["edits"]
    assert edits == [{"op": "set", "flag": flag, "values": fixed}]


def test_seconds_are_read_only_where_the_flag_takes_seconds() -> None:
    assert plain_number("30s", "float", in_seconds=False) is None
    assert plain_number("8", "int") is None  # already digits: nothing to respell
    assert plain_number("abc", "int") is None


def test_an_older_releases_cuda_graph_flag_split_by_phase_is_its_decode_one() -> None:
    contract = blind("corpus-real-engine-23", "cuda-graph-bs-ambiguous-prefix")
    assert [(e["op"], e["flag"], e["to"]) for e in contract["edits"]] == [
        ("rename", "--cuda-graph-bs", "--cuda-graph-bs-decode")
    ]
    lines = recorded_lines("old-flag-cuda-graph-max-bs-split-by-phase.rc2.txt")
    assert decided(f"{PY} --cuda-graph-max-bs 16", lines, "parse-error")["edits"] == [
        {"op": "rename", "flag": "--cuda-graph-max-bs", "to": "--cuda-graph-max-bs-decode", "values": None}
    ]
    # Preflight says the same before any launch.
    (found,) = check_flags(LaunchCommand.parse(f"{PY} --cuda-graph-bs 1 2 4"), CAT)
    assert found.edits == (RenameFlag(flag="--cuda-graph-bs", to="--cuda-graph-bs-decode"),)


def test_a_flag_an_older_release_had_and_this_one_dropped_goes() -> None:
    contract = blind("corpus-real-engine-27", "collect-tokens-histogram-removed-flag")
    assert contract["edits"] == [{"op": "remove", "flag": "--collect-tokens-histogram"}]
    lines = recorded_lines("removed-flag-stream-output.rc2.txt")
    assert decided(f"{PY} --stream-output", lines, "parse-error")["edits"] == [
        {"op": "remove", "flag": "--stream-output"}
    ]


def test_key_value_pairs_for_a_json_flag_become_the_json_object() -> None:
    # `model=llama` is how other tools take labels; SGLang reads the flag with json.loads.
    contract = blind("corpus-real-engine-27", "extra-metric-labels-not-json")
    assert contract["edits"] == [
        {"op": "set", "flag": "--extra-metric-labels", "values": ['{"model": "llama"}']}
    ]
    assert blind("corpus-real-engine-26", "radix-eviction-policy-config-not-json")["edits"] == [
        {"op": "set", "flag": "--radix-eviction-policy-config", "values": ['{"protected_threshold": 4}']}
    ]
    lines = recorded_lines("extra-metric-labels-key-value-pairs-serve.rc2.txt")
    command = f"{SERVE} --enable-metrics --extra-metric-labels team=search,env=prod"
    assert decided(command, lines, "parse-error")["edits"] == [
        {"op": "set", "flag": "--extra-metric-labels", "values": ['{"team": "search", "env": "prod"}']}
    ]
    # A path or a URL with `=` in it is no object.
    assert as_json("http://host/a=b") is None


def test_a_comma_list_is_split_only_into_values_the_flag_takes() -> None:
    # A piece of 0 is a number too; an int list is not given 1.5.
    def edits(value: str) -> list:
        command = LaunchCommand.parse(f"{PY} --cuda-graph-bs-decode {value}")
        return [e for f in check_flags(command, CAT) for e in f.edits]

    assert edits("0,1,2") == [SetFlag(flag="--cuda-graph-bs-decode", values=("0", "1", "2"))]
    assert edits("1.5,2") == []
