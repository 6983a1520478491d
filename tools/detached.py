"""A server `deploy --detach` left running: what names it, whether it still runs, and stopping it.

By the time a person asks to stop it, the specdoctor that started it has exited, so nothing in memory
knows the engine. The run's report and transcript keep what does: the launcher's pid and process group,
its start time, and the marker every process of the launch inherits in its environment
(`tools/reaper.py`). A pid alone may belong to another process by now; the marker cannot. So the recorded
group counts only while its leader is still the process we started (same start time, our marker), and
otherwise only processes carrying the marker (and their children) are ours; each is checked against its
start time again just before its signal.
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.reaper import (
    MARKER_VARIABLE,
    EngineIdentity,
    Proc,
    TreeStop,
    find_engine,
    has_marker,
    read_proc,
    stop_tree,
)

__all__ = ["DetachedServer", "Launched", "live_engine_ids", "processes", "stop_server"]

_ENVIRON_MAX_BYTES = 1 << 20


class Launched(BaseModel):
    """One launcher process group of a launch, named so that it can be found again after specdoctor has
    exited: a single-node launch has one, a multi-node launch one per node rank."""

    model_config = ConfigDict(frozen=True)
    pid: int = Field(description="The launcher's pid, leader of its own process group.")
    pgid: int = Field(description="The launch's process group.")
    start_time: int = Field(
        description="The launcher's start time (clock ticks after boot, /proc/<pid>/stat)."
    )
    engine_id: str = Field(
        description=f"The launch's marker: {MARKER_VARIABLE} in every process's environment."
    )
    log_path: str | None = Field(default=None, description="The log the engine writes itself.")

    def leader_is_ours(self) -> bool:
        """The recorded pid is still the launcher we started: same start time, our marker."""
        leader = read_proc(self.pid)
        return (
            leader is not None
            and leader.start_time == self.start_time
            and has_marker(self.pid, self.engine_id)
        )

    def processes(self) -> list[Proc]:
        """The live processes of this launcher: its recorded group while the leader is verified, its marker,
        and their descendants."""
        group = self.pgid if self.leader_is_ours() else -1  # -1 matches no process group
        return find_engine(EngineIdentity(group, self.start_time, self.engine_id))

    def stop(self, grace_s: float) -> TreeStop:
        """SIGTERM the launcher first (SGLang then ends its scheduler and detokenizer itself), then whatever
        of the launch outlives it, SIGKILL after `grace_s`; report what survived even that."""
        return stop_tree(self.processes, grace_s, leader=(self.pid, self.start_time))


class DetachedServer(Launched):
    """What names a detached server after specdoctor has exited: node rank 0's launcher (it serves HTTP),
    and every other node rank's of a multi-node launch."""

    url: str = Field(description="Where the server answers.")
    command: str = Field(description="The command that was launched, as a shell line.")
    other_nodes: tuple[Launched, ...] = Field(
        default=(),
        description="Node ranks 1.. of a multi-node launch, each its own launcher and process group.",
    )

    def launches(self) -> tuple[Launched, ...]:
        return (self, *self.other_nodes)

    def engine_ids(self) -> set[str]:
        return {launch.engine_id for launch in self.launches()}


def processes(server: DetachedServer) -> list[Proc]:
    """Every live process of the server, on every node rank."""
    return [p for launch in server.launches() for p in launch.processes()]


def stop_server(server: DetachedServer, grace_s: float) -> TreeStop:
    """Stop node rank 0 first (a node rank above 0 waits for its shutdown broadcast, so it usually ends by
    itself), then whatever is left of the other node ranks."""
    stops = [launch.stop(grace_s) for launch in server.launches()]
    return TreeStop(
        *(  # one TreeStop for the whole server: each field joined over the node ranks
            [p for stop in stops for p in getattr(stop, field)] for field in TreeStop._fields
        )
    )


def live_engine_ids() -> set[str]:
    """The markers of every launch with a process still running, from one pass over /proc (only this
    user's processes can be read)."""
    prefix = f"{MARKER_VARIABLE}=".encode()
    found: set[str] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read(_ENVIRON_MAX_BYTES)
        except OSError:
            continue
        found.update(
            item[len(prefix) :].decode("ascii", "replace")
            for item in environ.split(b"\0")
            if item.startswith(prefix)
        )
    return found
