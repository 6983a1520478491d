"""Time and memory of `scan_file` on a 1 GB launch log, and how much `compact` shrinks real logs.

Run: `python bench/bench_logs.py [--size-mb 1024] [--keep]`. The big log is written to a temp dir: a
real SGLang 0.5.23 startup (`serve-module.log` up to the ready line), then `Decode batch` lines with
speculative `accept len`, then the real scheduler crash of `eagle3-device-cpu.rc137.txt`. A second log
has no ready line and its crash in the middle, followed by repeated warnings, which makes `scan_file`
search the whole file (its worst case). Each scan runs in a child process so peak RSS is its own.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTPUTS = ROOT / "tests" / "data" / "sglang-outputs"
READY = "The server is fired up and ready to roll!"
DECODE = (
    "[2026-12-03 09:{m:02d}:{s:02d}] Decode batch, #running-req: {r}, #token: {t}, token usage: 0.{u:02d}, "
    "accept len: {a:.2f}, accept rate: 0.{p:02d}, cuda graph: True, gen throughput (token/s): {g}.{u:02d}, "
    "#queue-req: 0\n"
)
NCCL_WARN = (
    "[2026-12-03 09:{m:02d}:{s:02d} TP3] NCCL WARN Call to connect returned Connection refused, retrying\n"
)

_CHILD = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[2])
from specdoctor.tools.logs import scan_file
t = time.perf_counter()
s = scan_file(sys.argv[1])
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "stage": s.stage, "ready": s.ready, "kind": s.root_cause.kind, "error_line": s.root_cause.error_line,
    "accept_length": s.accept_length, "compact_chars": len(s.compact), "size": s.size_bytes,
    "lines_parsed": s.lines_parsed, "bytes_skipped": s.bytes_skipped}))
"""


def body(name: str) -> list[str]:
    """A recorded output without its `# ...` header."""
    lines = (OUTPUTS / name).read_text().splitlines(keepends=True)
    marker = next((i for i, line in enumerate(lines) if line.startswith("# ---- stdout")), -1)
    return lines[marker + 1 :]


def block_of(template: str, n: int) -> str:
    return "".join(
        template.format(
            m=i // 60 % 60,
            s=i % 60,
            r=1 + i % 48,
            t=1000 + i,
            u=i % 100,
            a=1 + (i % 300) / 100,
            p=i % 100,
            g=900 + i,
        )
        for i in range(n)
    )


def write_log(path: Path, size: int, *, ready: bool) -> None:
    startup = body("serve-module.log")
    if ready:
        startup = startup[: next(i for i, line in enumerate(startup) if READY in line) + 1]
    else:
        startup = startup[: next(i for i, line in enumerate(startup) if "Load weight begin" in line) + 1]
    crash = body("eagle3-device-cpu.rc137.txt")
    crash = crash[next(i for i, line in enumerate(crash) if "Scheduler hit an exception" in line) :]
    filler = block_of(DECODE if ready else NCCL_WARN, 4096).encode()
    with path.open("wb") as f:
        f.write("".join(startup).encode())
        if ready:
            while f.tell() < size:
                f.write(filler)
            f.write("".join(crash).encode())
        else:
            while f.tell() < size // 2:
                f.write(filler)
            f.write("".join(crash).encode())
            while f.tell() < size:
                f.write(filler)


def scan_in_child(path: Path) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(ROOT)], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out)


def real_outputs() -> None:
    sys.path.insert(0, str(ROOT))
    from specdoctor.tools.logs import scan_file

    print(f"\n{'real output':58} {'bytes':>8} {'compact':>8} {'ratio':>6}  kind")
    total_in = total_out = 0
    for path in sorted([*OUTPUTS.glob("*.rc*.txt"), *OUTPUTS.glob("*.log")]):
        s = scan_file(path)
        total_in += s.size_bytes
        total_out += len(s.compact)
        print(
            f"{path.name:58} {s.size_bytes:8,} {len(s.compact):8,} {s.compaction_ratio:6.1f}  {s.root_cause.kind}"
        )
    print(f"{'all real outputs':58} {total_in:8,} {total_out:8,} {total_in / total_out:6.1f}")


def report(path: Path, size: int, *, ready: bool) -> None:
    t = time.perf_counter()
    write_log(path, size, ready=ready)
    written = time.perf_counter() - t
    scan_in_child(path)  # warm the page cache the same way for every run
    runs = [scan_in_child(path) for _ in range(3)]
    seconds = [float(r["seconds"]) for r in runs]  # type: ignore[arg-type]
    best = runs[seconds.index(min(seconds))]
    ratio = int(best["size"]) / int(best["compact_chars"])  # type: ignore[call-overload]
    print(f"\n{path.stem}: {path.stat().st_size / 2**20:,.0f} MiB written in {written:.1f} s")
    print(
        f"  scan_file: {min(seconds):.3f} s (best of 3; all: {', '.join(f'{s:.3f}' for s in seconds)}), "
        f"peak RSS {best['rss_mb']:.0f} MiB"
    )
    print(
        f"  stage={best['stage']} ready={best['ready']} kind={best['kind']} accept_length={best['accept_length']} "
        f"lines_parsed={best['lines_parsed']:,} bytes_skipped={best['bytes_skipped']:,}"
    )
    print(f"  error_line: {best['error_line']}")
    print(f"  compaction: {best['size']:,} bytes -> {best['compact_chars']:,} chars = {ratio:,.0f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--keep", action="store_true", help="leave the generated logs in the temp dir")
    args = parser.parse_args()
    size = args.size_mb << 20
    tmp = Path(tempfile.mkdtemp(prefix="bench_logs_"))
    try:
        small = scan_in_child(OUTPUTS / "eagle3-device-cpu.rc137.txt")
        print(f"baseline: python + imports + scan of a 28 KB log: peak RSS {small['rss_mb']:.0f} MiB")
        for name, ready in (("ready-then-crash-at-end", True), ("crash-in-middle-no-ready", False)):
            report(tmp / f"{name}.log", size, ready=ready)
    finally:
        if args.keep:
            print(f"logs kept in {tmp}")
        else:
            shutil.rmtree(tmp)
    real_outputs()


if __name__ == "__main__":
    main()
