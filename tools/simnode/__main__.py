"""`python -m specdoctor.tools.simnode [serve] <SGLang args>`: a simulated GPU node running a fake SGLang 0.5.23."""

from __future__ import annotations

import os
import sys

from specdoctor.tools.simnode.args import UsageExit, parse
from specdoctor.tools.simnode.launcher import Launcher
from specdoctor.tools.simnode.profile import PROFILE_ENV, ProfileError, load_profile, speed_from_env

EXIT_BAD_PROFILE = 78
"""The simulator's own configuration is wrong (EX_CONFIG); never an SGLang exit code."""


def main(argv: list[str]) -> int:
    try:
        profile = load_profile(os.environ.get(PROFILE_ENV))
        speed = speed_from_env()
    except ProfileError as exc:
        sys.stderr.write(f"simnode: {exc}\n")
        return EXIT_BAD_PROFILE
    try:
        invocation = parse(argv)
    except UsageExit as exc:
        sys.stderr.write(exc.text)
        return exc.code
    return Launcher(invocation, profile, speed).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
