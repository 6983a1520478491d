"""The simulated GPU node (`python -m specdoctor.tools.simnode`) against what real SGLang 0.5.23 prints and serves.

Every test runs the node as a real subprocess in its own process group, talks real HTTP on a free port,
and checks /proc afterwards that no process of the launch is left. Failure texts are compared with the
real outputs in tests/data/sglang-outputs/ where a CPU host could record them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from specdoctor.tools.simnode.memory import resolve_settings
from specdoctor.tools.simnode.tracebacks import SITE
from tests.tiny_models import TINY_EAGLE3, TINY_LLAMA

ROOT = Path(__file__).resolve().parents[1]
OUTPUTS = ROOT / "tests" / "data" / "sglang-outputs"
TOKEN_ENV = "SIMNODE_TEST_TOKEN"
READY = "The server is fired up and ready to roll!"

LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "head_dim": 128,
    "max_position_embeddings": 131072,
    "vocab_size": 128256,
    "rope_scaling": {"factor": 8.0, "rope_type": "llama3", "original_max_position_embeddings": 8192},
}
EAGLE3_8B = {**LLAMA_8B, "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("models")
    made = {}
    for name, config in {
        "tiny-llama": TINY_LLAMA,
        "tiny-eagle3": TINY_EAGLE3,
        "Llama-3.1-8B-Instruct": LLAMA_8B,
        "EAGLE3-LLaMA3.1-Instruct-8B": EAGLE3_8B,
        "Llama-3.1-70B-Instruct": {
            **LLAMA_8B,
            "hidden_size": 8192,
            "num_attention_heads": 64,
            "num_hidden_layers": 80,
        },
    }.items():
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(config))
        made[name] = str(root / name)
    (root / "no-config").mkdir()
    made["no-config"] = str(root / "no-config")
    made["root"] = str(root)
    return made


def our_processes(token: str) -> list[int]:
    """Live processes whose environment carries this test's token, read straight from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if f"{TOKEN_ENV}={token}".encode() in environ.split(b"\0") and state != "Z":
            found.append(int(entry))
    return found


class Node:
    """One launch of the simulated node, its output collected line by line."""

    def __init__(self, args: list[str], token: str, profile: str | None, env: dict[str, str] | None) -> None:
        self.port = free_port()
        full = ["--port", str(self.port), *args] if args and args[0] != "serve" else args
        run_env = {
            **os.environ,
            TOKEN_ENV: token,
            "SPECDOCTOR_SIM_SPEED": "0.02",
            "COLUMNS": "80",
            **(env or {}),
        }
        if profile:
            run_env["SPECDOCTOR_SIM_PROFILE"] = profile
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "specdoctor.tools.simnode", *full],
            cwd=ROOT,
            env=run_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, needle: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text:
            if time.monotonic() > deadline:
                raise AssertionError(f"{needle!r} never printed; output:\n{self.text[-3000:]}")
            if self.proc.poll() is not None:
                self._reader.join(2)
                if needle in self.text:
                    return
                raise AssertionError(f"exited {self.proc.returncode} before {needle!r}:\n{self.text[-3000:]}")
            time.sleep(0.02)

    def exit_code(self, timeout: float = 10.0) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(2)
        return code

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path: str) -> tuple[int, bytes]:
        return http(self.url(path))

    def post(self, path: str, body: dict) -> tuple[int, dict]:
        code, raw = http(self.url(path), body)
        return code, json.loads(raw)

    def ready(self) -> None:
        self.wait_for(READY)

    def kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(5)


def http(url: str, body: dict | None = None) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def launch() -> Iterator:
    token = uuid.uuid4().hex
    nodes: list[Node] = []

    def start(*args: str, profile: str | None = None, env: dict[str, str] | None = None) -> Node:
        node = Node(list(args), token, profile, env)
        nodes.append(node)
        return node

    yield start
    for node in nodes:  # stop what still runs as a controller would; a hung launcher gets its group killed
        if node.proc.poll() is None:
            node.proc.send_signal(signal.SIGTERM)
            try:
                node.proc.wait(5)
            except subprocess.TimeoutExpired:
                node.kill_group()
    deadline = time.monotonic() + 3
    while our_processes(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = our_processes(token)
    for node in nodes:
        node.kill_group()
    assert left == [], f"processes of the launch left behind: {left}"


def write_profile(tmp_path: Path, **inject: object) -> str:
    path = tmp_path / "node.json"
    gpus = {"count": 8, "name": "NVIDIA H200", "memory_mib": 143771, "compute_capability": "9.0", "p2p": True}
    path.write_text(json.dumps({"gpus": gpus, "inject": inject}))
    return str(path)


def children_of(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


# ---- argparse ----------------------------------------------------------------------------------


def _sorted_choices(line: str) -> str:
    return re.sub(r"\{([^}]*)\}", lambda m: "{" + ",".join(sorted(m.group(1).split(","))) + "}", line)


def test_unknown_flag_prints_the_real_usage_dump_and_exits_2(launch, models) -> None:
    recorded = (
        (OUTPUTS / "wrong-flag-num-speculative-tokens.rc2.txt")
        .read_text()
        .split("# ---- stdout+stderr ----\n")[1]
    )
    node = launch("--model-path", models["tiny-llama"], "--num-speculative-tokens", "16")
    assert node.exit_code() == 2
    ours = node.text.replace(SITE, "/opt/sglang-cpu/lib/python3.11/site-packages")
    # The real run's port came from the default; ours adds --port before the model, which argparse ignores.
    assert [_sorted_choices(x) for x in ours.splitlines()] == [
        _sorted_choices(x) for x in recorded.splitlines()
    ]
    assert node.lines[-1] == "sglang serve: error: unrecognized arguments: --num-speculative-tokens 16"


def test_a_value_of_the_wrong_type_is_refused_by_argparse(launch, models) -> None:
    node = launch("--model-path", models["tiny-llama"], "--mem-fraction-static", "abc")
    assert node.exit_code() == 2
    assert node.lines[-1] == "sglang serve: error: argument --mem-fraction-static: invalid float value: 'abc'"


# ---- resolution: exit 1 with the real traceback ------------------------------------------------

RECORDED_RESOLUTION_FAILURES = [
    ("spec-topk-without-num-steps.rc1.txt", []),
    ("spec-draft-tokens-without-num-steps.rc1.txt", []),
    ("invalid-speculative-algorithm-EAGLE4.rc1.txt", []),
    ("spec-rejection-sampling-topk-gt-1.rc1.txt", []),
    ("spec-rejection-sampling-with-accept-threshold.rc1.txt", []),
    ("spec-sink-size-without-window.rc1.txt", []),
    ("spec-window-size-zero.rc1.txt", []),
    ("spec-block-verification-on-cpu.rc1.txt", []),
    ("spec-topk-gt-1-page-size-gt-1.rc1.txt", ["--attention-backend", "torch_native"]),
    ("spec-draft-path-nonexistent.rc1.txt", []),
    ("model-path-nonexistent.rc1.txt", []),
    ("model-hf-repo-id-offline.rc1.txt", []),
    ("model-dir-without-config.rc1.txt", []),
    ("context-length-over-model-max.rc1.txt", []),
]


def _recorded_command(name: str, models: dict[str, str]) -> tuple[list[str], str]:
    text = (OUTPUTS / name).read_text()
    command = re.search(r"^# command: (.*)$", text, re.M).group(1).split()
    argv = command[command.index("sglang.launch_server") + 1 :]
    if "--device" in argv and "block-verification" not in name:
        del argv[argv.index("--device") : argv.index("--device") + 2]
    argv = [models["no-config"] if a == "/tmp" else a.replace("$MODELS", models["root"]) for a in argv]
    return argv, text.split("# ---- stdout+stderr ----\n")[1]


def _traceback(text: str) -> str:
    return text[text.index("Traceback (most recent call last):") :].strip()


@pytest.mark.parametrize(("recording", "extra"), RECORDED_RESOLUTION_FAILURES)
def test_resolution_failure_is_the_real_traceback(launch, models, recording: str, extra: list[str]) -> None:
    argv, recorded = _recorded_command(recording, models)
    node = launch(*argv, *extra)
    assert node.exit_code() == 1
    ours = node.text.replace(SITE, "/opt/sglang-cpu/lib/python3.11/site-packages").replace(
        models["no-config"], "/tmp"
    )
    assert _traceback(ours) == _traceback(recorded)
    kill_line = next(x for x in node.lines if "kill_process_tree called" in x)
    assert re.search(r"kill_process_tree called: parent_pid=(\d+), include_parent=False, pid=\1$", kill_line)


def test_num_steps_alone_fails_on_the_none_topk_comparison(launch, models) -> None:
    # Recorded from real SGLang 0.5.23 (CPU venv) while building the simulator: resolution, not the scheduler.
    node = launch(
        "--model-path",
        models["tiny-llama"],
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        models["tiny-eagle3"],
        "--speculative-num-steps",
        "3",
    )
    assert node.exit_code() == 1
    assert node.lines[-2:] == [
        "    cfg.speculative_eagle_topk > 1",
        "TypeError: '>' not supported between instances of 'NoneType' and 'int'",
    ]
    assert (
        f'File "{SITE}/sglang/srt/arg_groups/speculative_hook.py", line 1274, in _handle_eagle_family'
        in node.text
    )


def test_sglang_serve_without_model_is_the_cli_exception(launch) -> None:
    node = launch("serve", "--port", "1")
    assert node.exit_code() == 1
    assert (
        node.lines[-1] == "Exception: Error: --model-path is required. Please provide the path to the model."
    )
    assert "UserWarning" not in node.text


# ---- a healthy launch --------------------------------------------------------------------------

STARTUP_ORDER = [
    "server_args={",
    "Init parallel begin.",
    "Init parallel ends. elapsed=",
    "Load weight begin. avail mem=",
    "Load weight end. elapsed=",
    "KV Cache is allocated. dtype: torch.bfloat16, #tokens: ",
    "Memory pool end. avail mem=",
    "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=",
    "Capture target decode CUDA graph end. bs=[1, 2, 4, 8, 12, 16,",
    "max_total_num_tokens=",
    "Engine startup timings (s): ",
    "INFO:     Uvicorn running on http://127.0.0.1:",
    '"GET /model_info HTTP/1.1" 200 OK',
    '"POST /generate HTTP/1.1" 200 OK',
    READY,
]


def test_good_launch_serves_every_endpoint_like_sglang(launch, models) -> None:
    node = launch("--model-path", models["Llama-3.1-8B-Instruct"], "--decode-log-interval", "10")
    node.ready()
    positions = [next(i for i, x in enumerate(node.lines) if step in x) for step in STARTUP_ORDER]
    assert positions == sorted(positions)
    assert re.search(
        r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] Load weight end\. elapsed=\d+\.\d\d s, type=LlamaForCausalLM, "
        r"avail mem=\d+\.\d\d GB, mem usage=14\.96 GB\.$",
        node.text,
        re.M,
    )
    assert node.get("/health") == (200, b"")
    assert node.get("/health_generate") == (200, b"")
    assert node.get("/ready") == (200, b"")
    assert node.get("/ping") == (200, b"")
    assert node.get("/metrics")[0] == 404
    for path in ("/server_info", "/get_server_info"):
        code, raw = node.get(path)
        info = json.loads(raw)
        assert code == 200
        assert info["version"] == "0.5.23" and info["status"] == "ready"
        assert info["speculative_algorithm"] is None and info["tp_size"] == 1
        assert info["model_path"] == models["Llama-3.1-8B-Instruct"]
        assert 0.85 < info["mem_fraction_static"] < 0.95
        assert info["max_total_num_tokens"] > 100_000
        assert "avg_spec_accept_length" not in info["internal_states"][0]
    node.wait_for("Endpoint '/get_server_info' is deprecated")
    code, raw = node.get("/model_info")
    assert code == 200 and json.loads(raw)["architectures"] == ["LlamaForCausalLM"]
    code, raw = node.get("/v1/models")
    card = json.loads(raw)["data"][0]
    assert code == 200 and card["id"] == models["Llama-3.1-8B-Instruct"] and card["max_model_len"] == 131072
    code, out = node.post("/generate", {"text": "Hello", "sampling_params": {"max_new_tokens": 32}})
    assert code == 200 and len(out["output_ids"]) == 32 and isinstance(out["text"], str)
    assert (
        out["meta_info"]["completion_tokens"] == 32 and out["meta_info"]["finish_reason"]["type"] == "length"
    )
    assert not any(k.startswith("spec_") for k in out["meta_info"])
    code, chat = node.post(
        "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    )
    assert code == 200 and chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"]["role"] == "assistant" and chat["usage"]["completion_tokens"] == 8
    node.wait_for('"POST /v1/chat/completions HTTP/1.1" 200 OK')  # access lines are logged before the answer
    decode = [x for x in node.lines if "Decode batch" in x]
    assert decode and all("accept len" not in x for x in decode)
    assert re.search(
        r"Decode batch, #running-req: 1, #token: \d+, token usage: \d\.\d\d, cuda graph: True, "
        r"gen throughput \(token/s\): \d+\.\d\d, #queue-req: 0$",
        decode[-1],
    )


def test_sigterm_drains_exits_0_and_takes_the_scheduler_down(launch, models) -> None:
    node = launch("--model-path", models["tiny-llama"])
    node.ready()
    scheduler = children_of(node.proc.pid)
    assert len(scheduler) == 1
    assert b"sglang::scheduler" in Path(f"/proc/{scheduler[0]}/cmdline").read_bytes()
    node.proc.send_signal(signal.SIGTERM)
    assert node.exit_code() == 0
    assert not Path(f"/proc/{scheduler[0]}").exists() or "Z" in Path(f"/proc/{scheduler[0]}/stat").read_text()
    tail = [re.sub(r"^\[[^\]]*\] ", "", x) for x in node.lines[-8:]]
    assert tail[0] == "SIGTERM received. signum=None frame=None. Draining requests and shutting down..."
    assert tail[-1].startswith("kill_process_tree called: ")


def test_readiness_is_503_until_warm_up_and_v1_models_answers_before(launch, models, tmp_path) -> None:
    node = launch("--model-path", models["tiny-llama"], profile=write_profile(tmp_path, hang_at_stage="http"))
    node.wait_for("Uvicorn running on")
    time.sleep(0.3)
    assert node.get("/health")[0] == 503
    assert node.get("/ready")[0] == 503
    assert node.get("/v1/models")[0] == 200
    assert READY not in node.text
    node.proc.send_signal(signal.SIGTERM)
    assert node.exit_code() == 0


# ---- memory -------------------------------------------------------------------------------------


def test_auto_mem_fraction_static_follows_memory_hook_for_an_h200() -> None:
    from specdoctor.tools.simnode.args import defaults

    settings = resolve_settings({**defaults(), "model_path": "m"}, 143771, mla=False)
    # reserved = 512 + 8192 * 1.5 + 1/8 * 1024 + 256 * 2 + 58 prefill sizes * 8 MiB
    assert settings.chunked_prefill_size == 8192 and settings.decode_max_bs == 256
    assert settings.mem_fraction_static == round((143771 - (512 + 12288 + 128 + 512 + 58 * 8)) / 143771, 3)


def test_mem_fraction_too_high_fails_capturing_cuda_graphs(launch, models) -> None:
    node = launch("--model-path", models["Llama-3.1-8B-Instruct"], "--mem-fraction-static", "0.99")
    assert node.exit_code() == -signal.SIGKILL
    assert re.search(
        r"Exception: Capture cuda graph failed: CUDA out of memory\. Tried to allocate \d+\.\d\d [MG]iB\. "
        r"GPU 0 has a total capacity of 140\.40 GiB of which \d+\.\d\d MiB is free\.",
        node.text,
    )
    assert "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)" in node.text
    assert "Scheduler hit an exception: Traceback (most recent call last):" in node.text
    assert re.sub(r"^\[[^\]]*\] ", "", node.lines[-2]) == (
        "Received sigquit from a child process. It usually means the child failed."
    )
    assert re.search(
        r"kill_process_tree called: parent_pid=(\d+), include_parent=True, pid=\1$", node.lines[-1]
    )


@pytest.mark.parametrize(
    "fix",
    [
        ["--cuda-graph-max-bs-decode", "16"],
        ["--cuda-graph-backend-decode", "disabled"],
        ["--disable-cuda-graph"],
    ],
)
def test_the_suggested_capture_fixes_let_the_same_fraction_start(launch, models, fix: list[str]) -> None:
    node = launch("--model-path", models["Llama-3.1-8B-Instruct"], "--mem-fraction-static", "0.99", *fix)
    node.ready()
    node.proc.send_signal(signal.SIGTERM)
    assert node.exit_code() == 0


def test_mem_fraction_too_low_leaves_no_kv_cache(launch, models) -> None:
    node = launch("--model-path", models["Llama-3.1-8B-Instruct"], "--mem-fraction-static", "0.05")
    assert node.exit_code() == -signal.SIGKILL
    assert re.search(
        r"ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0\.05\. "
        r"Raise --mem-fraction-static above 0\.1\d\d \(minimum viable = 1 - available/pre = 0\.1\d{3}\)\. "
        r"If using speculative decoding, draft weights are now counted\.",
        node.text,
    )
    assert "Load weight end." in node.text and "KV Cache is allocated" not in node.text


# ---- speculative decoding ------------------------------------------------------------------------


def _spec_launch(launch, models, algorithm: str) -> Node:
    node = launch(
        "--model-path",
        models["Llama-3.1-8B-Instruct"],
        "--speculative-algorithm",
        algorithm,
        "--speculative-draft-model-path",
        models["EAGLE3-LLaMA3.1-Instruct-8B"],
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
        "--decode-log-interval",
        "5",
        "--enable-metrics",
    )
    node.ready()
    return node


def test_eagle_with_an_eagle3_draft_starts_but_accepts_nothing(launch, models) -> None:
    node = _spec_launch(launch, models, "EAGLE")
    code, out = node.post("/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 40}})
    meta = out["meta_info"]
    assert code == 200 and meta["spec_accept_length"] == 1.0 and meta["spec_verify_ct"] == 40
    assert meta["spec_num_correct_drafts"] == 0 and meta["spec_num_proposed_drafts"] == 120
    info = json.loads(node.get("/server_info")[1])
    assert info["speculative_algorithm"] == "EAGLE" and info["speculative_num_steps"] == 3
    assert info["internal_states"][0]["avg_spec_accept_length"] == 1.0
    node.wait_for('"GET /server_info HTTP/1.1" 200 OK')
    decode = [x for x in node.lines if "Decode batch" in x]
    assert decode and all(", accept len: 1.00, accept rate: 0.00, cuda graph: True," in x for x in decode)
    assert (
        "type=LlamaForCausalLMEagle3" in node.text and "Capture target verify CUDA graph begin" in node.text
    )


def test_eagle3_with_its_draft_accepts_the_profiles_length(launch, models) -> None:
    node = _spec_launch(launch, models, "EAGLE3")
    code, out = node.post("/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 62}})
    assert code == 200 and out["meta_info"]["spec_accept_length"] == pytest.approx(3.1, abs=0.05)
    node.get("/ping")
    node.wait_for('"GET /ping HTTP/1.1" 200 OK')
    decode = [x for x in node.lines if "Decode batch" in x]
    accepted = [
        float(re.search(r", accept len: (\d\.\d\d), accept rate: 0\.\d\d, ", x).group(1)) for x in decode
    ]
    assert accepted and all(2.6 <= a <= 3.6 for a in accepted)
    assert json.loads(node.get("/server_info")[1])["internal_states"][0][
        "avg_spec_accept_length"
    ] == pytest.approx(3.1, abs=0.15)  # the 8-token warm-up request counts too


def test_speculative_launch_logs_the_real_resolution_warnings(launch, models) -> None:
    node = launch(
        "--model-path",
        models["Llama-3.1-8B-Instruct"],
        "--speculative-algorithm",
        "eagle3",
        "--speculative-draft-model-path",
        models["EAGLE3-LLaMA3.1-Instruct-8B"],
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "8",
    )
    node.ready()
    assert (
        "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
        in node.text
    )
    assert "Max running requests is reset to 48 for speculative decoding." in node.text
    info = json.loads(node.get("/server_info")[1])
    assert info["speculative_algorithm"] == "EAGLE3" and info["speculative_num_draft_tokens"] == 4
    assert info["max_running_requests"] == 48


def test_ngram_accepts_about_1_6_and_reports_its_defaults(launch, models) -> None:
    node = launch(
        "--model-path",
        models["Llama-3.1-8B-Instruct"],
        "--speculative-algorithm",
        "NGRAM",
        "--decode-log-interval",
        "4",
    )
    node.ready()
    assert "speculative_num_draft_tokens is set to 12 by default for ngram speculative decoding." in node.text
    code, out = node.post("/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 48}})
    assert code == 200 and out["meta_info"]["spec_accept_length"] == pytest.approx(1.6, abs=0.05)
    info = json.loads(node.get("/server_info")[1])
    assert (
        info["speculative_eagle_topk"],
        info["speculative_num_draft_tokens"],
        info["speculative_num_steps"],
    ) == (
        10,
        12,
        1,
    )


def test_sglang_serve_takes_the_model_positionally(launch, models) -> None:
    port = free_port()
    node = launch("serve", models["tiny-llama"], "--port", str(port))
    node.wait_for(READY)
    assert "UserWarning" not in node.text
    info = json.loads(http(f"http://127.0.0.1:{port}/server_info")[1])
    assert info["launch_command"] == f"--model-path {models['tiny-llama']} --port {port}"


def test_slow_stage_delays_a_stage_without_failing_it(launch, models, tmp_path) -> None:
    node = launch(
        "--model-path", models["tiny-llama"], profile=write_profile(tmp_path, slow_stage={"weights": 1.0})
    )
    node.wait_for("Load weight begin.")
    time.sleep(0.4)
    assert node.lines[-1].endswith("Load weight begin. avail mem=139.89 GB")
    node.ready()


def test_ngram_with_dp_attention_is_refused(launch, models) -> None:
    node = launch(
        "--model-path",
        models["Llama-3.1-8B-Instruct"],
        "--tp-size",
        "4",
        "--dp-size",
        "4",
        "--enable-dp-attention",
        "--speculative-algorithm",
        "NGRAM",
    )
    assert node.exit_code() == 1
    assert node.lines[-1] == "ValueError: Currently ngram speculative decoding does not support dp attention."


# ---- the node ------------------------------------------------------------------------------------


def test_busy_http_port_logs_errno_98_and_the_launcher_hangs(launch, models) -> None:
    node = launch("--model-path", models["tiny-llama"])
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", node.port))
        squatter.listen()
        node.wait_for("address already in use")
        assert re.search(
            rf"^\[[^\]]+\] ERROR:    \[Errno 98\] error while attempting to bind on address \('127\.0\.0\.1', "
            rf"{node.port}\): address already in use$",
            node.text,
            re.M,
        )
        node.proc.send_signal(signal.SIGTERM)  # SGLang's stuck launcher does not answer it either
        time.sleep(0.5)
        assert node.proc.poll() is None
        assert READY not in node.text and node.lines[-1].endswith(
            "INFO:     Waiting for application shutdown."
        )
    node.kill_group()


def test_port_beyond_65535_fails_the_warm_up_after_its_timeout(launch, models) -> None:
    # --port comes last, so argparse keeps it over the free port the helper passes first.
    node = launch(
        "--model-path", models["tiny-llama"], "--port", "70000", env={"SPECDOCTOR_SIM_SPEED": "0.005"}
    )
    assert node.exit_code() == -signal.SIGKILL
    assert "INFO:     Uvicorn running on http://127.0.0.1:70000 (Press CTRL+C to quit)" in node.text
    assert "Initialization failed. warmup error: Traceback (most recent call last):" in node.text
    assert "requests.exceptions.InvalidURL: Failed to parse: http://127.0.0.1:70000/model_info" in node.text


def test_hang_injection_stops_the_log_and_never_gets_ready(launch, models, tmp_path) -> None:
    node = launch(
        "--model-path", models["tiny-llama"], profile=write_profile(tmp_path, hang_at_stage="weights")
    )
    node.wait_for("Load weight begin.")
    time.sleep(0.5)
    assert node.lines[-1].endswith("Load weight begin. avail mem=139.89 GB")
    assert node.proc.poll() is None
    node.proc.send_signal(signal.SIGTERM)
    assert node.exit_code() == 0


def test_crash_after_ready_dies_like_a_scheduler_crash(launch, models, tmp_path) -> None:
    node = launch(
        "--model-path", models["tiny-llama"], profile=write_profile(tmp_path, crash_after_ready_s=0.3)
    )
    node.ready()
    assert node.exit_code() == -signal.SIGKILL
    assert "torch.AcceleratorError: CUDA error: an illegal memory access was encountered" in node.text
    assert node.text.index(READY) < node.text.index("Scheduler hit an exception")
    # Once serving, 0.5.23's running-phase handler answers (multinode-rank0-peer-killed.rc137.txt).
    assert [line.split("] ", 1)[1] for line in node.lines[-4:-1]] == [
        "SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
        "Sleeping 5 seconds before crash diagnostics to let GPU activity settle.",
        "No live scheduler processes found; skipping py-spy and CUDA coredump.",
    ]


def test_scheduler_killed_from_outside_takes_the_launcher_down(launch, models) -> None:
    node = launch("--model-path", models["tiny-llama"])
    node.ready()
    (scheduler,) = children_of(node.proc.pid)
    os.kill(scheduler, signal.SIGKILL)
    assert node.exit_code() == -signal.SIGKILL
    assert (
        f"Subprocess scheduler_0 (pid={scheduler}) crashed with exit code -9. Triggering SIGQUIT for cleanup..."
        in node.text
    )


def test_tp_larger_than_the_gpus_fails_on_the_first_rank_without_a_device(launch, models) -> None:
    node = launch("--model-path", models["Llama-3.1-8B-Instruct"], "--tp", "8", profile="rtx4090x2")
    assert node.exit_code() == -signal.SIGKILL
    assert re.search(r"^\[[^\]]+ TP2\] Scheduler hit an exception: Traceback", node.text, re.M)
    assert "torch.AcceleratorError: CUDA error: invalid device ordinal" in node.text


def test_rtx4090_pair_without_p2p_fails_in_custom_all_reduce_until_disabled(launch, models) -> None:
    node = launch("--model-path", models["tiny-llama"], "--tp", "2", profile="rtx4090x2")
    assert node.exit_code() == -signal.SIGKILL
    assert "RuntimeError: CUDART error: peer access is not supported between these two devices" in node.text
    fixed = launch(
        "--model-path", models["tiny-llama"], "--tp", "2", "--disable-custom-all-reduce", profile="rtx4090x2"
    )
    fixed.ready()
    assert any(re.search(r" TP1\] Capture target decode CUDA graph end\. ", x) for x in fixed.lines)
    fixed.proc.send_signal(signal.SIGTERM)
    assert fixed.exit_code() == 0


def test_stray_process_on_one_gpu_unbalances_tp(launch, models) -> None:
    node = launch("--model-path", models["tiny-llama"], "--tp", "2", profile="a100x2-busy")
    assert node.exit_code() == -signal.SIGKILL
    assert re.search(
        r"RuntimeError: The memory capacity is unbalanced\. Some GPUs may be occupied by other processes\. "
        r"pre_model_load_memory=[\d.]+, local_gpu_memory=[\d.]+, local_gpu_memory \* 0\.9=[\d.]+$",
        node.text,
        re.M,
    )


def test_weights_larger_than_the_gpu_die_in_torch_while_loading(launch, models) -> None:
    node = launch("--model-path", models["Llama-3.1-70B-Instruct"], profile="rtx4090x2")
    assert node.exit_code() == -signal.SIGKILL
    assert re.search(
        r"^torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate [\d.]+ GiB\. GPU 0 has a total capacity of "
        r"23\.99 GiB of which [\d.]+ MiB is free\.",
        node.text,
        re.M,
    )
    assert "Load weight begin." in node.text and "Load weight end." not in node.text


def test_tp_that_does_not_divide_the_heads_is_a_bare_assert(launch, models) -> None:
    node = launch("--model-path", models["Llama-3.1-8B-Instruct"], "--tp", "3")
    assert node.exit_code() == -signal.SIGKILL
    assert "    assert self.total_num_heads % tp_size == 0\n           ^^^" in node.text
    assert "\nAssertionError\n" in node.text


def test_an_unknown_profile_is_a_configuration_error(launch, models) -> None:
    node = launch("--model-path", models["tiny-llama"], profile="dgx-nonexistent")
    assert node.exit_code() == 78
    assert "SPECDOCTOR_SIM_PROFILE=dgx-nonexistent" in node.text and "h200x8" in node.text


def test_the_simulator_never_imports_the_diagnoser() -> None:
    code = (
        "import sys, specdoctor.tools.simnode.__main__; "
        "print(sorted({'.'.join(m.split('.')[:2]) for m in sys.modules} & {'specdoctor.playbooks', 'specdoctor.agent'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
