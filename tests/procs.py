"""Which processes are alive, read straight from /proc (not through the code under test)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

RUN_TOKEN = "SPECDOCTOR_TEST_RUN"
"""A variable a test sets to a fresh value so the processes it starts can be told from anyone else's."""


def run_token() -> bytes:
    """`RUN_TOKEN=<value>` as it appears in /proc/<pid>/environ of the processes this test started."""
    return f"{RUN_TOKEN}={os.environ[RUN_TOKEN]}".encode()


def live_processes(match: Callable[[bytes, bytes], bool]) -> list[int]:
    """Pids of live (non-zombie) processes, other than this one, whose (environ, cmdline) match."""
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
        if state not in ("Z", "X") and match(environ, cmdline):
            found.append(int(entry.name))
    return found
