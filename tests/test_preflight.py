from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from specdoctor.agent.preflight import preflight, validate_edits
from specdoctor.tools.catalog_load import bundled
from specdoctor.tools.command import LaunchCommand, SetFlag
from specdoctor.tools.gpu import parse_gpus_description
from specdoctor.tools.sglang_facts import facts_for

CAT = bundled("0.5.23")
ENTRY = "python -m sglang.launch_server"


@pytest.fixture
def models(tmp_path):
    """A target (DeepSeek-V3-like, 64 heads) and an EAGLE-3 draft, as real folders with config.json."""

    def make(name: str, config: dict) -> str:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
        return str(folder)

    return {
        "target": make(
            "Kimi-K2.5",
            {
                "architectures": ["DeepseekV3ForCausalLM"],
                "num_attention_heads": 64,
                "max_position_embeddings": 131072,
            },
        ),
        "eagle3": make(
            "kimi-eagle3", {"architectures": ["LlamaForCausalLMEagle3"], "num_attention_heads": 64}
        ),
        "eagle": make("llama-eagle", {"architectures": ["LlamaForCausalLMEagle"]}),
        "custom": make(
            "custom",
            {
                "architectures": ["FooForCausalLM"],
                "auto_map": {"AutoConfig": "x.Foo"},
                "max_position_embeddings": 4096,
            },
        ),
        "llama": make("llama", {"architectures": ["LlamaForCausalLM"], "num_attention_heads": 14}),
    }


def run(cmd: str, **kw):
    return preflight(LaunchCommand.parse(cmd), CAT, **kw)


def codes(report) -> list[str]:
    return [f.code for f in report.findings]


def test_seed_command(models):
    report = run(
        f"{ENTRY} --model-path {models['target']} --tp 8 --speculative-algorithm EAGLE3 "
        f"--speculative-draft-model-path {models['eagle3']} --speculative-eagle-topk 1 --num-speculative-tokens 16",
        gpus=parse_gpus_description("8x H200"),
    )
    foreign = next(f for f in report.findings if f.code == "foreign-flag")
    assert foreign.flag == "--num-speculative-tokens" and foreign.severity == "error"
    assert (
        "with --speculative-eagle-topk 1 SGLang forces the draft-token count to --speculative-num-steps + 1"
        in foreign.why
    )
    corrected = report.corrected
    assert corrected.value("--speculative-num-draft-tokens") == "16"
    assert corrected.value("--speculative-num-steps") == "15"
    assert corrected.value("--tp-size") == "8" and not corrected.has("--num-speculative-tokens")
    assert not report.unfixed
    assert preflight(corrected, CAT, gpus=parse_gpus_description("8x H200")).clean


def test_eagle3_draft_under_eagle_is_caught_before_launch(models):
    report = run(
        f"{ENTRY} --model-path {models['target']} --speculative-algorithm EAGLE --speculative-draft-model-path {models['eagle3']}"
    )
    finding = next(f for f in report.findings if f.code == "eagle3-draft-as-eagle")
    assert "accept length 1.0" in finding.message and finding.category == "spec-draft-mismatch"
    assert report.corrected.value("--speculative-algorithm") == "EAGLE3"


def test_eagle_draft_under_eagle3(models):
    report = run(
        f"{ENTRY} --model-path {models['target']} --speculative-algorithm EAGLE3 --speculative-draft-model-path {models['eagle']}"
    )
    assert report.corrected.value("--speculative-algorithm") == "EAGLE"


def test_eagle3_draft_recognised_by_name_when_not_local(models):
    report = run(
        f"{ENTRY} --model-path {models['target']} --speculative-algorithm EAGLE --speculative-draft-model-path lightseekorg/kimi-k2.5-eagle3"
    )
    assert report.corrected.value("--speculative-algorithm") == "EAGLE3"


@pytest.mark.parametrize(
    ("flags", "code", "expect"),
    [
        (
            "--speculative-eagle-topk 4",
            "spec-steps-missing",
            {"--speculative-num-steps": "2", "--speculative-num-draft-tokens": "8"},
        ),
        (
            "--speculative-num-draft-tokens 6",
            "spec-steps-missing",
            {"--speculative-num-steps": "5", "--speculative-eagle-topk": "1"},
        ),
        (
            "--speculative-num-steps 3",
            "spec-only-steps",
            {"--speculative-eagle-topk": "1", "--speculative-num-draft-tokens": "4"},
        ),
        (
            "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 8",
            "spec-chain-tokens",
            {"--speculative-num-draft-tokens": "4"},
        ),
        (
            "--speculative-num-steps 2 --speculative-eagle-topk 2 --speculative-num-draft-tokens 16",
            "spec-tree-too-small",
            {"--speculative-num-draft-tokens": "7"},
        ),
        (
            "--speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8 --page-size 16 --attention-backend torch_native",
            "spec-needs-chain",
            {"--speculative-eagle-topk": "1"},
        ),
        (
            "--speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8 --speculative-use-rejection-sampling",
            "spec-needs-chain",
            {"--speculative-eagle-topk": "1", "--speculative-num-draft-tokens": "4"},
        ),
    ],
)
def test_speculative_relations_sglang_enforces(models, flags, code, expect):
    report = run(
        f"{ENTRY} --model-path {models['target']} --speculative-algorithm EAGLE3 --speculative-draft-model-path {models['eagle3']} {flags}"
    )
    assert code in codes(report)
    for flag, value in expect.items():
        assert report.corrected.value(flag, CAT.canonical) == value


def test_unknown_algorithm_takes_the_draft_kind(models):
    report = run(
        f"{ENTRY} --model-path {models['target']} --speculative-algorithm EAGLE4 --speculative-draft-model-path {models['eagle3']}"
    )
    assert "spec-unknown-algorithm" in codes(report)
    assert report.corrected.value("--speculative-algorithm") == "EAGLE3"
    assert run(
        f"{ENTRY} --model-path {models['target']} --speculative-algorithm eagle3 --speculative-draft-model-path {models['eagle3']}"
    ).clean


def test_speculative_flags_without_algorithm(models):
    report = run(
        f"{ENTRY} --model-path {models['target']} --speculative-draft-model-path {models['eagle3']} --speculative-num-steps 3"
    )
    assert "spec-no-algorithm" in codes(report)
    assert report.corrected.value("--speculative-algorithm") == "EAGLE3"


def test_ngram_with_dp_attention_and_torch_native():
    report = run(
        f"{ENTRY} --model-path org/model --tp-size 4 --dp-size 4 --enable-dp-attention --speculative-algorithm NGRAM --attention-backend torch_native",
        host=False,
    )
    assert {"spec-dp-attention", "spec-attention-backend"} <= set(codes(report))
    assert not report.corrected.has("--enable-dp-attention") and not report.corrected.has(
        "--attention-backend"
    )
    assert report.corrected.value("--speculative-algorithm") == "NGRAM"


def test_eagle_without_draft_path_is_flagged_unless_builtin_mtp(models):
    assert "spec-no-draft" in codes(
        run(f"{ENTRY} --model-path {models['llama']} --speculative-algorithm EAGLE3")
    )
    assert "spec-no-draft" not in codes(
        run(f"{ENTRY} --model-path {models['target']} --speculative-algorithm EAGLE")
    )
    assert "spec-no-draft" not in codes(
        run(f"{ENTRY} --model-path {models['llama']} --speculative-algorithm NEXTN")
    )


def test_eagle3_without_a_draft_is_suspect_even_when_the_target_cannot_be_read(tmp_path):
    # An EAGLE-3 head is always its own checkpoint; an EAGLE target may carry MTP layers, so it is not judged.
    unread = tmp_path / "no-such-model"
    report = run(f"{ENTRY} --model-path {unread} --speculative-algorithm EAGLE3 --speculative-eagle-topk 1")
    found = next(f for f in report.findings if f.code == "spec-no-draft")
    assert found.severity == "warning" and "unless the target's checkpoint carries" in found.message
    assert report.corrected.value("--speculative-algorithm") == "NGRAM"
    assert not report.corrected.has("--speculative-eagle-topk")
    assert "spec-no-draft" not in codes(run(f"{ENTRY} --model-path {unread} --speculative-algorithm EAGLE"))


@pytest.mark.parametrize("architecture", facts_for("0.5.23").speculative.mtp_targets)
def test_every_target_sglang_gives_an_mtp_draft_needs_no_draft_path(tmp_path, architecture):
    """One table of SGLang facts: preflight and the simulated node agree on which targets carry MTP."""
    folder = tmp_path / "target"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": [architecture]}))
    assert "spec-no-draft" not in codes(run(f"{ENTRY} --model-path {folder} --speculative-algorithm EAGLE"))


def test_host_checks(models, tmp_path):
    missing = run(f"{ENTRY} --model-path {tmp_path}/nope")
    assert missing.unfixed and missing.unfixed[0].code == "model-missing"
    assert "needs-remote-code" in codes(run(f"{ENTRY} --model-path {models['custom']}"))
    long = run(f"{ENTRY} --model-path {models['custom']} --trust-remote-code --context-length 32k")
    assert long.corrected.value("--context-length") == "4096"
    tp = run(
        f"{ENTRY} --model-path {models['llama']} --tp-size 8", gpus=parse_gpus_description("4x A100 80GB")
    )
    assert (
        "tp-above-gpus" in codes(tp) and tp.corrected.value("--tp-size") == "2"
    )  # 14 heads: 2 divides, 4 does not
    masked = run(
        f"CUDA_VISIBLE_DEVICES=0,1 {ENTRY} --model-path {models['target']} --tp-size 4",
        gpus=parse_gpus_description("8x H100"),
    )
    assert "tp-above-gpus" in codes(masked)


def test_busy_port_gets_a_free_one(models):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        report = run(f"{ENTRY} --model-path {models['target']} --port {port}")
        finding = next(f for f in report.findings if f.code == "port-busy")
        new_port = int(report.corrected.value("--port"))
        assert new_port >= port + 10 and "Errno 98" in finding.evidence[0]


def test_abbreviations_and_underscores_are_rewritten(models):
    report = run(f"{ENTRY} --model-path {models['target']} --mem-frac 0.8 --trust_remote_code")
    assert report.corrected.shell().endswith("--mem-fraction-static 0.8 --trust-remote-code")


def test_bad_values(models):
    report = run(
        f"{ENTRY} --model-path {models['target']} --mem-fraction-static 85 --dtype bfloat --tp-size two --port"
    )
    by_code = {f.flag: f for f in report.findings}
    assert report.corrected.value("--mem-fraction-static") == "0.85"
    assert report.corrected.value("--dtype") == "bfloat16"
    assert by_code["--tp-size"].code == "bad-value" and not by_code["--tp-size"].edits
    assert by_code["--port"].code == "missing-value"


def test_clean_command_is_clean(models):
    report = run(
        f"{ENTRY} --model-path {models['target']} --tp-size 8 --speculative-algorithm EAGLE3 --speculative-draft-model-path {models['eagle3']}",
        gpus=parse_gpus_description("8x H200"),
    )
    assert report.clean, report.findings


def test_validate_edits_refuses_unknown_flags_and_bad_paths(models):
    spec = LaunchCommand.parse(f"{ENTRY} --model-path {models['target']}")
    assert "not a flag" in validate_edits(spec, [SetFlag(flag="--speculative-tokens", values=("4",))], CAT)[0]
    assert validate_edits(spec, [SetFlag(flag="--model-path", values=("/etc",))], CAT) == [
        "model /etc: no config.json"
    ]
    assert validate_edits(spec, [SetFlag(flag="--mem-fraction-static", values=("0.8",))], CAT) == []
    assert validate_edits(spec, [], CAT) == ["the edits do not change the command"]


def test_value_fixes_keep_the_full_name_an_abbreviation_was_renamed_to(models):
    report = run(f"{ENTRY} --model-path {models['target']} --mem-frac 85 --tp 2 3", host=False)
    assert report.corrected.argv()[3:] == [
        "--model-path",
        models["target"],
        "--mem-fraction-static",
        "0.85",
        "--tp-size",
        "2",
    ]


def test_one_vllm_speculative_token_becomes_a_valid_chain(models):
    report = run(
        f"{ENTRY} --model-path {models['target']} --speculative-algorithm EAGLE3 "
        f"--speculative-draft-model-path {models['eagle3']} --num-speculative-tokens 1"
    )
    # SGLang needs at least one step, and with topk 1 the draft tokens are steps + 1.
    assert report.corrected.value("--speculative-num-steps") == "1"
    assert report.corrected.value("--speculative-num-draft-tokens") == "2"
    assert preflight(report.corrected, CAT).clean


def test_unknown_vllm_method_is_not_invented(models):
    config = json.dumps({"method": "medusa", "num_speculative_tokens": 3})
    spec = LaunchCommand.parse(
        [*ENTRY.split(), "--model-path", models["target"], "--speculative-config", config]
    )
    report = preflight(spec, CAT)
    foreign = next(f for f in report.findings if f.flag == "--speculative-config")
    assert "no algorithm for vLLM method 'medusa'" in foreign.why
    assert report.corrected.value("--speculative-algorithm") is None


def test_vllm_method_maps_to_sglang_algorithm(models):
    config = json.dumps({"method": "deepseek_mtp", "num_speculative_tokens": 2})
    spec = LaunchCommand.parse(
        [*ENTRY.split(), "--model-path", models["target"], "--speculative-config", config]
    )
    assert preflight(spec, CAT).corrected.value("--speculative-algorithm") == "NEXTN"


def test_a_flag_given_twice_is_a_warning_naming_the_value_sglang_uses():
    report = run(f"{ENTRY} --model-path org/m --tp-size 2 --tp-size 4", host=False)
    [dup] = [f for f in report.findings if f.code == "duplicate-flag"]
    assert dup.severity == "warning" and "SGLang uses the last one: 4" in dup.message
    assert report.corrected.shell().endswith("--model-path org/m --tp-size 4")


def test_thousands_of_copies_of_one_bad_flag_are_one_finding():
    report = run(f"{ENTRY} --model-path org/m " + "--num-speculative-tokens 3 " * 3000, host=False)
    assert [f.code for f in report.findings if f.flag == "--num-speculative-tokens"] == ["foreign-flag"]


def test_a_multi_node_command_is_checked_per_node_and_never_rewritten():
    gpus = parse_gpus_description("8x H200")
    two_nodes = (
        f"{ENTRY} --model-path org/m --tp-size 16 --nnodes 2 --node-rank 1 --dist-init-addr 10.0.0.1:5000"
    )
    report = run(two_nodes, host=False)
    assert report.clean and report.corrected == report.original
    assert (
        preflight(LaunchCommand.parse(two_nodes), CAT, gpus=gpus, facts=None, host=True).corrected.value(
            "--tp-size"
        )
        == "16"
    )
    broken = run(f"{ENTRY} --model-path org/m --tp-size 16 --nnodes 2", gpus=gpus)
    messages = [f.message for f in broken.findings if f.code == "multi-node"]
    assert any("--dist-init-addr is missing" in m for m in messages) and any(
        "--node-rank" in m for m in messages
    )
    small = run(
        f"{ENTRY} --model-path org/m --tp-size 32 --nnodes 2 --node-rank 0 --dist-init-addr h:1", gpus=gpus
    )
    assert [f.code for f in small.findings if f.severity == "error"] == ["node-too-small"]


def test_a_flag_unknown_to_a_stand_in_catalog_is_a_warning_not_a_fix():
    """The SGLang that runs is not known (its python has none here): a flag the bundled list lacks may be
    a newer release's. Nothing is changed; the warning says how to check against the real one."""
    stand_in = bundled("0.5.23")
    stand_in.authoritative = False
    command = LaunchCommand.parse(f"{ENTRY} --model-path org/m --enable-some-future-feature")
    report = preflight(command, stand_in, host=False)
    [finding] = [f for f in report.findings if f.flag == "--enable-some-future-feature"]
    assert (
        finding.severity == "warning"
        and not finding.edits
        and "a newer SGLang may have it" in finding.message
    )
    assert report.corrected == command
    known = preflight(command, CAT, host=False)  # the SGLang that runs: then it is an error with a fix
    assert any(f.severity == "error" and f.edits for f in known.findings)


def test_a_served_name_with_a_colon_is_respelled_before_launch():
    # Real SGLang 0.5.23 refuses it (tests/data/sglang-outputs/served-model-name-colon.rc1.txt); older
    # releases start and read `model: gpt-oss:120b` in every request as base model + LoRA adapter `120b`.
    report = run(f"{ENTRY} --model-path m --served-model-name gpt-oss:120b", host=False)
    found = next(f for f in report.findings if f.code == "served-name-colon")
    assert found.severity == "error" and "LoRA adapter '120b'" in found.message
    assert report.corrected.value("--served-model-name") == "gpt-oss-120b"
    assert "served-name-colon" not in codes(
        run(f"{ENTRY} --model-path m --served-model-name gpt-oss-120b", host=False)
    )


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("TheBloke/Mistral-7B-v0.1-GPTQ:gptq-4bit-32g-actorder_True", "repo-id-revision"),
        ("org/model name", "repo-id-invalid"),
        ("org/-model", "repo-id-invalid"),
        ("org/model", None),
        ("Qwen/Qwen3-0.6B", None),
        ("ÜberModel/x", None),  # the Hub's check reads `\w` as Python does: Unicode letters pass
        ("/models/a:b", None),  # a folder's name may hold anything
        ("$MODELS/tiny-llama", None),  # a shell variable the script expands
        ("s3://bucket/model", None),
    ],
)
def test_a_model_path_must_be_a_folder_or_a_hub_repo_id(path, code):
    report = run(f"{ENTRY} --model-path '{path}'", host=False)
    found = [f.code for f in report.findings if f.code.startswith("repo-id")]
    assert found == ([code] if code else []), report.findings
    if code == "repo-id-revision":
        assert report.corrected.value("--model-path") == "TheBloke/Mistral-7B-v0.1-GPTQ"
        assert report.corrected.value("--revision") == "gptq-4bit-32g-actorder_True"


def test_a_host_address_this_machine_lacks_is_named_before_launch() -> None:
    # corpus-real-engine-5's `--host 192.168.1.50` hung for half an hour on the real engine: SGLang's own
    # readiness request retries an address nothing listens on. 192.0.2.0/24 is reserved for documentation.
    from specdoctor.agent.preflight import HostFacts, preflight
    from specdoctor.tools.system import address_is_local

    assert not address_is_local("192.0.2.10")
    assert (
        address_is_local("127.0.0.1")
        and address_is_local("0.0.0.0")
        and address_is_local("no-such-host.invalid")
    )
    spec = LaunchCommand.parse(
        "python -m sglang.launch_server --model-path /tmp/m --host 192.0.2.10 --port 31999"
    )
    report = preflight(spec, CAT)
    found = [f for f in report.findings if f.code == "host-not-local"]
    assert found and found[0].edits[0].values == ("0.0.0.0",)
    assert not [f for f in report.findings if f.code == "port-busy"], "an address we lack is not a busy port"
    # Replayed facts that never recorded the address say nothing.
    quiet = preflight(spec, CAT, facts=HostFacts(live=False))
    assert not [f for f in quiet.findings if f.code == "host-not-local"]


def test_model_folder_files_sglang_would_fail_on_are_named_before_launch(models):
    """The two folders corpus-real-engine-7 recorded SGLang 0.5.23 failing on: a tokenizer_config.json
    with a trailing comma (the tokenizer fails to load) and a generation_config.json with top_k 0 (every
    chat request is rejected: "top_k must be -1 (disable) or at least 1, got 0.")."""
    folder = Path(models["llama"])
    (folder / "tokenizer_config.json").write_text('{\n  "pad_token": "</s>",\n}\n')
    (folder / "generation_config.json").write_text('{"top_k": 0, "temperature": 0.6}')
    report = run(f"{ENTRY} --model-path {folder}")
    broken = next(f for f in report.findings if f.code == "model-file-broken")
    assert "tokenizer_config.json" in broken.message and broken.severity == "error"
    assert report.corrected.value("--sampling-defaults") == "openai"
    # SGLang's own defaults asked for: the file's values are not used, nothing to say about them.
    taken = run(f"{ENTRY} --model-path {folder} --sampling-defaults openai")
    assert "generation-defaults-rejected" not in codes(taken)
    (folder / "generation_config.json").write_text('{"top_k": 20, "top_p": 0.8}')
    assert "generation-defaults-rejected" not in codes(run(f"{ENTRY} --model-path {folder}"))
