"""How `specdoctor check` scales with the size of the command: 10, 1,000 and 10,000 arguments.

    python bench/bench_check_scale.py [--runs N]

The arguments are one bad flag (vLLM's --num-speculative-tokens) repeated, and distinct tuning flags
repeated with changing values (duplicates); prints the median wall time of the whole CLI run and the size
of what it prints (findings are de-duplicated, so the output stays small). Goal: under 2 s at 10,000.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

SIZES = (10, 1_000, 10_000)
BASE = ["python", "-m", "sglang.launch_server", "--model-path", "org/model"]


def commands(size: int) -> dict[str, list[str]]:
    half = size // 2
    return {
        "one bad flag repeated": BASE + ["--num-speculative-tokens", "3"] * half,
        "duplicated tuning flags": BASE
        + [
            t
            for i in range(half)
            for t in ("--mem-fraction-static" if i % 2 else "--tp-size", str(i % 7 + 1))
        ],
    }


def run(argv: list[str]) -> tuple[float, int]:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "specdoctor", "check", "--no-host", "--sglang-version", "0.5.23", "--", *argv],
        capture_output=True,
        text=True,
    )
    return time.perf_counter() - started, len(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"{'arguments':>10}  {'command':<26}{'median s':>10}{'output chars':>14}")
    for size in SIZES:
        for name, argv in commands(size).items():
            times, out = [], 0
            for _ in range(args.runs):
                seconds, out = run(argv)
                times.append(seconds)
            print(f"{size:>10}  {name:<26}{statistics.median(times):>10.2f}{out:>14}")


if __name__ == "__main__":
    main()
