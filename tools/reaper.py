"""Finding and ending every process of one engine launch, and the watchdog that does it if specdoctor dies.

An engine launch is identified three ways, because SGLang's children can leave the launcher's process
group or lose their parent: the process group (the launcher leads a new session), a marker variable in
the environment every descendant inherits (`/proc/<pid>/environ` keeps the start-time environment, so
the marker survives `setsid()` and re-parenting), and the parent links from processes already known.
A process is named by `(pid, start_time)`, so a recycled pid is never mistaken for ours.

Run as a script, this module is the watchdog (`python -I -S reaper.py --marker ID --grace S`). It is
started by `specdoctor.tools.process` before the engine, in its own session, so a Ctrl+C in specdoctor's terminal
does not reach it. Its stdin is a pipe whose only writer is specdoctor: it reads `engine <pid>
<start_time>` once the engine runs and `release` after an orderly stop. End of input without `release`
means specdoctor died (even by SIGKILL, which runs no cleanup), so it stops the engine and exits. It
also exits once the engine is gone. It imports only the standard library, as `-S` leaves no
site-packages.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import NamedTuple

MARKER_VARIABLE = "SPECDOCTOR_ENGINE_ID"
_POLL_S = 0.02
_KILL_WAIT_S = 5.0
_WATCH_TICK_S = 1.0


class Proc(NamedTuple):
    """One row of `/proc/<pid>/stat`."""

    pid: int
    ppid: int
    pgid: int
    state: str
    start_time: int
    name: str

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.start_time)


class EngineIdentity(NamedTuple):
    """What names one launch: its process group, the group leader's start time, its marker value."""

    pgid: int
    leader_start: int
    marker: str


def read_proc(pid: int) -> Proc | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            raw = stat.read().decode("utf-8", "replace")
    except OSError:
        return None
    # The command name may contain spaces and parentheses; it ends at the last ')'.
    head, _, rest = raw.rpartition(")")
    fields = rest.split()
    if len(fields) < 20:
        return None
    name = head.partition("(")[2]
    return Proc(pid, int(fields[1]), int(fields[2]), fields[0], int(fields[19]), name)


def list_procs() -> list[Proc]:
    procs = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (proc := read_proc(int(entry))) is not None:
            procs.append(proc)
    return procs


def has_marker(pid: int, marker: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            data = environ.read()
    except OSError:
        return False
    return f"\0{MARKER_VARIABLE}={marker}\0".encode() in b"\0" + data


def _alive(proc: Proc) -> bool:
    # A zombie holds no memory; its parent (or init) reaps it.
    return proc.state not in ("Z", "X")


def find_engine(engine: EngineIdentity, known: Iterable[tuple[int, int]] = ()) -> list[Proc]:
    """Live processes of this launch: its group, its marker, `known` ones, and all their descendants."""
    me = os.getpid()
    known_keys = set(known)
    procs = [p for p in list_procs() if _alive(p) and p.pid != me]
    members = {
        p.pid: p
        for p in procs
        if (p.pgid == engine.pgid and p.start_time >= engine.leader_start)
        or p.key in known_keys
        or has_marker(p.pid, engine.marker)
    }
    children: dict[int, list[Proc]] = defaultdict(list)
    for proc in procs:
        children[proc.ppid].append(proc)
    pending = list(members)
    while pending:
        for child in children[pending.pop()]:
            if child.pid not in members:
                members[child.pid] = child
                pending.append(child.pid)
    return sorted(members.values())


def signal_procs(procs: Iterable[Proc], signum: int) -> list[Proc]:
    """Send `signum` to each process that is still the same process (same start time); return those hit."""
    hit = []
    for proc in procs:
        current = read_proc(proc.pid)
        if current is None or current.start_time != proc.start_time:
            continue
        try:
            os.kill(proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            continue
        hit.append(proc)
    return hit


class TreeStop(NamedTuple):
    found: list[Proc]
    terminated: list[Proc]
    killed: list[Proc]
    survivors: list[Proc]


def stop_tree(
    find: Callable[[], list[Proc]],
    grace_s: float,
    leader: tuple[int, int] | None = None,
    group: int | None = None,
) -> TreeStop:
    """SIGTERM the launch, SIGKILL what is left after `grace_s`, and report what survived even that.

    A live `leader` (pid, start time) gets SIGTERM first and alone: SGLang's launcher then drains and
    ends its scheduler and detokenizer itself and exits 0, whereas a SIGTERM reaching the scheduler
    directly reads to the launcher as a child crash (SIGQUIT, 5 s of crash diagnostics, exit -9).
    Whatever is left once the leader has exited gets SIGTERM too. `group` is SIGKILLed as a whole as
    well, which also catches a process forked between a scan and the signal; pass it only while the
    group leader is unreaped, so the group id cannot have been reused.
    """
    alive = find()
    found = {p.key: p for p in alive}
    terminated: dict[tuple[int, int], Proc] = {}
    leader_alive = any(p.key == leader for p in alive)
    if leader_alive:
        terminated.update(
            (p.key, p) for p in signal_procs([p for p in alive if p.key == leader], signal.SIGTERM)
        )
    deadline = time.monotonic() + grace_s
    while alive and time.monotonic() < deadline:
        leader_alive = leader_alive and any(p.key == leader for p in alive)
        if not leader_alive:
            rest = [p for p in alive if p.key not in terminated]
            terminated.update((p.key, p) for p in signal_procs(rest, signal.SIGTERM))
        time.sleep(_POLL_S)
        alive = find()
        found.update((p.key, p) for p in alive)
    killed: dict[tuple[int, int], Proc] = {}
    deadline = time.monotonic() + _KILL_WAIT_S
    while alive and time.monotonic() < deadline:
        _signal_group(group, signal.SIGKILL)
        killed.update((p.key, p) for p in signal_procs(alive, signal.SIGKILL))
        time.sleep(_POLL_S)
        alive = find()
    return TreeStop(list(found.values()), list(terminated.values()), list(killed.values()), alive)


def _signal_group(group: int | None, signum: int) -> None:
    if group is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


def watch(stdin_fd: int, marker: str, grace_s: float) -> int:
    """The watchdog loop; returns the exit status of the script."""
    parent = os.getppid()
    engine: EngineIdentity | None = None
    pending = b""
    while True:
        readable, _, _ = select.select([stdin_fd], [], [], _WATCH_TICK_S)
        orphaned = os.getppid() != parent
        if readable:
            chunk = os.read(stdin_fd, 4096)
            if not chunk:
                orphaned = True
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                words = line.decode("ascii", "replace").split()
                if words == ["release"]:
                    return 0
                if len(words) == 3 and words[0] == "engine":
                    engine = EngineIdentity(int(words[1]), int(words[2]), marker)
        if orphaned:
            return _stop_orphan(parent, engine, marker, grace_s)
        if engine is not None and not find_engine(engine):
            return 0


def _stop_orphan(parent: int, engine: EngineIdentity | None, marker: str, grace_s: float) -> int:
    # Before `engine` arrives only the marker identifies the launch; -1 matches no process group.
    identity = engine or EngineIdentity(-1, 0, marker)
    if not find_engine(identity):
        return 0
    print(
        f"specdoctor reaper: specdoctor (pid {parent}) is gone; stopping its engine (marker {marker})",
        file=sys.stderr,
        flush=True,
    )
    leader = (engine.pgid, engine.leader_start) if engine else None
    result = stop_tree(lambda: find_engine(identity), grace_s, leader)
    if result.survivors:
        pids = " ".join(str(p.pid) for p in result.survivors)
        print(f"specdoctor reaper: engine processes survive SIGKILL: {pids}", file=sys.stderr, flush=True)
        return 1
    print(
        f"specdoctor reaper: engine stopped: {len(result.found)} process(es) ended, "
        f"{len(result.terminated)} sent SIGTERM, {len(result.killed)} SIGKILLed after {grace_s:g} s",
        file=sys.stderr,
        flush=True,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Stop a specdoctor engine launch when specdoctor dies.")
    parser.add_argument("--marker", required=True, help=f"value of {MARKER_VARIABLE} in the engine's env")
    parser.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    args = parser.parse_args(argv)
    # A terminal's Ctrl+C or hangup must not end the watchdog before specdoctor's cleanup is done.
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    return watch(sys.stdin.fileno(), args.marker, args.grace)


if __name__ == "__main__":
    sys.exit(main())
