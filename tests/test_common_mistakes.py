"""Lessons of corpus-real-engine-13 (a representative mix of common launch mistakes on the real SGLang
0.5.23, recorded blind: 6/12 on arrival), each on its blind case, with the near miss it must not take."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdoctor.agent.diagnose import context_for, decide, outcome_from_log
from specdoctor.agent.evaluate import flag_value
from specdoctor.playbooks.device_checks import device_not_a_device
from specdoctor.playbooks.flag_checks import check_flags
from specdoctor.playbooks.gate import invalid_edits
from specdoctor.playbooks.view import CommandView
from specdoctor.tools.command import LaunchCommand, RemoveFlag, SetFlag
from specdoctor.tools.gpu import parse_gpus_description
from tests.recorded import blind, decided, recorded_lines
from tests.test_corpus_scores import CAT, contract_for

DATA = Path(__file__).parent / "data" / "corpus-real-engine-13"
PY = "python -m sglang.launch_server --model-path /models/tiny-llama --device cpu"


def _blind(name: str) -> dict:
    return blind("corpus-real-engine-13", name)


@pytest.mark.parametrize(
    ("name", "edits"),
    [
        ("lora-paths-adapter-dir-missing", [{"op": "remove", "flag": "--lora-paths"}]),
        ("max-total-tokens-too-small-rejects-prompt", [{"op": "remove", "flag": "--max-total-tokens"}]),
        (
            "lora-target-modules-comma-separated",
            [{"op": "set", "flag": "--lora-target-modules", "values": ["q_proj", "v_proj"]}],
        ),
        ("schedule-policy-fifo", [{"op": "set", "flag": "--schedule-policy", "values": ["fcfs"]}]),
    ],
)
def test_each_common_mistake_gets_its_fix(name: str, edits: list) -> None:
    assert _blind(name)["edits"] == edits


def test_a_comma_list_is_split_only_into_choices_the_flag_has() -> None:
    found = check_flags(LaunchCommand.parse(f"{PY} --lora-target-modules q_proj,v_proj"), CAT)
    (fix,) = [f for f in found if f.edits]
    assert fix.edits == (SetFlag(flag="--lora-target-modules", values=("q_proj", "v_proj")),)
    unknown = check_flags(LaunchCommand.parse(f"{PY} --lora-target-modules q_proj,nope"), CAT)
    assert not any(e.values == ("q_proj", "nope") for f in unknown for e in f.edits if isinstance(e, SetFlag))
    # The gate takes the pieces as the user's own words, and nothing else.
    command = LaunchCommand.parse(f"{PY} --lora-target-modules q_proj,v_proj")
    assert not invalid_edits(
        command, [SetFlag(flag="--lora-target-modules", values=("q_proj", "v_proj"))], CAT
    )


def test_a_list_flags_value_is_all_its_values() -> None:
    spec = LaunchCommand.parse(f"{PY} --lora-target-modules q_proj v_proj")
    assert flag_value(spec, "--lora-target-modules", CAT) == (True, "q_proj v_proj")
    assert flag_value(LaunchCommand.parse(f"{PY} --tp-size 2 --tp-size 4"), "--tp-size", CAT) == (True, "4")


def test_a_missing_model_path_is_not_taken_for_an_adapters(tmp_path: Path) -> None:
    case = json.loads((DATA / "lora-paths-adapter-dir-missing.json").read_text())
    case["command"] = case["command"].replace(
        "--lora-paths sql=/models/llama-sql-lora", "--lora-paths sql=/a/b"
    )
    path = tmp_path / "case.json"
    path.write_text(json.dumps(case))
    assert contract_for(path)["action"] == "stop"  # the error names another path than the adapter's


def test_a_device_torch_has_no_type_for_becomes_the_device_the_host_has() -> None:
    assert _blind("device-gpu-not-a-torch-device")["edits"] == [
        {"op": "set", "flag": "--device", "values": ["cpu"]}
    ]
    lines = recorded_lines("device-nvidia-not-a-torch-device.rc137.txt")
    command = "sglang serve --model-path /models/tiny-llama --device nvidia --max-total-tokens 4096"
    spec = LaunchCommand.parse(command)
    on = {
        "a CPU host": (parse_gpus_description("none"), "cpu", 0.6),
        "an H100 host": (parse_gpus_description("1x H100 80GB"), "cuda", 0.7),
        "an unknown host": (None, "cuda", 0.45),  # a guess: not applied unattended
    }
    for host, (gpus, device, confidence) in on.items():
        ctx = context_for(spec, CAT, lines, gpus=gpus, outcome=outcome_from_log(lines, "startup-crash"))
        decision = decide(ctx)
        assert (decision.action, decision.edits, decision.confidence) == (
            "fix",
            (SetFlag(flag="--device", values=(device,)),),
            confidence,
        ), host


def test_only_the_devices_the_engine_lists_pass_the_gate_as_its_names() -> None:
    spec = LaunchCommand.parse(f"{PY} --device gpu")
    assert not invalid_edits(spec, [SetFlag(flag="--device", values=("cpu",))], CAT)
    assert invalid_edits(spec, [SetFlag(flag="--device", values=("tpu9",))], CAT)
    # A device torch knows is not flagged, whatever SGLang's --help lists.
    for device, flagged in (("mps", False), ("musa", False), ("cuda:1", False), ("CUDA", True)):
        view = CommandView(LaunchCommand.parse(f"{PY.replace('cpu', device)}"), CAT)
        assert bool(device_not_a_device(view, None)) is flagged, device


def test_a_parallel_size_the_tp_group_cannot_hold_is_taken_back() -> None:
    assert _blind("ep-size-2-without-tp")["edits"] == [{"op": "remove", "flag": "--ep-size"}]
    lines = recorded_lines("ep-2-alias-without-tp.rc1.txt")
    # The same failure when SGLang's own value broke the law: no flag of the command's is to blame.
    for command in (f"{PY} --ep-size 4", f"{PY} --ep-size 2 --tp-size 1"):
        ctx = context_for(
            LaunchCommand.parse(command), CAT, lines, outcome=outcome_from_log(lines, "startup-crash")
        )
        decision = decide(ctx)
        taken = decision.playbook == "sglang.parallel.inconsistent-layout"
        assert taken is ("2" in command), (command, decision.summary)


@pytest.mark.parametrize(
    ("name", "flag"),
    [
        ("moe-dp-size-2-without-tp.rc1.txt", "--moe-dp-size"),
        ("attn-cp-size-2-without-tp.rc1.txt", "--attn-cp-size"),
    ],
)
def test_a_group_size_the_tp_size_does_not_divide_is_a_parallel_layout_fault(name: str, flag: str) -> None:
    # Sizes of MoE and attention rank groups are parallel settings, not MoE kernels or attention backends.
    lines = recorded_lines(name)
    ctx = context_for(
        LaunchCommand.parse(f"{PY} {flag} 2"), CAT, lines, outcome=outcome_from_log(lines, "startup-crash")
    )
    decision = decide(ctx)
    assert (decision.category, decision.edits) == ("tp-config", (RemoveFlag(flag=flag),))


def test_lora_target_all_with_names_is_all_alone_before_a_launch() -> None:
    # SGLang asserts `all` stands alone (lora_hook.check_lora_server_args); preflight says so first.
    from specdoctor.playbooks.value_checks import check_values

    case = json.loads(
        (DATA.parent / "corpus-real-engine-20" / "lora-target-modules-all-mixed-with-names.json").read_text()
    )
    (found,) = [f for f in check_values(CommandView(LaunchCommand.parse(case["command"]), CAT)) if f.flag]
    assert found.edits == (SetFlag(flag="--lora-target-modules", values=("all",)),)
    assert not check_values(CommandView(LaunchCommand.parse(f"{PY} --lora-target-modules all"), CAT))


def test_after_the_crash_the_engine_check_takes_the_value_checks_edit_not_the_feature_away() -> None:
    # The check reads --enable-lora too; the value check's edit keeps LoRA on, as the user asked.
    contract = blind("corpus-real-engine-20", "lora-target-modules-all-mixed-with-names")
    assert contract["edits"] == [{"op": "set", "flag": "--lora-target-modules", "values": ["all"]}]
    lines = recorded_lines("lora-target-modules-names-then-all.rc1.txt")
    command = f"{PY} --enable-lora --max-lora-rank 8 --lora-target-modules q_proj v_proj all"
    first = decided(command, lines)
    assert (first["playbook"], first["edits"]) == (
        "sglang.source.check",
        [{"op": "set", "flag": "--lora-target-modules", "values": ["all"]}],
    )


def test_none_for_a_number_whose_default_is_none_is_leaving_the_flag_out() -> None:
    contract = blind("corpus-real-engine-41", "constrained-json-max-whitespace-cnt-none-string")
    assert contract["edits"] == [{"op": "remove", "flag": "--constrained-json-max-whitespace-cnt"}]
    from tests.recorded import SERVE

    lines = recorded_lines("serve-max-running-requests-None.rc2.txt")
    found = decided(f"{SERVE} --max-running-requests None", lines, "parse-error")
    assert found["edits"] == [{"op": "remove", "flag": "--max-running-requests"}]
    # A number flag whose default is a number: `none` is no spelling of it, nothing is guessed.
    spec = LaunchCommand.parse(f"{SERVE} --schedule-conservativeness none")
    assert not any(
        f.edits == (RemoveFlag(flag="--schedule-conservativeness"),) for f in check_flags(spec, CAT)
    )


@pytest.mark.parametrize(
    "name",
    ["device-hpu-on-cpu-host", "device-mps-recipe-on-linux-cpu-host", "device-xpu-on-intel-xeon-cpu-host"],
)
def test_a_device_whose_own_code_says_it_is_not_here_becomes_the_hosts(name: str) -> None:
    assert blind("corpus-real-engine-43", name)["edits"] == [
        {"op": "set", "flag": "--device", "values": ["cpu"]}
    ]


def test_a_device_is_judged_absent_only_by_its_own_code_and_the_host() -> None:
    from tests.recorded import SERVE

    lines = recorded_lines("serve-device-xpu-on-cpu-host.rc1.txt")
    spec = LaunchCommand.parse(SERVE.replace("--device cpu", "--device xpu"))

    def on(gpus: str | None, log: list[str] = lines) -> tuple:
        host = parse_gpus_description(gpus) if gpus else None
        decision = decide(
            context_for(spec, CAT, log, gpus=host, outcome=outcome_from_log(log, "startup-crash"))
        )
        return decision.playbook, getattr(decision, "edits", ())

    assert on("none") == ("sglang.hardware.device-absent", (SetFlag(flag="--device", values=("cpu",)),))
    assert on("1x H100 80GB") == (
        "sglang.hardware.device-absent",
        (SetFlag(flag="--device", values=("cuda",)),),
    )
    assert on(None)[0] != "sglang.hardware.device-absent"  # nothing known of the host: no device is guessed
    # torch_npu missing is a package to install on an NPU host as much as a device missing here: no guess.
    npu = recorded_lines("serve-device-npu-on-cpu-host.rc1.txt")
    spec = LaunchCommand.parse(SERVE.replace("--device cpu", "--device npu"))
    assert on("none", npu)[0] != "sglang.hardware.device-absent"


def test_a_backend_off_the_device_goes_with_the_setting_whose_code_failed() -> None:
    # --attention-backend triton does not run on a CPU, and the failure is in batch_invariant_ops, the code of
    # --enable-deterministic-inference, which needs CUDA/XPU too: both go in one change.
    from tests.recorded import SERVE

    contract = blind("corpus-real-engine-47", "deterministic-inference-triton-backend-on-cpu-batch-invariant")
    both = [
        {"op": "remove", "flag": "--attention-backend"},
        {"op": "remove", "flag": "--enable-deterministic-inference"},
    ]
    assert contract["edits"] == both
    lines = recorded_lines("serve-deterministic-inference-triton-on-cpu.rc137.txt")
    assert (
        decided(f"{SERVE} --enable-deterministic-inference --attention-backend triton", lines)["edits"]
        == both
    )
    # Without another chosen setting on the failing path, the backend goes alone.
    assert decided(f"{SERVE} --attention-backend triton", lines)["edits"] == both[:1]


def test_a_duration_with_a_unit_for_a_flag_in_seconds_is_written_in_seconds() -> None:
    from tests.recorded import SERVE

    assert blind("corpus-real-engine-54", "dynamic-batch-tokenizer-timeout-with-ms-suffix")["edits"] == [
        {"op": "set", "flag": "--dynamic-batch-tokenizer-batch-timeout", "values": ["0.002"]}
    ]
    lines = recorded_lines("serve-watchdog-timeout-with-min-suffix.rc2.txt")
    assert decided(f"{SERVE} --watchdog-timeout 5min", lines, "parse-error")["edits"] == [
        {"op": "set", "flag": "--watchdog-timeout", "values": ["300"]}
    ]
    from specdoctor.playbooks.view import plain_number

    assert plain_number("500ms", "int", in_seconds=True) is None  # no whole number of seconds says it
    assert plain_number("2m", "int", in_seconds=False) != "120"  # a count's `m` is not minutes
