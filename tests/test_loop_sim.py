"""The loop end to end: real subprocesses, real HTTP, the simulated GPU node. After every test no process
of ours may be left."""

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

from specdoctor.agent.approve import PolicyApprover
from specdoctor.agent.diagnose import default_planner
from specdoctor.agent.events import EventBus
from specdoctor.agent.launcher import SimulatedLauncher
from specdoctor.agent.loop import Loop
from specdoctor.agent.policy import Backoff, Budget, LoopSettings
from specdoctor.agent.watch import StageDeadlines, WatchSettings
from specdoctor.tools.catalog_load import bundled
from specdoctor.tools.command import LaunchCommand
from specdoctor.tools.edit_policy import Allowance
from specdoctor.tools.reaper import MARKER_VARIABLE
from specdoctor.tools.system import find_free_port
from tests.procs import RUN_TOKEN, live_processes, run_token

DEMO_MODELS = Path(__file__).resolve().parent.parent / "agent" / "data" / "demo"
SPEED = 0.05


def our_processes() -> list[int]:
    """Processes this test started through specdoctor launches (they carry the engine marker) or the
    simulated node: only those whose environment holds this test's token, so another test run on the same
    machine is never counted."""
    return live_processes(
        lambda env, cmd: (
            (MARKER_VARIABLE.encode() in env or b"specdoctor.tools.simnode" in cmd)
            and run_token() in env.split(b"\0")
        )
    )


@pytest.fixture(autouse=True)
def no_leftovers(monkeypatch):
    # Every process a test starts inherits this environment, the simulated node and the reaper included.
    monkeypatch.setenv(RUN_TOKEN, uuid.uuid4().hex)
    yield
    deadline = time.time() + 10
    while our_processes() and time.time() < deadline:
        time.sleep(0.2)
    assert our_processes() == []


class Collect:
    def __init__(self) -> None:
        self.events = []

    def handle(self, event) -> None:
        self.events.append(event)

    def close(self) -> None:
        return None

    def of(self, kind: str) -> list:
        return [e for e in self.events if e.type == kind]


def run_loop(command: str, tmp_path: Path, profile: str = "h200x8", **settings) -> tuple[object, Collect]:
    sink = Collect()
    base = dict(
        log_dir=tmp_path,
        watch=WatchSettings(deadlines=StageDeadlines().scaled(0.005), spec_probes=2),
        backoff=Backoff(initial_s=0.3, max_s=1.0, max_restarts=2),
        budget=Budget(max_launches=4, wall_time_s=120),
    )
    loop = Loop(
        LaunchCommand.parse(command),
        bundled(),
        SimulatedLauncher(profile, speed=SPEED),
        default_planner(),
        # Other test runs on this machine may take a port between our check and our bind: moving --port is
        # allowed here (the policy that pins it is tested in test_trust_boundary).
        PolicyApprover(0.5, Allowance(flags=frozenset({"--port"}))),
        EventBus([sink]),
        LoopSettings(**{**base, **settings}),
    )
    return loop.run(), sink


def kimi(extra: str, port: int | None = None) -> str:
    port = port or find_free_port(31000)
    return (
        f"python -m sglang.launch_server --model-path {DEMO_MODELS / 'Kimi-K2.5'} --tp-size 8 --trust-remote-code "
        f"--speculative-algorithm EAGLE3 --speculative-draft-model-path {DEMO_MODELS / 'kimi-k2.5-eagle3'} "
        f"--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --mem-fraction-static 0.75 "
        f"--port {port} {extra}"
    )


def test_demo_reaches_healthy_in_two_launches(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "specdoctor", "demo", "--sim-speed", "0.05", "--run-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "HEALTHY after 2 launch(es)" in proc.stdout
    assert (
        "--speculative-num-draft-tokens 16" in proc.stdout and "--speculative-algorithm EAGLE3" in proc.stdout
    )
    events = [json.loads(line) for line in (tmp_path / "transcript.jsonl").read_text().splitlines()]
    assert [e["type"] for e in events].count("launch") == 2
    assert events[-1]["type"] == "stop" and events[-1]["result"] == "healthy"


def test_degraded_is_never_healthy_and_gets_fixed(tmp_path):
    # Preflight off: the watcher itself must catch an EAGLE-3 draft run as EAGLE (accept length 1.0).
    command = kimi("").replace("--speculative-algorithm EAGLE3", "--speculative-algorithm EAGLE")
    result, sink = run_loop(command, tmp_path, preflight=False)
    outcomes = [e.outcome for e in sink.of("outcome")]
    assert outcomes[0].kind == "degraded" and outcomes[0].accept_length == pytest.approx(1.0, abs=0.02)
    assert sink.of("decision")[0].decision.playbook == "sglang.spec.accept-length-one"
    assert outcomes[-1].kind == "healthy" and outcomes[-1].accept_length > 1.3
    assert result.kind == "healthy" and "--speculative-algorithm EAGLE3" in result.final_command


def test_hang_is_detected_by_its_stage_deadline(tmp_path):
    profile = tmp_path / "hang.json"
    profile.write_text(
        json.dumps(
            {
                "name": "hang",
                "gpus": {
                    "count": 8,
                    "name": "NVIDIA H200",
                    "memory_mib": 143771,
                    "compute_capability": "9.0",
                    "p2p": True,
                },
                "inject": {"hang_at_stage": "weights"},
            }
        )
    )
    started = time.monotonic()
    result, sink = run_loop(
        kimi(""), tmp_path, profile=str(profile), budget=Budget(max_launches=1, wall_time_s=120)
    )
    outcome = sink.of("outcome")[0].outcome
    assert outcome.kind == "hung" and outcome.stage == "weights" and "no progress" in outcome.detail
    assert time.monotonic() - started < 60  # the deadline (scaled), not the wall budget, ended it
    assert result.kind in ("stopped", "budget")


def test_crash_after_ready_is_relaunched_with_backoff(tmp_path):
    profile = tmp_path / "crashy.json"
    profile.write_text(
        json.dumps(
            {
                "name": "crashy",
                "gpus": {
                    "count": 8,
                    "name": "NVIDIA H200",
                    "memory_mib": 143771,
                    "compute_capability": "9.0",
                    "p2p": True,
                },
                "inject": {"crash_after_ready_s": 0.5},
            }
        )
    )
    result, sink = run_loop(
        kimi(""),
        tmp_path,
        profile=str(profile),
        when_healthy="supervise",
        budget=Budget(max_launches=3, wall_time_s=120),
    )
    outcomes = [e.outcome for e in sink.of("outcome")]
    crashes = [o for o in outcomes if o.kind == "exited" and o.ready_seen]
    assert len(crashes) >= 2, outcomes
    launches = sink.of("launch")
    assert len(launches) == 3 and launches[0].command == launches[1].command  # same command: a restart
    outcome_times = [e.elapsed_s for e in sink.of("outcome") if e.outcome.kind == "exited"]
    assert launches[1].elapsed_s - outcome_times[0] >= 0.3  # backoff waited
    assert result.kind == "stopped" and "kept crashing after it was healthy (3 times)" in result.message


def test_sigint_to_deploy_stops_the_tree_and_writes_the_report(tmp_path):
    port = find_free_port(32000)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specdoctor",
            "deploy",
            # Another test run may take the port between check and bind: deploy may move it here.
            "--no-pin",
            "--allow",
            "port",
            "--simulate",
            "h200x8",
            "--sim-speed",
            str(SPEED),
            "--run-dir",
            str(tmp_path),
            "--",
            *kimi("", port).split(),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    deadline = time.time() + 60
    while time.time() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if "supervising" in line:
            break
    assert any("HEALTHY" in x for x in lines), "".join(lines)
    # Once healthy, the operator is told where it serves, the command that works, and how to stop it.
    text = "".join(lines)
    assert f"serving at http://127.0.0.1:{port}" in text
    working = text.split("working command:\n", 1)[1].splitlines()[0].strip()
    assert working.startswith("python -m sglang.launch_server") and f"--port {port}" in working
    assert lines[-1].strip() == "supervising; Ctrl-C to stop"
    assert our_processes()  # supervising: the server is up
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["result"] == "interrupted"
    events = [json.loads(line) for line in (tmp_path / "transcript.jsonl").read_text().splitlines()]
    assert events[-1]["type"] == "stop" and events[-1]["result"] == "interrupted"


def test_detach_leaves_the_server_running(tmp_path):
    port = find_free_port(33000)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "specdoctor",
            "deploy",
            # Another test run may take the port between check and bind: deploy may move it here.
            "--no-pin",
            "--allow",
            "port",
            "--detach",
            "--simulate",
            "h200x8",
            "--sim-speed",
            str(SPEED),
            "--run-dir",
            str(tmp_path),
            "--",
            *kimi("", port).split(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"http://127.0.0.1:{port}" in proc.stdout
    pid = int(proc.stdout.split("server running: pid ")[1].split(",")[0])
    try:
        import urllib.request

        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).status == 200
    finally:
        os.killpg(pid, signal.SIGTERM)
        deadline = time.time() + 10
        while our_processes() and time.time() < deadline:
            time.sleep(0.2)


def deploy_cli(
    tmp_path: Path, *options: str, port: int, env: dict | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            *(sys.executable, "-m", "specdoctor", "deploy", *options, "--no-llm"),
            *("--simulate", "h200x8", "--sim-speed", str(SPEED), "--run-dir", str(tmp_path)),
            *("--", *kimi("", port).split()),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def stop_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specdoctor", "stop", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_detach_then_stop_leaves_no_process(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    env = {**os.environ, "SPECDOCTOR_RUNS_DIR": str(runs)}
    port = find_free_port(33500)
    proc = deploy_cli(runs / "first", "--detach", port=port, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"stop it with: specdoctor stop {runs / 'first'}" in proc.stdout
    pid = int(proc.stdout.split("server running: pid ")[1].split(",")[0])
    try:
        assert pid in our_processes() and len(our_processes()) >= 2  # the launcher and its scheduler
        report = json.loads((runs / "first" / "report.json").read_text())
        assert report["detached"]["pid"] == pid and report["detached"]["url"] == f"http://127.0.0.1:{port}"
        # No RUN: the one detached server still running in the runs folder.
        stopped = stop_cli(env=env)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert f"stopped run first (pid {pid}, http://127.0.0.1:{port})" in stopped.stdout
        assert our_processes() == []
        again = stop_cli(str(runs / "first"), env=env)
        assert again.returncode == 0 and "nothing to stop" in again.stdout
        none_left = stop_cli(env=env)
        assert none_left.returncode == 2 and "no server left running" in none_left.stderr
    finally:
        if our_processes():
            os.killpg(pid, signal.SIGKILL)


def test_deploy_pins_the_port_and_names_who_holds_it(tmp_path):
    import socket

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        # --allow does not lift a pin: the conflict stops the run before any launch.
        proc = deploy_cli(tmp_path, "--once", "--allow", "port", port=port)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "--allow port has no effect: --port is pinned" in proc.stderr
    assert "--port is pinned" in proc.stdout
    assert f"port {port} is held by pid {os.getpid()} (" in proc.stdout
    events = [json.loads(line) for line in (tmp_path / "transcript.jsonl").read_text().splitlines()]
    assert not [e for e in events if e["type"] == "launch"]
    [approval] = [e for e in events if e["type"] == "approval"]
    assert [r["pinned"] for r in approval["refused"]] == [True]
    assert events[-1]["result"] == "stopped" and f"port {port} is held by pid" in events[-1]["message"]


def test_allow_kill_frees_a_gpu_held_by_a_stray_process(tmp_path):
    base = str(DEMO_MODELS.parent.parent.parent / "tools" / "simnode" / "profiles" / "a100x2-busy.json")
    command = f"python -m sglang.launch_server --model-path {tmp_path / 'Qwen3-8B'} --tp-size 2 --port {find_free_port(37000)}"
    (tmp_path / "Qwen3-8B").mkdir()
    (tmp_path / "Qwen3-8B" / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Qwen3ForCausalLM"],
                "model_type": "qwen3",
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "hidden_size": 4096,
                "num_hidden_layers": 36,
                "vocab_size": 151936,
                "max_position_embeddings": 40960,
            }
        )
    )
    refused, sink = run_loop(command, tmp_path / "no", profile=base)
    assert refused.kind == "stopped" and sink.of("decision")[-1].decision.category == "stale-gpu-process"
    freed, sink = run_loop(command, tmp_path / "yes", profile=base, allow_kill=True)
    assert freed.kind == "healthy", freed.message
    assert any("freed the GPUs: stopped 1 process(es)" in e.note for e in sink.of("approval"))


def test_a_hand_edited_command_is_checked_before_it_is_launched(tmp_path):
    from specdoctor.agent.approve import Review

    class Person:
        kind = "user"

        def __init__(self) -> None:
            self.notes: list[str] = []

        def confirm(self, question: str) -> bool:
            return False

        def review(self, old, decision, new, attempt, note="", touches=(), alternative=None):
            self.notes.append(note)
            if attempt == 0 or note:
                return Review(approved=True, spec=new, by="user")
            typo = LaunchCommand.parse(new.shell().replace("--mem-fraction-static", "--mem-fraction-statc"))
            return Review(approved=True, spec=typo, by="user")

    person = Person()
    sink = Collect()
    loop = Loop(
        LaunchCommand.parse(kimi("").replace("--mem-fraction-static 0.75", "--mem-fraction-static 0.97")),
        bundled(),
        SimulatedLauncher("h200x8", speed=SPEED),
        default_planner(),
        person,
        EventBus([sink]),
        LoopSettings(
            log_dir=tmp_path, watch=WatchSettings(deadlines=StageDeadlines().scaled(0.005), spec_probes=2)
        ),
    )
    result = loop.run()
    assert any("your edit has problems" in n and "--mem-fraction-statc" in n for n in person.notes), (
        person.notes
    )
    launched = [e.command for e in sink.of("launch")]
    assert "--mem-fraction-statc" not in " ".join(launched)
    assert result.kind == "healthy"


def test_kill_9_of_deploy_leaves_a_readable_transcript_and_no_engine(tmp_path):
    from specdoctor.agent.transcript import read_transcript

    port = find_free_port(39000)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specdoctor",
            "deploy",
            # Another test run may take the port between check and bind: deploy may move it here.
            "--no-pin",
            "--allow",
            "port",
            "--simulate",
            "h200x8",
            "--sim-speed",
            str(SPEED),
            "--run-dir",
            str(tmp_path),
            "--",
            *kimi("", port).split(),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.time() + 60
    while time.time() < deadline and "HEALTHY" not in proc.stdout.readline():
        pass
    assert our_processes()  # supervising a healthy server
    proc.kill()  # SIGKILL: no handler runs, no atexit
    proc.wait(10)
    deadline = time.time() + 15  # the watchdog notices its owner is gone and stops the engine tree
    while our_processes() and time.time() < deadline:
        time.sleep(0.2)
    assert our_processes() == []
    transcript = read_transcript(tmp_path / "transcript.jsonl")
    assert transcript.stop is None  # killed: no stop event, and everything before it intact
    kinds = [e.type for e in transcript.events]
    assert kinds[0] == "run_start" and "launch" in kinds
    assert transcript.outcomes()[-1].outcome.kind == "healthy"


def test_freeing_simulated_gpus_leaves_no_stale_profile_files() -> None:
    from specdoctor.agent.launcher import SimulatedLauncher

    launcher = SimulatedLauncher("a100x2-busy", speed=0.05)
    first_report = launcher.gpus()
    freed = launcher.free_gpus(list(first_report.processes))
    assert freed.message.startswith("stopped 1 process(es)") and freed.stopped == (
        first_report.processes[0].pid,
    )
    first = Path(launcher.profile_name)
    assert first.is_file() and not launcher.gpus().processes
    launcher.free_gpus([])
    # The replaced copy is gone; the one in use stays until exit.
    assert not first.exists() and Path(launcher.profile_name).is_file()
    Path(launcher.profile_name).unlink()
