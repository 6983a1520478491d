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

__all__ = ["DetachedServer", "live_engine_ids", "processes", "stop_server"]

_ENVIRON_MAX_BYTES = 1 << 20


class DetachedServer(BaseModel):
    """What names a detached engine launch after specdoctor has exited."""

    model_config = ConfigDict(frozen=True)
    pid: int = Field(description="The launcher's pid, leader of its own process group.")
    pgid: int = Field(description="The launch's process group.")
    start_time: int = Field(
        description="The launcher's start time (clock ticks after boot, /proc/<pid>/stat)."
    )
    engine_id: str = Field(
        description=f"The launch's marker: {MARKER_VARIABLE} in every process's environment."
    )
    url: str = Field(description="Where the server answers.")
    log_path: str | None = Field(default=None, description="The log the engine writes itself.")
    command: str = Field(description="The command that was launched, as a shell line.")

    def leader_is_ours(self) -> bool:
        """The recorded pid is still the launcher we started: same start time, our marker."""
        leader = read_proc(self.pid)
        return (
            leader is not None
            and leader.start_time == self.start_time
            and has_marker(self.pid, self.engine_id)
        )


def processes(server: DetachedServer) -> list[Proc]:
    """The live processes of this launch: its recorded group while the leader is verified, its marker, and
    their descendants."""
    group = server.pgid if server.leader_is_ours() else -1  # -1 matches no process group
    return find_engine(EngineIdentity(group, server.start_time, server.engine_id))


def stop_server(server: DetachedServer, grace_s: float) -> TreeStop:
    """SIGTERM the launcher first (SGLang then ends its scheduler and detokenizer itself), then whatever
    of the launch outlives it, SIGKILL after `grace_s`; report what survived even that."""
    return stop_tree(lambda: processes(server), grace_s, leader=(server.pid, server.start_time))


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
