"""The simulated scheduler process: `python -I -S child.py sglang::scheduler LAUNCHER_PID ORPHAN_S`.

It does no work; it exists so that stopping a launch must really take down a process tree. Like SGLang's
scheduler it outlives a launcher killed with SIGKILL (a controller must kill the tree); unlike it, it
gives up after ORPHAN_S seconds as an orphan, so a broken test cannot leave it running forever.
Run by path with -I -S (no site, no script-dir imports) so it starts in a few milliseconds.
"""

from __future__ import annotations

import os
import sys
import time


def main() -> None:
    launcher, orphan_s = int(sys.argv[2]), float(sys.argv[3])
    orphaned_at = None
    while True:
        time.sleep(0.1)
        if os.getppid() == launcher:
            continue
        orphaned_at = orphaned_at or time.monotonic()
        if time.monotonic() - orphaned_at > orphan_s:
            return


if __name__ == "__main__":
    main()
