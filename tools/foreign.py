"""Stopping processes we did not start, which hold the GPUs a launch needs. Only with the user's leave
(`deploy --allow-kill`, or a yes at the `fix` prompt), and never a process of ours."""

from __future__ import annotations

import os
import signal
import time

from tools.reaper import Proc, read_proc, signal_procs


def terminate_foreign(pids: list[int], grace_s: float = 10.0) -> str:
    """SIGTERM, then SIGKILL after `grace_s`, each pid that is still the process nvidia-smi listed."""
    me = {os.getpid(), os.getppid()}
    targets: list[Proc] = [p for pid in pids if pid not in me and (p := read_proc(pid)) is not None]
    gone = sorted(set(pids) - {p.pid for p in targets} - me)
    denied = [p for p in targets if not _may_signal(p.pid)]
    targets = [p for p in targets if p not in denied]
    signal_procs(targets, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_same(p) for p in targets):
        time.sleep(0.2)
    signal_procs([p for p in targets if _same(p)], signal.SIGKILL)
    parts = []
    if targets:
        parts.append("stopped " + ", ".join(f"{p.pid} ({p.name})" for p in targets))
    if gone:
        parts.append("already gone: " + ", ".join(map(str, gone)))
    if denied:
        parts.append(
            "not allowed to stop "
            + ", ".join(f"{p.pid} ({p.name})" for p in denied)
            + " (another user's; ask its owner)"
        )
    return "; ".join(parts) or "nothing to stop"


def _same(proc: Proc) -> bool:
    current = read_proc(proc.pid)
    return current is not None and current.start_time == proc.start_time and current.state not in ("Z", "X")


def _may_signal(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except PermissionError:
        return False
    except ProcessLookupError:
        return True
    return True
