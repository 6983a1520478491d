"""Which processes are alive, read straight from /proc (not through the code under test)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

TEST_TOKEN = "TEST_RUN_TOKEN"
"""Set to a fresh value for each test (conftest); every process the test starts inherits it, so a
leftover check counts only this test's processes, not another checkout's or a user's demo."""
RUN_TOKEN = TEST_TOKEN


def run_token() -> bytes:
    """`TEST_TOKEN=<value>` as it appears in /proc/<pid>/environ of the processes this test started."""
    return f"{TEST_TOKEN}={os.environ[TEST_TOKEN]}".encode()


def live_processes(match: Callable[[bytes, bytes], bool], this_test_only: bool = True) -> list[int]:
    """Pids of live (non-zombie) processes, other than this one, whose (environ, cmdline) match (and that
    this test started, unless `this_test_only` is off)."""
    token = f"{TEST_TOKEN}={os.environ.get(TEST_TOKEN, '')}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        mine = not this_test_only or token in environ.split(b"\0")
        if state not in ("Z", "X") and mine and match(environ, cmdline):
            found.append(int(entry.name))
    return found
