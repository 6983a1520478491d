"""How fast `specdoctor check` catches the seed crash, against how long real SGLang takes to hit it.

    python bench/bench_check.py [--runs N]

Uses the real SGLang 0.5.23 CPU environment of the tests (built on first use). Prints:
  - check, cold: the catalog is read from the installed SGLang's real --help (empty cache)
  - check, warm: the catalog comes from the on-disk cache
  - real SGLang failing on the same command (argparse error, exit 2)
  - the ratio real / warm (goal: >= 25x)
  - `specdoctor --help` start-up against `python -c pass`
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.sglang_env import ensure_env


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    return time.perf_counter() - started, proc.returncode


def median_of(runs: int, argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    results = [timed(argv, env) for _ in range(runs)]
    return statistics.median(t for t, _ in results), results[-1][1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    runs = ap.parse_args().runs
    sglang = ensure_env()
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp)
        for name, arch in (("M", "DeepseekV3ForCausalLM"), ("D", "LlamaForCausalLMEagle3")):
            (models / name).mkdir()
            (models / name / "config.json").write_text(
                f'{{"architectures": ["{arch}"], "num_attention_heads": 64}}'
            )
        seed = [
            "--model-path",
            str(models / "M"),
            "--tp",
            "8",
            "--speculative-algorithm",
            "EAGLE3",
            "--speculative-draft-model-path",
            str(models / "D"),
            "--speculative-eagle-topk",
            "1",
            "--num-speculative-tokens",
            "16",
        ]
        cache = Path(tmp) / "cache"
        # A normal install keeps bytecode caches; this sandbox sets PYTHONDONTWRITEBYTECODE, which would make
        # every run recompile specdoctor and its dependencies from source.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["SPECDOCTOR_CACHE_DIR"] = str(cache)
        check = [sys.executable, "-m", "specdoctor", "check", "--json", "--", *sglang.launch_server(), *seed]
        colds = []
        for i in range(max(1, runs // 2)):
            env_i = {**env, "SPECDOCTOR_CACHE_DIR": str(cache / f"cold{i}")}
            colds.append(timed(check, env_i)[0])
        cold = statistics.median(colds)
        timed(check, env)  # fill the cache
        warm, rc = median_of(runs, check, env)
        real, real_rc = median_of(max(1, runs // 2), [*sglang.launch_server(), *seed], env)
    help_t, _ = median_of(runs * 2, [sys.executable, "-m", "specdoctor", "--help"], env)
    bare, _ = median_of(runs * 2, [sys.executable, "-c", "pass"], env)
    print(f"check, cold (real --help read once):   {cold * 1000:8.0f} ms")
    print(f"check, warm (cached catalog):          {warm * 1000:8.0f} ms   (exit {rc}: findings)")
    print(f"real SGLang failing on the command:    {real * 1000:8.0f} ms   (exit {real_rc})")
    print(f"ratio real / warm:                     {real / warm:8.1f} x   (goal >= 25x)")
    print(f"specdoctor --help start-up:            {help_t * 1000:8.0f} ms")
    print(
        f"python -c pass:                        {bare * 1000:8.0f} ms   (--help costs {(help_t - bare) * 1000:.0f} ms more)"
    )


if __name__ == "__main__":
    main()
