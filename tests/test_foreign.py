"""`--allow-kill` on real processes: only an SGLang/vLLM Python process of this user, still the one nvidia-smi
listed, is ever signalled, and the message says what matched or why a process was spared."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specdoctor.tools.foreign import engine_match, identify, terminate_foreign
from specdoctor.tools.gpu import GpuProcess
from specdoctor.tools.reaper import read_proc

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def fake_sglang(tmp_path) -> Path:
    """A package named `sglang` whose launch_server only sleeps (SIGTERM ignored when asked to)."""
    package = tmp_path / "sglang"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(
        "import signal, sys, time\n"
        "if 'stubborn' in sys.argv: signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ok', flush=True)\n"
        "time.sleep(60)\n"
    )
    return tmp_path


def engine(root: Path, *extra: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglang.launch_server", "--port", "1", *extra],
        env={**os.environ, "PYTHONPATH": str(root)},
        stdout=subprocess.PIPE,
    )
    assert proc.stdout.readline() == b"ok\n"  # started and, if asked, ignoring SIGTERM
    return proc


def listed(proc: subprocess.Popen, name: str = "python3") -> GpuProcess:
    """The row nvidia-smi would print for it, stamped with its start time as `gpu.inspect` does."""
    found = read_proc(proc.pid)
    assert found is not None
    return GpuProcess(
        gpu_index=0, pid=proc.pid, process_name=name, used_memory_mib=1000, start_time=found.start_time
    )


def test_stops_an_sglang_process_and_says_what_matched(fake_sglang):
    stray = engine(fake_sglang)
    freed = terminate_foreign([listed(stray)], grace_s=5)
    assert stray.wait(5) is not None
    assert freed.stopped == (stray.pid,)
    assert freed.message.startswith(f"stopped {stray.pid} (python")
    assert freed.message.endswith(": -m sglang.launch_server")


def test_an_engine_that_ignores_sigterm_is_killed_after_grace(fake_sglang):
    stray = engine(fake_sglang, "stubborn")
    terminate_foreign([listed(stray)], grace_s=0.5)
    assert stray.wait(5) == -9


def test_a_sleep_posing_as_python3_is_not_killed():
    posing = subprocess.Popen(["bash", "-c", "exec -a python3 sleep 100"])
    try:
        time.sleep(0.2)  # let bash exec
        assert Path(f"/proc/{posing.pid}/cmdline").read_bytes().startswith(b"python3\0")
        freed = terminate_foreign([listed(posing)], grace_s=0.5)
        time.sleep(0.3)
        assert posing.poll() is None, "the posing process was signalled"
        assert freed.stopped == ()
        assert freed.message == (
            f"not stopped {posing.pid} (sleep as 'python3'): it runs "
            f"{os.readlink(f'/proc/{posing.pid}/exe')}, not a Python interpreter running SGLang or vLLM"
        )
    finally:
        posing.kill()
        posing.wait()


def test_a_sleep_with_an_sglang_worker_title_is_not_killed():
    posing = subprocess.Popen(["bash", "-c", "exec -a sglang::scheduler_TP0 sleep 100"])
    try:
        time.sleep(0.2)
        freed = terminate_foreign([listed(posing)], grace_s=0.5)
        assert posing.poll() is None and freed.stopped == ()
        assert "not a Python interpreter" in freed.message
    finally:
        posing.kill()
        posing.wait()


def test_a_python_process_that_is_not_an_engine_is_not_killed():
    # `-c` code followed by words that look like an engine's: the words are the code's arguments.
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "-m", "sglang.launch_server"]
    )
    try:
        freed = terminate_foreign([listed(other)], grace_s=0.5)
        assert other.poll() is None and freed.stopped == ()
        assert freed.message.endswith(": its command line runs neither SGLang nor vLLM")
    finally:
        other.kill()
        other.wait()


def test_a_pid_reused_since_nvidia_smi_listed_it_is_not_killed(fake_sglang):
    stray = engine(fake_sglang)
    try:
        row = listed(stray).model_copy(update={"start_time": listed(stray).start_time - 1})
        freed = terminate_foreign([row], grace_s=0.5)
        assert stray.poll() is None and freed.stopped == ()
        assert "a new process took the pid since nvidia-smi listed it" in freed.message
    finally:
        stray.kill()
        stray.wait()


def test_another_users_process_is_reported_not_signalled():
    # pid 1 runs as root; as root ourselves the uid matches, and it is no engine either way.
    who = identify(1)
    assert who is not None and who.refusal is not None
    if os.getuid() != 0:
        assert who.refusal.startswith("it belongs to uid 0, not to you")


def test_never_itself_and_gone_processes_are_reported():
    me = GpuProcess(pid=os.getpid(), process_name="python3")
    assert terminate_foreign([me]).message == "nothing to stop"
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    freed = terminate_foreign([GpuProcess(pid=done.pid, process_name="python3")])
    assert freed.message == f"already gone: {done.pid}" and freed.stopped == ()


@pytest.mark.parametrize(
    ("argv", "matched"),
    [
        (["python3", "-m", "sglang.launch_server", "--model-path", "m"], "-m sglang.launch_server"),
        (
            ["python", "-X", "faulthandler", "-m", "vllm.entrypoints.openai.api_server"],
            "-m vllm.entrypoints.openai.api_server",
        ),
        (["/venv/bin/python3", "/venv/bin/sglang", "serve", "m"], "the sglang entry script /venv/bin/sglang"),
        (
            ["python", "/src/sglang/python/sglang/launch_server.py"],
            "the script /src/sglang/python/sglang/launch_server.py",
        ),
        (["sglang::scheduler_TP0"], "worker title 'sglang::scheduler_TP0'"),
        (["VLLM::EngineCore"], "worker title 'VLLM::EngineCore'"),
        (["python3", "-c", "import sglang", "sglang"], None),
        (["python3", "train.py", "-m", "sglang.launch_server"], None),
        (["python3", "-m", "sglang_router.launch_router"], None),
        (["python3"], None),
    ],
)
def test_engine_match(argv, matched):
    assert engine_match(argv) == matched


def test_a_live_report_stamps_each_process_with_its_start_time():
    from specdoctor.tools.gpu import _with_start_times, build_report

    rows = [GpuProcess(pid=os.getpid(), process_name="python3"), GpuProcess(pid=2**22 + 1, process_name="x")]
    report = _with_start_times(build_report([], rows, driver_version=None, cuda_version=None, source="nvml"))
    assert [p.start_time for p in report.processes] == [read_proc(os.getpid()).start_time, None]
