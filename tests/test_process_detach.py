"""`deploy --detach`: an engine started to write its own log file survives specdoctor's exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_detached_engine_outlives_its_owner_and_keeps_logging(tmp_path):
    log = tmp_path / "engine.log"
    owner = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).parent.parent)!r})
        from specdoctor.tools.process import EngineProcess
        seen = []
        engine = EngineProcess.start(
            [sys.executable, "-u", "-c", "import time\\nfor i in range(600):\\n print('tick', i, flush=True); time.sleep(0.1)"],
            {{"PATH": "/usr/bin:/bin"}}, {str(log)!r}, to_file=True, on_line=[seen.append],
        )
        deadline = time.time() + 10
        while len(seen) < 3 and time.time() < deadline:
            time.sleep(0.05)
        assert seen[:2] == ["tick 0", "tick 1"], seen
        engine.detach()
        print(engine.pid, flush=True)
        """
    )
    proc = subprocess.run([sys.executable, "-c", owner], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    pid = int(proc.stdout.strip())
    try:
        time.sleep(1.5)  # past the watchdog's reaction time: it must have let go
        assert _alive(pid)
        before = log.read_text().count("tick")
        time.sleep(0.5)
        assert log.read_text().count("tick") > before  # still writing, to its own file
    finally:
        os.killpg(pid, signal.SIGKILL)


def test_followed_output_reaches_subscribers_like_the_pipe(tmp_path):
    from specdoctor.tools.process import EngineProcess

    seen: list[str] = []
    engine = EngineProcess.start(
        [sys.executable, "-c", "print('a'); print('b\\xe9'); import sys; sys.stdout.flush()"],
        dict(os.environ),
        tmp_path / "x.log",
        to_file=True,
        on_line=[seen.append],
    )
    assert engine.wait(10) == 0
    deadline = time.time() + 5
    while len(seen) < 2 and time.time() < deadline:
        time.sleep(0.05)
    engine.stop()
    assert seen == ["a", "bé"]
    assert (tmp_path / "x.log").read_text() == "a\nbé\n"
