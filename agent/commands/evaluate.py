"""`specdoctor eval DIR`: score the planner on a folder of real crash cases."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specdoctor.agent.commands.options import add_llm_options


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="score the planner on a folder of real crash cases",
        description="Diagnose every case (*.json) in DIR, check each first decision against the case's "
        "`expected` alternatives, and print per category: cases, solved, stopped correctly, category right. "
        "Offline and rules-only unless an LLM is configured and --llm is given.",
        epilog="exit 0 when every case is solved, 1 otherwise, 2 on bad input",
    )
    p.add_argument("cases", metavar="DIR", help="folder of crash-case JSON files")
    p.add_argument("--json", action="store_true", help="print one JSON object with every case's score")
    p.add_argument("--llm", action="store_true", help="let the LLM planner answer what no playbook knows")
    add_llm_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specdoctor.agent.commands.common import llm_planner
    from specdoctor.agent.diagnose import (
        as_contract,
        context_for,
        decide,
        default_planner,
        gpus_from_case,
        outcome_from_log,
        read_case,
    )
    from specdoctor.agent.evaluate import refused, score_case
    from specdoctor.tools.catalog_load import bundled
    from specdoctor.tools.command import CommandError, LaunchCommand
    from specdoctor.tools.errors import UsageError

    folder = Path(args.cases)
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder: give the folder that holds the crash cases (*.json)")
    paths = sorted(folder.glob("*.json"))
    if not paths:
        raise UsageError(f"no crash cases (*.json) in {folder}")
    catalog = bundled("0.5.23")
    # As `diagnose --case` sees a case: the SGLang that ran it is not known, 0.5.23's flags stand in.
    catalog.authoritative = False
    llm, notes = llm_planner(args, host=False) if args.llm else (None, ())
    planner = default_planner(llm, notes, Path(args.playbooks) if args.playbooks else None)
    scores = []
    for path in paths:
        case = read_case(path)
        try:
            spec = LaunchCommand.parse(case.command)
        except (UsageError, CommandError) as exc:
            # `diagnose --case` refuses it the same way; scored as not solved, never dropped.
            scores.append(refused(case.model_dump(), str(exc)))
            continue
        lines = case.log.splitlines()
        ctx = context_for(
            spec,
            catalog,
            lines,
            gpus=gpus_from_case(case.gpus),
            outcome=outcome_from_log(lines, case.exit_kind),
        )
        scores.append(score_case(case.model_dump(), as_contract(decide(ctx, planner), ctx), catalog))
    if args.json:
        print(json.dumps({"totals": totals(scores), "cases": [s.model_dump() for s in scores]}, indent=2))
    else:
        show(scores)
    return 0 if all(s.solved for s in scores) else 1


UNATTENDED_THRESHOLD = 0.5
"""`deploy`'s default --min-confidence: a wrong fix at or above it would be applied unasked."""


def totals(scores) -> dict:
    fixes = [s for s in scores if s.expected_action == "fix"]
    stops = [s for s in scores if s.expected_action == "stop"]
    right = sum(s.solved for s in scores)
    return {
        "cases": len(scores),
        "first_decision_right": right,
        "first_decision_right_pct": round(100 * right / len(scores), 1),
        "refused": sum(s.action == "refused" for s in scores),
        "confident_wrong_fixes": sum(s.confident_wrong_fix(UNATTENDED_THRESHOLD) for s in scores),
        "stops_where_a_fix_was_known": sum(s.stopped_where_a_fix_was_known for s in scores),
        "fix_cases": len(fixes),
        "fixes_solved": sum(s.solved for s in fixes),
        "stop_cases": len(stops),
        "stopped_correctly": sum(s.solved for s in stops),
        "category_right": sum(s.category_right for s in scores),
        "fix_solved_pct": round(100 * sum(s.solved for s in fixes) / len(fixes), 1) if fixes else None,
        "category_right_pct": round(100 * sum(s.category_right for s in scores) / len(scores), 1),
    }


def show(scores) -> None:
    from specdoctor.agent.render import Out

    out = Out(sys.stdout)
    by_cat: dict[str, list] = {}
    for s in scores:
        by_cat.setdefault(s.category, []).append(s)
    out.line(f"{'category':<22}{'cases':>6}{'solved':>8}{'stopped ok':>12}{'category ok':>13}", "bold")
    for cat, group in sorted(by_cat.items()):
        stops = [s for s in group if s.expected_action == "stop"]
        fixes = [s for s in group if s.expected_action == "fix"]
        out.line(
            f"{cat:<22}{len(group):>6}{sum(s.solved for s in fixes):>5}/{len(fixes):<2}"
            f"{sum(s.solved for s in stops):>9}/{len(stops):<2}{sum(s.category_right for s in group):>10}/{len(group):<2}"
        )
    t = totals(scores)
    out.line()
    out.line(
        f"fix cases solved {t['fixes_solved']}/{t['fix_cases']} ({t['fix_solved_pct']}%) · stop cases stopped "
        f"{t['stopped_correctly']}/{t['stop_cases']} · category right {t['category_right']}/{t['cases']} ({t['category_right_pct']}%)",
        "bold",
    )
    out.line(
        f"first decision right {t['first_decision_right']}/{t['cases']} ({t['first_decision_right_pct']}%) · "
        f"confident wrong fixes {t['confident_wrong_fixes']} (confidence ≥ {UNATTENDED_THRESHOLD}) · "
        f"stops where a fix was known {t['stops_where_a_fix_was_known']}",
        "bold",
    )
    for s in scores:
        if not s.solved or not s.category_right:
            mark = "✗" if not s.solved else "~"
            out.line(
                f"{mark} {s.id}: expected {s.expected_action}/{s.category}, got {s.action}/{s.decided_category} "
                f"({s.playbook or 'no playbook'}): {s.summary}",
                "yellow",
            )
