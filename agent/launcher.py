"""Launchers start the engine for a LaunchCommand and know the node it runs on.

`RealLauncher` runs the command's own argv (never a shell), wrappers included (`docker run … IMAGE`,
`nohup`, `numactl`, …): a container lives as long as its `docker run` process, so stopping that process group
stops it. `SimulatedLauncher` runs the engine's arguments against the built-in simulated GPU node
(`tools/simnode`), which stands in for the engine and whatever wraps it, so the whole loop can be exercised
without a GPU.
`MultiNodeLauncher` (`agent/multinode.py`) starts every node rank of a multi-node command through one of them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from specdoctor.tools.command import LaunchCommand, SetFlag
from specdoctor.tools.detached import Launched
from specdoctor.tools.errors import UsageError
from specdoctor.tools.foreign import FreedGpus, terminate_foreign
from specdoctor.tools.gpu import Gpu, GpuProcess, GpuReport, build_report
from specdoctor.tools.process import (
    DEFAULT_GRACE_S,
    EngineProcess,
    LineCallback,
    ProcessRef,
    StopResult,
)
from specdoctor.tools.redact import is_secret_env


def engine_env(spec: LaunchCommand, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment the command's first program runs with: ours, the command's leading `NAME=value`
    words, then `extra`, less specdoctor's own LLM settings and secrets (`SPECDOCTOR_LLM_API_KEY`, a base URL
    with a password in it): the engine, and whatever code it loads, never needs them, and its logs must not
    print them. What wrappers set (`env A=1`, a container's `-e`) they set themselves, from the argv."""
    return _without_ours({**os.environ, **spec.host_env(), **(extra or {})})


def _without_ours(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not _ours_to_keep(k)}


def _ours_to_keep(name: str) -> bool:
    return name.startswith("SPECDOCTOR_LLM_") or (name.startswith("SPECDOCTOR_") and is_secret_env(name))


def check_launchable(spec: LaunchCommand) -> None:
    """Refuse, as a usage error, a command that cannot run as a watched server (`--help`, `docker run -d`)."""
    problem = spec.launch_problem()
    if problem is not None:
        raise UsageError(problem)


class Engine(Protocol):
    """One launch as the loop watches and stops it: an `EngineProcess`, or every node rank of a multi-node
    launch as one (`agent/multinode.py`)."""

    @property
    def pid(self) -> int: ...

    @property
    def log_path(self) -> Path: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int | None: ...

    def tail(self) -> list[str]: ...

    def subscribe(self, on_line: LineCallback, replay: bool = False) -> Callable[[], None]: ...

    def processes(self) -> list[ProcessRef]: ...

    def stop(self, grace_s: float = DEFAULT_GRACE_S) -> StopResult: ...

    def detach(self) -> None: ...

    def launches(self) -> list[Launched]:
        """What names each launcher process group of this launch once specdoctor has exited."""
        ...


class Launcher(Protocol):
    name: str

    def start(self, spec: LaunchCommand, log_path: Path, to_file: bool = False) -> Engine: ...

    def gpus(self) -> GpuReport: ...

    def free_gpus(self, processes: list[GpuProcess]) -> FreedGpus:
        """Stop processes that hold GPU memory (never ours, only engines of this user); say what happened."""
        ...


class RealLauncher:
    """Runs the engine exactly as the command says, in its own process group, environment overrides added."""

    name = "real"

    def start(self, spec: LaunchCommand, log_path: Path, to_file: bool = False) -> EngineProcess:
        return EngineProcess.start(spec.argv(), engine_env(spec), log_path, to_file=to_file)

    def gpus(self) -> GpuReport:
        from specdoctor.tools.gpu import inspect

        return inspect()

    def free_gpus(self, processes: list[GpuProcess]) -> FreedGpus:
        return terminate_foreign(processes)


class SimulatedLauncher:
    """Runs `python -m specdoctor.tools.simnode <the command's arguments>` on a described node (a profile)."""

    name = "simulated"

    def __init__(self, profile: str, speed: float = 1.0) -> None:
        from specdoctor.tools.simnode.profile import load_profile

        self.profile_name = profile
        self.profile = load_profile(profile)
        self.speed = speed
        self._edited: Path | None = None
        """The temporary profile `free_gpus` wrote; removed when replaced and at exit."""

    def argv(self, spec: LaunchCommand) -> list[str]:
        """The simulated node with the engine's arguments; wrappers are dropped (the node stands in for
        them), and a container's published port is where the node listens, as the engine would be reached."""
        box, port = spec.container, spec.value("--port")
        reach = box.reach(int(port or 30000)) if box is not None and (port or "30000").isdigit() else None
        if reach is not None:
            spec = spec.apply(SetFlag(flag="--port", values=(str(reach[1]),)))
        args = spec.arguments()
        if (
            spec.is_serve_cli
            and spec.positionals()
            and not spec.has("--model-path")
            and not spec.has("--model")
        ):
            # `sglang serve MODEL` is `--model-path MODEL` to the server; the simulated entry has no `serve`.
            model = spec.positionals()[0]
            args = ["--model-path", model, *[a for a in args if a != model]]
        return [sys.executable, "-m", "specdoctor.tools.simnode", *args]

    def start(self, spec: LaunchCommand, log_path: Path, to_file: bool = False) -> EngineProcess:
        # The engine's environment as the command gives it (a container's `-e` included): no wrapper runs.
        sim = {"SPECDOCTOR_SIM_PROFILE": self.profile_name, "SPECDOCTOR_SIM_SPEED": str(self.speed)}
        env = _without_ours({**os.environ, **spec.env_dict(), **sim})
        return EngineProcess.start(self.argv(spec), env, log_path, to_file=to_file)

    def free_gpus(self, processes: list[GpuProcess]) -> FreedGpus:
        """On the simulated node the stray processes are part of the profile: a copy without them is used."""
        import atexit
        import json
        import tempfile

        pids = {p.pid for p in processes}
        kept = [p for p in self.profile.processes if p.pid not in pids]
        data = self.profile.model_dump(mode="json")
        data["processes"] = [p.model_dump(mode="json") for p in kept]
        with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="simnode-", delete=False) as f:
            json.dump(data, f)
        if self._edited is None:
            atexit.register(lambda: self._edited and self._edited.unlink(missing_ok=True))
        else:
            self._edited.unlink(missing_ok=True)  # no engine reads it: the last one has exited
        self._edited = Path(f.name)
        self.profile_name = f.name
        self.profile = self.profile.model_copy(update={"processes": tuple(kept)})
        return FreedGpus(
            stopped=tuple(sorted(pids)),
            message=f"stopped {len(pids)} process(es) on the simulated node: "
            + ", ".join(str(p) for p in sorted(pids)),
        )

    def gpus(self) -> GpuReport:
        """What nvidia-smi would print on the simulated node."""
        spec = self.profile.gpus
        major, minor = (int(x) for x in spec.compute_capability.split("."))
        used = {i: self.profile.others_mib(i) for i in range(spec.count)}
        gpus = [
            Gpu(
                index=i,
                name=spec.name,
                memory_total_mib=spec.memory_mib,
                memory_used_mib=used[i],
                memory_free_mib=spec.memory_mib - used[i],
                compute_capability=(major, minor),
            )
            for i in range(spec.count)
        ]
        processes = [
            GpuProcess(gpu_index=p.gpu, pid=p.pid, process_name=p.name, used_memory_mib=p.memory_mib)
            for p in self.profile.processes
        ]
        return build_report(
            gpus, processes, driver_version="590.48.01", cuda_version="13.1", source="described"
        )
