"""`specdoctor demo`: the founding story, end to end, on the built-in simulated 8x H200 node.

An 8-GPU SGLang launch of Kimi-K2.5 with a freshly trained EAGLE-3 drafter, with every fault the real
deployment hit stacked in one command: vLLM's `--num-speculative-tokens`, `--speculative-algorithm EAGLE`
for an EAGLE-3 draft (the server would start, but accept nothing), a `--mem-fraction-static` too high for
CUDA graph capture, and a port another server already holds.
"""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path

from specdoctor.agent.commands.options import positive


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="the whole loop on a built-in simulated 8x H200 node (no GPU needed)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--sim-speed",
        type=positive(float),
        default=0.3,
        metavar="X",
        help="time scale of the simulated node (default 0.3)",
    )
    p.add_argument("--run-dir", metavar="DIR", help="where logs, transcript and report go")
    p.add_argument("--quiet-stages", action="store_true", help="do not print each startup stage")
    p.set_defaults(run=run)


def seed_command(models: Path, port: int) -> str:
    return (
        f"python -m sglang.launch_server --model-path {models / 'Kimi-K2.5'} --tp 8 --trust-remote-code "
        f"--speculative-algorithm EAGLE --speculative-draft-model-path {models / 'kimi-k2.5-eagle3'} "
        f"--speculative-eagle-topk 1 --num-speculative-tokens 16 --mem-fraction-static 0.97 --port {port}"
    )


def run(args: argparse.Namespace) -> int:
    from specdoctor.agent.approve import PolicyApprover
    from specdoctor.agent.console import ConsoleSink
    from specdoctor.agent.launcher import SimulatedLauncher
    from specdoctor.agent.render import Out
    from specdoctor.agent.session import Session, make_run_dir, settings_for
    from specdoctor.tools.catalog_load import CatalogChoice, bundled
    from specdoctor.tools.command import LaunchCommand
    from specdoctor.tools.edit_policy import Allowance
    from specdoctor.tools.process import install_signal_handlers

    install_signal_handlers()
    models = Path(__file__).resolve().parent.parent / "data" / "demo"
    out = Out(sys.stdout)
    with socket.socket() as squatter:
        # "Another server" already listens on the port the command asks for.
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        spec = LaunchCommand.parse(seed_command(models, port))
        out.line(
            "The seed story: Kimi-K2.5 + an EAGLE-3 drafter on 8x H200 (simulated), with four faults in one command.",
            "bold",
        )
        out.line(f"(another server is holding port {port}; the demo lets specdoctor move --port)", "dim")
        run_dir = make_run_dir(args.run_dir)
        demo_args = argparse.Namespace(
            max_launches=6,
            timeout=600.0,
            gpu_minutes=None,
            simulate="h200x8",
            sim_speed=args.sim_speed,
            playbooks=None,
            no_llm=True,
            report=None,
        )
        catalog = bundled("0.5.23")
        session = Session(
            spec=spec,
            choice=CatalogChoice(catalog=catalog, note="flags of SGLang 0.5.23 (bundled --help)"),
            launcher=SimulatedLauncher("h200x8", speed=args.sim_speed),
            # The story has another server on the port: moving --port is the demo's to make.
            approver=PolicyApprover(0.5, Allowance(flags=frozenset({"--port"}))),
            settings=settings_for(demo_args, run_dir, when_healthy="stop"),
            run_dir=run_dir,
            mode="demo",
            sinks=[ConsoleSink(out, stages=not args.quiet_stages, canon=catalog.canonical)],
        )
        result = session.run(demo_args)
    launches = len(result.attempts)
    preflight = session.report.report().preflight if session.report is not None else None
    caught = len(preflight.findings) if preflight is not None else 0
    before = f"; preflight caught {caught} problem(s) before any launch" if caught else ""
    out.line()
    out.line(f"{result.kind.upper()} after {launches} launch(es){before}.", "bold")
    out.line(
        f"transcript: {session.transcript_path}  (replay it: specdoctor replay {session.transcript_path})",
        "dim",
    )
    return result.exit_code
