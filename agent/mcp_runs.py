"""`deploy`, `deploy_status` and `stop` for the MCP server: runs this server started, and only those.

A run is the same loop as `specdoctor deploy --detach` (same policy approver, allowance and budget, set on
the server's command line, never by the client), in a thread of the server. Its launcher keeps every
engine it starts, so `stop` ends exactly those process trees (each known by its own marker and start
time), never a pid a client names. When the server exits, the runs it started are stopped with it.
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import Field

from specdoctor.agent.launcher import Launcher
from specdoctor.agent.mcp_results import AttemptSummary, RunState, RunStatus, StopReport, redacted
from specdoctor.agent.results import LoopResult
from specdoctor.agent.session import Session
from specdoctor.tools.command import LaunchCommand
from specdoctor.tools.errors import UsageError
from specdoctor.tools.gpu import GpuProcess, GpuReport
from specdoctor.tools.process import EngineProcess, StopRequested

PROGRESS_LINES = 40
STOP_WAIT_S = 30.0
"""How long `stop` waits for a run's loop to wind down once its engines are stopped."""
WaitS = Annotated[
    float,
    Field(ge=0, le=600, description="Wait up to this many seconds for the run to end before answering."),
]


class OwnedLauncher:
    """A launcher that remembers every engine it started, and starts none once its run is stopped."""

    def __init__(self, inner: Launcher) -> None:
        self.inner, self.name = inner, inner.name
        self.engines: list[EngineProcess] = []
        self.cancelled = False
        self._lock = threading.Lock()

    def start(self, spec: LaunchCommand, log_path: Path, to_file: bool = False) -> EngineProcess:
        with self._lock:
            if self.cancelled:  # the loop unwinds as from Ctrl-C: Interrupted, its engine stopped
                raise StopRequested(signal.SIGTERM)
            engine = self.inner.start(spec, log_path, to_file=to_file)
            self.engines.append(engine)
            return engine

    def gpus(self) -> GpuReport:
        return self.inner.gpus()

    def free_gpus(self, processes: list[GpuProcess]) -> str:
        return self.inner.free_gpus(processes)

    def stop_all(self) -> tuple[int, list[str]]:
        """Stop every engine this launcher started: (processes ended, processes left running)."""
        with self._lock:
            self.cancelled = True
            engines = list(self.engines)
        ended, left = 0, []
        for engine in engines:
            result = engine.stop()
            ended += len(result.stopped)
            left += [f"{p.pid} ({p.name})" for p in result.survivors]
        return ended, left


class Progress:
    """A text stream for the run's ConsoleSink: keeps its last lines (thread-safe)."""

    def __init__(self, limit: int = PROGRESS_LINES) -> None:
        self._lines: deque[str] = deque(maxlen=limit)
        self._partial = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            *done, self._partial = (self._partial + text).split("\n")
            self._lines.extend(done)
        return len(text)

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return False

    def lines(self) -> list[str]:
        with self._lock:
            return list(self._lines)


@dataclass
class Run:
    id: str
    command: str
    session: Session
    launcher: OwnedLauncher
    progress: Progress
    thread: threading.Thread | None = None
    result: LoopResult | None = None
    error: str | None = None
    stop_asked: bool = False
    stop_message: str = ""
    started_at: float = field(default_factory=time.monotonic)

    def state(self) -> RunState:
        if self.stop_asked:
            return "stopping" if self.thread is not None and self.thread.is_alive() else "stopped"
        if self.result is None:
            return "running" if self.error is None else "failed"
        if self.result.kind != "healthy":
            return "failed"
        engine = self.launcher.engines[-1] if self.launcher.engines else None
        return "exited" if engine is not None and engine.poll() is not None else "healthy"

    def message(self) -> str:
        if self.stop_asked:
            return self.stop_message or "stopping: its engines are being ended"
        if self.error is not None:
            return f"internal error: {self.error}"
        if self.result is None:
            return "the loop is running: ask deploy_status for its progress"
        if self.state() == "exited":
            engine = self.launcher.engines[-1]
            return f"the server was healthy and has exited (exit code {engine.poll()}); see {engine.log_path}"
        return self.result.message

    def status(self) -> RunStatus:
        result = self.result
        return redacted(
            RunStatus(
                run_id=self.id,
                state=self.state(),
                result=result.kind if result else None,
                message=self.message(),
                command=self.command,
                final_command=result.final_command if result else None,
                url=result.url if result else None,
                attempts=[_summary(a) for a in result.attempts] if result else [],
                progress=self.progress.lines(),
                run_dir=str(self.session.run_dir),
            )
        )


def _summary(attempt) -> AttemptSummary:
    outcome, decision = attempt.outcome, attempt.decision
    return AttemptSummary(
        number=attempt.number,
        command=attempt.command,
        outcome=outcome.kind if outcome else None,
        detail=outcome.detail if outcome else None,
        decision=f"{decision.action} [{decision.category}] {decision.summary}" if decision else None,
    )


class RunRegistry:
    """The runs this server started; one at a time may be running or serving (they share the GPUs)."""

    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        self.runs: dict[str, Run] = {}
        self._lock = threading.Lock()

    def deploy(
        self,
        command: Annotated[
            str | list[str],
            Field(description="The SGLang launch command, one shell line or its argv words."),
        ],
        wait_s: WaitS = 30.0,
    ) -> RunStatus:
        """Launch the command and, on failure, diagnose, fix and relaunch until it is healthy, as `specdoctor
        deploy --detach` does: only changes the server's policy allows unattended (tuning flags, or what it
        was started with --allow), within its budget. A healthy server is left running until `stop` (or
        until this MCP server exits). Returns the run's status after `wait_s`; ask deploy_status later."""
        with self._lock:
            busy = [r.id for r in self.runs.values() if r.state() in ("running", "healthy", "stopping")]
            if busy:
                raise UsageError(
                    f"run {busy[0]} is still running or serving: stop it first (one run at a time)"
                )
            run = self._prepare(command)
            self.runs[run.id] = run
            run.thread = threading.Thread(
                target=self._loop, args=(run,), name=f"deploy-{run.id}", daemon=True
            )
            run.thread.start()
        return self._wait(run, wait_s)

    def deploy_status(
        self,
        run_id: Annotated[str, Field(description="The run_id `deploy` returned.")],
        wait_s: WaitS = 0.0,
    ) -> RunStatus:
        """The state of a run this server started: running, healthy (with its URL), failed (with why), or
        stopped; its latest steps, and each launch once the loop has ended."""
        return self._wait(self._get(run_id), wait_s)

    def stop(self, run_id: Annotated[str, Field(description="The run_id `deploy` returned.")]) -> StopReport:
        """Stop a run this server started: every engine process it launched is ended (SIGTERM, then SIGKILL
        after a grace period) and a loop still fixing is stopped. No other process is touched."""
        run = self._get(run_id)
        run.stop_asked = True
        ended, left = run.launcher.stop_all()
        if run.thread is not None:
            run.thread.join(STOP_WAIT_S)
        if left:
            run.stop_message = f"{len(left)} process(es) of run {run.id} survived SIGKILL: check nvidia-smi"
        else:
            run.stop_message = f"run {run.id} stopped by `stop`: {ended} process(es) ended, none left running"
        state = run.state()
        message = run.stop_message + ("; its loop is still winding down" if state == "stopping" else "")
        return redacted(
            StopReport(run_id=run.id, state=state, message=message, stopped=ended, left_running=left)
        )

    def close(self) -> None:
        """Stop every run this server started (the server is exiting: nobody could stop them later)."""
        for run in list(self.runs.values()):
            run.stop_asked = True
            run.launcher.stop_all()

    def _get(self, run_id: str) -> Run:
        run = self.runs.get(run_id)
        if run is None:
            known = ", ".join(self.runs) or "none yet"
            raise UsageError(f"no run {run_id!r} was started by this server (its runs: {known})")
        return run

    def _wait(self, run: Run, wait_s: float) -> RunStatus:
        if run.thread is not None and wait_s > 0:
            run.thread.join(wait_s)
        return run.status()

    def _prepare(self, command: str | list[str]) -> Run:
        from specdoctor.agent.approve import PolicyApprover
        from specdoctor.agent.commands.common import allowance, choose_catalog, pins
        from specdoctor.agent.commands.options import DEFAULT_PINS
        from specdoctor.agent.console import ConsoleSink
        from specdoctor.agent.launcher import check_launchable
        from specdoctor.agent.mcp_tools import read_command
        from specdoctor.agent.render import Out
        from specdoctor.agent.session import launcher_for, make_run_dir, settings_for
        from specdoctor.tools.dirs import runs_dir
        from specdoctor.tools.redact import redact_text

        spec = read_command(command)
        check_launchable(spec)
        # deploy launches the command, so its python is read for its flags, as `specdoctor deploy` does.
        choice = choose_catalog(spec, self.options, launching=True)
        allowed = allowance(self.options, choice.catalog)
        # As `specdoctor deploy`: whatever points at the server keeps pointing at it.
        pinned = pins(self.options, choice.catalog, DEFAULT_PINS)
        run_id = uuid.uuid4().hex[:8]
        base = Path(self.options.run_dir) if getattr(self.options, "run_dir", None) else runs_dir()
        run_dir = make_run_dir(str(base / f"{time.strftime('%Y%m%d-%H%M%S')}-mcp-{run_id}"))
        launcher = OwnedLauncher(launcher_for(self.options))
        progress = Progress()
        session = Session(
            spec=spec,
            choice=choice,
            launcher=launcher,
            approver=PolicyApprover(self.options.min_confidence, allowed),
            settings=settings_for(self.options, run_dir, when_healthy="detach", pinned=pinned),
            run_dir=run_dir,
            mode="deploy",
            sinks=[ConsoleSink(Out(progress, color=False), canon=choice.catalog.canonical)],
        )
        return Run(
            id=run_id,
            command=redact_text(spec.shell()),
            session=session,
            launcher=launcher,
            progress=progress,
        )

    def _loop(self, run: Run) -> None:
        try:
            run.result = run.session.run(self.options)
        except BaseException as exc:  # reported in the run's status, not as a thread's traceback
            run.error = f"{type(exc).__name__}: {exc}"
