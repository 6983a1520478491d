"""Lessons of corpus-real-engine-32 (runtime and performance flags copied from GPU recipes; 7 of 13 on
arrival), each on its blind case and, where the set has one only, a second real launch recorded here."""

from __future__ import annotations

import pytest

from tests.recorded import PY, blind, decided, recorded_lines

FOLDER = "corpus-real-engine-32"


@pytest.mark.parametrize(
    "name, edit, playbook",
    [
        # A switch whose own words are the missing module's name (torch_memory_saver).
        (
            "enable-memory-saver-without-torch-memory-saver",
            "--enable-memory-saver",
            "sglang.hardware.missing-module",
        ),
        # The feature's backend defaults to the missing package (--disaggregation-transfer-backend mooncake).
        (
            "pd-decode-mode-single-server-without-mooncake",
            "--disaggregation-mode",
            "sglang.hardware.missing-module",
        ),
        # "Are you sure you have a CUDA build?" on --device cpu, the flag's words in the failing code.
        (
            "layerwise-nvtx-marker-on-cpu-torch-warmup",
            "--enable-layerwise-nvtx-marker",
            "sglang.hardware.gpu-feature-off-device",
        ),
        # The feature's own module (offloader.py) named after the family of its flags.
        (
            "offload-group-size-v2-on-llama-no-submodule-accessor",
            "--offload-group-size",
            "sglang.feature.named-in-error",
        ),
    ],
)
def test_the_setting_that_reached_for_what_is_missing_is_taken_back(
    name: str, edit: str, playbook: str
) -> None:
    found = blind(FOLDER, name)
    assert found["playbook"] == playbook
    assert found["edits"] == [{"op": "remove", "flag": edit}]


def test_prefill_mode_on_one_server_without_mooncake_too() -> None:
    lines = recorded_lines("pd-prefill-mode-without-mooncake.rc137.txt")
    found = decided(f"{PY} --port 32290 --disaggregation-mode prefill", lines)
    assert (found["playbook"], found["edits"]) == (
        "sglang.hardware.missing-module",
        [{"op": "remove", "flag": "--disaggregation-mode"}],
    )


def test_a_missing_package_no_chosen_setting_reaches_for_stays_a_stop() -> None:
    lines = recorded_lines("pd-prefill-mode-without-mooncake.rc137.txt")
    assert decided(f"{PY} --port 32290", lines)["action"] == "stop"


def test_two_settings_of_one_feature_in_its_module_are_taken_back_together() -> None:
    import json
    from pathlib import Path

    case = json.loads(
        (
            Path(__file__).parent
            / "data"
            / FOLDER
            / "offload-group-size-v2-on-llama-no-submodule-accessor.json"
        ).read_text()
    )
    command = case["command"].replace("--offload-num-in-group 1", "--offload-num-in-group 2")
    found = decided(command, case["log"].splitlines())
    assert sorted(e["flag"] for e in found["edits"]) == ["--offload-group-size", "--offload-num-in-group"]


@pytest.mark.parametrize(
    "folder, name, flag",
    [
        (FOLDER, "moe-dense-tp-size-1-on-cpu-gathered-buffer-warmup", "--moe-dense-tp-size"),
        ("corpus-real-engine-28", "attn-dp-on-cpu-torch-native-not-implemented", "--attn-dp-size"),
    ],
)
def test_the_layout_that_switches_the_mlp_sync_on_goes_when_the_backend_cannot_pad(
    folder: str, name: str, flag: str
) -> None:
    """Two real launches recorded blind: an all-gathered dense MLP and attention DP, each padding its batch
    through torch_native's missing get_cuda_graph_seq_len_fill_value()."""
    found = blind(folder, name)
    assert found["playbook"] == "sglang.parallel.mlp-sync-unsupported-backend"
    assert found["edits"] == [{"op": "remove", "flag": flag}]


def test_a_setting_whose_own_module_imports_the_missing_package_goes() -> None:
    # `--tool-server` imports entrypoints/openai/tool_server.py, which imports openai_harmony: without the
    # flag SGLang never imports it (or the person installs it).
    from tests.recorded import SERVE, blind, decided, recorded_lines

    assert blind("corpus-real-engine-46", "tool-server-demo-without-openai-harmony")["edits"] == [
        {"op": "remove", "flag": "--tool-server"}
    ]
    lines = recorded_lines("serve-tool-server-mcp-url-without-openai-harmony.rc3.txt")
    assert decided(f"{SERVE} --tool-server localhost:9999", lines)["edits"] == [
        {"op": "remove", "flag": "--tool-server"}
    ]
    # A setting whose field is not the importing module is not taken for it.
    assert decided(f"{SERVE} --served-model-name support-bot", lines)["action"] == "stop"


def test_a_value_whose_words_name_the_missing_package_goes() -> None:
    # `--load-format runai_streamer` and the package `runai_model_streamer`.
    from tests.recorded import blind

    assert blind("corpus-real-engine-48", "load-format-runai-streamer-package-missing")["edits"] == [
        {"op": "remove", "flag": "--load-format"}
    ]
    from specdoctor.playbooks.packages import _words_of_value_in

    assert _words_of_value_in("runai_streamer", "runai_model_streamer")
    assert not _words_of_value_in("auto", "runai_model_streamer")  # one word is no name
    assert not _words_of_value_in("fast_streamer", "runai_model_streamer")


def test_a_switch_named_for_the_missing_package_goes() -> None:
    from tests.recorded import blind, decided

    assert blind("corpus-real-engine-51", "enable-lmcache-package-not-installed")["edits"] == [
        {"op": "remove", "flag": "--enable-lmcache"}
    ]
    line = ["ModuleNotFoundError: No module named 'lmcache'"]
    base = "python -m sglang.launch_server --model-path /models/tiny-llama --device cpu"
    assert decided(f"{base} --enable-metrics", line)["action"] == "stop"  # another switch: install it


def test_one_features_settings_that_name_the_missing_package_go_together() -> None:
    from tests.recorded import blind, decided

    contract = blind("corpus-real-engine-42", "pd-prefill-nixl-backend-not-installed")
    assert contract["edits"] == [
        {"op": "remove", "flag": "--disaggregation-mode"},
        {"op": "remove", "flag": "--disaggregation-transfer-backend"},
    ]
    assert contract["confidence"] < 0.5  # prefill/decode disaggregation is what is served: a person's call
    # Settings of two features naming the path: nothing is guessed between them.
    lines = [
        '  File "/x/sglang/srt/disaggregation/prefill.py", line 1, in f',
        "ImportError: Please install NIXL",
    ]
    base = "python -m sglang.launch_server --model-path /models/tiny-llama"
    assert (
        decided(f"{base} --served-model-name prefill --disaggregation-transfer-backend nixl", lines)["action"]
        == "stop"
    )
