"""The simulated node: its GPUs, what already runs on them, model sizes, and injected faults.

A profile is a built-in name (`tools/simnode/profiles/<name>.json`) or the path of a JSON file of the same
shape. Every profile sees the model sizes of `profiles/models.json`; its own `models` entries win.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

PROFILE_ENV = "SPECDOCTOR_SIM_PROFILE"
SPEED_ENV = "SPECDOCTOR_SIM_SPEED"
DEFAULT_PROFILE = "h200x8"
PROFILES_DIR = Path(__file__).with_name("profiles")
_SHARED_MODELS = "models"

Stage = Literal["args", "init", "weights", "kv_cache", "cuda_graph", "scheduler", "http", "warmup"]
"""Startup stages, in order, named as specdoctor's watcher names them."""


class ProfileError(ValueError):
    """The node profile cannot be used; the message says which one and why."""


class GpuSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    count: int = Field(ge=1, description="GPUs visible to the launch.")
    name: str = Field(description="As nvidia-smi names it, e.g. `NVIDIA H200`.")
    memory_mib: int = Field(gt=0, description="Total memory of one GPU in MiB (nvidia-smi `memory.total`).")
    compute_capability: str = Field(description="e.g. `9.0` for sm90.")
    p2p: bool = Field(description="CUDA peer access between the GPUs (false on GeForce cards).")


class GpuProcess(BaseModel):
    """A process that holds GPU memory before the launch (a stale server, another job)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    gpu: int = Field(ge=0)
    pid: int
    name: str
    memory_mib: int = Field(ge=0)


class ModelSize(BaseModel):
    """What a model costs on the GPU; keyed by the model folder's basename."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    weights_gib: float = Field(ge=0, description="All weights at tp 1; each rank holds weights_gib / tp.")
    kv_bytes_per_token: int = Field(gt=0, description="KV cache bytes per token on one GPU at tp 1.")
    draft_weights_gib: float | None = Field(
        default=None, description="Weights of the speculative draft model launched with this target."
    )
    draft_kv_bytes_per_token: int | None = Field(
        default=None, description="Draft KV bytes per token at tp 1; None: from the draft's config.json."
    )
    accept_length: float | None = Field(
        default=None, description="Mean accept length when the draft matches the algorithm."
    )
    graph_mib_per_bs: float = Field(
        default=8.0, gt=0, description="CUDA-graph memory per captured decode batch size, MiB per GPU."
    )


class Inject(BaseModel):
    """Faults the node injects, for tests of the watcher and the loop."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    hang_at_stage: Stage | None = Field(
        default=None,
        description="Print the stage's opening line(s), then nothing more; never become ready (SIGTERM still "
        "stops it gracefully).",
    )
    crash_after_ready_s: float | None = Field(
        default=None, ge=0, description="Seconds (wall clock) after ready, the scheduler crashes."
    )
    slow_stage: dict[Stage, float] = Field(
        default_factory=dict, description="Extra wall-clock seconds spent in a stage (not scaled by speed)."
    )
    hide_accept_length: bool = Field(
        default=False,
        description="Speculative decoding runs, but no accept length shows in /generate, /server_info or the "
        "decode lines (only /metrics, with --enable-metrics, exports it): an unmeasurable server.",
    )
    node_rank: int | None = Field(
        default=None,
        ge=0,
        description="In a multi-node launch, only the node of this --node-rank has the faults above (None: "
        "every node).",
    )


class NodeProfile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    gpus: GpuSpec
    processes: tuple[GpuProcess, ...] = ()
    models: dict[str, ModelSize] = Field(default_factory=dict)
    inject: Inject = Field(default_factory=Inject)
    context_mib: int = Field(default=520, ge=0, description="CUDA context of each rank, MiB.")
    comm_mib: int = Field(default=400, ge=0, description="NCCL and all-reduce buffers per rank when tp > 1.")

    def for_node(self, node_rank: int) -> NodeProfile:
        """Node `node_rank` of a multi-node launch: every node has these GPUs; faults only where injected."""
        if self.inject.node_rank in (None, node_rank):
            return self
        return self.model_copy(update={"inject": Inject()})

    def others_mib(self, gpu: int) -> int:
        """Memory other processes hold on this GPU."""
        return sum(p.memory_mib for p in self.processes if p.gpu == gpu)

    def model_size(self, folder: str) -> ModelSize | None:
        name = Path(folder.rstrip("/")).name
        if name in self.models:
            return self.models[name]
        lowered = {k.lower(): v for k, v in self.models.items()}
        return lowered.get(name.lower())


def builtin_names() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.json") if p.stem != _SHARED_MODELS)


def load_profile(spec: str | None) -> NodeProfile:
    """The profile a name or path stands for (the default node when `spec` is empty)."""
    spec = spec or DEFAULT_PROFILE
    path = PROFILES_DIR / f"{spec}.json" if spec in builtin_names() else Path(spec)
    if not path.is_file():
        raise ProfileError(
            f"{PROFILE_ENV}={spec}: neither a built-in profile ({', '.join(builtin_names())}) nor a JSON file"
        )
    try:
        raw = json.loads(path.read_text())
        shared = json.loads((PROFILES_DIR / f"{_SHARED_MODELS}.json").read_text())
        raw.setdefault("name", path.stem)
        raw["models"] = {**shared, **raw.get("models", {})}
        return NodeProfile.model_validate(raw)
    except (OSError, ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ProfileError(f"{PROFILE_ENV}={spec}: not a valid node profile ({first})") from None


def speed_from_env(env: dict[str, str] | None = None) -> float:
    """The time-scale factor: 1.0 is a short but realistic startup, 0.02 is for tests."""
    raw = (env if env is not None else os.environ).get(SPEED_ENV, "1.0")
    try:
        speed = float(raw)
    except ValueError:
        raise ProfileError(f"{SPEED_ENV}={raw}: not a number") from None
    if speed < 0:
        raise ProfileError(f"{SPEED_ENV}={raw}: must be >= 0")
    return speed
