"""The leftover-process checks count only what the test itself started."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.procs import TEST_TOKEN, live_processes


def _sleeper(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", "specdoctor.tools.simnode"], env=env
    )


def test_another_runs_processes_are_not_counted_as_this_tests_leftovers() -> None:
    simnode_like = lambda env, cmd: b"specdoctor.tools.simnode" in cmd  # noqa: E731
    others = {k: v for k, v in os.environ.items() if k != TEST_TOKEN}
    foreign, mine = _sleeper(others), _sleeper(dict(os.environ))
    try:
        found = live_processes(simnode_like)
        assert mine.pid in found and foreign.pid not in found
        assert foreign.pid in live_processes(simnode_like, this_test_only=False)
    finally:
        for proc in (foreign, mine):
            proc.kill()
            proc.wait()
