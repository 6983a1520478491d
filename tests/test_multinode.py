"""A multi-node launch driven by the loop: every node rank a real process of the simulated node, meeting over
real TCP on 127.0.0.1. One command for all nodes; a fix reaches every node; one node failing stops and
relaunches all; every node's log is evidence; a multi-node layout is never changed unattended. After every
test no process this test started may be left."""

from __future__ import annotations

import ast
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
from specdoctor.agent.multinode import MultiNodeLauncher, node_command, node_log
from specdoctor.agent.policy import Backoff, Budget, LoopSettings
from specdoctor.agent.watch import StageDeadlines, WatchSettings
from specdoctor.tools.catalog_load import bundled
from specdoctor.tools.command import LaunchCommand
from specdoctor.tools.edit_policy import Allowance
from specdoctor.tools.logs import extract_root_cause
from specdoctor.tools.rank_logs import MergedLog
from specdoctor.tools.reaper import MARKER_VARIABLE
from specdoctor.tools.system import find_free_port
from tests.procs import RUN_TOKEN, live_processes, run_token

DEMO_MODELS = Path(__file__).resolve().parent.parent / "agent" / "data" / "demo"
SPEED = 0.05
READY = "The server is fired up and ready to roll!"
H200 = {"count": 8, "name": "NVIDIA H200", "memory_mib": 143771, "compute_capability": "9.0", "p2p": True}


def our_processes() -> list[int]:
    return live_processes(
        lambda env, cmd: (
            (MARKER_VARIABLE.encode() in env or b"specdoctor.tools.simnode" in cmd)
            and run_token() in env.split(b"\0")
        )
    )


@pytest.fixture(autouse=True)
def no_leftovers(monkeypatch):
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


def two_nodes(extra: str, model: Path | str = DEMO_MODELS / "Kimi-K2.5") -> str:
    """A TP16 launch over two 8-GPU nodes, as node rank 0 runs it."""
    rendezvous, port = find_free_port(41000), find_free_port(43000)
    return (
        f"python -m sglang.launch_server --model-path {model} --tp-size 16 --trust-remote-code "
        f"--nnodes 2 --node-rank 0 --dist-init-addr 127.0.0.1:{rendezvous} --port {port} {extra}"
    )


KIMI_EAGLE3 = (
    f"--speculative-algorithm EAGLE3 --speculative-draft-model-path {DEMO_MODELS / 'kimi-k2.5-eagle3'} "
    "--speculative-num-steps 3 --speculative-eagle-topk 1 --mem-fraction-static 0.75"
)


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
        MultiNodeLauncher(SimulatedLauncher(profile, speed=SPEED), 2),
        default_planner(),
        PolicyApprover(0.5, Allowance(flags=frozenset({"--port"}))),
        EventBus([sink]),
        LoopSettings(**{**base, **settings}),
    )
    return loop.run(), sink


def server_args(log: Path) -> dict:
    line = next(x for x in log.read_text().splitlines() if "server_args=" in x)
    return ast.literal_eval(line.split("server_args=", 1)[1])


def test_node_command_changes_only_the_node_rank() -> None:
    spec = LaunchCommand.parse(
        "python -m sglang.launch_server --model-path m --node_rank=0 --nnodes 2 --port 1"
    )
    assert (
        node_command(spec, 1).shell()
        == "python -m sglang.launch_server --model-path m --node-rank=1 --nnodes 2 --port 1"
    )
    assert node_log(Path("/runs/attempt-3.log"), 1) == Path("/runs/attempt-3.rank1.log")


def test_a_two_node_tp16_launch_with_vllms_flag_is_fixed_on_both_nodes_and_healthy(tmp_path) -> None:
    # Preflight off: both nodes must fail on the flag, and the one fix must reach both.
    result, sink = run_loop(two_nodes(f"{KIMI_EAGLE3} --num-speculative-tokens 4"), tmp_path, preflight=False)
    assert result.kind == "healthy", result.message
    assert [e.attempt for e in sink.of("launch")] == [1, 2]
    for rank in (0, 1):
        failed = (tmp_path / f"attempt-1.rank{rank}.log").read_text()
        assert "error: unrecognized arguments: --num-speculative-tokens 4" in failed
        args = server_args(tmp_path / f"attempt-2.rank{rank}.log")
        assert (args["node_rank"], args["nnodes"], args["tp_size"]) == (rank, 2, 16)
        assert args["speculative_num_draft_tokens"] == 4
    merged = (tmp_path / "attempt-1.log").read_text().splitlines()
    assert "[rank 0]" in merged and "[rank 1]" in merged
    evidence = sink.of("evidence")[0]
    assert (
        evidence.root_cause.kind == "argparse" and "--num-speculative-tokens" in evidence.root_cause.message
    )
    final = LaunchCommand.parse(result.final_command)
    assert final.value("--speculative-num-draft-tokens") == "4" and not final.has("--num-speculative-tokens")
    assert (final.value("--tp-size"), final.value("--nnodes"), final.value("--node-rank")) == ("16", "2", "0")
    ready = (tmp_path / "attempt-2.rank0.log").read_text()
    assert READY in ready and READY not in (tmp_path / "attempt-2.rank1.log").read_text()


def test_the_tp_size_of_a_multi_node_launch_is_never_changed_unattended(tmp_path) -> None:
    # 40 attention heads do not split over 16 ranks: the heads playbook proposes --tp-size 8, which would
    # silently change the layout every node runs. The run stops for a person instead.
    model = tmp_path / "models" / "Llama-40-heads"
    model.mkdir(parents=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 5120,
        "intermediate_size": 13824,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "num_hidden_layers": 40,
        "max_position_embeddings": 4096,
        "vocab_size": 32000,
    }
    (model / "config.json").write_text(json.dumps(config))
    result, sink = run_loop(two_nodes("", model=model), tmp_path)
    assert result.kind == "stopped"
    assert "--tp-size" in result.message and "identity" in result.message, result.message
    assert [e.attempt for e in sink.of("launch")] == [1]
    assert all(LaunchCommand.parse(e.command).value("--tp-size") == "16" for e in sink.of("launch"))
    assert sink.of("decision")[-1].decision.playbook == "sglang.parallel.heads"
    for rank in (0, 1):
        assert "AssertionError" in (tmp_path / f"attempt-1.rank{rank}.log").read_text()


def test_a_node_that_dies_stops_the_other_and_the_loop_relaunches_both(tmp_path) -> None:
    # Node rank 1 alone crashes a while after it is up; node rank 0 then fails its next broadcast.
    profile = tmp_path / "node.json"
    inject = {"crash_after_ready_s": 2.0, "node_rank": 1}
    profile.write_text(json.dumps({"name": "h200-node", "gpus": H200, "inject": inject}))
    result, sink = run_loop(
        two_nodes(KIMI_EAGLE3 + " --speculative-num-draft-tokens 4"),
        tmp_path,
        profile=str(profile),
        when_healthy="supervise",
        backoff=Backoff(initial_s=0.2, max_s=5.0, max_restarts=1),  # 2 s healthy is not "long"
    )
    assert result.kind == "stopped" and "kept crashing after it was healthy (2 times)" in result.message
    assert [e.attempt for e in sink.of("launch")] == [1, 2]  # both nodes relaunched, once
    for evidence in sink.of("evidence"):
        # The node that failed first is the cause; node rank 0's `Connection reset by peer` is its echo.
        assert "illegal memory access" in evidence.root_cause.error_line
    merged = (tmp_path / "attempt-1.log").read_text()
    assert merged.index("illegal memory access") < merged.index("Connection reset by peer")
    assert "Connection reset by peer" in (tmp_path / "attempt-1.rank0.log").read_text()
    assert "illegal memory access" not in (tmp_path / "attempt-1.rank0.log").read_text()


def test_killing_one_node_ends_the_launch_and_stopping_leaves_nothing(tmp_path) -> None:
    spec = LaunchCommand.parse(two_nodes(f"{KIMI_EAGLE3} --speculative-num-draft-tokens 4"))
    engine = MultiNodeLauncher(SimulatedLauncher("h200x8", speed=SPEED), 2).start(
        spec, tmp_path / "attempt-1.log"
    )
    try:
        deadline = time.monotonic() + 30
        while not any(READY in line for line in engine.tail()):
            assert engine.poll() is None and time.monotonic() < deadline, engine.tail()[-5:]
            time.sleep(0.05)
        pids = {p.pid for p in engine.processes()}
        assert {engine.ranks[0].pid, engine.ranks[1].pid} <= pids and engine.pid == engine.ranks[0].pid
        os.kill(engine.ranks[1].pid, signal.SIGKILL)
        assert engine.wait(15) == -signal.SIGKILL
        assert engine.first_ended == (1, -signal.SIGKILL)
        assert engine.ranks[0].wait(5) == -signal.SIGKILL  # node rank 0 went down with it
    finally:
        stopped = engine.stop(2.0)
    assert stopped.clean
    lines = (tmp_path / "attempt-1.log").read_text().splitlines()
    reset = next(i for i, x in enumerate(lines) if "Connection reset by peer" in x)
    assert lines[max(i for i, x in enumerate(lines[:reset]) if x.startswith("[rank "))] == "[rank 0]"
    assert extract_root_cause(lines).exception_type == "RuntimeError"


def test_merged_log_keeps_each_record_whole_in_arrival_order(tmp_path) -> None:
    merged = MergedLog(tmp_path / "all.log", hold_s=0.05)
    zero, one = merged.feeder(0), merged.feeder(1)
    zero("[2026-12-03 08:10:59 TP0] Init parallel begin.")
    one("[2026-12-03 08:10:59 TP8] Init parallel begin.")
    one("[2026-12-03 08:11:02 TP8] Scheduler hit an exception: Traceback (most recent call last):")
    zero("[2026-12-03 08:11:02 TP0] Load weight begin. avail mem=139.89 GB")
    one('  File "/x/scheduler.py", line 1, in run')
    one("RuntimeError: boom")
    one("")
    time.sleep(0.2)
    one("[2026-12-03 08:11:02] Received sigquit from a child process. It usually means the child failed.")
    merged.close()
    assert (tmp_path / "all.log").read_text().splitlines() == [
        "[rank 0]",
        "[2026-12-03 08:10:59 TP0] Init parallel begin.",
        "[rank 1]",
        "[2026-12-03 08:10:59 TP8] Init parallel begin.",
        # Node 1's traceback started before node 0's next line arrived, and stays in one piece.
        "[2026-12-03 08:11:02 TP8] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/x/scheduler.py", line 1, in run',
        "RuntimeError: boom",
        "",
        "[rank 0]",
        "[2026-12-03 08:11:02 TP0] Load weight begin. avail mem=139.89 GB",
        "[rank 1]",
        "[2026-12-03 08:11:02] Received sigquit from a child process. It usually means the child failed.",
    ]
    assert oct((tmp_path / "all.log").stat().st_mode & 0o777) == "0o600"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specdoctor", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_deploy_runs_both_nodes_of_a_simulated_two_node_launch(tmp_path) -> None:
    command = two_nodes(f"{KIMI_EAGLE3} --num-speculative-tokens 4").split()
    run = tmp_path / "run"
    sim = ("--simulate", "h200x8", "--sim-nodes", "2", "--sim-speed", str(SPEED))
    proc = _cli("deploy", *sim, "--once", "--run-dir", str(run), "--", *command, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--speculative-num-draft-tokens 4" in proc.stdout and "--tp-size 16" in proc.stdout
    events = [json.loads(line) for line in (run / "transcript.jsonl").read_text().splitlines()]
    assert [e["type"] for e in events].count("launch") == 1  # preflight fixed the flag before any launch
    assert {p.name for p in run.glob("attempt-1*.log")} == {
        "attempt-1.log",
        "attempt-1.rank0.log",
        "attempt-1.rank1.log",
    }


def test_sim_nodes_is_explained_and_checked(tmp_path) -> None:
    assert "--sim-nodes" in _cli("deploy", "--help", cwd=tmp_path).stdout
    command = two_nodes(KIMI_EAGLE3).split()
    alone = _cli("deploy", "--sim-nodes", "2", "--", *command, cwd=tmp_path)
    assert alone.returncode == 2 and "add --simulate" in alone.stderr + alone.stdout
    one_node = [a for a in command if a not in ("--nnodes", "2")]
    sim = ("--simulate", "h200x8", "--sim-nodes", "2", "--sim-speed", str(SPEED), "--once")
    proc = _cli("deploy", *sim, "--run-dir", str(tmp_path / "run"), "--", *one_node, cwd=tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "the command says --nnodes 1: give it --nnodes 2" in proc.stdout


def test_a_detached_two_node_launch_is_recorded_on_every_node_and_stop_ends_both(tmp_path) -> None:
    command = two_nodes(KIMI_EAGLE3).split()
    run = tmp_path / "run"
    sim = ("--simulate", "h200x8", "--sim-nodes", "2", "--sim-speed", str(SPEED))
    proc = _cli("deploy", *sim, "--detach", "--run-dir", str(run), "--", *command, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    detached = json.loads((run / "report.json").read_text())["detached"]
    ranks = [detached, *detached["other_nodes"]]
    assert [Path(r["log_path"]).name for r in ranks] == ["attempt-1.rank0.log", "attempt-1.rank1.log"]
    assert (
        len({r["engine_id"] for r in ranks}) == 2 and len(our_processes()) >= 4
    )  # two launchers, two schedulers
    stopped = _cli("stop", "--grace", "5", str(run), cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert our_processes() == []


def test_one_nodes_command_copied_with_more_nodes_loses_the_rank_with_the_node_count() -> None:
    """corpus-real-engine-28 (blind): --nnodes 2 --node-rank 0 on one host fails SGLang's divisibility
    check; without --nnodes, a node rank (and a first node's address) means nothing, so it goes too."""
    from tests.recorded import blind

    found = blind("corpus-real-engine-28", "nnodes-2-with-tp-1-single-host")
    assert sorted(e["flag"] for e in found["edits"]) == ["--nnodes", "--node-rank"]


@pytest.mark.parametrize(
    "name", ["nnodes-2-node-0-alone-on-one-host-hangs", "nnodes-2-node-rank-1-started-alone-hangs"]
)
def test_a_loopback_rendezvous_no_other_node_joined_runs_as_one_node(name: str) -> None:
    from tests.recorded import blind

    contract = blind("corpus-real-engine-42", name)
    assert contract["playbook"] == "sglang.parallel.peers-never-join" and contract["confidence"] < 0.5


def test_nodes_that_never_join_are_started_by_a_person_unless_the_rendezvous_is_this_host() -> None:
    from tests.recorded import DATA, SERVE, decided

    # Recorded on the real `sglang serve`: node 0 of two, rendezvous localhost, waits at "Init parallel begin".
    lines = (
        (DATA / "sglang-outputs" / "serve-nnodes-2-rank-0-alone-localhost.hang.txt").read_text().splitlines()
    )
    here = f"{SERVE} --nnodes 2 --node-rank 0 --tp-size 2 --dist-init-addr localhost:32295"
    found = decided(here, lines, "hang")
    assert found["playbook"] == "sglang.parallel.peers-never-join"
    assert {e["flag"] for e in found["edits"]} == {"--nnodes", "--node-rank", "--dist-init-addr"}
    # Node 0 on another host: the other nodes are a person's to start.
    there = decided(here.replace("localhost:32295", "10.0.0.5:32295"), lines, "hang")
    assert (there["playbook"], there["action"]) == ("sglang.parallel.peers-never-join", "stop")
