"""Launch/stop cycles of the simulated GPU node: how long each takes and whether any process is left behind.

Run: `python bench/bench_simnode.py [--cycles 100] [--speed 0.02] [--profile h200x8]`. Each cycle starts
`python -m specdoctor.tools.simnode` in its own session (a tiny Llama model folder made in a temp dir), polls
`/health` until it answers 200, sends SIGTERM to the launcher and waits for it. Every launch carries one
token in its environment; at the end /proc is scanned for processes with that token (must be 0).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.procs import live_processes  # noqa: E402
from tests.tiny_models import TINY_LLAMA  # noqa: E402

TOKEN_ENV = "SIMNODE_BENCH_TOKEN"
CONFIG = TINY_LLAMA


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
            return resp.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def cycle(model: str, env: dict[str, str]) -> tuple[float, float, int]:
    """(seconds to healthy, seconds to exit after SIGTERM, exit code)."""
    port = free_port()
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "specdoctor.tools.simnode", "--model-path", model, "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        while not healthy(port):
            if proc.poll() is not None:
                raise RuntimeError(f"the node exited {proc.returncode} before it was healthy")
            time.sleep(0.01)
        ready = time.perf_counter() - started
        stopping = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        return ready, time.perf_counter() - stopping, code
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def leftovers(token: str) -> list[int]:
    marker = f"{TOKEN_ENV}={token}".encode()
    return live_processes(lambda environ, _: marker in environ.split(b"\0"), this_test_only=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--speed", default="0.02", help="SPECDOCTOR_SIM_SPEED")
    parser.add_argument("--profile", default="h200x8", help="SPECDOCTOR_SIM_PROFILE")
    opts = parser.parse_args()
    token = uuid.uuid4().hex
    env = {
        **os.environ,
        TOKEN_ENV: token,
        "SPECDOCTOR_SIM_SPEED": opts.speed,
        "SPECDOCTOR_SIM_PROFILE": opts.profile,
    }
    with tempfile.TemporaryDirectory(prefix="simnode-bench-") as tmp:
        model = Path(tmp) / "tiny-llama"
        model.mkdir()
        (model / "config.json").write_text(json.dumps(CONFIG))
        began = time.perf_counter()
        results = [cycle(str(model), env) for _ in range(opts.cycles)]
        total = time.perf_counter() - began
    time.sleep(0.2)
    left = leftovers(token)
    ready = [r for r, _, _ in results]
    stop = [s for _, s, _ in results]
    codes = sorted({c for _, _, c in results})
    print(f"cycles: {opts.cycles} (speed {opts.speed}, profile {opts.profile})")
    print(f"total: {total:.2f} s ({total / opts.cycles * 1000:.0f} ms per cycle)")
    print(f"to healthy: median {statistics.median(ready) * 1000:.0f} ms, max {max(ready) * 1000:.0f} ms")
    print(f"SIGTERM to exit: median {statistics.median(stop) * 1000:.0f} ms, max {max(stop) * 1000:.0f} ms")
    print(f"exit codes: {codes}")
    print(f"processes left: {len(left)}")
    if left or codes != [0]:
        sys.exit(1)


if __name__ == "__main__":
    main()
