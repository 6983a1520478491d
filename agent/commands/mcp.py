"""`specdoctor mcp`: serve specdoctor's tools to a coding assistant over MCP (stdio)."""

from __future__ import annotations

import argparse
import sys

from specdoctor.agent import exitcodes
from specdoctor.agent.commands.options import (
    _add_policy_options,
    _add_simulation_options,
    add_llm_options,
    add_no_pin_option,
    positive,
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mcp",
        help="serve check, diagnose and flag help to a coding assistant (MCP over stdio)",
        description="A Model Context Protocol server on stdin/stdout: check_command, diagnose_log, flag_help and "
        "gpu_status for a coding assistant; with --allow-deploy also deploy, deploy_status and stop for runs this "
        "server starts (unattended policy: tuning changes only, or what --allow names; --port and --host pinned unless --no-pin). Register it in the "
        "assistant's MCP config, e.g. `claude mcp add specdoctor -- specdoctor mcp`. Needs `specdoctor[mcp]`.",
        epilog="exit codes: 0 the client closed the session, 2 usage error (or the mcp package is missing)",
    )
    p.add_argument(
        "--allow-deploy",
        action="store_true",
        help="also offer deploy / deploy_status / stop: the client may launch servers (on --simulate's node, "
        "or this machine's GPUs); runs still running when the session ends are stopped",
    )
    g = p.add_argument_group("budget of each deploy")
    g.add_argument("--max-launches", type=positive(int), default=6, metavar="N", help="default 6")
    g.add_argument(
        "--timeout", type=positive(float), default=3600.0, metavar="S", help="seconds (default 3600)"
    )
    g.add_argument("--gpu-minutes", type=positive(float), default=None, metavar="M", help="default: none")
    g.add_argument(
        "--run-dir",
        metavar="DIR",
        help="each run's logs, transcript and report go in DIR/<time>-mcp-<run id> (default "
        "~/.local/state/specdoctor/runs)",
    )
    _add_policy_options(p)
    add_no_pin_option(p)
    _add_simulation_options(p)
    add_llm_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        import mcp.server.mcpserver  # noqa: F401 -- the 2.x SDK; a 1.x one has no MCPServer
    except ImportError:
        print(
            "specdoctor mcp: error: the MCP server needs the mcp package (2.x): pip install 'specdoctor[mcp]'",
            file=sys.stderr,
        )
        return exitcodes.USAGE
    from specdoctor.agent.mcp_server import serve

    return serve(args)
