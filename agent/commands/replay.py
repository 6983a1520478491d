"""`specdoctor replay FILE`: re-run today's planners on a recorded session."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from specdoctor.agent import exitcodes

EXAMPLES = Path(__file__).resolve().parent.parent / "data" / "examples"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="re-run today's planners on a recorded session; report divergences",
        description="Feed a transcript's recorded outcomes and evidence to today's playbooks instead of a real "
        "engine and GPUs, and report for each step whether the decision is the same or diverged (both shown). "
        f"Example transcripts ship in {EXAMPLES}.",
        epilog="exit codes: 0 every decision matches, 1 a decision diverged, 2 an unreadable transcript",
    )
    p.add_argument("transcript", metavar="FILE", help="a transcript.jsonl written by deploy, fix or demo")
    p.add_argument("--as-recorded", action="store_true", help="just play the session back, timing compressed")
    p.add_argument(
        "--speed",
        type=float,
        default=20.0,
        metavar="X",
        help="with --as-recorded: how much faster (default 20)",
    )
    p.add_argument("--playbooks", metavar="DIR", help="also use the YAML playbooks in DIR")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specdoctor.agent.transcript import read_transcript

    transcript = read_transcript(Path(args.transcript))
    for warning in transcript.warnings:
        print(f"specdoctor replay: note: {warning}", file=sys.stderr)
    if args.as_recorded:
        return play(transcript, args.speed)
    return compare(transcript, args)


def play(transcript, speed: float) -> int:
    from specdoctor.agent.console import ConsoleSink

    sink = ConsoleSink()
    last = 0.0
    for event in transcript.events:
        time.sleep(max(0.0, min((event.elapsed_s - last) / max(speed, 1e-6), 2.0)))
        last = event.elapsed_s
        sink.handle(event)
    return exitcodes.OK


def compare(transcript, args: argparse.Namespace) -> int:
    from specdoctor.agent.diagnose import default_planner
    from specdoctor.agent.render import Out
    from specdoctor.agent.replay import replay

    planner = default_planner(playbooks_dir=Path(args.playbooks) if args.playbooks else None)
    steps = replay(transcript, planner)
    out = Out(sys.stdout)
    diverged = 0
    for step in steps:
        where = "before launch" if step.attempt == 0 else f"attempt {step.attempt}"
        if step.skipped:
            out.line(f"· {where} {step.what}: skipped ({step.skipped})", "dim")
        elif step.same:
            out.line(f"✓ {where} {step.what}: same — {step.today}", "green")
        else:
            diverged += 1
            out.line(f"✗ {where} {step.what}: DIVERGED", "bold red")
            out.line(f"    recorded: {step.recorded}", "red")
            out.line(f"    today:    {step.today}", "green")
            for change in step.changes:
                out.line(f"      {change}", "yellow")
    checked = sum(1 for s in steps if not s.skipped)
    out.line(
        f"{checked} decision(s) replayed, {diverged} diverged"
        + (" (the recording was cut short)" if transcript.truncated else ""),
        "bold",
    )
    return exitcodes.FINDINGS if diverged else exitcodes.OK
