"""What redaction costs: microseconds per line of real SGLang output, as the process tee pays it.

Run: `python bench/bench_redact.py [--rounds 3]`. Reads every recorded output in `tests/data/sglang-outputs`
(real SGLang 0.5.23 launches, server_args dumps and tracebacks included) and prints, for the best round,
the lines, their average length, the microseconds per line and the lines per second one core can redact.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from specdoctor.tools.redact import LogRedactor

OUTPUTS = Path(__file__).resolve().parents[1] / "tests" / "data" / "sglang-outputs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    lines = [line for p in sorted(OUTPUTS.iterdir()) for line in p.read_text(errors="replace").splitlines()]
    best = float("inf")
    for _ in range(args.rounds):
        redactor = LogRedactor()
        started = time.perf_counter()
        for line in lines:
            redactor.line(line)
        best = min(best, time.perf_counter() - started)
    per_line = best / len(lines)
    print(f"lines: {len(lines)}  average length: {sum(map(len, lines)) / len(lines):.0f} chars")
    print(f"redaction: {per_line * 1e6:.1f} us/line  ({1 / per_line:,.0f} lines/s on one core)")


if __name__ == "__main__":
    main()
