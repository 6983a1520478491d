"""A multi-node launch driven as one: every node rank started from one command, watched as one engine.

`MultiNodeLauncher` wraps a launcher that can start one node's engine (today the simulated node, each rank a
process on this machine) and starts one per `--node-rank` of the same command, changing nothing else: a fix
is one command, so it reaches every node. `MultiNodeEngine` is what the loop watches: it ends when the first
node rank ends (a real node notices a dead peer at its next collective and fails too), its log is every
rank's output in arrival order (`tools/rank_logs.py`), and stopping it stops every node. A failure on one
node therefore stops and relaunches all of them, and the planner reads all their logs.

A Slurm or Kubernetes launcher is another class with the same `Launcher` protocol (docs/MULTINODE.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from specdoctor.agent.launcher import Engine, Launcher
from specdoctor.tools.command import LaunchCommand, SetFlag
from specdoctor.tools.detached import Launched
from specdoctor.tools.foreign import FreedGpus
from specdoctor.tools.gpu import GpuProcess, GpuReport
from specdoctor.tools.process import DEFAULT_GRACE_S, EngineStartError, LineCallback, ProcessRef, StopResult
from specdoctor.tools.rank_logs import MergedLog

SETTLE_S = 5.0
"""Once one node rank has ended, how long the others get to end on their own (and print why) before the
engine reports the end; a real node may instead hang in a collective until its NCCL timeout."""
_ENDED_GRACE_S = 2.0
"""Grace for what is left of a node rank that has already exited (its scheduler children)."""


def node_command(spec: LaunchCommand, node_rank: int) -> LaunchCommand:
    """What node `node_rank` runs: the same command with its own `--node-rank`, nothing else changed."""
    return spec.apply(SetFlag(flag="--node-rank", values=(str(node_rank),)), _flag_name)


def _flag_name(name: str) -> str:
    # `--node_rank` is the same flag to SGLang's parser; rewrite it rather than add a second one.
    return "--" + name.lstrip("-").replace("_", "-") if name.startswith("--") else name


def node_log(log_path: Path, node_rank: int) -> Path:
    """`attempt-3.log` → `attempt-3.rank1.log`: node rank 1's own log beside the merged one."""
    return log_path.with_name(f"{log_path.stem}.rank{node_rank}{log_path.suffix}")


class MultiNodeLauncher:
    """Starts `nodes` node ranks of one multi-node command through `inner`, one engine per rank."""

    def __init__(self, inner: Launcher, nodes: int, settle_s: float = SETTLE_S) -> None:
        if nodes < 2:
            raise ValueError(f"a multi-node launch has at least 2 nodes, not {nodes}")
        self.inner, self.nodes, self.settle_s = inner, nodes, settle_s
        self.name = f"{inner.name} x{nodes} nodes"

    def start(self, spec: LaunchCommand, log_path: Path, to_file: bool = False) -> MultiNodeEngine:
        said = spec.value("--nnodes", _flag_name)
        if said != str(self.nodes):
            raise EngineStartError(
                f"{self.nodes} node ranks are to be started (--sim-nodes {self.nodes}), but the command says "
                f"--nnodes {said or 1}: give it --nnodes {self.nodes} --node-rank 0 --dist-init-addr HOST:PORT"
            )
        try:
            merged = MergedLog(log_path)
        except OSError as exc:
            raise EngineStartError(f"cannot write the engine log {log_path}: {exc.strerror}") from None
        ranks: list[Engine] = []
        try:
            for rank in range(self.nodes):
                ranks.append(self.inner.start(node_command(spec, rank), node_log(log_path, rank), to_file))
        except BaseException:
            for started in ranks:
                started.stop()
            merged.close()
            raise
        return MultiNodeEngine(ranks, merged, self.settle_s)

    def gpus(self) -> GpuReport:
        """One node's GPUs: every node of the launch is alike, and preflight counts GPUs per node."""
        return self.inner.gpus()

    def free_gpus(self, processes: list[GpuProcess]) -> FreedGpus:
        return self.inner.free_gpus(processes)


class MultiNodeEngine:
    """Every node rank of one launch, seen by the loop as one engine (the `Engine` protocol).

    `pid`, `tail` and `subscribe` are node rank 0's (it serves HTTP; the watcher follows its stages);
    `log_path` is the merged log of every rank, its own log once detached; `poll` ends with the first rank
    to end; `stop` stops them all at once.
    """

    def __init__(self, ranks: list[Engine], merged: MergedLog, settle_s: float = SETTLE_S) -> None:
        self.ranks, self.merged, self.settle_s = ranks, merged, settle_s
        self.first_ended: tuple[int, int] | None = None
        """(node rank, exit code) of the first node rank that ended."""
        self._ended: dict[int, StopResult] = {}
        self._lock = threading.RLock()
        self._detached = False
        for rank, engine in enumerate(ranks):
            engine.subscribe(merged.feeder(rank), replay=True)

    @property
    def pid(self) -> int:
        return self.ranks[0].pid

    @property
    def log_path(self) -> Path:
        # Detached, the merged log stops with specdoctor; node rank 0's own log goes on.
        return self.ranks[0].log_path if self._detached else self.merged.path

    def poll(self) -> int | None:
        """The exit code of the first node rank to end; once one has, the others get `settle_s` to end
        on their own so that the log holds every node's last words."""
        with self._lock:
            if self.first_ended is None:
                for rank, engine in enumerate(self.ranks):
                    code = engine.poll()
                    if code is not None:
                        self.first_ended = (rank, code)
                        self._settle(rank)
                        break
            return None if self.first_ended is None else self.first_ended[1]

    def _settle(self, first: int) -> None:
        self._end(first)
        deadline = time.monotonic() + self.settle_s
        for rank, engine in enumerate(self.ranks):
            if rank != first and engine.wait(max(0.0, deadline - time.monotonic())) is not None:
                self._end(rank)
        self.merged.flush()

    def _end(self, rank: int) -> None:
        """Reap what is left of a node rank that exited, and read its output to the end."""
        self._ended[rank] = self.ranks[rank].stop(_ENDED_GRACE_S)

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.1)
        return code

    def tail(self) -> list[str]:
        return self.ranks[0].tail()

    def subscribe(self, on_line: LineCallback, replay: bool = False) -> Callable[[], None]:
        return self.ranks[0].subscribe(on_line, replay=replay)

    def processes(self) -> list[ProcessRef]:
        return [
            p for rank, engine in enumerate(self.ranks) if rank not in self._ended for p in engine.processes()
        ]

    def stop(self, grace_s: float = DEFAULT_GRACE_S) -> StopResult:
        """Stop every node rank at once (a node rank above 0 waits for node rank 0's shutdown, so one at a
        time would cost a grace period each), then close the merged log."""
        began = time.monotonic()
        with self._lock:
            left = [rank for rank in range(len(self.ranks)) if rank not in self._ended]
            threads = [threading.Thread(target=self._stop_rank, args=(rank, grace_s)) for rank in left]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            self.merged.close()
            return _combined([self._ended[rank] for rank in range(len(self.ranks))], time.monotonic() - began)

    def _stop_rank(self, rank: int, grace_s: float) -> None:
        self._ended[rank] = self.ranks[rank].stop(grace_s)

    def launches(self) -> list[Launched]:
        return [launch for engine in self.ranks for launch in engine.launches()]

    def detach(self) -> None:
        """Leave every node rank running on its own (each was started writing straight to its log)."""
        for engine in self.ranks:
            engine.detach()
        self.merged.close()
        self._detached = True


def _combined(results: list[StopResult], elapsed: float) -> StopResult:
    def every(field: str) -> tuple[ProcessRef, ...]:
        return tuple(p for result in results for p in getattr(result, field))

    return StopResult(
        pid=results[0].pid,
        exit_code=results[0].exit_code,
        stopped=every("stopped"),
        terminated=every("terminated"),
        killed=every("killed"),
        survivors=every("survivors"),
        elapsed_s=round(elapsed, 3),
        message="; ".join(f"node rank {rank}: {result.message}" for rank, result in enumerate(results)),
    )
