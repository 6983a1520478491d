"""`specdoctor deploy -- CMD`: unattended launch, fix and relaunch until healthy."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TYPE_CHECKING

from specdoctor.agent import exitcodes
from specdoctor.agent.commands.options import (
    DEFAULT_PINS,
    add_catalog_options,
    add_command_argument,
    add_llm_options,
    add_no_pin_option,
    add_run_options,
    add_secrets_option,
)

if TYPE_CHECKING:
    from pathlib import Path

    from specdoctor.agent.policy import Mode
    from specdoctor.agent.render import Out
    from specdoctor.agent.results import LoopResult
    from specdoctor.tools.catalog import FlagCatalog


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "deploy",
        help="unattended: launch, diagnose, fix and relaunch until healthy",
        description="Check the command, launch it, watch it start, and on failure diagnose, change the command "
        "and relaunch, until the server is healthy and its speculative decoding works. Changes are applied by "
        "policy (--min-confidence). --port and --host are pinned (never changed: a port conflict stops the run, "
        "naming who holds the port) unless --no-pin. Once healthy it keeps supervising in the foreground (a "
        "later crash re-enters the loop with backoff) unless --detach (stop it later with `specdoctor stop`) "
        "or --once.",
        epilog=exitcodes.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_command_argument(p)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--detach",
        action="store_true",
        help="once healthy, leave the server running; print its PID, URL and log",
    )
    mode.add_argument(
        "--once",
        action="store_true",
        help="once healthy, stop the server and exit 0 (does this command work?)",
    )
    add_no_pin_option(p)
    p.add_argument("--json", action="store_true", help="print the final report as JSON on stdout")
    add_secrets_option(p)
    add_run_options(p)
    add_catalog_options(p)
    add_llm_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specdoctor.agent.approve import PolicyApprover
    from specdoctor.agent.commands.common import allowance
    from specdoctor.agent.console import ConsoleSink
    from specdoctor.agent.render import Out
    from specdoctor.agent.session import Session, launcher_for, make_run_dir, settings_for

    spec, choice = Session.prepare(args)
    out = Out(sys.stderr if args.json else sys.stdout, show_secrets=args.show_secrets)
    allowed = allowance(args, choice.catalog)
    pinned = _pins(args, choice.catalog, allowed.flags)
    run_dir = make_run_dir(args.run_dir)
    session = Session(
        spec=spec,
        choice=choice,
        launcher=launcher_for(args),
        approver=PolicyApprover(args.min_confidence, allowed),
        settings=settings_for(args, run_dir, when_healthy=_when_healthy(args), pinned=pinned),
        run_dir=run_dir,
        mode="deploy",
        sinks=[ConsoleSink(out, canon=choice.catalog.canonical)],
    )
    result = session.run(args)
    report_path = session.report_path
    if args.detach and result.kind == "healthy":
        _detached(out, result, run_dir)
    out.line(f"transcript: {session.transcript_path}  report: {report_path}", "dim")
    if args.json:
        print(report_path.read_text())
    return result.exit_code


def _pins(args: argparse.Namespace, catalog: FlagCatalog, allowed: frozenset[str]) -> tuple[str, ...]:
    """deploy's pins; an --allow that a pin overrides is said once, on stderr."""
    from specdoctor.agent.commands.common import pins

    pinned = pins(args, catalog, DEFAULT_PINS)
    for flag in sorted(allowed & set(pinned)):
        print(
            f"specdoctor deploy: --allow {flag[2:]} has no effect: {flag} is pinned, and a pin holds even over "
            "--allow (--no-pin lifts deploy's own pins on --port and --host)",
            file=sys.stderr,
        )
    return pinned


def _detached(out: Out, result: LoopResult, run_dir: Path) -> None:
    """Where the server left running is, and how to stop it."""
    out.line(f"server running: pid {result.pid}, {result.url}, log {result.log_path}", "bold green")
    out.line(f"stop it with: specdoctor stop {shlex.quote(str(run_dir))}", "bold")


def _when_healthy(args: argparse.Namespace) -> Mode:
    return "detach" if args.detach else "stop" if args.once else "supervise"
