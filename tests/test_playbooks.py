"""Every built-in playbook, each on a real log: a corpus case (real SGLang issue threads), a real output of
SGLang 0.5.23 on this CPU machine, or a real message recorded in /work/shared/gpu/signatures.md."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from specdoctor.agent.diagnose import context_for, decide, gpus_from_case, outcome_from_log
from specdoctor.playbooks.decision import Fix, Retry, Stop
from specdoctor.playbooks.registry import all_playbooks
from specdoctor.tools.catalog_load import bundled
from specdoctor.tools.command import LaunchCommand

DATA = Path(__file__).parent / "data"
CAT = bundled("0.5.23")
PY = "python -m sglang.launch_server"


def real_log(name: str) -> list[str]:
    """Body of a recorded file (after its `# ---` header), or a corpus case's log."""
    if name.startswith("corpus:"):
        return json.loads((DATA / "corpus" / f"{name[7:]}.json").read_text())["log"].splitlines()
    text = (DATA / name).read_text()
    return [
        ln
        for ln in text.split("\n# ---", 1)[-1].splitlines()
        if not ln.startswith("# ") and not ln.startswith("---")
    ]


@dataclass
class Scenario:
    playbook: str
    command: str
    log: str
    action: type
    category: str
    flags: dict[str, str | None] = field(default_factory=dict)
    """Expected values in the corrected command (None: absent; "": present without a value)."""
    gpus: str | None = None
    exit_kind: str | None = None
    env: dict[str, str] = field(default_factory=dict)


S = Scenario
FILES = Path(__file__).parent / "data" / "launch-files"
SCENARIOS = [
    S(
        "sglang.request.api-key-missing",
        "sglang serve --model-path /models/tiny-llama --device cpu --api-key sk-recorded-test --max-total-tokens 4096",
        "sglang-outputs/api-key-generate-request-without-key.rc137.txt",
        Stop,
        "other",
        exit_kind="runs-but-degraded",
    ),
    S(
        "sglang.scheduler.watchdog",
        "sglang serve --model-path /models/tiny-llama --device cpu --watchdog-timeout 0.001 --max-total-tokens 4096",
        "sglang-outputs/watchdog-timeout-tiny-serve.rc137.txt",
        Fix,
        "other",
        {"--watchdog-timeout": None, "--device": "cpu"},
        exit_kind="runtime-crash",
    ),
    S(
        "sglang.parallel.inconsistent-layout",
        "sglang serve --model-path /models/tiny-llama --device cpu --ep 2 --max-total-tokens 4096",
        "sglang-outputs/ep-2-alias-without-tp.rc1.txt",
        Fix,
        "tp-config",
        {"--ep-size": None, "--device": "cpu"},
    ),
    S(
        "sglang.flag.config-file",
        f"{PY} --config {FILES / 'vllm-key-config.yaml'}",
        "sglang-outputs/config-yaml-unknown-key.rc2.txt",
        Fix,
        "flag-name",
        {"--config": None, "--model-path": "/models/tiny-llama", "--num-speculative-tokens": None},
        exit_kind="parse-error",
    ),
    S(
        "sglang.request.chat-template-refuses",
        f"{PY} --model-path M --chat-template {FILES / 'alternating.jinja'}",
        "sglang-outputs/chat-template-file-roles-must-alternate.rc137.txt",
        Fix,
        "other",
        {"--chat-template": None},
        exit_kind="runs-but-degraded",
    ),
    S(
        "sglang.argparse",
        f"{PY} --model-path M --tp 8 --num-speculative-tokens 16 --speculative-algorithm EAGLE3 --speculative-draft-model-path D --speculative-eagle-topk 1",
        "sglang-outputs/wrong-flag-num-speculative-tokens.rc2.txt",
        Fix,
        "flag-name",
        {
            "--speculative-num-draft-tokens": "16",
            "--speculative-num-steps": "15",
            "--num-speculative-tokens": None,
        },
    ),
    S(
        "sglang.argparse",
        f"{PY} --model-path M --attention-backend flashinfr",
        "sglang-outputs/invalid-choice-attention-backend-typo.rc2.txt",
        Fix,
        "invalid-choice",
        {"--attention-backend": "flashinfer"},
    ),
    S(
        "sglang.argparse",
        f"{PY} --model-path M --mem-fraction-static abc",
        "sglang-outputs/bad-type-mem-fraction-static.rc2.txt",
        Stop,
        "flag-name",
    ),
    S(
        "sglang.spec.accept-length-one",
        f"{PY} --model-path moonshotai/Kimi-K2.5 --tp 8 --trust-remote-code --speculative-algorithm EAGLE --speculative-draft-model-path lightseekorg/kimi-k2.5-eagle3",
        "corpus:eagle-algo-with-eagle3-draft-accept-1",
        Fix,
        "spec-draft-mismatch",
        {"--speculative-algorithm": "EAGLE3"},
        exit_kind="runs-but-degraded",
    ),
    S(
        "sglang.spec.accept-length-one",
        f"{PY} --model-path org/target --speculative-algorithm EAGLE3 --speculative-draft-model-path org/some-draft",
        "corpus:eagle-algo-with-eagle3-draft-accept-1",
        Stop,
        "spec-draft-mismatch",
        exit_kind="runs-but-degraded",
    ),
    S(
        "sglang.cuda-graph.capture",
        "sglang serve --model-path /models/DeepSeek-V4.1-checkpoint --tp 8 --speculative-algorithm DSPARK --trust-remote-code",
        "corpus:dsv41-dspark-decode-graph-oom",
        Fix,
        "cuda-graph",
        {"--cuda-graph-max-bs-decode": "64"},
    ),
    S(
        "sglang.cuda-graph.capture",
        f"{PY} --model-path M --tp 8 --mem-fraction-static 0.95",
        "signature-logs/row-09-oom.txt",
        Fix,
        "cuda-graph",
        {"--mem-fraction-static": "0.88"},
    ),
    S(
        "sglang.cuda-graph.capture",
        f"{PY} --model-path openai/gpt-oss-20b --enable-torch-compile",
        "corpus:gpt-oss-torch-compile-capture-failure",
        Fix,
        "cuda-graph",
        {"--enable-torch-compile": None},
    ),
    S(
        "sglang.cuda-graph.capture",
        f"{PY} --model-path M --tp 8",
        "corpus:deepseek-v25-cuda-graph-capture-bug",
        Stop,
        "engine-bug",
    ),
    S(
        "sglang.network.http-port",
        f"{PY} --model-path M --port 31999",
        "sglang-outputs/port-http-in-use-vllm-stub.rc137.txt",
        Fix,
        "port-in-use",
        {"--port": "*"},
    ),
    S(
        "sglang.spec.steps-missing",
        f"{PY} --model-path M --device cpu --speculative-algorithm EAGLE3 --speculative-draft-model-path D --speculative-eagle-topk 4",
        "sglang-outputs/spec-topk-without-num-steps.rc1.txt",
        Fix,
        "spec-config",
        {"--speculative-num-steps": "2"},
    ),
    S(
        "sglang.spec.only-steps",
        "SGLANG_ENABLE_SPEC_V2=1 python -m sglang.launch_server --model-path /models/any-MTP-model --speculative-algorithm NEXTN --speculative-num-steps 1",
        "corpus:spec-num-steps-without-topk-typeerror",
        Fix,
        "spec-config",
        {"--speculative-eagle-topk": "1", "--speculative-num-draft-tokens": "2"},
    ),
    S(
        "sglang.spec.unknown-algorithm",
        f"{PY} --model-path M --speculative-algorithm EAGLE4",
        "sglang-outputs/invalid-speculative-algorithm-EAGLE4.rc1.txt",
        Stop,
        "spec-config",
    ),
    S(
        "sglang.spec.dp-attention",
        f"{PY} --model-path /models/model --tp-size 4 --dp-size 4 --enable-dp-attention --speculative-algorithm NGRAM",
        "corpus:ngram-with-dp-attention-rejected",
        Fix,
        "spec-config",
        {"--enable-dp-attention": None, "--speculative-algorithm": "NGRAM"},
    ),
    S(
        "sglang.spec.needs-chain",
        f"{PY} --model-path M --device cpu --speculative-algorithm EAGLE3 --speculative-draft-model-path D --speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8 --page-size 16",
        "sglang-outputs/spec-topk-gt-1-page-size-gt-1.rc1.txt",
        Fix,
        "spec-config",
        {"--speculative-eagle-topk": "1", "--speculative-num-draft-tokens": "4"},
    ),
    S(
        "sglang.memory.kv-pool-empty",
        f"{PY} --model-path M --mem-fraction-static 0.2",
        "signature-logs/row-05.txt",
        Fix,
        "oom",
        {"--mem-fraction-static": "0.88"},
    ),
    S(
        "sglang.memory.kv-pool-empty",
        f"{PY} --model-path M --mem-fraction-static 0.95",
        "signature-logs/row-05.txt",
        Stop,
        "oom",
    ),
    S(
        "sglang.memory.unbalanced",
        f"{PY} --model-path /workspace/model/Qwen2.5-72-int4 --tp-size 2",
        "corpus:memory-unbalanced-other-processes",
        Stop,
        "stale-gpu-process",
    ),
    S(
        "sglang.network.internal-port",
        f"{PY} --model-path M --port 30000",
        "signature-logs/row-19.txt",
        Fix,
        "port-in-use",
        {"--port": "*"},
    ),
    S(
        "sglang.hardware.no-gpu",
        f"{PY} --model-path M",
        "sglang-outputs/no-device-flag-no-accelerator.rc1.txt",
        Stop,
        "driver-cuda",
    ),
    S("sglang.hardware.no-gpu", f"{PY} --model-path M", "signature-logs/row-61.txt", Stop, "driver-cuda"),
    S(
        "sglang.hardware.driver-too-old",
        f"{PY} --model-path M",
        "signature-logs/row-30.txt",
        Stop,
        "driver-cuda",
    ),
    S(
        "sglang.hardware.no-kernel-image",
        f"{PY} --model-path M",
        "signature-logs/row-29.txt",
        Stop,
        "driver-cuda",
    ),
    S(
        "sglang.parallel.peer-access",
        f"{PY} --served-model-name=qwen --trust-remote-code --model=./Qwen2.5-0.5B-Instruct --tensor-parallel-size=2",
        "corpus:custom-allreduce-4090-peer-access",
        Fix,
        "nccl",
        {"--disable-custom-all-reduce": ""},
    ),
    S(
        "sglang.network.nccl-shm",
        f"{PY} --model-path M --tp-size 8",
        "signature-logs/row-38.txt",
        Fix,
        "nccl",
        env={"NCCL_SHM_DISABLE": "1"},
    ),
    S(
        "sglang.model.remote-code",
        f"{PY} --model-path org/custom-model",
        "signature-logs/row-52.txt",
        Fix,
        "trust-remote-code",
        {"--trust-remote-code": ""},
    ),
    S(
        "sglang.model.context-length",
        f"{PY} --model-path M --device cpu --context-length 100000",
        "sglang-outputs/context-length-over-model-max.rc1.txt",
        Fix,
        "context-length",
        {"--context-length": "512"},
    ),
    S(
        "sglang.model.required",
        "sglang serve --device cpu",
        "sglang-outputs/serve-missing-model-path.rc1.txt",
        Stop,
        "model-path",
    ),
    S(
        "sglang.hardware.package-skew",
        f"{PY} --model-path /models/google--gemma-3-27b-it --tp 4 --attention-backend flashinfer",
        "corpus:flashinfer-min-version-not-installed",
        Stop,
        "driver-cuda",
    ),
    S(
        "sglang.backend.fa3-not-here",
        f"{PY} --model-path M --attention-backend fa3",
        "signature-logs/row-28.txt",
        Fix,
        "attention-backend",
        {"--attention-backend": "flashinfer"},
    ),
    S(
        "sglang.spec.v2-tree-shapes",
        "SGLANG_ENABLE_SPEC_V2=1 python -m sglang.launch_server --model-path /dataset/model/llama3.1/Llama-3.1-8B-Instruct --speculative-algorithm EAGLE3 --speculative-draft-model-path jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B --speculative-num-steps 5 --speculative-num-draft-tokens 8 --speculative-eagle-topk 4 --disable-cuda-graph",
        "corpus:spec-v2-eagle3-topk-gt1",
        Fix,
        "spec-config",
        {"--speculative-eagle-topk": "1", "--speculative-num-draft-tokens": "6"},
        exit_kind="runtime-crash",
    ),
    S(
        "sglang.spec.attention-backend",
        f"{PY} --model-path /models/model --speculative-algorithm NGRAM --attention-backend torch_native",
        "corpus:ngram-torch-native-backend",
        Fix,
        "attention-backend",
        {"--attention-backend": None, "--speculative-algorithm": "NGRAM"},
    ),
    S(
        "sglang.memory.request-slots",
        f"{PY} --model-path M --max-running-requests 64",
        "signature-logs/row-14.txt",
        Fix,
        "oom",
        {"--max-running-requests": "32"},
    ),
    S(
        "sglang.parallel.heads",
        f"{PY} --model-path M --tp-size 4",
        "signature-logs/row-54.txt",
        Stop,
        "tp-config",
    ),
    S(
        "sglang.parallel.block-quant",
        f"{PY} --model-path Step-3.5-Flash-FP8 --tp 4 --ep 4 --quantization fp8 --trust-remote-code",
        "corpus:step35-fp8-tp4-block-quant-divisibility",
        Stop,
        "tp-config",
    ),
    S(
        "sglang.parallel.too-many-ranks",
        f"{PY} --model-path M --tp-size 8",
        "signature-logs/row-36.txt",
        Fix,
        "tp-config",
        {"--tp-size": "4"},
        gpus="4x H100 80GB",
    ),
    S(
        "sglang.model.missing",
        f"{PY} --model-path /nonexistent/model --device cpu",
        "sglang-outputs/model-path-nonexistent.rc1.txt",
        Stop,
        "model-path",
    ),
    S(
        "sglang.model.offline",
        f"{PY} --model-path meta-llama/Llama-3.1-8B-Instruct --device cpu",
        "sglang-outputs/model-hf-repo-id-offline.rc1.txt",
        Stop,
        "model-path",
    ),
    S(
        "sglang.model.gated",
        f"{PY} --model-path meta-llama/Llama-3.1-8B-Instruct",
        "signature-logs/row-51.txt",
        Stop,
        "model-path",
    ),
    S(
        "sglang.hardware.triton-smem",
        f"{PY} --model-path M --attention-backend triton",
        "signature-logs/row-41.txt",
        Fix,
        "attention-backend",
        {"--attention-backend": "flashinfer"},
    ),
    S(
        "sglang.hardware.shared-library",
        f"{PY} --model-path M --enable-memory-saver",
        "signature-logs/loader-preload-missing-libcudart.txt",
        Fix,
        "driver-cuda",
        {"--enable-memory-saver": None},
    ),
    S(
        "sglang.hardware.shared-library",
        f"{PY} --model-path M",
        "signature-logs/loader-preload-missing-libcudart.txt",
        Stop,
        "driver-cuda",
    ),
    S(
        "sglang.source.check",
        f"{PY} --model-path M --device cpu --served-model-name tiny-llama:v1",
        "sglang-outputs/served-model-name-colon.rc1.txt",
        Fix,
        "other",
        # Preflight's check of the same field respells the name (the `:` SGLang reads as an adapter's).
        {"--served-model-name": "tiny-llama-v1"},
    ),
    S(
        "sglang.hardware.fp8-arch",
        f"{PY} --model-path M --quantization fp8",
        "signature-logs/row-fp8-sm86.txt",
        Fix,
        "quantization",
        {"--quantization": None},
    ),
    S(
        "sglang.hardware.package-skew",
        f"{PY} --model-path M --device cpu",
        "sglang-outputs/eagle3-device-cpu.rc137.txt",
        Stop,
        "driver-cuda",
    ),
    S(
        "sglang.hardware.missing-module",
        f"{PY} --model-path M --device cpu --grammar-backend llguidance",
        "sglang-outputs/grammar-backend-llguidance-not-installed.rc137.txt",
        Fix,
        "other",
        {"--grammar-backend": None},
    ),
    S(
        "sglang.engine.static-faults",
        f"{PY} --model-path M --device cpu --port 70000",
        "sglang-outputs/port-out-of-range-vllm-stub.rc137.txt",
        Fix,
        "port-in-use",
        {"--port": None},
    ),
    S(
        "sglang.spec.validation",
        f"{PY} --model-path M --device cpu --speculative-algorithm EAGLE3 --speculative-draft-model-path D --speculative-draft-window-size 0",
        "sglang-outputs/spec-window-size-zero.rc1.txt",
        Fix,
        "spec-config",
        {"--speculative-draft-window-size": None},
    ),
    S(
        "sglang.backend.not-on-this-gpu",
        f"{PY} --model-path M --device cpu --decode-attention-backend trtllm_mha",
        "sglang-outputs/decode-backend-trtllm-mha-on-cpu.rc1.txt",
        Fix,
        "attention-backend",
        {"--decode-attention-backend": "*"},
    ),
    S(
        "sglang.source.check",
        f"{PY} --model-path M --device cpu --enable-deterministic-inference --attention-backend torch_native",
        "sglang-outputs/deterministic-inference-torch-native-backend.rc1.txt",
        Fix,
        "attention-backend",
        {"--attention-backend": "triton"},
    ),
    S(
        "sglang.source.check",
        f"{PY} --model-path M --device cpu --retraction-policy priority",
        "sglang-outputs/retraction-policy-priority-without-priority-scheduling.rc1.txt",
        Fix,
        "other",
        {"--enable-priority-scheduling": ""},
    ),
    S("sglang.memory.host-ram", f"{PY} --model-path M --tp 8", "signature-logs/row-03.txt", Stop, "oom"),
    S(
        "sglang.model.architecture",
        f"{PY} --model-path org/new-model",
        "signature-logs/row-53.txt",
        Fix,
        "trust-remote-code",
        {"--trust-remote-code": ""},
    ),
    S(
        "sglang.engine.nan",
        f"{PY} --model-path M --dtype float16",
        "signature-logs/row-27.txt",
        Fix,
        "other",
        {"--dtype": "bfloat16"},
    ),
    S(
        "sglang.network.hub-transient",
        f"{PY} --model-path org/model",
        "signature-logs/row-hub-503.txt",
        Retry,
        "model-path",
    ),
    S(
        "sglang.network.nccl-system",
        f"{PY} --model-path M --tp-size 8",
        "signature-logs/row-37.txt",
        Stop,
        "nccl",
    ),
    S(
        "sglang.memory.weights-do-not-fit",
        "python3 -m sglang.launch_server --model-path google/gemma-3-12b-it --dtype=float16 --quantization fp8 --mem-fraction-static 0.6",
        "corpus:gemma3-12b-on-16gb-oom",
        Stop,
        "oom",
        gpus="1x RTX 4070 Ti SUPER 16GB",
    ),
    S(
        "sglang.memory.weights-do-not-fit",
        "python3 -m sglang.launch_server --model-path google/gemma-3-12b-it --mem-fraction-static 0.6",
        "corpus:gemma3-12b-on-16gb-oom",
        Fix,
        "oom",
        {"--tp-size": "2"},
        gpus="2x RTX 4090",
    ),
    S(
        "sglang.engine.illegal-access",
        f"{PY} --model-path M",
        "signature-logs/row-33.txt",
        Stop,
        "engine-bug",
    ),
    S(
        "sglang.hardware.torch-compile",
        f"{PY} --model-path meta-llama/Meta-Llama-3.1-70B-Instruct --tp 8 --quantization fp8 --enable-torch-compile",
        "corpus:torch-compile-with-fp8-70b-v02",
        Fix,
        "other",
        {"--enable-torch-compile": None},
    ),
    S(
        "sglang.engine.static-faults",
        f"{PY} --model-path M --device cpu --tp-size 0",
        "sglang-outputs/tp-size-0.rc1.txt",
        Fix,
        "tp-config",
        {"--tp-size": "1"},
    ),
    S(
        "sglang.network.nodes-missing",
        f"{PY} --model-path M --tp-size 2 --nnodes 2 --node-rank 0 --dist-init-addr 127.0.0.1:29701",
        "sglang-outputs/multinode-rank0-peer-missing.rc137.txt",
        Stop,
        "nccl",
    ),
    S(
        "sglang.network.rendezvous-unreachable",
        f"{PY} --model-path M --tp-size 2 --nnodes 2 --node-rank 1 --dist-init-addr 127.0.0.1:29721",
        "sglang-outputs/multinode-rank1-peer-missing.rc137.txt",
        Stop,
        "nccl",
    ),
    S(
        "sglang.network.rendezvous-port",
        f"{PY} --model-path M --tp-size 2 --nnodes 2 --node-rank 0 --dist-init-addr 127.0.0.1:29741",
        "sglang-outputs/multinode-rank0-rendezvous-port-taken.rc137.txt",
        Stop,
        "port-in-use",
    ),
    S(
        "sglang.network.peer-node-lost",
        f"{PY} --model-path M --tp-size 2 --nnodes 2 --node-rank 0 --dist-init-addr 127.0.0.1:29711",
        "sglang-outputs/multinode-rank0-peer-killed.rc137.txt",
        Stop,
        "nccl",
    ),
    S(
        "sglang.engine.internal-crash",
        f"{PY} --model-path google/gemma-2-2b-it --speculative-algorithm EAGLE --speculative-draft-model-path /models/EAGLE-draft-for-the-target",
        "corpus:eagle-swa-target-gemma-crash",
        Stop,
        "engine-bug",
    ),
]


@pytest.mark.parametrize("s", SCENARIOS, ids=[f"{s.playbook}:{s.log}" for s in SCENARIOS])
def test_playbook_on_real_log(s: Scenario):
    spec = LaunchCommand.parse(s.command)
    lines = real_log(s.log)
    ctx = context_for(
        spec, CAT, lines, gpus=gpus_from_case(s.gpus), outcome=outcome_from_log(lines, s.exit_kind)
    )
    decision = decide(ctx)
    assert isinstance(decision, s.action), decision
    assert decision.category == s.category, decision
    if isinstance(decision, Fix):
        fixed = spec.apply_all(decision.edits, CAT.canonical)
        for flag, want in s.flags.items():
            if want is None:
                assert not fixed.has(flag, CAT.canonical), fixed.shell()
            elif want == "":
                assert fixed.has(flag, CAT.canonical) and not fixed.values(flag, CAT.canonical), fixed.shell()
            elif want == "*":
                assert fixed.value(flag, CAT.canonical) != spec.value(flag, CAT.canonical), fixed.shell()
            else:
                assert fixed.value(flag, CAT.canonical) == want, fixed.shell()
        for name, value in s.env.items():
            assert fixed.env_dict().get(name) == value
        assert decision.evidence
    owner = decision.playbook
    assert owner == s.playbook, (owner, decision.summary)


def test_every_builtin_playbook_is_tested_on_a_real_log():
    tested = {s.playbook for s in SCENARIOS} | {p for _, _, p in CASES}
    missing = sorted(pb.id for pb in all_playbooks() if pb.id not in tested)
    assert not missing, f"playbooks without a real-log test: {missing}"


def test_an_ngram_that_accepts_nothing_is_not_told_to_train_a_draft():
    # NGRAM has no draft model: it copies from earlier text, so its advice is about the workload.
    lines = real_log("corpus:eagle-algo-with-eagle3-draft-accept-1")
    spec = LaunchCommand.parse(f"{PY} --model-path M --speculative-algorithm NGRAM")
    ctx = context_for(spec, CAT, lines, outcome=outcome_from_log(lines, "runs-but-degraded"))
    decision = decide(ctx)
    assert isinstance(decision, Stop) and decision.playbook == "sglang.spec.accept-length-one"
    assert decision.summary.startswith(
        "NGRAM speculative decoding runs but accepts nothing (accept length 1.00)"
    )
    assert "draft" not in decision.summary and "trained for this exact target" not in decision.advice
    assert "repeat their input" in decision.advice


def test_a_low_but_working_acceptance_is_not_a_failure_for_the_playbook():
    # 1.2 is above "none accepted" (1.05): accept-length-one does not claim it, whatever the algorithm.
    lines = [
        ln.replace("accept_len: 1.00", "accept_len: 1.20")
        for ln in real_log("corpus:eagle-algo-with-eagle3-draft-accept-1")
    ]
    spec = LaunchCommand.parse(f"{PY} --model-path M --speculative-algorithm NGRAM")
    ctx = context_for(spec, CAT, lines, outcome=outcome_from_log(lines, "runs-but-degraded"))
    assert ctx.outcome.accept_length == pytest.approx(1.2)
    assert decide(ctx).playbook != "sglang.spec.accept-length-one"


def test_nothing_close_means_no_confident_guess():
    spec = LaunchCommand.parse(f"{PY} --model-path M")
    lines = ["[2026-01-01 00:00:00] Everything looked fine until the process vanished without a word."]
    decision = decide(context_for(spec, CAT, lines))
    assert isinstance(decision, Stop) and decision.category == "other" and decision.confidence <= 0.3


# Real cases from SGLang's issue tracker (tests/data/corpus-extra), each decided by the playbook named.
EXTRA = [
    ("custom-allreduce-v2-no-nvlink-capture-attributeerror", "sglang.engine.internal-crash"),
    ("deepep-normal-mode-cuda-graph-capture", "sglang.feature.not-capturable"),
    ("deepseek-v2-lite-awq-marlin-shape-misaligned", "sglang.hardware.quant-alignment"),
    ("dflash-under-pd-decode-spec-info-none", "sglang.spec.disaggregation"),
    ("dsv4-nextn-alias-rejected-use-eagle", "sglang.spec.supported-algorithms"),
    ("enable-reasoning-vllm-flag", "sglang.argparse"),
    ("expert-distribution-metrics-eagle-multistep-capture", "sglang.feature.not-capturable"),
    ("flashinfer-mla-nextn-topk-gt1", "sglang.spec.needs-chain"),
    ("gated-llama2-no-hf-auth", "sglang.model.gated"),
    ("gdn-hybrid-flashinfer-on-b300", "sglang.backend.only-listed"),
    ("gemma4-flashinfer-paged-prefill-invalid-config", "sglang.backend.required"),
    ("gpt-oss-eagle3-v3-head-aux-layer-mismatch", "sglang.engine.internal-crash"),
    ("hybrid-attention-backend-with-eagle-b200", "sglang.spec.backend-unsupported"),
    ("kimi-k26-eagle3-draft-without-lm-head-accept-1", "sglang.spec.accept-length-one"),
    ("kv-pool-undersized-loader-temporaries-eagle", "sglang.model.prompt-too-long"),
    ("max-loaded-loras-needs-newer-sglang", "sglang.argparse"),
    ("mimo-v25-vision-fa3-on-blackwell", "sglang.backend.fa3-not-here"),
    ("mm-attention-backend-triton-invalid-choice", "sglang.argparse"),
    ("ngram-with-replayssm-spec-gdn", "sglang.feature.named-in-error"),
    ("orphaned-dp-schedulers-hold-gpus-after-slurm-job", "sglang.memory.stale-holders"),
    ("qwen3-yarn-override-context-length-not-raised", "sglang.model.prompt-too-long"),
    ("qwen35-vision-heads-tp6-ascend", "sglang.parallel.odd-tp"),
    ("rocm-dsa-mtp-overlap-draft-extend-assert", "sglang.spec.overlap-worker"),
    ("rpc-port-held-by-dying-predecessor", "sglang.network.internal-port"),
    ("sm75-gemma-rmsnorm-no-kernel-image", "sglang.hardware.no-kernel-image"),
    ("tool-call-parser-llama4-invalid-choice", "sglang.argparse"),
    ("tp2-warmup-hang-custom-allreduce", "sglang.parallel.warmup-hang"),
]


# A second set (tests/data/corpus-blind), added in the same commit as the rules that decide it: it is not
# held out. Cases the rules answer differently from the thread are scored in test_corpus_scores, not here.
BLIND = [
    ("deepseek-r1-int8-arch-not-supported-stale-kernels", "sglang.model.architecture"),
    ("glm4-0414-arch-unsupported-old-sglang", "sglang.model.architecture"),
    ("kimi-k26-eagle3-draft-inherits-mla-backend", "sglang.backend.draft-worker"),
    ("model-prefix-ambiguous-after-loader-config-flag", "sglang.argparse"),
    ("qwen25-specforge-eagle3-draft-capture-crash", "sglang.cuda-graph.capture"),
    ("qwen35-eagle3-aux-hidden-unpack-capture", "sglang.engine.internal-crash"),
    ("speculative-adaptive-shared-logits-buffer-assert", None),
]
# corpus-fresh-2 was scored blind (8/25) before the rules below were written from its failures' kinds; it
# is no longer held out (corpus-fresh-3 is), and these cases are the rules' real logs.
FRESH2 = [
    ("nvfp4-checkpoint-autodetected-as-modelopt-fp8", "sglang.message.use-choice"),
    ("nextn-flashinfer-mla-draft-tokens-3-not-power-of-two", "sglang.message.power-of-two"),
    ("kimi-k25-pipeline-parallel-not-supported", "sglang.feature.named-in-error"),
    ("fp8-moe-flashinfer-cutlass-runner-missing", "sglang.feature.named-in-error"),
    ("glm5-fp8-b300-deepgemm-tma-capture-illegal-address-0512", "sglang.cuda-graph.capture"),
]
# corpus-fresh-3 was scored blind (its first 23 cases 11/23, its last 10 6/10) before the rules below were
# generalised from the kinds of its failures; it is development data now.
FRESH3 = [
    ("memory-saver-preload-cuda13-pip-libcudart-missing", "sglang.hardware.shared-library"),
    ("model-path-with-colon-revision-suffix-hfvalidationerror", "sglang.model.missing"),
    ("eagle3-without-draft-model-path-loads-target-as-draft", "sglang.spec.no-draft"),
    ("rocm-mi300-mla-decode-triton-shared-mem-out-of-resources", "sglang.hardware.triton-smem"),
    ("deterministic-inference-fp16-sm89-persistent-matmul-smem", "sglang.hardware.triton-smem"),
    ("pipeline-parallel-with-speculative-decoding-rejected", "sglang.source.check"),
]
# corpus-fresh (the first blind set) is development data: a real log per rule generalised from it.
FRESH = [
    ("qwen35-mtp-radix-no-buffer-rocm", "sglang.source.check"),
]
# corpus-fresh-4 was scored blind (6/10 before the session, 6/10 when first scored); the rules below were
# then generalised from the kinds of its failures, so it is development data now.
FRESH4 = [
    ("served-model-name-with-colon-parsed-as-lora-adapter", "sglang.serving.served-name-colon"),
    ("hicache-on-swa-model-hiradixcache-unsupported-unified-radix-env", "sglang.feature.named-in-error"),
    ("glm5-fp8-mi325x-forced-aiter-backend-mha-k-triton-compile-error", "sglang.feature.named-in-error"),
]
# corpus-fresh-5 was scored blind (5/11 on the code before and after the day's work); then read.
FRESH5 = [
    ("diffusion-serve-rejects-served-model-name", "sglang.argparse"),
]
# The reading generalised after corpus-fresh-6 (tests/test_failure_reading.py) answers these, two logs of
# different formats (a faulthandler dump, a cut Python traceback).
FRESH2 += [
    ("mlx-mixed-chunk-mps-cat-segfault", "sglang.feature.lone-choice"),
    ("eagle-draft-fp16-target-bf16-dtype-mismatch-capture", "sglang.spec.draft-dtype"),
    ("base-model-no-chat-template-openai-chat", "sglang.serving.no-chat-template"),
]
FRESH += [
    ("amd-piecewise-cuda-graph-forward-context-regression", "sglang.engine.advice"),
    ("dsv4-deepgemm-242-jit-warmup-m-indices-typeerror", "sglang.default.deepgemm"),
]
FRESH6 = [
    ("rocm-aiter-custom-allreduce-graph-capture-hsa-exception-hy3", "sglang.parallel.amd-allreduce"),
    ("rdna-gfx1151-default-aiter-arch-unsupported-use-triton", "sglang.backend.aiter-arch"),
]
# corpus-real-engine: recorded blind on the real SGLang 0.5.23 (3/13 before), read afterwards.
REAL_ENGINE = [
    ("chat-template-name-not-builtin", "sglang.serving.unknown-chat-template"),
    ("load-format-pt-on-safetensors-model", "sglang.model.no-weights"),
]
REAL_ENGINE_2 = [
    ("triton-attention-backend-on-cpu", "sglang.hardware.backend-off-device"),
    ("host-with-port-suffix", "sglang.network.host-with-port"),
    ("hierarchical-cache-on-cpu", "sglang.hardware.gpu-feature-off-device"),
]
REAL_ENGINE_4 = [
    ("radix-eviction-slru-with-tlru-config-keys", "sglang.flag.json-unknown-key"),
    ("kv-canary-on-cpu-device-stream", "sglang.feature.named-in-error"),
    ("rl-on-policy-target-on-cpu", "sglang.source.check"),
]
# corpus-real-engine-7: recorded blind (2/12 on arrival: most fail on the first request), read afterwards.
REAL_ENGINE_7 = [
    ("skip-tokenizer-init-chat-request-500", "sglang.request.no-tokenizer"),
    ("is-embedding-on-causal-lm-crashes-on-chat", "sglang.request.embedding-model-generates"),
    ("generation-config-top-k-zero-rejects-chat", "sglang.request.sampling-default-rejected"),
    ("preferred-sampling-params-top-p-as-percent-fails-warmup", "sglang.request.sampling-default-rejected"),
    ("chat-template-jinja-unclosed-for-block", "sglang.request.chat-template-broken"),
    ("lora-dora-adapter-unsupported", "sglang.model.adapter-kind-unsupported"),
    ("max-total-tokens-zero-not-enough-memory", "sglang.memory.kv-pool-empty"),
    ("env-external-model-package-not-importable", "sglang.hardware.missing-module"),
]
REAL_ENGINE_9 = [
    ("return-hidden-states-mode-last-rejects-full-request", "sglang.message.remedy"),
    ("strict-thinking-with-grammar-backend-none", "sglang.message.remedy"),
]
REAL_ENGINE_5 = [
    ("host-ip-not-on-this-machine-hangs", "sglang.network.own-address-unreachable"),
    ("chunked-prefill-size-zero-kv-budget-negative", "sglang.memory.kv-pool-empty"),
]
REAL_ENGINE_3 = [
    ("dist-init-addr-without-port", "sglang.network.dist-init-addr"),
    ("max-queued-requests-zero-rejects-warmup", "sglang.serving.queue-too-small-for-warmup"),
    ("env-dist-init-method-override-without-tcp-scheme", "sglang.network.init-method-without-scheme"),
]
_WARMUP_IDS = "sglang.serving.warmup-ids-beyond-the-vocabulary"
_HF_TEMPLATE = "sglang.serving.unknown-hf-template-name"
_TIKTOKEN = "sglang.model.tokenizer-file-read-as-tiktoken"
_ARCHITECTURE = "sglang.model.architecture-respelled"
_SHAPES = "sglang.model.weights-do-not-fit-the-config"
FRESH3_MORE = [("dsv4-flash-dp-attention-eagle-overlap-chat-hang", "sglang.feature.default-named")]
FRESH4 += [("gemma4-bf16-checkpoint-forced-modelopt-fp4-tuple-index", "sglang.feature.lone-choice")]
CASES = (
    [("corpus-fresh", c, p) for c, p in FRESH]
    + [("corpus-fresh-5", c, p) for c, p in FRESH5]
    + [("corpus-fresh-4", c, p) for c, p in FRESH4]
    + [("corpus-extra", c, p) for c, p in EXTRA]
    + [("corpus-blind", c, p) for c, p in BLIND]
    + [("corpus-fresh-2", c, p) for c, p in FRESH2]
    + [("corpus-fresh-3", c, p) for c, p in FRESH3 + FRESH3_MORE]
    + [("corpus-fresh-6", c, p) for c, p in FRESH6]
    + [("corpus-real-engine", c, p) for c, p in REAL_ENGINE]
    + [("corpus-real-engine-2", c, p) for c, p in REAL_ENGINE_2]
    + [("corpus-real-engine-3", c, p) for c, p in REAL_ENGINE_3]
    + [("corpus-real-engine-4", c, p) for c, p in REAL_ENGINE_4]
    + [("corpus-real-engine-5", c, p) for c, p in REAL_ENGINE_5]
    + [("corpus-real-engine-7", c, p) for c, p in REAL_ENGINE_7]
    + [("corpus-real-engine-9", c, p) for c, p in REAL_ENGINE_9]
    + [
        ("corpus-real-engine-12", "page-size-zero", "sglang.value.zero-chosen"),
        ("corpus-real-engine-14", "decode-log-interval-zero-crashes-warmup", "sglang.value.zero-chosen"),
        (
            "corpus-real-engine-14",
            "chat-template-hf-tokenizer-config-json",
            "sglang.request.chat-template-unreadable",
        ),
        (
            "corpus-real-engine-19",
            "metrics-endpoint-404-without-enable-metrics",
            "sglang.request.metrics-off",
        ),
        ("corpus-real-engine-21", "warmups-voice-chat-on-small-vocab-model", _WARMUP_IDS),
        (
            "corpus-real-engine-29",
            "sc-eagle3-draft-dir-without-weights",
            "sglang.speculative.draft-unreadable",
        ),
        ("corpus-real-engine-24", "lora-paths-json-form-wrong-keys", "sglang.flag.json-keys-respelled"),
        (
            "corpus-real-engine-24",
            "lora-requests-on-server-without-enable-lora",
            "sglang.request.lora-not-enabled",
        ),
        ("corpus-real-engine-43", "device-hpu-on-cpu-host", "sglang.hardware.device-absent"),
        (
            "corpus-real-engine-56",
            "json-override-max-position-embeddings-quoted-string",
            "sglang.flag.json-number-quoted",
        ),
        (
            "corpus-real-engine-52",
            "prefill-max-requests-zero-warmup-never-scheduled",
            "sglang.value.zero-stalls",
        ),
        ("corpus-real-engine-50", "ssl-key-cert-mismatch", "sglang.network.tls-pair-does-not-load"),
        (
            "corpus-real-engine-50",
            "ssl-ca-certs-cert-without-ip-san-warmup-fails",
            "sglang.network.tls-own-warmup-unverified",
        ),
        (
            "corpus-real-engine-46",
            "tool-call-parser-glm47-on-llama-required-ignored",
            "sglang.request.tool-parser-of-another-family",
        ),
        (
            "corpus-real-engine-42",
            "nnodes-2-node-0-alone-on-one-host-hangs",
            "sglang.parallel.peers-never-join",
        ),
        (
            "corpus-real-engine-44",
            "export-architectures-llamamodel-transformers-fallback",
            "sglang.model.head-does-not-generate",
        ),
        ("corpus-real-engine-31", "env-health-check-timeout-with-unit-suffix", "sglang.value.not-a-number"),
        ("corpus-real-engine-33", "tokenizer-path-repo-id-offline", "sglang.model.hub-unreachable"),
        ("corpus-real-engine-60", "hf-home-set-to-hub-subfolder-offline", "sglang.model.cache-variable"),
        ("corpus-real-engine-68", "pythonwarnings-error-sglang-serve", "sglang.host.warnings-as-errors"),
        ("corpus-real-engine-69", "env-http-proxy-breaks-local-warmup", "sglang.host.proxy-for-own-requests"),
        (
            "corpus-real-engine-69",
            "env-pythonoptimize-2-strips-docstrings",
            "sglang.host.docstrings-stripped",
        ),
        ("corpus-real-engine-67", "crash-dump-folder-is-existing-file", "sglang.path.output-unwritable"),
        (
            "corpus-real-engine-59",
            "auto-map-points-to-missing-file-with-trust-remote-code",
            "sglang.model.remote-code-missing",
        ),
        (
            "corpus-real-engine-61",
            "checkpoint-engine-wait-weights-without-pusher-hang",
            "sglang.serving.waits-for-outside",
        ),
        (
            "corpus-real-engine-64",
            "gated-launch-port-on-first-instance-http-port",
            "sglang.network.http-port",
        ),
        (
            "corpus-real-engine-60",
            "nonroot-user-port-80-permission-denied-hang",
            "sglang.network.privileged-port",
        ),
        ("corpus-real-engine-60", "tmpdir-too-long-zmq-ipc-path", "sglang.host.socket-path-too-long"),
        ("corpus-real-engine-60", "readonly-rootfs-no-writable-tmp", "sglang.host.no-writable-temp"),
        (
            "corpus-real-engine-60",
            "gloo-socket-ifname-missing-interface",
            "sglang.host.network-interface-missing",
        ),
        (
            "corpus-real-engine-40",
            "json-override-hidden-act-unsupported-by-llama",
            "sglang.model.override-from-another-model",
        ),
        (
            "corpus-real-engine-9",
            "reasoning-parser-on-non-reasoning-model-empty-content",
            "sglang.request.reasoning-parser-takes-the-answer",
        ),
        ("corpus-real-engine-37", "env-prometheus-multiproc-dir-missing", "sglang.env.folder-not-there"),
        (
            "corpus-real-engine-34",
            "host-with-trailing-comma-hangs-in-dist-init",
            "sglang.value.pasted-punctuation",
        ),
        (
            "corpus-real-engine-25",
            "max-total-tokens-64-truncates-completion",
            "sglang.memory.pool-below-context",
        ),
        (
            "corpus-real-engine-28",
            "attn-dp-on-cpu-torch-native-not-implemented",
            "sglang.parallel.mlp-sync-unsupported-backend",
        ),
        ("corpus-real-engine-21", "hf-chat-template-name-not-in-named-templates", _HF_TEMPLATE),
        ("corpus-real-engine-21", "tokenizer-path-points-at-tokenizer-json-file", _TIKTOKEN),
        ("corpus-real-engine-22", "config-architecture-typo-fixed-by-override", _ARCHITECTURE),
        ("corpus-real-engine-22", "json-override-num-heads-breaks-weight-shapes", _SHAPES),
        # The engine check reads the algorithm through a helper's parameter named as the field.
        ("corpus-real-engine-18", "eagle3-with-gemma4-assistant-draft", "sglang.source.check"),
        ("corpus-real-engine-25", "input-embeds-request-with-radix-cache-on", "sglang.request.input-embeds"),
        ("corpus-real-engine-26", "hicache-size-exceeds-host-memory", "sglang.memory.hicache-host-too-small"),
    ]
)


@pytest.mark.parametrize(("folder", "case_id", "playbook_id"), CASES, ids=[c for _, c, _ in CASES])
def test_playbook_solves_a_real_issue_case(folder, case_id, playbook_id):
    from specdoctor.agent.diagnose import as_contract
    from specdoctor.agent.evaluate import score_case

    case = json.loads((DATA / folder / f"{case_id}.json").read_text())
    lines = case["log"].splitlines()
    ctx = context_for(
        LaunchCommand.parse(case["command"]),
        CAT,
        lines,
        gpus=gpus_from_case(case["gpus"]),
        outcome=outcome_from_log(lines, case["exit_kind"]),
    )
    contract = as_contract(decide(ctx), ctx)
    assert contract["playbook"] == playbook_id, contract
    assert score_case(case, contract, CAT).solved, contract


def _healthy_startup() -> list[str]:
    return real_log("sglang-outputs/serve-module.log")


def test_a_crash_after_ready_is_not_blamed_on_cuda_graph_capture():
    lines = [
        *_healthy_startup(),
        "[2026-12-03 08:30:00] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1, in event_loop',
        "KeyError: 'rid'",
    ]
    ctx = context_for(
        LaunchCommand.parse(f"{PY} --model-path M"),
        CAT,
        lines,
        outcome=outcome_from_log(lines, "runtime-crash"),
    )
    decision = decide(ctx)
    assert decision.playbook != "sglang.cuda-graph.capture" and decision.category == "engine-bug"


def test_an_oom_after_the_kv_pool_is_placed_lowers_the_fraction_instead_of_giving_up():
    oom = next(ln for ln in real_log("signature-logs/row-34.txt") if ln.strip())
    lines = [*_healthy_startup(), oom]
    ctx = context_for(
        LaunchCommand.parse(f"{PY} --model-path M --mem-fraction-static 0.9"),
        CAT,
        lines,
        outcome=outcome_from_log(lines, "runtime-crash"),
    )
    decision = decide(ctx)
    assert isinstance(decision, Fix) and decision.playbook == "sglang.memory.weights-do-not-fit"
    assert any(
        getattr(e, "flag", "") == "--mem-fraction-static" and float(e.values[0]) < 0.9 for e in decision.edits
    )


def test_stale_holders_reads_a_real_nvidia_smi_table_pasted_under_an_oom():
    """A second, independent log for the rule: nvidia-smi's own table (a different format from the corpus
    case's bare columns), pasted after a real CUDA OOM."""
    table = real_log("nvidia-smi/tables-other-drivers/2x-rtx4090__570.148.08__1proc.txt")
    oom = next(ln for ln in real_log("signature-logs/row-34.txt") if ln.strip())
    lines = [oom, *table]
    ctx = context_for(LaunchCommand.parse(f"{PY} --model-path M --tp-size 2"), CAT, lines)
    decision = decide(ctx)
    assert isinstance(decision, Stop) and decision.playbook == "sglang.memory.stale-holders"
    assert "553657 (text-embeddings-router, 15506 MiB on GPU" in decision.summary


def test_an_engine_bug_stop_carries_a_bug_report_with_secrets_masked():
    case = json.loads((DATA / "corpus" / "deepseek-v25-cuda-graph-capture-bug.json").read_text())
    lines = case["log"].splitlines()
    command = case["command"] + " --api-key sk-abcdefghijklmnopqrstuvwx"
    ctx = context_for(
        LaunchCommand.parse(command), CAT, lines, outcome=outcome_from_log(lines, case["exit_kind"])
    )
    decision = decide(ctx)
    assert isinstance(decision, Stop) and decision.category == "engine-bug"
    report = decision.bug_report
    assert "**Raised at**: srt/model_executor/cuda_graph_runner.py:147" in report
    assert "--api-key '***'" in report and "sk-abcdefghijklmnopqrstuvwx" not in report
    assert "**SGLang**: not known from the log" in report and "Capture cuda graph begin" in report


@pytest.mark.parametrize(("auto_map", "action"), [(True, Fix), (False, Stop)])
def test_a_model_type_transformers_lacks_is_read_from_the_checkpoint(tmp_path, auto_map, action):
    # transformers' own words: "...does not recognize this architecture. This could be because of an issue
    # with the checkpoint, or because your version of Transformers is out of date." config.json decides.
    from specdoctor.tools.system import model_facts

    config = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3"}
    if auto_map:
        config["auto_map"] = {"AutoConfig": "configuration_x.XConfig"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    spec = LaunchCommand.parse(f"{PY} --model-path {tmp_path}")
    lines = real_log("signature-logs/row-53.txt")
    ctx = context_for(spec, CAT, lines, model=model_facts(str(tmp_path)), outcome=outcome_from_log(lines))
    decision = decide(ctx)
    assert isinstance(decision, action) and decision.playbook == "sglang.model.architecture", decision
    if auto_map:
        assert decision.confidence == 0.7 and "auto_map" in decision.summary
    else:
        assert "older than the model" in decision.summary
