"""specdoctor.tools.process on real process trees: teeing, stopping the whole tree, and no orphan whatever happens.

The "engine" is a small Python tree standing in for SGLang's launcher + scheduler + detokenizer. Every
test checks /proc itself afterwards (not through tools.process) that nothing of the tree is left.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from specdoctor.tools.process import EngineProcess, EngineStartError, StopResult

REPO = Path(__file__).resolve().parents[1]

# argv[1]: this process's role; argv[2:]: options, passed on to the children.
#   ignore-term: every process ignores SIGTERM      escape: child 0 calls setsid() (leaves the group)
#   orphan:      the launcher exits once its children run (as when SGLang's launcher dies first)
#   scrubbed:    child 0 starts, via a short-lived middle process, a grandchild with an empty environment
#                in its own session, so neither the group, the marker nor a parent link leads to it
#   graceful:    like SGLang, the launcher answers SIGTERM by ending its children itself and exiting 0;
#                the others report a SIGTERM that reaches them directly
TREE = r"""
import os, signal, subprocess, sys, time
CODE = os.environ["TREE_CODE"]
role, options = sys.argv[1], sys.argv[2:]
kids = []
def say(text):
    os.write(1, text.encode() + b"\n")  # one write: lines of concurrent processes do not interleave
def spawn(child_role, **kw):
    kids.append(subprocess.Popen([sys.executable, "-c", CODE, child_role, *options], **kw))
def shut_down_kids(*_):
    for kid in kids:
        kid.send_signal(signal.SIGUSR1 if role == "root" else signal.SIGKILL)
        kid.wait()
    os._exit(0)
def report_sigterm(*_):
    say(f"{role} got SIGTERM")
    os._exit(1)
if "ignore-term" in options:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if role == "child-0" and "escape" in options:
    os.setsid()
if role == "root":
    for i in range(2):
        spawn(f"child-{i}")
    os.write(1, b"not utf-8: \xff\xfe\xc3(\n")
elif role.startswith("child"):
    if role == "child-0" and "scrubbed" in options:
        spawn("middle")
    else:
        spawn("grandchild-" + role[-1])
elif role == "middle":
    env = {"PATH": os.environ.get("PATH", "/usr/bin"), "TREE_CODE": CODE}
    subprocess.Popen([sys.executable, "-c", CODE, "grandchild-0"], env=env, start_new_session=True)
    time.sleep(1.5)
    say(f"middle {os.getpid()} exits")
    sys.exit(0)
if "graceful" in options:
    signal.signal(signal.SIGTERM, shut_down_kids if role == "root" else report_sigterm)
    signal.signal(signal.SIGUSR1, shut_down_kids)
say(f"pid {role} {os.getpid()} pgid {os.getpgid(0)}")
if role == "root" and "orphan" in options:
    time.sleep(0.3)
    sys.exit(3)
time.sleep(60)
"""
TREE_SIZE = 5  # root, two children, two grandchildren
PID_LINE = re.compile(r"^pid (\S+) (\d+) pgid (\d+)$")
REAPER_LINE = "specdoctor reaper:"


def tree_env() -> dict[str, str]:
    return {**os.environ, "TREE_CODE": TREE}


def tree_argv(*options: str) -> list[str]:
    return [sys.executable, "-c", TREE, "root", *options]


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def marked_pids(engine_id: str) -> list[int]:
    """Live processes whose environment carries this launch's marker, read straight from /proc."""
    needle = f"SPECDOCTOR_ENGINE_ID={engine_id}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and alive(int(entry)):
            found.append(int(entry))
    return found


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def tree_pids(lines: list[str]) -> dict[str, tuple[int, int]]:
    """role -> (pid, pgid) from the tree's own report."""
    return {m[1]: (int(m[2]), int(m[3])) for line in lines if (m := PID_LINE.match(line))}


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def log_lines(path: Path) -> list[str]:
    return path.read_bytes().decode("utf-8", "replace").splitlines() if path.exists() else []


class Leftovers:
    """Records what a test started and, at teardown, proves none of it is alive."""

    def __init__(self) -> None:
        self.engine_ids: list[str] = []
        self.pids: set[int] = set()

    def track(self, engine: EngineProcess) -> EngineProcess:
        self.engine_ids.append(engine.engine_id)
        self.pids.update((engine.pid, engine.watchdog_pid))
        return engine

    def alive(self) -> list[int]:
        found = {pid for pid in self.pids if alive(pid)}
        for engine_id in self.engine_ids:
            found.update(marked_pids(engine_id))
        return sorted(found)


@pytest.fixture
def leftovers() -> Iterator[Leftovers]:
    record = Leftovers()
    yield record
    survivors = record.alive()
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert survivors == [], f"processes left running: {survivors}"


def start_tree(tmp_path: Path, leftovers: Leftovers, *options: str, **kwargs) -> EngineProcess:
    engine = leftovers.track(
        EngineProcess.start(tree_argv(*options), tree_env(), tmp_path / "engine.log", **kwargs)
    )
    assert wait_for(lambda: len(tree_pids(engine.tail())) >= TREE_SIZE), engine.tail()
    leftovers.pids.update(pid for pid, _ in tree_pids(engine.tail()).values())
    return engine


def test_output_is_teed_to_log_tail_and_subscribers(tmp_path: Path, leftovers: Leftovers) -> None:
    early: list[str] = []
    broken_calls: list[str] = []

    def broken(line: str) -> None:
        broken_calls.append(line)
        raise ValueError("a buggy subscriber")

    engine = start_tree(tmp_path, leftovers, on_line=[early.append, broken])
    replayed: list[str] = []
    engine.subscribe(replayed.append, replay=True)

    raw = (tmp_path / "engine.log").read_bytes()
    assert b"not utf-8: \xff\xfe\xc3(\n" in raw
    assert "not utf-8: \ufffd\ufffd\ufffd(" in engine.tail()
    assert engine.lines_seen == TREE_SIZE + 1 == len(early) == len(replayed)
    assert early == engine.tail() == replayed
    assert len(broken_calls) == 1
    assert engine.last_output_at is not None and engine.last_output_at <= time.monotonic()
    roles = tree_pids(engine.tail())
    assert roles["root"] == (engine.pid, engine.pid)
    assert {pid for pid, _ in roles.values()} <= {p.pid for p in engine.processes()}

    result = engine.stop(grace_s=5)

    assert result.clean and result.survivors == () and result.killed == ()
    assert {p.pid for p in result.terminated} >= {pid for pid, _ in roles.values()}
    assert result.exit_code == -signal.SIGTERM
    assert "sent SIGTERM" in result.message
    assert engine.poll() == -signal.SIGTERM


def test_tail_keeps_only_the_last_lines(tmp_path: Path, leftovers: Leftovers) -> None:
    code = "for i in range(50): print(f'line {i}')"
    engine = leftovers.track(
        EngineProcess.start([sys.executable, "-c", code], dict(os.environ), tmp_path / "t.log", tail_lines=5)
    )
    assert engine.wait(10) == 0
    assert wait_for(lambda: engine.lines_seen == 50)
    assert engine.tail() == [f"line {i}" for i in range(45, 50)]
    assert log_lines(tmp_path / "t.log") == [f"line {i}" for i in range(50)]
    assert engine.stop().clean


def test_launcher_alone_gets_sigterm_and_ends_its_children(tmp_path: Path, leftovers: Leftovers) -> None:
    engine = start_tree(tmp_path, leftovers, "graceful")
    pids = {pid for pid, _ in tree_pids(engine.tail()).values()}

    result = engine.stop(grace_s=5)

    assert result.clean and result.exit_code == 0
    assert [p.pid for p in result.terminated] == [engine.pid]
    assert {p.pid for p in result.stopped} == pids
    assert not any("got SIGTERM" in line for line in log_lines(tmp_path / "engine.log"))
    assert "5 process(es) ended, 1 sent SIGTERM" in result.message


def test_sigterm_ignored_is_sigkilled_after_grace(tmp_path: Path, leftovers: Leftovers) -> None:
    engine = start_tree(tmp_path, leftovers, "ignore-term")

    result = engine.stop(grace_s=0.5)

    assert result.clean
    assert {p.pid for p in result.killed} >= {pid for pid, _ in tree_pids(engine.tail()).values()}
    assert result.exit_code == -signal.SIGKILL
    assert "SIGKILLed" in result.message
    assert result.elapsed_s >= 0.5


def test_child_that_leaves_the_process_group_is_stopped(tmp_path: Path, leftovers: Leftovers) -> None:
    engine = start_tree(tmp_path, leftovers, "escape")
    roles = tree_pids(engine.tail())
    escaped_pid, escaped_group = roles["child-0"]
    assert escaped_group != engine.pgid
    assert escaped_pid in {p.pid for p in engine.processes() if p.pgid != engine.pgid}

    result = engine.stop(grace_s=5)

    assert result.clean
    assert escaped_pid in {p.pid for p in result.terminated}
    assert not alive(escaped_pid)
    assert roles["grandchild-0"][1] == escaped_group
    assert not alive(roles["grandchild-0"][0])


def test_descendant_without_marker_or_parent_is_remembered(tmp_path: Path, leftovers: Leftovers) -> None:
    engine = start_tree(tmp_path, leftovers, "scrubbed")
    hidden_pid, hidden_group = tree_pids(engine.tail())["grandchild-0"]
    assert hidden_group == hidden_pid != engine.pgid
    assert hidden_pid not in marked_pids(engine.engine_id)
    assert wait_for(lambda: any(line.startswith("middle ") for line in engine.tail()))
    middle_pid = int(next(line for line in engine.tail() if line.startswith("middle ")).split()[1])
    # The middle process is gone, so no parent link leads from the tree to the hidden grandchild.
    assert wait_for(lambda: parent_of(hidden_pid) != middle_pid)

    result = engine.stop(grace_s=5)

    assert hidden_pid in {p.pid for p in result.terminated}
    assert not alive(hidden_pid) and result.clean


def test_stop_after_the_launcher_died_ends_its_orphans(tmp_path: Path, leftovers: Leftovers) -> None:
    engine = start_tree(tmp_path, leftovers, "orphan")
    assert engine.wait(10) == 3
    orphans = {pid for role, (pid, _) in tree_pids(engine.tail()).items() if role != "root"}
    assert all(alive(pid) for pid in orphans)
    assert {p.pid for p in engine.processes()} == orphans

    result = engine.stop(grace_s=5)

    assert result.exit_code == 3 and result.clean
    assert {p.pid for p in result.terminated} == orphans
    assert not any(alive(pid) for pid in orphans)


def test_context_manager_stops_the_tree(tmp_path: Path, leftovers: Leftovers) -> None:
    with start_tree(tmp_path, leftovers) as engine:
        pids = [pid for pid, _ in tree_pids(engine.tail()).values()]
        assert all(alive(pid) for pid in pids)
    assert not any(alive(pid) for pid in pids)
    assert engine.poll() == -signal.SIGTERM


def test_stop_of_an_exited_engine_reports_nothing_running(tmp_path: Path, leftovers: Leftovers) -> None:
    engine = leftovers.track(
        EngineProcess.start([sys.executable, "-c", "print('bye')"], dict(os.environ), tmp_path / "e.log")
    )
    assert engine.wait(10) == 0
    # The watchdog notices the engine is gone and exits by itself.
    assert wait_for(lambda: not alive(engine.watchdog_pid), timeout=5)

    result = engine.stop()

    assert isinstance(result, StopResult)
    assert (result.exit_code, result.stopped, result.terminated, result.killed) == (0, (), (), ())
    assert "already exited" in result.message
    assert engine.tail() == ["bye"]


@pytest.mark.parametrize(
    ("argv", "cwd", "expected"),
    [
        (["/nonexistent/sglang"], None, "'/nonexistent/sglang' was not found"),
        ([str(Path(__file__))], None, "is not executable"),
        (
            [sys.executable, "-V"],
            Path("/nonexistent-dir"),
            "working directory /nonexistent-dir does not exist",
        ),
        ([], None, "argv is empty"),
    ],
)
def test_start_failures_are_one_line_errors(
    tmp_path: Path, argv: list[str], cwd: Path | None, expected: str
) -> None:
    watchdogs_before = own_watchdogs()
    with pytest.raises(EngineStartError, match=re.escape(expected)) as raised:
        EngineProcess.start(argv, dict(os.environ), tmp_path / "e.log", cwd=cwd)
    assert "\n" not in str(raised.value)
    assert wait_for(lambda: own_watchdogs() == watchdogs_before, timeout=5)


def test_unwritable_log_is_a_start_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(EngineStartError, match="cannot write the engine log"):
        EngineProcess.start([sys.executable, "-V"], dict(os.environ), blocker / "sub" / "e.log")


def own_watchdogs() -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and alive(int(entry)):
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                ppid = parent_of(int(entry))
            except OSError:
                continue
            if ppid == os.getpid() and b"reaper.py" in cmdline:
                found.add(int(entry))
    return found


OWNER = """
import os, sys, time
from pathlib import Path
from specdoctor.tools.process import EngineProcess, install_signal_handlers
mode, log = sys.argv[1], Path(sys.argv[2])
if mode == "signals":
    install_signal_handlers()
tree = [sys.executable, "-c", os.environ["TREE_CODE"], "root"]
engine = EngineProcess.start(tree, dict(os.environ), log)
print(engine.pid, engine.watchdog_pid, engine.engine_id, flush=True)
while engine.lines_seen < 6:
    time.sleep(0.01)
if mode == "exit":
    sys.exit(0)
try:
    with engine:
        print("running", flush=True)
        time.sleep(60)
finally:
    print("stopped", engine.poll(), flush=True)
"""


def start_owner(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[str], Leftovers, list[int]]:
    """A specdoctor stand-in that starts the tree; returns it, what it started, and the tree's pids."""
    env = {**tree_env(), "PYTHONPATH": str(REPO)}
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, mode, str(tmp_path / "engine.log")],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    engine_pid, watchdog_pid, engine_id = owner.stdout.readline().split()
    started = Leftovers()
    started.engine_ids.append(engine_id)
    assert wait_for(lambda: len(tree_pids(log_lines(tmp_path / "engine.log"))) >= TREE_SIZE), log_lines(
        tmp_path / "engine.log"
    )
    pids = [pid for pid, _ in tree_pids(log_lines(tmp_path / "engine.log")).values()]
    started.pids.update([int(engine_pid), int(watchdog_pid), *pids])
    return owner, started, pids


def test_kill_9_of_the_owner_leaves_no_engine(tmp_path: Path, leftovers: Leftovers) -> None:
    owner, started, pids = start_owner(tmp_path, "hold")
    leftovers.engine_ids += started.engine_ids
    leftovers.pids |= started.pids
    assert owner.stdout.readline().strip() == "running"
    assert all(alive(pid) for pid in pids)

    owner.kill()
    owner.wait()
    owner.stdout.close()

    assert wait_for(lambda: started.alive() == [], timeout=5), started.alive()
    assert any(REAPER_LINE in line for line in log_lines(tmp_path / "engine.log"))


def test_normal_exit_of_the_owner_stops_the_engine_at_exit(tmp_path: Path, leftovers: Leftovers) -> None:
    owner, started, _ = start_owner(tmp_path, "exit")
    leftovers.engine_ids += started.engine_ids
    leftovers.pids |= started.pids

    assert owner.wait(30) == 0
    owner.stdout.close()

    assert started.alive() == []
    assert not any(REAPER_LINE in line for line in log_lines(tmp_path / "engine.log"))


def test_sigterm_to_the_owner_is_an_orderly_stop(tmp_path: Path, leftovers: Leftovers) -> None:
    owner, started, _ = start_owner(tmp_path, "signals")
    leftovers.engine_ids += started.engine_ids
    leftovers.pids |= started.pids
    assert owner.stdout.readline().strip() == "running"

    owner.send_signal(signal.SIGTERM)

    assert owner.wait(30) == 128 + signal.SIGTERM
    assert owner.stdout.read().split() == ["stopped", str(-signal.SIGTERM)]
    owner.stdout.close()
    assert started.alive() == []
    assert not any(REAPER_LINE in line for line in log_lines(tmp_path / "engine.log"))


SMALL_TREE = "import subprocess, sys, time\nkids = [subprocess.Popen(['sleep', '30']) for _ in range(2)]\nprint('up', flush=True)\ntime.sleep(30)\n"


def test_hundred_start_stop_cycles_leave_nothing(tmp_path: Path, leftovers: Leftovers) -> None:
    for cycle in range(100):
        engine = leftovers.track(
            EngineProcess.start(
                [sys.executable, "-I", "-S", "-c", SMALL_TREE], dict(os.environ), tmp_path / f"{cycle}.log"
            )
        )
        assert wait_for(lambda engine=engine: engine.lines_seen == 1), engine.tail()
        result = engine.stop(grace_s=5)
        assert result.clean and len(result.terminated) == 3 and result.killed == ()
    assert leftovers.alive() == []
    assert own_watchdogs() == set()


def test_an_interrupt_a_library_disguised_is_still_known_to_be_one():
    # pydantic turns a KeyboardInterrupt that lands inside a schema build into a SchemaError: the CLI and
    # the loop must still end as interrupted (exit 130, engine stopped), not as an internal error.
    script = (
        "import os, signal, time\n"
        "from specdoctor.tools.process import install_signal_handlers, interrupt_requested\n"
        "install_signal_handlers()\n"
        "print(interrupt_requested())\n"
        "try:\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(5)\n"
        "    except KeyboardInterrupt:\n"
        "        raise RuntimeError('a library wrapped it') from None\n"
        "except RuntimeError:\n"
        "    print(interrupt_requested())\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert proc.stdout.split() == ["False", "True"], proc.stdout + proc.stderr
