"""`specdoctor deploy` driving the REAL SGLang 0.5.23 server on this CPU machine (`--device cpu`, a tiny
random-weight Llama): flag faults fixed before launch, a port taken behind its back recognised from the
real `Errno 98` line (SGLang then hangs forever) and relaunched, Ctrl-C leaving nothing behind, and the
real "no accelerator" failure ending in a clear stop."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from specdoctor.tools.reaper import MARKER_VARIABLE
from specdoctor.tools.system import find_free_port
from tests.procs import RUN_TOKEN, live_processes, run_token

pytestmark = pytest.mark.real_sglang


def sglang_processes() -> list[int]:
    """Real SGLang of this test's launches: the launcher runs sglang.launch_server, its children retitle
    themselves sglang::..., all carry the engine marker, and this test's token (not another run's)."""

    def real(env: bytes, cmd: bytes) -> bool:
        sglang = b"sglang.launch_server" in cmd or cmd.startswith(b"sglang::")
        return sglang and MARKER_VARIABLE.encode() in env and run_token() in env.split(b"\0")

    return live_processes(real)


@pytest.fixture(autouse=True)
def nothing_left(monkeypatch):
    monkeypatch.setenv(RUN_TOKEN, uuid.uuid4().hex)
    yield
    deadline = time.time() + 15
    while sglang_processes() and time.time() < deadline:
        time.sleep(0.3)
    assert sglang_processes() == []


def deploy(args: list[str], command: list[str], run_dir: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "specdoctor", "deploy", "--run-dir", str(run_dir), *args, "--", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def read_until(proc: subprocess.Popen, needle: str, timeout: float) -> str:
    seen = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        seen.append(line)
        if needle in line:
            return "".join(seen)
    raise AssertionError(f"{needle!r} not seen:\n{''.join(seen)}")


def tiny_llama_on_cpu(sglang_env, port: int, *extra: str) -> list[str]:
    """The real SGLang serving the tiny Llama on this CPU, on `port`, with `extra` flags."""
    model = ["--model-path", sglang_env.tiny_llama, "--device", "cpu", "--max-total-tokens", "4096"]
    return [*sglang_env.launch_server(), *model, "--port", str(port), *extra]


def transcript(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "transcript.jsonl").read_text().splitlines()]


def test_wrong_flag_and_underscore_fixed_before_launch_then_healthy(sglang_env, tmp_path):
    port = find_free_port(34000)
    command = [
        *sglang_env.launch_server(),
        "--model-path",
        sglang_env.tiny_llama,
        "--device",
        "cpu",
        "--max_total_tokens",
        "4096",
        "--max-model-len",
        "512",
        "--port",
        str(port),
        # Generation and chat answer only with the key: the health checks send it, and no sink shows it.
        "--api-key",
        "sk-specdoctor-test-key",
    ]
    proc = deploy(["--once"], command, tmp_path)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    events = transcript(tmp_path)
    assert [e["type"] for e in events].count("launch") == 1
    final = events[-1]["final_command"]
    assert "--max-total-tokens 4096" in final and "--context-length 512" in final
    assert "--max_total_tokens" not in final and "--max-model-len" not in final
    assert any(e["type"] == "outcome" and e["outcome"]["kind"] == "healthy" for e in events)
    assert "sk-specdoctor-test-key" not in out + (tmp_path / "transcript.jsonl").read_text()


def test_port_taken_after_preflight_is_recognised_from_errno_98_and_relaunched(sglang_env, tmp_path):
    port = find_free_port(35000)
    command = tiny_llama_on_cpu(sglang_env, port)
    # Supervising (stays in the foreground once healthy); moving --port is allowed for this run (deploy
    # pins it unless --no-pin).
    proc = deploy(["--no-pin", "--allow", "port"], command, tmp_path)
    with socket.socket() as squatter:
        read_until(proc, "launch 1", 60)
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", port))  # preflight saw the port free; now someone else takes it
        squatter.listen()
        text = read_until(proc, "HEALTHY", 240)
    assert "HUNG: SGLang printed a fatal line" in text and "Errno 98" in text
    assert "launch 2" in text
    assert sglang_processes()  # the healthy relaunch is running
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    events = transcript(tmp_path)
    hung = [e for e in events if e["type"] == "outcome" and e["outcome"]["kind"] == "hung"]
    assert hung and hung[0]["outcome"]["elapsed_s"] < 120  # from the line, not a multi-minute timeout
    assert events[-1]["type"] == "stop" and events[-1]["result"] == "interrupted"


def test_no_accelerator_ends_in_a_clear_stop(sglang_env, tmp_path):
    m, d = sglang_env.tiny_llama, sglang_env.tiny_eagle3
    command = [
        *sglang_env.launch_server(),
        "--model-path",
        m,
        "--tp",
        "8",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        d,
        "--speculative-eagle-topk",
        "1",
        "--num-speculative-tokens",
        "16",
        "--port",
        str(find_free_port(36000)),
    ]
    proc = deploy(["--once"], command, tmp_path)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 3, out
    assert "no usable GPU" in out and "Traceback" not in out
    events = transcript(tmp_path)
    assert [e["type"] for e in events].count("launch") == 1
    launched = next(e for e in events if e["type"] == "launch")["command"]
    assert "--speculative-num-draft-tokens 16" in launched and "--num-speculative-tokens" not in launched
    decision = [e for e in events if e["type"] == "decision"][-1]["decision"]
    assert decision["action"] == "stop" and decision["category"] == "driver-cuda"


def test_a_chat_template_that_does_not_compile_is_found_by_a_chat_request_and_taken_back(
    sglang_env, tmp_path
):
    """The server starts and generates, so only a chat request shows the fault (SGLang answers 400 with
    Jinja's message); the run diagnoses it from that answer and relaunches without the template."""
    template = tmp_path / "broken.jinja"
    template.write_text("{% for message in messages %}{{ message.content }}\n")
    port = find_free_port(36000)
    command = tiny_llama_on_cpu(sglang_env, port, "--chat-template", str(template))
    proc = deploy(["--once", "--allow", "chat-template"], command, tmp_path / "run")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    events = transcript(tmp_path / "run")
    outcomes = [e["outcome"] for e in events if e["type"] == "outcome"]
    assert outcomes[0]["kind"] == "unhealthy" and "Unexpected end of template" in outcomes[0]["detail"]
    assert outcomes[-1]["kind"] == "healthy"
    assert "--chat-template" not in events[-1]["final_command"]
