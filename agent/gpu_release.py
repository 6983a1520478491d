"""Getting the GPUs back between launches: stop our engine and wait until its memory is released, and
(with the user's leave) stop processes we did not start that hold the GPUs a launch needs."""

from __future__ import annotations

import time

from specdoctor.agent.approve import Approver
from specdoctor.agent.events import ApprovalEvent, EventBus
from specdoctor.agent.launcher import Engine, Launcher
from specdoctor.playbooks.host_checks import launch_gpus
from specdoctor.playbooks.view import CommandView


def stop_and_release(
    engine: Engine, launcher: Launcher, grace_s: float, release_s: float, hung: bool
) -> None:
    ours = {p.pid for p in engine.processes()} | {engine.pid}
    # A hung SGLang ignores SIGTERM (it waits on a server that never started): no point waiting long.
    engine.stop(min(grace_s, 3.0) if hung else grace_s)
    deadline = time.monotonic() + release_s
    while time.monotonic() < deadline:
        report = launcher.gpus()
        if not report.ok or not {p.pid for p in report.processes} & ours:
            return
        time.sleep(1.0)


def free_stray_gpus(
    launcher: Launcher, approver: Approver, bus: EventBus, view: CommandView, attempt: int, allowed: bool
) -> bool:
    """Stop the processes we did not start that hold memory on the GPUs `view` uses; True if any went."""
    report = launcher.gpus()
    used = launch_gpus(view, report)
    foreign = (
        [
            p
            for p in report.processes
            if (p.used_memory_mib or 0) > 0 and (used is None or p.gpu_index is None or p.gpu_index in used)
        ]
        if report.ok
        else []
    )
    if not foreign:
        return False
    names = ", ".join(
        f"{p.pid} ({p.process_name}, {p.used_memory_mib} MiB on GPU {p.gpu_index})" for p in foreign
    )
    if not (allowed and approver.confirm(f"stop {names}, which hold GPU memory this launch needs?")):
        return False
    freed = launcher.free_gpus(foreign)
    # Approved, but each process's identity is checked before any signal; nothing stopped is no progress.
    note = f"freed the GPUs: {freed.message}" if freed.stopped else f"did not free the GPUs: {freed.message}"
    bus.emit(ApprovalEvent(attempt=attempt, approved=True, by=approver.kind, note=note))
    return bool(freed.stopped)
