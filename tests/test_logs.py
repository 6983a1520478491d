"""Root causes, stages and compaction on real SGLang 0.5.23 outputs and real crash excerpts."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from specdoctor.tools.engines import SGLANG
from specdoctor.tools.logs import (
    RootCause,
    ScanLimits,
    StageTracker,
    compact,
    extract_root_cause,
    read_tail,
    scan_file,
    strip_prefix,
    usage_dump_span,
)

DATA = Path(__file__).parent / "data"
OUTPUTS = DATA / "sglang-outputs"
CORPUS = DATA / "corpus"
READY = "The server is fired up and ready to roll!"

# The recorder wrote the last line containing `Error:`; the traceback really ends in
# `requests.exceptions.InvalidURL` (no "Error" in its name), raised while handling the header's line.
IMPLIED_BY_HEADER = {
    "port-out-of-range-vllm-stub.rc137.txt": (
        "requests.exceptions.InvalidURL: Failed to parse: http://127.0.0.1:70000/model_info"
    ),
}
# Recorded with a request after ready: the client's side follows this line.
CLIENT_SIDE = "--- client side (curl) ---"
# Headers cut `last_error_line` at 300 characters.
HEADER_CHARS = 300


def read_output(path: Path) -> tuple[dict[str, str], list[str]]:
    """(`# key: value` header, output lines) of a recorded output; files without a header are all body."""
    lines = path.read_text().splitlines()
    if not lines or not lines[0].startswith("# case:"):
        return {}, lines
    end = next(i for i, line in enumerate(lines) if line.startswith("# ---- stdout"))
    header = dict(line[2:].partition(": ")[::2] for line in lines[:end])
    return header, lines[end + 1 :]


def is_wrapper(line: str | None) -> bool:
    return line is not None and any(w.pattern.search(line) for w in SGLANG.wrappers)


ALL_OUTPUTS = sorted(OUTPUTS.iterdir())


def test_every_recorded_launch_output_is_covered() -> None:
    # REPORT.md §3: 57 real outputs of broken launches, plus those recorded since from the same real SGLang
    # 0.5.23 to give a rule its second real log (each read by the rule's test), a two-node launch on one host,
    # and requests after ready; each has a header to check against.
    launches = [p for p in ALL_OUTPUTS if ".rc" in p.name]
    assert len(launches) == 185
    assert all(read_output(p)[0].get("last_error_line") for p in launches)


@pytest.mark.parametrize("path", ALL_OUTPUTS, ids=lambda p: p.name)
def test_root_cause_of_every_real_output(path: Path, tmp_path: Path) -> None:
    header, body = read_output(path)
    root = extract_root_cause(body)
    if not header:
        # Complete startups, endpoint bodies, readiness polls, server_info: nothing failed.
        assert root.kind == "none", root.error_line
        return
    expected = strip_prefix(header["last_error_line"])
    if header["exit_code"] == "124" and root.kind == "none":
        # Killed by `timeout` while hanging: no error of its own, only the warning it kept retrying (or, with
        # a fatal line of its own, read like any other failure below).
        assert any(expected[:HEADER_CHARS] in strip_prefix(line) for line in body)
        return
    if path.name in IMPLIED_BY_HEADER:
        assert root.error_line == IMPLIED_BY_HEADER[path.name]
        assert expected in root.chain
    else:
        assert root.error_line is not None
        assert root.error_line[:HEADER_CHARS] == expected[:HEADER_CHARS]
    assert not is_wrapper(root.error_line)
    exit_code = header["exit_code"]
    assert root.kind == {"2": "argparse", "1": "exception"}.get(exit_code, root.kind)
    if exit_code == "137" and CLIENT_SIDE not in body:  # a request recording: stopped by us, not killed
        assert root.kind in ("exception", "fatal-line")
        assert "kill_process_tree" not in root.error_line  # type: ignore[operator]
    if any("Scheduler hit an exception" in line for line in body):
        assert root.wrapper == "Scheduler hit an exception"
    # The same answer from the file, and the compact text leads with it.
    log = tmp_path / path.name
    log.write_text("\n".join(body) + "\n")
    summary = scan_file(log)
    assert summary.root_cause.error_line == root.error_line
    assert len(summary.compact) <= 6000
    assert root.error_line[:200] in summary.compact  # type: ignore[index]


def test_traceback_block_keeps_frames_and_is_bounded() -> None:
    _, body = read_output(OUTPUTS / "eagle3-device-cpu.rc137.txt")
    root = extract_root_cause(body)
    assert root.exception_type == "ModuleNotFoundError"
    assert root.message == "No module named 'vllm'"
    assert len(root.block) <= 40
    assert root.block[0].startswith("Scheduler hit an exception: Traceback")
    assert root.block[-1] == "ModuleNotFoundError: No module named 'vllm'"
    assert root.block[-2] == "    from vllm._custom_ops import rotary_embedding"
    path, line, function = root.frames[-1]
    assert path.endswith("sglang/srt/layers/rotary_embedding/base.py")
    assert (line, function) == (138, "__init__")
    assert root.wrappers == (
        "Scheduler hit an exception",
        "Received sigquit from a child process",
        "kill_process_tree called",
    )


def test_chained_exceptions_are_kept_oldest_first() -> None:
    _, body = read_output(OUTPUTS / "model-hf-repo-id-offline.rc1.txt")
    root = extract_root_cause(body)
    assert root.error_line == (
        "OSError: We couldn't connect to 'https://huggingface.co' to load the files, "
        "and couldn't find them in the cached files."
    )
    assert root.chain[0].startswith(
        "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files"
    )
    # The message goes on on the next line, and stays with it.
    assert root.message.endswith("'https://huggingface.co/docs/transformers/installation#offline-mode'.")
    assert root.wrapper == "kill_process_tree called"


def test_multiline_exception_message_stays_in_the_block() -> None:
    # Signatures rows 9/10: the 0.5.23 wording of a graph-capture failure, as the scheduler logs it.
    lines = [
        "[2026-12-03 08:19:28 TP0] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=9.50 GB",
        "[2026-12-03 08:19:30 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/usr/lib/python3/site-packages/sglang/srt/model_executor/model_runner.py", line 1620, in init_device_graphs',
        "    CudaGraphRunner(self)",
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 7 has a total capacity of 95.00 GiB",
        "Possible solutions:",
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
        "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)",
        "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. (Not recommended. Huge performance loss)",
        "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose ",
        "",
        "[2026-12-03 08:19:30] Received sigquit from a child process. It usually means the child failed.",
    ]
    root = extract_root_cause(lines)
    assert root.exception_type == "Exception"
    assert root.error_line.startswith("Exception: Capture cuda graph failed: CUDA out of memory.")  # type: ignore[union-attr]
    assert "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)" in root.message
    assert root.block[-1].startswith("Open an issue on GitHub")
    assert root.frames[-1][2] == "init_device_graphs"
    tracker = StageTracker(clock=lambda: 0.0)
    for line in lines:
        tracker.feed(line)
    assert tracker.stage == "cuda_graph"


def test_port_in_use_is_fatal_although_sglang_keeps_running() -> None:
    _, body = read_output(OUTPUTS / "port-http-in-use-vllm-stub.rc137.txt")
    root = extract_root_cause(body)
    assert root.kind == "fatal-line"
    assert "[Errno 98]" in root.error_line  # type: ignore[operator]
    tracker = StageTracker(clock=lambda: 0.0)
    fatal_at = None
    for i, line in enumerate(body):
        tracker.feed(line)
        if fatal_at is None and tracker.fatal_line:
            fatal_at = i
    # Flagged on the bind error itself, three minutes before our timeout killed the hung launcher.
    assert body[fatal_at].endswith("address already in use")  # type: ignore[index]
    assert not tracker.ready
    assert tracker.stage == "scheduler"


def test_bare_uvicorn_bind_failure() -> None:
    lines = (DATA / "uvicorn-port-in-use.txt").read_text().splitlines()
    root = extract_root_cause(lines)
    assert root.kind == "fatal-line"
    assert root.error_line == (
        "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use"
    )
    tracker = StageTracker(clock=lambda: 0.0)
    for line in lines:
        tracker.feed(line)
    assert tracker.fatal_line == root.error_line


@pytest.mark.parametrize("name", ["serve-module.log", "serve-serve.log"])
def test_successful_startup_goes_through_the_stages_in_order(name: str) -> None:
    ticks = iter(range(10_000))
    tracker = StageTracker(clock=lambda: float(next(ticks)))
    changes = [c for c in (tracker.feed(line) for line in (OUTPUTS / name).read_text().splitlines()) if c]
    seen = [c.stage for c in changes]
    # No graph capture on CPU; every other stage, in profile order.
    assert seen == [
        "args",
        "init",
        "weights",
        "weights_done",
        "kv_cache",
        "scheduler",
        "http",
        "warmup",
        "ready",
    ]
    order = [s.id for s in SGLANG.stages]
    assert [order.index(s) for s in seen] == sorted(order.index(s) for s in seen)
    assert [c.previous for c in changes[1:]] == seen[:-1]
    assert changes[-1].line == READY
    assert tracker.ready
    assert tracker.stage_started_at == changes[-1].at
    assert tracker.state().last_stage_line == READY
    summary = scan_file(OUTPUTS / name)
    assert (summary.stage, summary.ready, summary.root_cause.kind) == ("ready", True, "none")


def test_stage_tracker_on_the_real_readiness_poll() -> None:
    # Each poll line: seconds since launch, then the last log line at that moment.
    polls = []
    for row in (OUTPUTS / "serve-module-readiness-poll.txt").read_text().splitlines():
        if row.startswith("t="):
            t, _, line = row.partition(" | ")
            polls.append((float(t.split()[0][2:-1]), line))
    tracker = StageTracker(clock=lambda: 0.0, started_at=0.0)
    for now, line in polls:
        tracker.feed(line, now=now)
        if now == 17.5:
            # The same "chat template" line since 9.2 s: no progress for 8.3 s. The poll never caught the
            # `server_args=` line, so the tracker cannot know more than "launched".
            assert tracker.stage == "launch"
            assert tracker.last_progress_at == 9.2
            assert tracker.seconds_since_progress(now) == pytest.approx(8.3)
    assert tracker.stage == "weights_done"
    assert tracker.stage_started_at == 19.1
    # Our own /v1/models polls after 19.1 s are not progress.
    assert tracker.last_progress_at == 19.1
    assert tracker.seconds_in_stage(20.8) == pytest.approx(1.7)


def test_probe_access_lines_and_repeats_are_not_progress() -> None:
    now = [0.0]
    tracker = StageTracker(clock=lambda: now[0])
    log = (OUTPUTS / "serve-module.log").read_text().splitlines()
    probe = next(line for line in log if '"GET /health HTTP/1.1" 503' in line)
    generate = next(line for line in log if '"POST /generate HTTP/1.1" 200' in line)
    for t, line in ((1.0, log[10]), (2.0, log[10]), (3.0, probe), (4.0, probe), (5.0, generate)):
        now[0] = t
        tracker.feed(line)
        assert tracker.last_progress_at == {1.0: 1.0, 2.0: 1.0, 3.0: 1.0, 4.0: 1.0, 5.0: 5.0}[t]


def test_accept_length_from_decode_batch_lines() -> None:
    tracker = StageTracker(clock=lambda: 0.0)
    plain = next(
        line for line in (OUTPUTS / "serve-module.log").read_text().splitlines() if "Decode batch" in line
    )
    tracker.feed(plain)
    assert tracker.accept_length is None
    # metrics_reporter.py's format with speculative decoding on; `block accept len` is another metric.
    tracker.feed(
        "[2026-12-03 09:00:01 TP0] Decode batch, #running-req: 1, #token: 90, token usage: 0.00, "
        "accept len: 1.00, accept rate: 0.25, block accept len: 3.50, cuda graph: True, "
        "gen throughput (token/s): 61.22, #queue-req: 0"
    )
    assert tracker.accept_length == 1.0
    tracker.feed(
        "[2026-12-03 09:00:02 DP0 TP0] Decode batch, #running-req: 2, accept len: 3.25, accept rate: 0.81"
    )
    state = tracker.state()
    assert (state.accept_length, state.accept_samples, state.accept_length_mean) == (3.25, 2, 2.125)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            "[2026-12-03 08:10:59 TP1] Scheduler hit an exception: Traceback",
            "Scheduler hit an exception: Traceback",
        ),
        ("[2026-12-03 08:10:59 DP0 TP0] Init parallel begin.", "Init parallel begin."),
        (
            "[2026-12-03 08:10:59 TP0 EP0] Load weight begin. avail mem=21.62 GB",
            "Load weight begin. avail mem=21.62 GB",
        ),
        ("[2026-12-03 08:10:59.123 PP1 TP3] KV Cache is allocated.", "KV Cache is allocated."),
        (
            "[23:17:01 TP7] Load weight end. type=DeepseekV2ForCausalLM",
            "Load weight end. type=DeepseekV2ForCausalLM",
        ),
        (
            "\x1b[1;33m'--disable-cuda-graph' is deprecated and will be removed in a future release.\x1b[0m",
            "'--disable-cuda-graph' is deprecated and will be removed in a future release.",
        ),
        (
            "(EngineCore_DP0 pid=3114) ERROR 07-01 09:12:40 [core.py:515] EngineCore failed to start.",
            "EngineCore failed to start.",
        ),
        (
            "(APIServer pid=1) INFO 07-01 09:12:01 [api_server.py:1395] Starting vLLM API server",
            "Starting vLLM API server",
        ),
        ('  File "/x.py", line 3, in f', '  File "/x.py", line 3, in f'),
        ("[...]", "[...]"),
        ('[rank1]:   File "/x.py", line 3, in f', '  File "/x.py", line 3, in f'),
        ("[rank0]: RuntimeError: NCCL error", "RuntimeError: NCCL error"),
    ],
)
def test_strip_prefix(line: str, message: str) -> None:
    assert strip_prefix(line) == message


CORPUS_EXPECTED: dict[str, tuple[str, str | None]] = {
    "custom-allreduce-4090-peer-access": (
        "exception",
        "RuntimeError: CUDART error: peer access is not supported between these two devices",
    ),
    "deepseek-v25-cuda-graph-capture-bug": (
        "traceback-cut",
        'File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 147, in __init__',
    ),
    "dsv41-dspark-decode-graph-oom": (
        "exception",
        "Exception: Capture cuda graph failed: CUDA out of memory.",
    ),
    "eagle-algo-with-eagle3-draft-accept-1": ("none", None),
    "eagle-swa-target-gemma-crash": (
        "exception",
        "TypeError: unsupported operand type(s) for -: 'Tensor' and 'NoneType'",
    ),
    "flashinfer-min-version-not-installed": (
        "message",
        "flashinfer_python with minimum required version 0.2.5 is not installed",
    ),
    "gemma3-12b-on-16gb-oom": (
        "exception",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 226.00 MiB. GPU 0 has a total capacity of "
        "15.58 GiB of which 71.25 MiB is free. Including non-PyTorch memory, this process has 13.94 GiB memory in "
        "use. Of the allocated memory 13.64 GiB is allocated by PyTorch, and 67.23 MiB is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
        "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
    ),
    "gpt-oss-torch-compile-capture-failure": (
        "exception",
        "Exception: Capture cuda graph failed: SubprocException: An exception occurred in a subprocess:",
    ),
    "memory-unbalanced-other-processes": (
        "exception",
        "ValueError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes.",
    ),
    "ngram-torch-native-backend": ("exception", "AttributeError: 'NoneType' object has no attribute 'shape'"),
    "ngram-with-dp-attention-rejected": (
        "exception",
        'ValueError("Currently ngram speculative decoding does not support dp attention.")',
    ),
    "reasoning-parser-underscore": (
        "argparse",
        "launch_server.py: error: unrecognized arguments: --reasoning_parser kimi_k2",
    ),
    "spec-num-steps-without-topk-typeerror": (
        "exception",
        "TypeError: '>' not supported between instances of 'NoneType' and 'int'",
    ),
    "spec-v2-eagle3-topk-gt1": (
        "exception",
        "RuntimeError: Sizes of tensors must match except in dimension 1. Expected size 6 but got size 8 for tensor "
        "number 1 in the list.",
    ),
    "step35-fp8-tp4-block-quant-divisibility": (
        "exception",
        "ValueError: Weight output_partition_size = 320 is not divisible by weight quantization block_n = 128.",
    ),
    "torch-compile-with-fp8-70b-v02": (
        "traceback-cut",
        'File "/home/ubuntu/testfs/sglang-venv/lib/python3.10/site-packages/sglang/srt/managers/tp_worker.py", '
        "line 99, in __init__",
    ),
    "vllm-spec-flags-num-speculative-tokens": (
        "argparse",
        "launch_server.py: error: unrecognized arguments: --speculative-model [ngram] --tensor-parallel-size 1 "
        "--num-speculative-tokens 3 --ngram-prompt-lookup-max 4 --use-v2-block-manager",
    ),
}


def test_corpus_cases_all_have_an_expectation() -> None:
    assert {p.stem for p in CORPUS.glob("*.json")} == set(CORPUS_EXPECTED)


@pytest.mark.parametrize("case_id", sorted(CORPUS_EXPECTED))
def test_corpus_root_cause(case_id: str) -> None:
    case = json.loads((CORPUS / f"{case_id}.json").read_text())
    root = extract_root_cause(case["log"].splitlines())
    kind, line = CORPUS_EXPECTED[case_id]
    assert (root.kind, root.error_line) == (kind, line)
    assert not is_wrapper(root.error_line)
    if case["exit_kind"] == "runs-but-degraded":
        return
    assert root.kind != "none"
    text = compact(case["log"].splitlines())
    assert f"== root cause ({root.kind}" in text
    assert root.error_line[-40:] in text  # type: ignore[index]


def test_corpus_details() -> None:
    def root(case_id: str) -> RootCause:
        return extract_root_cause(json.loads((CORPUS / f"{case_id}.json").read_text())["log"].splitlines())

    assert root("gemma3-12b-on-16gb-oom").wrapper == "Received sigquit from a child process"
    assert root("deepseek-v25-cuda-graph-capture-bug").wrapper == "Exception in run_tp_server"
    assert root("deepseek-v25-cuda-graph-capture-bug").frames[-1][1:] == (147, "__init__")
    assert root("ngram-with-dp-attention-rejected").exception_type == "ValueError"
    assert root("ngram-with-dp-attention-rejected").message == (
        "Currently ngram speculative decoding does not support dp attention."
    )
    assert root("step35-fp8-tp4-block-quant-divisibility").frames[-1][2] == "validate_block_quant_shapes"
    accept = json.loads((CORPUS / "eagle-algo-with-eagle3-draft-accept-1.json").read_text())["log"]
    tracker = StageTracker(clock=lambda: 0.0)
    tracker.feed(accept)
    assert tracker.accept_length == 1.0


def test_vllm_prefixed_traceback() -> None:
    # Signatures rows 55 and 57: vLLM prefixes every traceback line; its wrapper comes first.
    engine = "(EngineCore_DP0 pid=3114) ERROR 07-01 09:12:40 [core.py:515] "
    lines = [
        f"{engine}EngineCore failed to start.",
        f"{engine}Traceback (most recent call last):",
        f'{engine}  File "/opt/venv/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 506, in run_engine_core',
        f"{engine}    engine_core = EngineCoreProc(*args, **kwargs)",
        f"{engine}ValueError: Free memory on device (31.44/47.38 GiB) on startup is less than desired GPU memory "
        "utilization (0.95, 45.01 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
        "(APIServer pid=3001) INFO 07-01 09:12:41 [launcher.py:101] Shutting down FastAPI HTTP server.",
    ]
    root = extract_root_cause(lines)
    assert root.exception_type == "ValueError"
    assert root.message.startswith("Free memory on device (31.44/47.38 GiB)")
    assert "Shutting down" not in root.message
    assert root.wrapper == "EngineCore failed to start"
    assert root.frames[-1][1:] == (506, "run_engine_core")


def test_rank_tagged_nccl_traceback_names_the_exception_not_its_header() -> None:
    # torch.distributed tags every line of a rank's traceback with `[rank0]: `; NCCL's own warning that says
    # why (P2P between GeForce cards) follows it untagged.
    site = "/usr/local/lib/python3.10/dist-packages/sglang/srt/distributed/device_communicators"
    lines = [
        "[2025-03-01 10:00:01 TP0] Init torch distributed begin.",
        "[rank0]: Traceback (most recent call last):",
        f'[rank0]:   File "{site}/pynccl.py", line 99, in __init__',
        "[rank0]:     self.comm: ncclComm_t = self.nccl.ncclCommInitRank(",
        f'[rank0]:   File "{site}/pynccl_wrapper.py", line 256, in NCCL_CHECK',
        '[rank0]:     raise RuntimeError(f"NCCL error: {error_str}")',
        "[rank0]: RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        "host:1234:1234 [0] include/alloc.h:103 NCCL WARN Cuda failure 'peer access is not supported between "
        "these two devices'",
        "[2025-03-01 10:00:05] Received sigquit from a child process. It usually means the child failed.",
    ]
    root = extract_root_cause(lines)
    assert root.kind == "exception" and root.exception_type == "RuntimeError"
    assert (
        root.error_line
        == "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)"
    )
    assert root.frames[-1][1:] == (256, "NCCL_CHECK")
    # A traceback header with neither frames nor exception is not a cause; the NCCL line after it is.
    bare = extract_root_cause([lines[1], lines[-2]])
    assert bare.kind == "message" and "peer access is not supported" in (bare.error_line or "")
    assert "Traceback" not in (bare.error_line or "")


def test_killed_without_traceback() -> None:
    # Signatures rows 3 and 45: the scheduler vanished (host OOM killer); no Python traceback at all.
    lines = [
        "[2025-06-01 10:00:00 TP0] Load weight begin. avail mem=78.50 GB",
        "Loading safetensors checkpoint shards:  75% Completed | 3/4 [01:10<00:23, 23.41s/it]",
        "[2025-06-01 10:01:30] Rank 0 scheduler is dead. Please check if there are relevant logs.",
        "[2025-06-01 10:01:31] Exit code: -9",
    ]
    root = extract_root_cause(lines)
    assert (root.kind, root.error_line, root.wrapper) == (
        "killed",
        "Exit code: -9",
        "Rank 0 scheduler is dead",
    )
    assert root.block[0].startswith("Load weight begin")
    shell = extract_root_cause(["Loading checkpoint shards:   0%|          | 0/2 [00:00<?, ?it/s]Killed"])
    assert shell.kind == "killed"


def test_usage_dump_is_found_and_collapsed() -> None:
    _, body = read_output(OUTPUTS / "invalid-choice-dtype.rc2.txt")
    span = usage_dump_span(body)
    assert span is not None
    start, end = span
    assert body[start].startswith("usage: sglang serve [-h] --model-path MODEL_PATH")
    assert body[end] == (
        "sglang serve: error: argument --dtype: invalid choice: 'bfloat' "
        "(choose from 'auto', 'half', 'float16', 'bfloat16', 'float', 'float32')"
    )
    assert end - start > 400
    text = compact(body)
    assert f"argparse usage dump: {end - start} lines" in text
    assert "[--tokenizer-path TOKENIZER_PATH]" not in text
    assert len(text) < 1500
    # The old prog name of 0.3.6-0.5.8 is an argparse error too.
    old = extract_root_cause(
        ["usage: launch_server.py [-h] --model-path MODEL_PATH", "launch_server.py: error: x"]
    )
    assert old.kind == "argparse"


def test_compact_cuts_server_args_and_counts_repeats() -> None:
    log = (OUTPUTS / "serve-module.log").read_text().splitlines()
    server_args = next(line for line in log if "server_args=" in line)
    decode = (
        "[2026-12-03 09:00:{:02d}] Decode batch, #running-req: 1, #token: {}, token usage: 0.00, accept len: 1.00, "
        "accept rate: 0.25, cuda graph: True, gen throughput (token/s): 61.22, #queue-req: 0"
    )
    lines = [
        *log[: log.index(next(x for x in log if READY in x)) + 1],
        *(decode.format(i % 60, i) for i in range(4000)),
    ]
    text = compact(lines)
    assert len(server_args) > 18_000
    assert "chars cut]" in text
    assert server_args[:200].split("] ", 1)[1] in text
    assert "line above repeated 3998 more times" in text
    assert text.count("Decode batch") == 2
    assert len(text) <= 6000
    ratio = sum(len(x) + 1 for x in lines) / len(text)
    assert ratio > 50
    for budget in (800, 2000, 4000):
        assert len(compact(lines, budget)) <= budget


@pytest.fixture(scope="module")
def big_logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 200 MB ready-then-crash log and a 64 MB log whose crash is in the middle, from real lines."""
    tmp = tmp_path_factory.mktemp("big")
    startup = (OUTPUTS / "serve-module.log").read_text().splitlines(keepends=True)
    _, crash_body = read_output(OUTPUTS / "eagle3-device-cpu.rc137.txt")
    crash = (
        "\n".join(crash_body[next(i for i, x in enumerate(crash_body) if "hit an exception" in x) :]) + "\n"
    )
    decode = "".join(
        f"[2026-12-03 09:{i // 60 % 60:02d}:{i % 60:02d}] Decode batch, #running-req: {1 + i % 48}, #token: {i}, "
        f"token usage: 0.{i % 100:02d}, accept len: {1 + i % 300 / 100:.2f}, accept rate: 0.{i % 100:02d}, "
        f"cuda graph: True, gen throughput (token/s): {900 + i}.00, #queue-req: 0\n"
        for i in range(4096)
    ).encode()
    probe = next(x for x in startup if '"GET /health HTTP/1.1" 503' in x)
    probes = (probe * 4096).encode()
    ready = startup[: next(i for i, x in enumerate(startup) if READY in x) + 1]
    loading = startup[: next(i for i, x in enumerate(startup) if "Load weight begin" in x) + 1]
    paths = {"ready": tmp / "ready-then-crash.log", "middle": tmp / "crash-in-middle.log"}
    with paths["ready"].open("wb") as f:
        f.write("".join(ready).encode())
        while f.tell() < 200 << 20:
            f.write(decode)
        f.write(crash.encode())
    with paths["middle"].open("wb") as f:
        f.write("".join(loading).encode())
        while f.tell() < 32 << 20:
            f.write(probes)
        f.write(crash.encode())
        while f.tell() < 64 << 20:
            f.write(probes)
    return paths


def test_scan_of_a_200_mb_log_reads_little(big_logs: dict[str, Path]) -> None:
    tracemalloc.start()
    try:
        summary = scan_file(big_logs["ready"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20
    assert summary.size_bytes > 200 << 20
    assert summary.bytes_skipped > 199 << 20
    assert (summary.stage, summary.ready) == ("ready", True)
    assert summary.root_cause.error_line == "ModuleNotFoundError: No module named 'vllm'"
    assert summary.root_cause.wrapper == "Scheduler hit an exception"
    assert summary.accept_length == 1 + 4095 % 300 / 100
    assert len(summary.compact) <= 6000
    assert "bytes of log not parsed" in summary.compact
    assert summary.compaction_ratio > 30_000
    tail = read_tail(big_logs["ready"], 4096)
    assert tail[-1].startswith("[2026-12-03 08:19:28] kill_process_tree called:")
    assert all(line.startswith(("[", " ", "Traceback", "ModuleNotFoundError")) or not line for line in tail)


def test_scan_finds_a_crash_in_the_middle_with_bounded_memory(big_logs: dict[str, Path]) -> None:
    tracemalloc.start()
    try:
        summary = scan_file(big_logs["middle"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # 8 MB read chunks; the file is 64 MB.
    assert peak < 40 << 20
    assert summary.root_cause.kind == "exception"
    assert summary.root_cause.error_line == "ModuleNotFoundError: No module named 'vllm'"
    assert (summary.stage, summary.ready) == ("weights", False)
    assert summary.bytes_skipped > 60 << 20


def test_byte_search_finds_stages_across_chunk_boundaries(tmp_path: Path) -> None:
    # Tiny head, tail and chunks force every stage line of a real startup through the byte search.
    log = tmp_path / "serve.log"
    log.write_bytes((OUTPUTS / "serve-module.log").read_bytes())
    limits = ScanLimits(head_bytes=2048, tail_bytes=2048, chunk_bytes=4097, window_bytes=4096)
    summary = scan_file(log, limits=limits)
    assert summary.bytes_skipped > 20_000
    assert (summary.stage, summary.ready, summary.last_stage_line) == ("ready", True, READY)
    assert summary.root_cause.kind == "none"
    lines = summary.compact.splitlines()
    assert any("Load weight end. elapsed=0.02 s" in line for line in lines)


def test_a_scheduler_that_died_while_starting_is_explained_by_its_own_traceback() -> None:
    # 0.5.23's launcher reports "Rank 0 scheduler died during initialization" (after an EOFError from the
    # closed pipe): both say that it died, the scheduler's traceback above them why.
    case = json.loads(
        (DATA / "corpus-real-engine-14" / "enable-trace-without-opentelemetry.json").read_text()
    )
    root = extract_root_cause(case["log"].splitlines())
    assert root.error_line.startswith("RuntimeError: opentelemetry package is not installed")
    assert "scheduler died during initialization" in root.wrappers
