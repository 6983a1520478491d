"""`specdoctor stop`: a detached server is stopped by what its run recorded, and only processes that are
still that launch (its marker, its start time) are signalled. Real processes stand in for engines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from specdoctor.tools.detached import DetachedServer
from specdoctor.tools.reaper import MARKER_VARIABLE, read_proc
from tests.procs import live_processes

SLEEPER = "import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\ntime.sleep(60)"
"""A launcher with one child, as SGLang's launcher has its scheduler."""


def ours() -> list[int]:
    return live_processes(lambda env, cmd: b"time.sleep(60)" in cmd)


@pytest.fixture(autouse=True)
def started():
    """The launches a test starts; whatever of them is left is killed, then none may be running."""
    launched: list[subprocess.Popen] = []
    yield launched
    for proc in launched:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    deadline = time.time() + 10
    while ours() and time.time() < deadline:
        time.sleep(0.1)
    assert ours() == []


def launch(launched: list, marker: str | None) -> subprocess.Popen:
    env = {**os.environ, **({MARKER_VARIABLE: marker} if marker else {})}
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER], env=env, start_new_session=True)
    launched.append(proc)
    deadline = time.time() + 10
    while len(ours()) < 2 * len(launched) and time.time() < deadline:
        time.sleep(0.05)  # its child is up
    return proc


def record(folder: Path, proc: subprocess.Popen, marker: str, port: int = 30000) -> Path:
    """A run folder whose report says it left `proc` running, as `deploy --detach` writes it."""
    stat = read_proc(proc.pid)
    assert stat is not None
    server = DetachedServer(
        pid=proc.pid,
        pgid=proc.pid,
        start_time=stat.start_time,
        engine_id=marker,
        url=f"http://127.0.0.1:{port}",
        command=f"python -m sglang.launch_server --model-path m --port {port}",
    )
    folder.mkdir(parents=True)
    (folder / "report.json").write_text(json.dumps({"result": "healthy", "detached": server.model_dump()}))
    return folder


def stop(*args: str, runs: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specdoctor", "stop", "--grace", "2", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SPECDOCTOR_RUNS_DIR": str(runs)},
    )


def test_with_several_running_none_is_guessed_and_a_named_one_is_stopped_alone(tmp_path, started):
    runs = tmp_path / "runs"
    first_marker, second_marker = uuid.uuid4().hex, uuid.uuid4().hex
    first, second = launch(started, first_marker), launch(started, second_marker)
    record(runs / "r1", first, first_marker, 30001)
    record(runs / "r2", second, second_marker, 30002)
    listed = stop(runs=runs)
    assert listed.returncode == 2
    assert "several detached servers are running" in listed.stderr
    assert f"specdoctor stop {runs / 'r1'}" in listed.stderr and f"pid {second.pid}" in listed.stderr
    assert first.poll() is None and second.poll() is None
    done = stop("r1", runs=runs)
    assert done.returncode == 0, done.stderr
    assert f"stopped run r1 (pid {first.pid}, http://127.0.0.1:30001): 2 process(es) ended" in done.stdout
    assert first.wait(10) is not None and second.poll() is None
    assert len(ours()) == 2  # the other run's launcher and child, untouched
    assert stop(runs=runs).returncode == 0  # now only r2 runs: no RUN stops it
    assert ours() == []


def test_a_pid_that_is_no_longer_our_launch_is_never_signalled(tmp_path, started):
    stranger = launch(started, None)  # no marker: not a launch of ours
    folder = record(tmp_path / "old-run", stranger, uuid.uuid4().hex)
    result = stop(str(folder), runs=tmp_path)
    assert result.returncode == 0
    assert "nothing to stop" in result.stdout and "no longer running" in result.stdout
    assert stranger.poll() is None and len(ours()) == 2


def test_a_run_that_left_nothing_running_is_a_usage_error(tmp_path):
    folder = tmp_path / "once"
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps({"result": "healthy", "detached": None}))
    result = stop(str(folder), runs=tmp_path)
    assert result.returncode == 2 and "left no server running" in result.stderr
    missing = stop("no-such-run", runs=tmp_path)
    assert missing.returncode == 2 and "no run 'no-such-run'" in missing.stderr
    assert missing.stderr.count("\n") == 1 and "Traceback" not in missing.stderr
