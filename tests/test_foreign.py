from __future__ import annotations

import subprocess
import sys

from specdoctor.tools.foreign import terminate_foreign


def test_stops_a_real_process_and_reports_it():
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    message = terminate_foreign([stray.pid], grace_s=5)
    assert stray.wait(5) is not None
    assert message.startswith(f"stopped {stray.pid} (python")


def test_a_process_that_ignores_sigterm_is_killed_after_grace():
    stray = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ok', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    assert stray.stdout.readline() == b"ok\n"
    terminate_foreign([stray.pid], grace_s=0.5)
    assert stray.wait(5) == -9


def test_never_itself_and_gone_processes_are_reported():
    import os

    assert terminate_foreign([os.getpid()]) == "nothing to stop"
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    assert terminate_foreign([done.pid]) == f"already gone: {done.pid}"
