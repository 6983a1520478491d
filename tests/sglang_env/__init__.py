"""The real SGLang 0.5.23, CPU-only, for the integration tests and benches.

Built once by build.sh into a cache folder (~2.5 GB, ~2 minutes), then reused: a file lock makes parallel
test processes wait for one build, and a stamp written last marks a finished one.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
VERSION = "0.5.23"


@dataclass(frozen=True)
class SglangEnv:
    venv: Path

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    @property
    def sglang(self) -> str:
        return str(self.venv / "bin" / "sglang")

    @property
    def tiny_llama(self) -> str:
        return str(self.venv / "models" / "tiny-llama")

    @property
    def tiny_eagle3(self) -> str:
        return str(self.venv / "models" / "tiny-eagle3")

    def launch_server(self) -> list[str]:
        return [self.python, "-m", "sglang.launch_server"]


class SglangEnvError(RuntimeError):
    pass


def _recipe_hash() -> str:
    h = hashlib.sha256()
    for name in ("build.sh", "requirements.txt", "constraints.txt", "make_tiny_models.py"):
        h.update((HERE / name).read_bytes())
    return h.hexdigest()[:16]


def default_venv() -> Path:
    if explicit := os.environ.get("SPECDOCTOR_SGLANG_VENV"):
        return Path(explicit)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "specdoctor" / f"sglang-{VERSION}-cpu"


def ensure_env(venv: Path | None = None) -> SglangEnv:
    """The environment, built if missing or built from an older recipe. Raises SglangEnvError with the
    build's last output lines when it cannot be built (e.g. no package index reachable)."""
    venv = venv or default_venv()
    stamp = venv / ".specdoctor-recipe"
    want = _recipe_hash()
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text().strip() == want:
            return SglangEnv(venv)
        proc = subprocess.run(["bash", str(HERE / "build.sh"), str(venv)], capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise SglangEnvError(f"building the SGLang {VERSION} test environment in {venv} failed:\n{tail}")
        stamp.write_text(want)
    return SglangEnv(venv)
