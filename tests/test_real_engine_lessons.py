"""What corpus-real-engine (13 failures of the real SGLang 0.5.23, recorded blind on this CPU host; 3/13
right before these rules) taught, each rule on its case and on a second real launch recorded here
(tests/data/sglang-outputs), and each with the near miss it must not take."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdoctor.agent.diagnose import context_for, decide, outcome_from_log
from specdoctor.tools.catalog_load import bundled
from specdoctor.tools.command import LaunchCommand
from specdoctor.tools.engine_source.remedies import remedies
from tests.test_corpus_scores import CAT, contract_for

DATA = Path(__file__).parent / "data"
PY = "python -m sglang.launch_server --model-path /models/tiny-llama --device cpu --max-total-tokens 4096"


def _case(tmp_path: Path, name: str, command: str | None = None) -> dict:
    case = json.loads((DATA / "corpus-real-engine" / f"{name}.json").read_text())
    if command is not None:
        case["command"] = command
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(case))
    return contract_for(path)


def _recorded(name: str, command: str) -> dict:
    text = (DATA / "sglang-outputs" / name).read_text()
    lines = text.split("---- stdout+stderr ----", 1)[1].splitlines()
    spec = LaunchCommand.parse(command)
    ctx = context_for(spec, CAT, lines, outcome=outcome_from_log(lines, "startup-crash"))
    decision = decide(ctx)
    edits = [e.model_dump(mode="json") for e in getattr(decision, "edits", ())]
    return {
        "playbook": decision.playbook,
        "action": decision.action,
        "edits": edits,
        "confidence": decision.confidence,
    }


@pytest.mark.parametrize(
    ("case", "recorded", "command", "edits"),
    [
        (
            "chat-template-name-not-builtin",
            "chat-template-missing-jinja-file.rc1.txt",
            f"{PY} --chat-template /tmp/no-such-template.jinja",
            [{"op": "remove", "flag": "--chat-template"}],
        ),
        (
            "load-format-pt-on-safetensors-model",
            "load-format-npcache-on-safetensors-model.rc137.txt",
            f"{PY} --load-format npcache",
            [{"op": "remove", "flag": "--load-format"}],
        ),
        (
            "tokenizer-path-nonexistent",
            "tokenizer-path-missing-folder.rc1.txt",
            f"{PY} --tokenizer-path /data/tokenizers/llama3",
            [{"op": "remove", "flag": "--tokenizer-path"}],
        ),
        (
            "env-dp-spec-prefill-coordination-with-ngram",
            "dp-spec-coordination-with-standalone.rc1.txt",
            f"SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION=1 {PY} --speculative-algorithm STANDALONE "
            "--speculative-draft-model-path /models/tiny-llama --speculative-num-steps 2 "
            "--speculative-eagle-topk 1 --speculative-num-draft-tokens 3",
            [{"op": "set_env", "name": "SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION", "value": "0"}],
        ),
    ],
)
def test_a_chosen_value_the_engine_rejects_is_taken_back(
    tmp_path: Path, case: str, recorded: str, command: str, edits: list
) -> None:
    assert _case(tmp_path, case)["edits"] == edits
    assert _recorded(recorded, command)["edits"] == edits


def test_a_folder_without_weights_is_a_stop_when_no_format_was_chosen(tmp_path: Path) -> None:
    contract = _case(tmp_path, "load-format-pt-on-safetensors-model", PY)
    assert contract["action"] == "stop" and contract["category"] == "model-path", contract


def test_a_missing_model_path_is_not_blamed_on_the_tokenizer(tmp_path: Path) -> None:
    # Same error, but the path it quotes is the model's: only a person knows where the model is.
    command = PY.replace("/models/tiny-llama", "/data/tokenizers/llama3")
    assert _recorded("tokenizer-path-missing-folder.rc1.txt", command)["action"] == "stop"


@pytest.mark.parametrize(
    ("case", "recorded", "command", "flag", "value"),
    [
        (
            "json-model-override-args-single-quotes",
            "model-loader-extra-config-python-dict.rc137.txt",
            f"{PY} --model-loader-extra-config \"{{'enable_multithread_load': True}}\"",
            "--model-loader-extra-config",
            '{"enable_multithread_load": true}',
        ),
    ],
)
def test_json_written_in_python_s_syntax_is_respelled(
    tmp_path: Path, case: str, recorded: str, command: str, flag: str, value: str
) -> None:
    contract = _case(tmp_path, case)
    assert contract["edits"] == [
        {"op": "set", "flag": "--json-model-override-args", "values": ['{"max_position_embeddings": 8192}']}
    ]
    assert _recorded(recorded, command)["edits"] == [{"op": "set", "flag": flag, "values": [value]}]


def test_the_gate_takes_a_respelled_json_value_and_no_new_word() -> None:
    from specdoctor.playbooks.gate import invalid_edits
    from specdoctor.tools.command import SetFlag

    spec = LaunchCommand.parse(f"{PY} --json-model-override-args \"{{'rope_theta': 1000000, 'tie': None}}\"")
    same = SetFlag(flag="--json-model-override-args", values=('{"rope_theta": 1000000, "tie": null}',))
    other = SetFlag(flag="--json-model-override-args", values=('{"rope_theta": 1, "tie": null}',))
    assert invalid_edits(spec, [same], CAT) == []
    assert invalid_edits(spec, [other], CAT)


def test_a_value_outside_a_listed_set_gets_the_nearest_listed_one(tmp_path: Path) -> None:
    # "--speculative-num-steps=6 is not in the adaptive config candidate_steps [0, 1, 3, 5, 7]"
    contract = _case(tmp_path, "eagle3-adaptive-num-steps-not-candidate")
    assert contract["edits"] == [{"op": "set", "flag": "--speculative-num-steps", "values": ["5"]}], contract


def test_a_bound_the_message_computed_is_the_value() -> None:
    said = "speculative_ngram_external_sam_budget must be less than or equal to speculative_num_draft_tokens - 1 (11)."
    edits = [r.edit for r in remedies(said, bundled("0.5.23")) if r.edit is not None]
    assert [e.values for e in edits] == [("11",)]


def test_what_the_message_says_to_specify_is_added(tmp_path: Path) -> None:
    # "you need to specify both --max-lora-rank and --lora-target-modules": the rank is there; the target
    # modules are asked for by a list whose catch-all choice is `all`. LoRA itself stays on.
    contract = _case(tmp_path, "enable-lora-without-target-modules")
    assert contract["edits"] == [{"op": "set", "flag": "--lora-target-modules", "values": ["all"]}], contract


def test_a_purpose_clause_names_what_the_user_wants_not_what_to_change(tmp_path: Path) -> None:
    # "To use priority scheduling, schedule_policy must be 'fcfs' or 'lof'."
    contract = _case(tmp_path, "priority-scheduling-with-lpm-policy")
    assert contract["edits"] == [{"op": "set", "flag": "--schedule-policy", "values": ["fcfs"]}], contract


def test_the_subject_of_an_only_supported_message_goes_not_the_algorithm(tmp_path: Path) -> None:
    # "NotImplementedError: --speculative-use-rejection-sampling is only supported for EAGLE / EAGLE3 /
    # NEXTN, not speculative_algorithm=STANDALONE": the switch goes, the STANDALONE draft stays.
    contract = _case(tmp_path, "standalone-with-rejection-sampling")
    assert contract["edits"] == [{"op": "remove", "flag": "--speculative-use-rejection-sampling"}], contract


DATA2 = DATA / "corpus-real-engine-2"


def _case2(tmp_path: Path, name: str) -> dict:
    path = tmp_path / f"{name}.json"
    path.write_text((DATA2 / f"{name}.json").read_text())
    return contract_for(path)


@pytest.mark.parametrize("case", ["flashinfer-attention-backend-on-cpu", "triton-attention-backend-on-cpu"])
def test_a_gpu_attention_backend_on_a_cpu_device_goes(tmp_path: Path, case: str) -> None:
    # Two ways the same mistake dies on the real engine: a package check, Triton finding no driver.
    contract = _case2(tmp_path, case)
    assert contract["edits"] == [{"op": "remove", "flag": "--attention-backend"}], contract


def test_check_names_a_backend_the_device_does_not_run_before_launch() -> None:
    from specdoctor.agent.preflight import preflight

    spec = LaunchCommand.parse(f"{PY} --attention-backend fa3")
    codes = [f.code for f in preflight(spec, CAT, host=False).findings]
    assert "backend-off-device" in codes
    own = LaunchCommand.parse(f"{PY} --attention-backend torch_native")
    assert "backend-off-device" not in [f.code for f in preflight(own, CAT, host=False).findings]


def test_a_host_written_with_its_port_loses_the_port(tmp_path: Path) -> None:
    assert _case2(tmp_path, "host-with-port-suffix")["edits"] == [
        {"op": "set", "flag": "--host", "values": ["0.0.0.0"]}
    ]
    recorded = _recorded("host-localhost-with-port.rc137.txt", f"{PY} --host localhost:8000")
    assert recorded["edits"] == [{"op": "set", "flag": "--host", "values": ["localhost"]}]


def test_a_gpu_feature_switched_on_for_a_cpu_device_goes(tmp_path: Path) -> None:
    contract = _case2(tmp_path, "hierarchical-cache-on-cpu")
    assert contract["edits"] == [{"op": "remove", "flag": "--enable-hierarchical-cache"}], contract
    recorded = _recorded(
        "hicache-write-back-on-cpu.rc137.txt",
        f"{PY} --enable-hierarchical-cache --hicache-write-policy write_back",
    )
    assert {"op": "remove", "flag": "--enable-hierarchical-cache"} in recorded["edits"], recorded
    # LoRA is what the server serves: its removal is offered, never applied unasked.
    lora = _recorded(
        "enable-lora-paths-on-cpu.rc137.txt",
        f"{PY} --enable-lora --max-lora-rank 8 --lora-target-modules all",
    )
    assert lora["playbook"] != "sglang.hardware.gpu-feature-off-device" or lora["confidence"] < 0.5, lora


DATA3 = DATA / "corpus-real-engine-3"


def _case3(tmp_path: Path, name: str) -> dict:
    path = tmp_path / f"{name}.json"
    path.write_text((DATA3 / f"{name}.json").read_text())
    return contract_for(path)


@pytest.mark.parametrize(
    ("case", "recorded", "command", "edits"),
    [
        (
            "dist-init-addr-without-port",
            "dist-init-addr-localhost-without-port.rc137.txt",
            f"{PY} --dist-init-addr localhost",
            [{"op": "remove", "flag": "--dist-init-addr"}],
        ),
        (
            "nccl-port-held-by-another-process",
            "nccl-port-taken-by-http-server.rc137.txt",
            f"{PY} --nccl-port 32291",
            [{"op": "remove", "flag": "--nccl-port"}],
        ),
        (
            "max-queued-requests-zero-rejects-warmup",
            "max-queued-requests-zero-small-batch.rc137.txt",
            f"{PY} --max-queued-requests 0 --max-running-requests 2",
            [{"op": "remove", "flag": "--max-queued-requests"}],
        ),
    ],
)
def test_a_single_node_setting_the_engine_cannot_use_goes(
    tmp_path: Path, case: str, recorded: str, command: str, edits: list
) -> None:
    assert _case3(tmp_path, case)["edits"] == edits
    assert _recorded(recorded, command)["edits"] == edits


def test_a_rendezvous_address_of_a_multi_node_launch_is_a_person_s() -> None:
    # Two nodes must agree on the port: nothing to take back on one node's guess.
    command = f"{PY} --dist-init-addr localhost --nnodes 2 --node-rank 0 --tp-size 2"
    assert _recorded("dist-init-addr-localhost-without-port.rc137.txt", command)["edits"] == []


def test_a_name_of_common_words_is_named_only_whole() -> None:
    from specdoctor.playbooks.naming import named_in

    # "tokens" is in countless messages; --max-total-tokens is named by max_total_tokens, not by "tokens".
    assert not named_in("--max-total-tokens", "stop=['</s>'] is unavailable (decode tokens to text)")
    assert named_in("--max-total-tokens", "max_total_tokens=4096 is smaller than the context length")


DATA4 = DATA / "corpus-real-engine-4"


def test_a_json_config_with_keys_its_object_lacks_goes(tmp_path: Path) -> None:
    # slru given tlru's keys: "SLRUStrategy.__init__() got an unexpected keyword argument 'threshold'".
    path = tmp_path / "case.json"
    path.write_text((DATA4 / "radix-eviction-slru-with-tlru-config-keys.json").read_text())
    assert contract_for(path)["edits"] == [{"op": "remove", "flag": "--radix-eviction-policy-config"}]
    # lru given any keys: "LRUStrategy() takes no arguments".
    recorded = _recorded(
        "radix-eviction-lru-with-slru-config-keys.rc137.txt",
        f"{PY} --radix-eviction-policy lru --radix-eviction-policy-config '{{\"protected_threshold\": 4}}'",
    )
    assert recorded["edits"] == [{"op": "remove", "flag": "--radix-eviction-policy-config"}], recorded


def test_an_engine_bug_stop_quotes_the_error_line(tmp_path: Path) -> None:
    path = tmp_path / "case.json"
    path.write_text((DATA4 / "kv-canary-on-cpu-device-stream.json").read_text())
    contract = contract_for(path)
    if contract["playbook"] == "sglang.engine.internal-crash":
        assert contract["summary"].endswith("got an unexpected keyword argument 'device'"), contract


def test_sglang_serve_s_own_backend_option_is_known(tmp_path: Path) -> None:
    from specdoctor.agent.preflight import preflight

    def codes(command: str) -> list[str]:
        return [f.code for f in preflight(LaunchCommand.parse(command), CAT, host=False).findings]

    serve = "sglang serve --model-path /models/tiny-llama --device cpu"
    assert not {"unknown-flag", "invalid-choice"} & set(codes(f"{serve} --model-type llm"))
    assert "invalid-choice" in codes(f"{serve} --model-type llama")
    # launch_server has no such option: there it is still an unknown flag.
    assert codes(f"{PY} --model-type llm")
    path = tmp_path / "case.json"
    path.write_text((DATA4 / "serve-model-type-architecture-name.json").read_text())
    assert contract_for(path)["edits"] == [{"op": "remove", "flag": "--model-type"}]


DATA5 = DATA / "corpus-real-engine-5"


@pytest.mark.parametrize(
    ("case", "edits"),
    [
        # `--host http://0.0.0.0`: "tcp:// rendezvous: port number missing".
        ("host-given-as-url-with-scheme", [{"op": "set", "flag": "--host", "values": ["0.0.0.0"]}]),
        # vLLM's `--tokenizer`, which argparse reads as an ambiguous prefix of six SGLang flags.
        (
            "vllm-tokenizer-flag-ambiguous-prefix",
            [{"op": "rename", "flag": "--tokenizer", "to": "--tokenizer-path", "values": None}],
        ),
    ],
)
def test_an_address_or_a_name_written_the_other_engine_s_way(tmp_path: Path, case: str, edits: list) -> None:
    path = tmp_path / "case.json"
    path.write_text((DATA5 / f"{case}.json").read_text())
    assert contract_for(path)["edits"] == edits


@pytest.mark.parametrize(
    ("case", "recorded", "given", "fixed"),
    [
        (
            "dist-init-addr-with-tcp-scheme",
            "serve-dist-init-addr-tcp-scheme.rc137.txt",
            "tcp://localhost:32295",
            "localhost:32295",
        ),
        (
            "dist-init-addr-bare-ipv6-without-brackets",
            "serve-dist-init-addr-bare-ipv6.rc137.txt",
            "0:0:0:0:0:0:0:1:32295",
            "[0:0:0:0:0:0:0:1]:32295",
        ),
    ],
)
def test_a_rendezvous_address_is_written_as_sglang_reads_it(case, recorded, given, fixed) -> None:
    # SGLang prepends `tcp://` itself, and an IPv6 host takes brackets: the user's own host and port, respelled.
    from tests.recorded import SERVE, blind, decided, recorded_lines

    assert blind("corpus-real-engine-42", case)["playbook"] == "sglang.network.dist-init-addr"
    found = decided(f"{SERVE} --dist-init-addr {given}", recorded_lines(recorded))
    assert found["edits"] == [{"op": "set", "flag": "--dist-init-addr", "values": [fixed]}]


def test_a_rendezvous_port_past_65535_goes_on_one_node_and_is_asked_for_on_several() -> None:
    from specdoctor.playbooks.device_checks import dist_init_addr_faults
    from specdoctor.playbooks.view import CommandView
    from tests.recorded import blind

    assert blind("corpus-real-engine-42", "dist-init-addr-port-out-of-range")["edits"] == [
        {"op": "remove", "flag": "--dist-init-addr"}
    ]
    two = CommandView(
        LaunchCommand.parse(f"{PY} --nnodes 2 --node-rank 0 --dist-init-addr 10.0.0.1:295000"), CAT
    )
    (found,) = dist_init_addr_faults(two)
    assert found.edits == () and "past 65535" in found.message  # which port is open is the person's to say


def test_a_check_on_a_field_sglang_resolves_from_the_commands_flag_takes_that_flag_back() -> None:
    # `assert cfg.tp_size % cfg.attn_dp_size == 0` reads no flag the command gives, but SGLang's argument
    # code sets attn_dp_size from --dp-size (the old `--dp-size N --enable-dp-attention` spelling).
    from tests.recorded import SERVE, blind, decided, recorded_lines

    contract = blind("corpus-real-engine-40", "dp-attention-dp-size-not-dividing-tp-size")
    assert contract["edits"] == [{"op": "remove", "flag": "--dp-size"}] and contract["confidence"] < 0.5
    lines = recorded_lines("serve-dp-attention-dp-size-4-tp-2.rc1.txt")
    found = decided(f"{SERVE} --enable-dp-attention --dp-size 4 --tp-size 2", lines)
    assert (found["playbook"], found["edits"]) == (
        "sglang.source.check",
        [{"op": "remove", "flag": "--dp-size"}],
    )
    # With every field the check reads at its default and nothing feeding them, it stays an engine bug.
    assert decided(SERVE, lines)["action"] == "stop"


def test_a_checks_arithmetic_is_computed_not_run() -> None:
    from specdoctor.tools.engine_source.holds import holds

    assert holds("cfg.tp_size % cfg.attn_dp_size == 0", {"tp_size": 2, "attn_dp_size": 1}) is True
    assert holds("cfg.tp_size % cfg.attn_dp_size == 0", {"tp_size": 1, "attn_dp_size": 4}) is False
    assert holds("x.a > 0 and not x.b", {"a": 1, "b": False}) is True
    # A call, a missing value or a division by zero is not known, and nothing is evaluated by Python.
    assert holds("__import__('os').system('true') == 0", {}) is None
    assert holds("cfg.tp_size % cfg.attn_dp_size == 0", {"tp_size": 2}) is None
    assert holds("cfg.tp_size % cfg.attn_dp_size == 0", {"tp_size": 2, "attn_dp_size": 0}) is None
