"""Which processes are alive, read straight from /proc (not through the code under test)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


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
