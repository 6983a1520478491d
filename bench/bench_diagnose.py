"""`specdoctor diagnose` on a 1 GB log: wall time and peak memory (goal: <= 2 s, bounded memory).

    python bench/bench_diagnose.py [--size-mb 1024]

The log is a real SGLang startup (tests/data/sglang-outputs/serve-module.log) followed by runtime
`Decode batch` lines up to the size, then (as in a log appended to across restarts) a second startup that
dies in a real scheduler crash: CUDA graph capture out of memory.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DECODE = "[2026-12-03 08:11:{s:02d} TP0] Decode batch, #running-req: 12, #token: 20480, token usage: 0.31, accept len: 2.87, accept rate: 0.62, cuda graph: True, gen throughput (token/s): 1843.21, #queue-req: 0\n"
CRASH = """[2026-12-03 09:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 3120, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 386, in __init__
    raise Exception(
Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 7 has a total capacity of 95.00 GiB of which 301.00 MiB is free.
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)
3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. (Not recommended. Huge performance loss)
Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose

[2026-12-03 09:00:02] Received sigquit from a child process. It usually means the child failed.
"""


def make_log(path: Path, size: int) -> None:
    head = (ROOT / "tests/data/sglang-outputs/serve-module.log").read_text()
    block = "".join(DECODE.format(s=i % 60) for i in range(2000)).encode()
    with path.open("wb") as f:
        f.write(head.encode())
        restart = "".join(head.splitlines(keepends=True)[:60]).encode()  # a second run, up to capture
        while f.tell() < size - len(CRASH) - len(restart):
            f.write(block)
        f.write(restart)
        f.write(CRASH.encode())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=1024)
    size = ap.parse_args().size_mb * 1024 * 1024
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "crash.log"
        make_log(log, size)
        cmd = [
            sys.executable,
            "-m",
            "specdoctor",
            "diagnose",
            "--json",
            "--no-llm",
            "--log",
            str(log),
            "--",
            "python",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "M",
            "--tp-size",
            "8",
            "--mem-fraction-static",
            "0.93",
        ]
        subprocess.run(cmd, capture_output=True, env=env, cwd=ROOT)  # warm the bytecode and page caches
        runs = []
        for _ in range(3):
            started = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
            runs.append(time.perf_counter() - started)
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        print(f"log size:              {log.stat().st_size / 2**20:8.0f} MiB")
        print(f"diagnose wall time:    {min(runs):8.2f} s   (best of 3; goal <= 2 s)")
        print(f"peak RSS (any child):  {peak_kib / 1024:8.0f} MiB")
        print(f"decision:              {proc.stdout.split(chr(10))[1:4]}")


if __name__ == "__main__":
    main()
