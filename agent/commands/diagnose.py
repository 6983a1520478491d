"""`specdoctor diagnose`: one decision from a recorded failure."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specdoctor.agent import exitcodes
from specdoctor.agent.commands.options import (
    add_catalog_options,
    add_command_argument,
    add_gpu_options,
    add_llm_options,
    add_secrets_option,
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diagnose",
        help="one diagnosis from a recorded crash log",
        description="Read a crash log (any size) and the command that produced it, and decide: the corrected "
        "command, or why no flag change can help. `--case FILE` reads a crash-corpus case instead.",
        epilog="--json prints exactly one object: action, category, summary, evidence, edits, command, env, "
        "playbook, confidence. Exit 0 when a decision was made, 2 on bad input.",
    )
    add_command_argument(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--log", metavar="FILE", help="the crash log; the command goes after `--`")
    src.add_argument("--case", metavar="FILE", help="a crash-corpus case (JSON with command, log, gpus, ...)")
    p.add_argument(
        "--exit-kind",
        choices=["parse-error", "startup-crash", "hang", "runs-but-degraded", "runtime-crash"],
        help="how the launch ended, if the log does not make it clear",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_secrets_option(p)
    add_catalog_options(p)
    add_gpu_options(p)
    add_llm_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specdoctor.agent.commands.common import choose_catalog, gpu_facts, llm_planner, read_spec
    from specdoctor.agent.diagnose import (
        as_contract,
        context_for,
        context_from_file,
        default_planner,
        gpus_from_case,
        plan,
        read_case,
    )
    from specdoctor.agent.events import redact_payload
    from specdoctor.tools.command import LaunchCommand
    from specdoctor.tools.errors import UsageError
    from specdoctor.tools.redact import redact_text

    if args.case:
        case = read_case(Path(args.case))
        spec = LaunchCommand.parse(case.command)
        choice = choose_catalog(spec, args)
        gpus = gpu_facts(args, live=False) or gpus_from_case(case.gpus)
        ctx = context_for(
            spec,
            choice.catalog,
            case.log.splitlines(),
            gpus=gpus,
            outcome=None
            if args.exit_kind is None and case.exit_kind is None
            else _outcome(case.log, args.exit_kind or case.exit_kind),
        )
    else:
        if not args.command:
            raise UsageError("give the command that produced the log after `--`")
        spec = read_spec(args)
        choice = choose_catalog(spec, args)
        ctx = context_from_file(
            spec, choice.catalog, Path(args.log), gpus=gpu_facts(args, live=False), exit_kind=args.exit_kind
        )
    llm, notes = llm_planner(args, host=False)
    planner = default_planner(llm, notes, Path(args.playbooks) if args.playbooks else None)
    planned = plan(ctx, planner)
    assert planned.decision is not None
    contract = as_contract(planned.decision, ctx)
    for error in planned.rule_errors:
        print(f"specdoctor: warning: {redact_text(error)} (skipped; please report it)", file=sys.stderr)
    if args.json:
        print(json.dumps(contract if args.show_secrets else redact_payload(contract), indent=2))
    else:
        show(contract, ctx, choice.note, planned.planner, args.show_secrets)
        if getattr(planned.decision, "bug_report", ""):
            print("\nA bug report to paste upstream (secrets masked):\n" + planned.decision.bug_report)
    # Scripts tell a fix from a stop without --json: 0 a fix (or a retry), 3 no flag change can help.
    return exitcodes.STOPPED if contract["action"] == "stop" else exitcodes.OK


def _outcome(log: str, exit_kind: str | None):
    from specdoctor.agent.diagnose import outcome_from_log

    return outcome_from_log(log.splitlines(), exit_kind)


def show(contract: dict, ctx, note: str, planner: str, show_secrets: bool = False) -> None:
    from specdoctor.agent.render import Out, decided_by, diff_lines
    from specdoctor.tools.command import LaunchCommand, diff
    from specdoctor.tools.redact import redact_command, redact_spec

    out = Out(sys.stdout, show_secrets=show_secrets)
    hide = (lambda spec: spec) if show_secrets else redact_spec
    out.line(f"specdoctor diagnose · {note}", "dim")
    if ctx.root.error_line:
        out.line(f"root cause: {ctx.root.error_line}", "bold")
    verdict = "FIX" if contract["action"] == "fix" else "STOP"
    out.line(
        f"{verdict} [{contract['category']}] {contract['summary']}",
        "bold green" if verdict == "FIX" else "bold yellow",
    )
    for line in contract["evidence"][:4]:
        out.line(f"  log: {line}", "dim")
    if contract["action"] == "fix":
        new = LaunchCommand.parse(contract["command"])
        out.line("changes:", "bold")
        diff_lines(out, diff(hide(ctx.spec), hide(new), ctx.catalog.canonical))
        out.line("corrected command:", "bold")
        out.line("  " + (contract["command"] if show_secrets else redact_command(new)), "bold green")
    who, decided = decided_by(planner, contract["playbook"])
    out.line(f"({who}, confidence {contract['confidence']:.2f})" if decided else f"({who})", "dim")
