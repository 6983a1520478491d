"""Stopping processes we did not start, which hold the GPUs a launch needs. Only with the user's leave
(`deploy --allow-kill`, or a yes at the `fix` prompt), and never a process of ours."""

from __future__ import annotations

import os

from specdoctor.tools.reaper import Proc, read_proc, stop_tree


def terminate_foreign(pids: list[int], grace_s: float = 10.0) -> str:
    """SIGTERM, then SIGKILL after `grace_s`, each pid that is still the process nvidia-smi listed."""
    me = {os.getpid(), os.getppid()}
    targets: list[Proc] = [p for pid in pids if pid not in me and (p := read_proc(pid)) is not None]
    gone = sorted(set(pids) - {p.pid for p in targets} - me)
    denied = [p for p in targets if not _may_signal(p.pid)]
    targets = [p for p in targets if p not in denied]
    stop_tree(lambda: [p for p in targets if _same(p)], grace_s)
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
    """Still the process nvidia-smi listed (not a reused pid), and not a zombie."""
    current = read_proc(proc.pid)
    return current is not None and current.key == proc.key and current.state not in ("Z", "X")


def _may_signal(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except PermissionError:
        return False
    except ProcessLookupError:
        pass  # gone meanwhile: nothing to be refused
    return True
