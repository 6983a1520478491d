"""`specdoctor stop [RUN]`: stop a server `deploy --detach` left running, and nothing else."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from specdoctor.agent import exitcodes
from specdoctor.agent.commands.options import positive

if TYPE_CHECKING:
    from specdoctor.tools.detached import DetachedServer

    Found = tuple[Path, DetachedServer]
    """A run folder and the server it left running."""

REPORT_MAX_BYTES = 16 << 20

EPILOG = """exit codes:
  0    the server was stopped, or nothing of it was running any more
  1    some of its processes survived SIGKILL (they are named)
  2    no such run, a run that left no server running, or several running and none named
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "stop",
        help="stop a server `deploy --detach` left running",
        description="Stop the server a `specdoctor deploy --detach` run left running: its launcher gets SIGTERM "
        "(SGLang then ends its own workers), whatever outlives it SIGTERM too, and all of it SIGKILL after "
        "--grace seconds. Only processes of that launch are signalled: the run's report names the launcher's "
        "pid, process group, start time and the marker every process of the launch carries, and each is "
        "checked again before its signal, so a pid reused since by another process is never touched.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "run_name",
        nargs="?",
        metavar="RUN",
        help="the run folder `deploy --detach` printed, or a run's name in the runs folder (default: the one "
        "detached server still running; several are listed)",
    )
    p.add_argument(
        "--grace",
        type=positive(float),
        default=10.0,
        metavar="S",
        help="seconds between SIGTERM and SIGKILL (default 10)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specdoctor.tools.detached import processes, stop_server
    from specdoctor.tools.redact import redact_text

    if args.run_name:
        folder, server = named_run(args.run_name)
    else:
        found = running_runs()
        if len(found) != 1:
            return _not_one(found)
        folder, server = found[0]
    where = f"run {folder.name} (pid {server.pid}, {server.url})"
    if not processes(server):
        print(f"nothing to stop: the server of {where} is no longer running")
        return exitcodes.OK
    tree = stop_server(server, args.grace)
    if tree.survivors:
        listed = ", ".join(f"{p.pid} ({redact_text(p.name)})" for p in tree.survivors)
        print(
            f"specdoctor stop: {len(tree.survivors)} process(es) of {where} survived SIGKILL: {listed}; "
            "they may hold GPU memory: check nvidia-smi",
            file=sys.stderr,
        )
        return exitcodes.FINDINGS
    print(
        f"stopped {where}: {len(tree.found)} process(es) ended, {len(tree.terminated)} sent SIGTERM"
        + (f", {len(tree.killed)} SIGKILLed after {args.grace:g} s" if tree.killed else "")
    )
    return exitcodes.OK


def named_run(name: str) -> Found:
    """The run folder `name` means (a path, or a name in the runs folder) and the server it left running."""
    from specdoctor.tools.dirs import runs_dir
    from specdoctor.tools.errors import UsageError

    folder = Path(name)
    if not (folder / "report.json").is_file():
        folder = runs_dir() / name
    if not (folder / "report.json").is_file():
        raise UsageError(
            f"no run {name!r} with a report: give the folder `deploy --detach` printed after `stop it with:`, "
            f"or a run's name in {runs_dir()}"
        )
    server = detached_server(folder)
    if server is None:
        raise UsageError(
            f"run {name} left no server running: only a `deploy --detach` that reached healthy does"
        )
    return folder, server


def detached_server(folder: Path) -> DetachedServer | None:
    """The server a run's report says it left running, or None (not detached, or no readable report)."""
    from pydantic import ValidationError

    from specdoctor.tools.detached import DetachedServer
    from specdoctor.tools.errors import UsageError
    from specdoctor.tools.files import read_text

    try:
        data = json.loads(read_text(folder / "report.json", "run report", REPORT_MAX_BYTES))
        detached = data.get("detached") if isinstance(data, dict) else None
        return DetachedServer.model_validate(detached) if detached else None
    except (UsageError, ValueError, ValidationError):
        return None


def running_runs() -> list[Found]:
    """(folder, server) of every run in the runs folder whose detached server still has a process
    running, newest first."""
    from specdoctor.tools.detached import live_engine_ids
    from specdoctor.tools.dirs import runs_dir

    base = runs_dir()
    if not base.is_dir():
        return []
    live = live_engine_ids()
    found: list[Found] = []
    for folder in base.iterdir():
        server = detached_server(folder) if (folder / "report.json").is_file() else None
        if server is not None and server.engine_ids() & live:
            found.append((folder, server))
    return sorted(found, key=lambda pair: (pair[0] / "report.json").stat().st_mtime, reverse=True)


def _not_one(found: list[Found]) -> int:
    from specdoctor.tools.dirs import runs_dir
    from specdoctor.tools.redact import redact_text

    if not found:
        print(
            f"specdoctor stop: no server left running by `deploy --detach` was found in {runs_dir()}; "
            "name its run folder: `specdoctor stop RUN`",
            file=sys.stderr,
        )
        return exitcodes.USAGE
    print("specdoctor stop: several detached servers are running; name the one to stop:", file=sys.stderr)
    for folder, server in found:
        command = redact_text(server.command)
        command = command if len(command) <= 100 else command[:99] + "…"
        print(f"  specdoctor stop {folder}   # pid {server.pid}, {server.url}: {command}", file=sys.stderr)
    return exitcodes.USAGE
