"""`specdoctor fix -- CMD`: the interactive fix-it session; every change is shown and you decide."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from specdoctor.agent import exitcodes
from specdoctor.agent.commands.options import (
    add_catalog_options,
    add_command_argument,
    add_llm_options,
    add_run_options,
    add_secrets_option,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from specdoctor.agent.approve import Approver
    from specdoctor.agent.events import Sink
    from specdoctor.tools.catalog import FlagCatalog
    from specdoctor.tools.command import Canon

    Parts = tuple[Approver, list[Sink], Callable[[str], None]]
    """Who approves, the event sinks, and how a closing line is written."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fix",
        help="launch, diagnose and relaunch, asking you before each change",
        description="Check the command, launch it and watch it start, with a live status line. On a failure you "
        "see the diagnosis, the log lines it rests on and the proposed change as a diff, and decide: accept it, "
        "edit the command, skip it (launch the command as it is), ask the LLM instead, or quit (exit 130, "
        "declined). A proposal that changes a --pin'ned flag is shown as pinned and cannot be accepted. Once the "
        "server is healthy it is stopped (does this command work?) unless --keep. Without a terminal it runs "
        "unattended, like `specdoctor deploy --once`.",
        epilog=exitcodes.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_command_argument(p)
    p.add_argument(
        "--keep",
        action="store_true",
        help="once healthy, keep the server running in the foreground and supervise it, like deploy",
    )
    add_secrets_option(p)
    add_run_options(p)
    add_catalog_options(p)
    add_llm_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specdoctor.agent.commands.common import pins
    from specdoctor.agent.session import Session, launcher_for, make_run_dir, settings_for

    spec, choice = Session.prepare(args)
    pinned = pins(args, choice.catalog)
    canon = choice.catalog.canonical
    if sys.stdin.isatty() and sys.stdout.isatty():
        approver, sinks, say = _interactive(canon, args.show_secrets)
    else:
        like = "specdoctor deploy" if args.keep else "specdoctor deploy --once"
        print(f"not a terminal: running unattended, like `{like}`", file=sys.stderr)
        approver, sinks, say = _unattended(args, choice.catalog)
    run_dir = make_run_dir(args.run_dir)
    session = Session(
        spec=spec,
        choice=choice,
        launcher=launcher_for(args),
        approver=approver,
        settings=settings_for(
            args, run_dir, when_healthy="supervise" if args.keep else "stop", pinned=pinned
        ),
        run_dir=run_dir,
        mode="fix",
        sinks=sinks,
    )
    result = session.run(args)
    say(f"transcript: {session.transcript_path}  report: {session.report_path}")
    return result.exit_code


def _interactive(canon: Canon, show_secrets: bool) -> Parts:
    from rich.console import Console
    from rich.text import Text

    from specdoctor.agent.interactive import InteractiveApprover
    from specdoctor.agent.live import LiveView

    console = Console(highlight=False)
    view = LiveView(console, canon=canon, show_secrets=show_secrets)
    approver = InteractiveApprover(console, before_prompt=view.pause, show_secrets=show_secrets)
    return approver, [view], lambda text: console.print(Text(text, style="dim"), soft_wrap=True)


def _unattended(args: argparse.Namespace, catalog: FlagCatalog) -> Parts:
    from specdoctor.agent.approve import PolicyApprover
    from specdoctor.agent.commands.common import allowance
    from specdoctor.agent.console import ConsoleSink
    from specdoctor.agent.render import Out

    out = Out(sys.stdout, show_secrets=args.show_secrets)
    return (
        PolicyApprover(args.min_confidence, allowance(args, catalog)),
        [ConsoleSink(out, canon=catalog.canonical)],
        lambda text: out.line(text, "dim"),
    )
