"""`specdoctor check -- CMD`: preflight only, no launch."""

from __future__ import annotations

import argparse
import json
import shutil
import sys

from specdoctor.agent import exitcodes
from specdoctor.agent.commands.options import (
    add_catalog_options,
    add_command_argument,
    add_gpu_options,
    add_secrets_option,
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="find a launch command's faults before launching it",
        description="Check a launch command against the flag catalog of the SGLang it would run, SGLang's own "
        "speculative-decoding rules, the model and draft config.json, the GPUs and the port; print each finding "
        "with its fix and the corrected command. Nothing is launched.",
        epilog="exit codes: 0 clean, 1 findings (with or without a fix), 2 usage error",
    )
    add_command_argument(p)
    p.add_argument("--json", action="store_true", help="print one JSON object (for scripts)")
    p.add_argument("--no-host", action="store_true", help="skip checks of this machine (paths, port, GPUs)")
    add_secrets_option(p)
    add_catalog_options(p)
    add_gpu_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specdoctor.agent.commands.common import choose_catalog, gpu_facts, read_spec
    from specdoctor.agent.preflight import preflight
    from specdoctor.playbooks.view import CommandView

    spec = read_spec(args)
    choice = choose_catalog(spec, args)
    host = not args.no_host
    view = CommandView(spec, choice.catalog)
    described = bool(args.gpus or args.nvidia_smi)
    # The live GPUs matter only on the machine that will run it: without nvidia-smi here (a laptop checking
    # a cluster command) they are skipped, not reported as a fault of the command.
    live = host and view.tp * (view.int("--pp-size") or 1) > 1 and shutil.which("nvidia-smi") is not None
    gpus = gpu_facts(args) if described or live else None
    report = preflight(spec, choice.catalog, gpus=gpus, host=host, catalog_note=choice.note)
    if args.json:
        data = as_json(report, choice.catalog.canonical, args.show_secrets)
        print(json.dumps(data, indent=2))
    else:
        show(report, choice.catalog.canonical, args.show_secrets)
    return exitcodes.OK if report.clean else exitcodes.FINDINGS


def as_json(report, canon, show_secrets: bool = False) -> dict:
    from specdoctor.agent.events import redact_payload
    from specdoctor.tools.command import diff
    from specdoctor.tools.redact import redact_spec

    data = {
        "ok": report.clean,
        "catalog": report.catalog_note,
        "findings": [f.model_dump(mode="json") for f in report.findings],
        "original": report.original.shell(),
        "command": report.corrected.shell(),
        "argv": report.corrected.argv(),
        "env": report.corrected.env_dict(),
        "changes": [d.model_dump() for d in diff(report.original, report.corrected, canon)],
        "unfixed": [f.message for f in report.unfixed],
        "elapsed_ms": round(report.elapsed_s * 1000, 2),
    }
    if show_secrets:
        return data
    # The diff of the masked commands: a changed secret must not show up as its before and after.
    masked = diff(redact_spec(report.original), redact_spec(report.corrected), canon)
    return redact_payload({**data, "changes": [d.model_dump() for d in masked]})


def show(report, canon, show_secrets: bool = False) -> None:
    from specdoctor.agent.render import Out, diff_lines, finding_lines
    from specdoctor.tools.command import diff
    from specdoctor.tools.redact import redact_command, redact_spec

    out = Out(sys.stdout, show_secrets=show_secrets)
    original, corrected = report.original, report.corrected
    shown = corrected.shell()
    if not show_secrets:
        original, corrected, shown = redact_spec(original), redact_spec(corrected), redact_command(corrected)
    out.line(f"specdoctor check · {report.catalog_note} · {report.elapsed_s * 1000:.1f} ms", "dim")
    if not report.findings:
        out.line("✓ no problems found", "bold green")
        return
    out.line()
    for f in report.findings:
        finding_lines(out, f)
    changes = diff(original, corrected, canon)
    if changes:
        out.line()
        out.line("corrected command:", "bold")
        out.line("  " + shown, "bold green")
        out.line("changes:", "bold")
        diff_lines(out, changes)
    if report.unfixed:
        out.line()
        out.line(f"{len(report.unfixed)} problem(s) have no automatic fix; see above.", "yellow")
