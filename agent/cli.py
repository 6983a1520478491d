"""specdoctor's command line: one verb per use, each in its own module, imported only when it runs."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from specdoctor import __version__
from specdoctor.agent import exitcodes
from specdoctor.tools.errors import UsageError

DESCRIPTION = """\
Launch SGLang, watch it start, and when it fails find out why, fix the launch command and try again,
until the server is healthy and its speculative decoding really works, or say why no flag can help.

  specdoctor check -- CMD        find a command's faults before launching it (no GPU needed)
  specdoctor diagnose ...        one diagnosis from a recorded crash log
  specdoctor eval DIR            score the planner on a folder of real crash cases
  specdoctor deploy -- CMD       unattended: launch, fix, relaunch until healthy (exit code + JSON report)
  specdoctor stop [RUN]          stop a server `deploy --detach` left running
  specdoctor fix -- CMD          the same, asking you before each change
  specdoctor replay FILE         re-run today's planners on a recorded session; report divergences
  specdoctor demo                the whole loop on a built-in simulated 8x H200 node (no GPU needed)
  specdoctor mcp                 serve these as tools to a coding assistant (MCP over stdio)

CMD is the launch command, e.g. `python -m sglang.launch_server --model-path M ...` or `sglang serve ...`,
given after `--` as words or as one quoted line."""

VERBS = {
    "check": "specdoctor.agent.commands.check",
    "diagnose": "specdoctor.agent.commands.diagnose",
    "eval": "specdoctor.agent.commands.evaluate",
    "deploy": "specdoctor.agent.commands.deploy",
    "stop": "specdoctor.agent.commands.stop",
    "fix": "specdoctor.agent.commands.fix",
    "demo": "specdoctor.agent.commands.demo",
    "replay": "specdoctor.agent.commands.replay",
    "mcp": "specdoctor.agent.commands.mcp",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specdoctor",
        description=DESCRIPTION,
        epilog=exitcodes.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"specdoctor {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for module in VERBS.values():
        importlib.import_module(module).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verb is None:
        parser.print_help()
        return exitcodes.USAGE
    from specdoctor.tools.catalog_load import CatalogError
    from specdoctor.tools.command import CommandError
    from specdoctor.tools.redact import redact_text

    try:
        return int(args.run(args))
    except (UsageError, CommandError, CatalogError) as exc:
        print(f"specdoctor {args.verb}: error: {redact_text(str(exc))}", file=sys.stderr)
        return exitcodes.USAGE
    except KeyboardInterrupt:
        print(f"specdoctor {args.verb}: interrupted", file=sys.stderr)
        return exitcodes.INTERRUPTED
    except BrokenPipeError:
        return exitcodes.OK
    except Exception as exc:  # the one place that turns an unexpected failure into a line, not a traceback
        from specdoctor.tools.process import interrupt_requested

        if interrupt_requested():
            print(f"specdoctor {args.verb}: interrupted", file=sys.stderr)
            return exitcodes.INTERRUPTED
        if os.environ.get("SPECDOCTOR_DEBUG"):
            raise
        print(
            f"specdoctor {args.verb}: internal error: {type(exc).__name__}: {redact_text(str(exc))} "
            "(set SPECDOCTOR_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return exitcodes.INTERNAL


if __name__ == "__main__":
    sys.exit(main())
