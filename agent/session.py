"""Everything a run needs, built from command-line options: where its files go, the launcher, the planner
chain, the event sinks, the loop settings. Shared by `deploy`, `fix` and `demo`."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path

from specdoctor.agent.approve import Approver
from specdoctor.agent.events import EventBus, Sink
from specdoctor.agent.launcher import Launcher, RealLauncher, SimulatedLauncher, check_launchable
from specdoctor.agent.loop import Loop
from specdoctor.agent.multinode import MultiNodeLauncher
from specdoctor.agent.policy import Backoff, Budget, LoopSettings, Mode
from specdoctor.agent.report import ReportBuilder
from specdoctor.agent.results import LoopResult
from specdoctor.agent.transcript import TranscriptWriter
from specdoctor.agent.watch import StageDeadlines, WatchSettings
from specdoctor.tools.catalog_load import CatalogChoice
from specdoctor.tools.command import LaunchCommand
from specdoctor.tools.dirs import runs_dir
from specdoctor.tools.errors import UsageError
from specdoctor.tools.health import HealthPolicy


@dataclass
class Session:
    spec: LaunchCommand
    choice: CatalogChoice
    launcher: Launcher
    approver: Approver
    settings: LoopSettings
    run_dir: Path
    mode: str
    notes: tuple[str, ...] = ()
    sinks: list[Sink] = field(default_factory=list)
    report: ReportBuilder | None = None

    @property
    def transcript_path(self) -> Path:
        return self.run_dir / "transcript.jsonl"

    @property
    def report_path(self) -> Path:
        return self.run_dir / "report.json"

    @classmethod
    def prepare(cls, args: argparse.Namespace) -> tuple[LaunchCommand, CatalogChoice]:
        """What `deploy` and `fix` start from: signal handling, the command, its catalog. The run folder is
        made by the caller once every option is checked, so that a usage error leaves no empty folder."""
        from specdoctor.agent.commands.common import choose_catalog, read_spec
        from specdoctor.agent.report import check_report_path
        from specdoctor.tools.process import install_signal_handlers

        install_signal_handlers()
        spec = read_spec(args)
        check_launchable(spec)
        if getattr(args, "report", None):
            check_report_path(args.report)
        return spec, choose_catalog(spec, args, launching=True)

    def run(self, args: argparse.Namespace) -> LoopResult:
        from specdoctor.agent.commands.common import llm_planner
        from specdoctor.agent.diagnose import default_planner

        llm, notes = llm_planner(args)
        planner = default_planner(
            llm, (*self.notes, *notes), Path(args.playbooks) if getattr(args, "playbooks", None) else None
        )
        self.report = ReportBuilder(getattr(args, "report", None))
        bus = EventBus([TranscriptWriter(self.transcript_path), self.report, *self.sinks])
        with bus:
            loop = Loop(
                self.spec,
                self.choice.catalog,
                self.launcher,
                planner,
                self.approver,
                bus,
                self.settings,
                mode=self.mode,
                catalog_note=self.choice.note,
                llm=llm,
                token_budget=llm.config.token_budget if llm is not None else None,
            )
            result = loop.run()
        self.report.write(self.report_path)
        return result


def make_run_dir(explicit: str | None) -> Path:
    if explicit:
        path = Path(explicit)
    else:
        path = runs_dir() / time.strftime("%Y%m%d-%H%M%S")
        suffix = 0
        while path.exists():
            suffix += 1
            path = path.with_name(f"{path.name.split('.')[0]}.{suffix}")
    if (path / "transcript.jsonl").exists():
        raise UsageError(f"--run-dir {path} already holds a run's transcript: give a new folder (or none)")
    try:
        # Owner-only: the attempt logs in it hold what the engine printed.
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot use --run-dir {path}: {exc.strerror}") from None
    return path


def launcher_for(args: argparse.Namespace) -> Launcher:
    nodes = getattr(args, "sim_nodes", 1)
    if getattr(args, "simulate", None):
        from specdoctor.tools.simnode.profile import ProfileError

        try:
            node = SimulatedLauncher(args.simulate, speed=args.sim_speed)
        except ProfileError as exc:
            raise UsageError(f"--simulate {args.simulate}: {str(exc).split(': ', 1)[-1]}") from None
        return MultiNodeLauncher(node, nodes) if nodes > 1 else node
    if nodes > 1:
        raise UsageError(
            f"--sim-nodes {nodes} runs the nodes of a multi-node command on the simulated node: add --simulate "
            "PROFILE (real nodes each run their own command; docs/MULTINODE.md)"
        )
    return RealLauncher()


def settings_for(
    args: argparse.Namespace, run_dir: Path, *, when_healthy: Mode, pinned: tuple[str, ...] = ()
) -> LoopSettings:
    simulated = bool(getattr(args, "simulate", None))
    # The simulated node compresses time; its stage deadlines, /health polls and backoff shrink with it.
    scale = args.sim_speed if simulated else 1.0
    return LoopSettings(
        budget=Budget(max_launches=args.max_launches, wall_time_s=args.timeout, gpu_minutes=args.gpu_minutes),
        backoff=Backoff(initial_s=max(10.0 * scale, 0.2), max_s=max(300.0 * scale, 1.0)),
        watch=WatchSettings(
            deadlines=StageDeadlines().scaled(max(scale, 0.05)) if simulated else StageDeadlines(),
            health_poll_s=min(max(scale, 0.05), 1.0),
            health=HealthPolicy(chat=not getattr(args, "no_chat_check", False)),
        ),
        when_healthy=when_healthy,
        allow_kill=getattr(args, "allow_kill", False),
        require_acceptance=getattr(args, "require_acceptance", False),
        pinned=pinned,
        log_dir=run_dir,
    )
