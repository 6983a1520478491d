"""HEALTHY means our server, measured: real engines (the simulated node, a real HTTP server process), real
ports, the real loop. After every test no process this test started may be left."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
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
from specdoctor.tools.reaper import MARKER_VARIABLE
from specdoctor.tools.system import find_free_port
from tests.procs import RUN_TOKEN, live_processes, run_token
from tests.tiny_models import TINY_EAGLE3, TINY_LLAMA

SPEED = 0.05
TRIALS = 20
AT_ONCE = 5


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


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("models")
    for name, config in {"tiny-llama": TINY_LLAMA, "tiny-eagle3": TINY_EAGLE3}.items():
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(config))
    return root


class Collect:
    def __init__(self) -> None:
        self.events: list = []

    def handle(self, event) -> None:
        self.events.append(event)

    def close(self) -> None:
        return None

    def of(self, kind: str) -> list:
        return [e for e in self.events if e.type == kind]


def make_loop(command: str, run_dir: Path, profile: str = "h200x8", **settings) -> tuple[Loop, Collect]:
    """A deploy --once as `specdoctor deploy --simulate PROFILE --sim-speed 0.05` builds it, in-process."""
    sink = Collect()
    base = dict(
        log_dir=run_dir,
        # As `deploy --simulate` sets it: /health is polled on the node's compressed clock too.
        watch=WatchSettings(deadlines=StageDeadlines().scaled(SPEED), health_poll_s=SPEED, spec_probes=2),
        backoff=Backoff(initial_s=0.3, max_s=1.0, max_restarts=1),
        budget=Budget(max_launches=1, wall_time_s=60),
        when_healthy="stop",
        grace_s=1.0,
    )
    loop = Loop(
        LaunchCommand.parse(command),
        bundled(),
        SimulatedLauncher(profile, speed=SPEED),
        default_planner(),
        PolicyApprover(0.5),
        EventBus([sink]),
        LoopSettings(**{**base, **settings}),
    )
    return loop, sink


def healthy_launches(sink: Collect) -> list[tuple[object, str]]:
    """(outcome, its engine's log) of each launch that was reported healthy."""
    return [
        (e.outcome, Path(e.outcome.log_path).read_text())
        for e in sink.of("outcome")
        if e.outcome.kind == "healthy"
    ]


def node(tmp_path: Path, **inject) -> str:
    """The h200x8 node with faults injected, as a profile file."""
    from specdoctor.tools.simnode.profile import load_profile

    profile = load_profile("h200x8").model_dump(mode="json")
    profile["inject"].update(inject)
    path = tmp_path / f"h200x8-{uuid.uuid4().hex[:8]}.json"
    path.write_text(json.dumps(profile))
    return str(path)


@pytest.fixture(scope="module")
def slow_weights(tmp_path_factory) -> str:
    """Weights take 3 s to load (wall clock), as a real checkpoint takes minutes: a second deploy started
    0-3 s after the first then passes preflight (the port is not bound yet) and loads while the first
    serves, which is when another server answers its /health."""
    return node(tmp_path_factory.mktemp("nodes"), slow_stage={"weights": 3.0})


def two_deploys(models: Path, run_dir: Path, stagger_s: float, profile: str) -> list[Collect]:
    """Two deploys of the same command on one port, the second started `stagger_s` after the first."""
    port = find_free_port(40000 + round(stagger_s * 1000))
    command = f"python -m sglang.launch_server --model-path {models / 'tiny-llama'} --port {port}"
    sinks: list[Collect] = []

    def deploy(name: str) -> None:
        loop, sink = make_loop(command, run_dir / name, profile)
        sinks.append(sink)
        loop.run()

    first = threading.Thread(target=deploy, args=("a",))
    first.start()
    time.sleep(stagger_s)
    deploy("b")
    first.join(120)
    return sinks


def test_two_deploys_on_one_port_never_report_a_false_healthy(models, tmp_path, slow_weights):
    staggers = [round(3.0 * i / (TRIALS - 1), 2) for i in range(TRIALS)]
    with ThreadPoolExecutor(AT_ONCE) as pool:
        trials = list(
            pool.map(lambda s: two_deploys(models, tmp_path / f"trial-{s}", s, slow_weights), staggers)
        )
    false_healthy, true_healthy, conflicts = [], 0, 0
    for stagger, sinks in zip(staggers, trials, strict=True):
        for sink in sinks:
            for outcome, log in healthy_launches(sink):
                # Ours: our engine bound the port itself (uvicorn prints this only after a bind succeeded)
                # and never logged that the port was taken.
                ours = "Uvicorn running on" in log and "[Errno 98]" not in log
                if ours and outcome.ownership == "process":
                    true_healthy += 1
                else:
                    false_healthy.append((stagger, outcome.detail))
            conflicts += sum(
                "[Errno 98]" in (e.outcome.fatal_line or "")
                for e in sink.of("outcome")
                if e.outcome.kind == "hung"
            )
    assert false_healthy == []
    # Each trial has one server that got the port; the other deploy saw the conflict or moved away first.
    assert true_healthy >= TRIALS
    print(f"{TRIALS} trials: {true_healthy} true HEALTHY, 0 false, {conflicts} port conflicts caught")


@pytest.mark.parametrize("owner_readable", [True, False], ids=["proc", "log-only"])
def test_an_answer_from_another_server_is_the_port_conflict_it_is(
    models, tmp_path, monkeypatch, owner_readable
):
    """The second engine's /health is answered by the first server while it loads: not ready (by the
    socket's owner, or where that cannot be read, because our log has not bound the port), and once its own
    bind fails the outcome is the port conflict, which the port playbook fixes."""
    if not owner_readable:
        from specdoctor.agent import watch
        from specdoctor.tools.port_owner import PortOwner

        unknown = PortOwner(state="unknown", detail="no /proc")
        monkeypatch.setattr(watch, "port_owner", lambda host, port, ours: unknown)
    port = find_free_port(45000)
    command = f"python -m sglang.launch_server --model-path {models / 'tiny-llama'} --port {port}"
    first, first_sink = make_loop(command, tmp_path / "a", when_healthy="supervise")
    runner = threading.Thread(target=first.run)
    runner.start()
    try:
        deadline = time.time() + 30
        while not healthy_launches(first_sink) and time.time() < deadline:
            time.sleep(0.05)
        assert healthy_launches(first_sink), "the first server did not come up"
        # Preflight off: as if both had checked the port before either bound it.
        second, sink = make_loop(command, tmp_path / "b", preflight=False)
        result = second.run()
    finally:
        first.engine.stop(2.0)  # ends the supervised server; its loop then stops on the crash
        runner.join(30)
    outcome = sink.of("outcome")[0].outcome
    assert outcome.kind == "hung" and "[Errno 98]" in outcome.fatal_line
    if owner_readable:
        assert "another server" in outcome.detail and "not by this launch" in outcome.detail
    assert sink.of("decision")[0].decision.category == "port-in-use"
    assert result.kind in ("budget", "stopped") and not healthy_launches(sink)


def test_where_the_owner_cannot_be_read_the_log_decides_and_says_so(models, tmp_path, monkeypatch):
    from specdoctor.agent import watch
    from specdoctor.tools.port_owner import PortOwner

    unknown = PortOwner(state="unknown", detail="/proc/net/tcp cannot be read on this host")
    monkeypatch.setattr(watch, "port_owner", lambda host, port, ours: unknown)
    command = (
        f"python -m sglang.launch_server --model-path {models / 'tiny-llama'} --port {find_free_port(47000)}"
    )
    result, sink = run(make_loop(command, tmp_path))
    outcome = sink.of("outcome")[-1].outcome
    assert (outcome.kind, outcome.ownership) == ("healthy", "log")
    assert outcome.detail.endswith(
        "[port owner not checked: /proc/net/tcp cannot be read on this host; trusted our log's bind line]"
    )
    assert result.kind == "healthy"


def spec_command(models: Path, *extra: str) -> str:
    return (
        f"python -m sglang.launch_server --model-path {models / 'tiny-llama'} --speculative-algorithm EAGLE3 "
        f"--speculative-draft-model-path {models / 'tiny-eagle3'} --speculative-num-steps 3 "
        f"--speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --decode-log-interval 1 "
        f"--port {find_free_port(46000)} {' '.join(extra)}"
    )


@pytest.fixture
def unmeasurable(tmp_path) -> str:
    """The h200x8 node, its engine hiding the accept length everywhere but /metrics."""
    return node(tmp_path, hide_accept_length=True)


def test_unmeasured_acceptance_is_never_called_working(models, tmp_path, unmeasurable):
    result, sink = run(make_loop(spec_command(models), tmp_path, unmeasurable))
    outcome = sink.of("outcome")[-1].outcome
    assert (outcome.kind, outcome.acceptance, outcome.accept_length) == ("healthy", "unmeasured", None)
    assert "acceptance is unmeasured" in outcome.detail and "--enable-metrics" in outcome.detail
    assert result.kind == "healthy" and "speculative acceptance unmeasured" in result.message
    for text in (outcome.detail, result.message):
        assert "working" not in text


def test_require_acceptance_makes_unmeasured_fatal(models, tmp_path, unmeasurable):
    result, sink = run(make_loop(spec_command(models), tmp_path, unmeasurable, require_acceptance=True))
    assert result.kind == "stopped" and result.exit_code == 3
    assert "could not be measured, and --require-acceptance makes that fatal" in result.message
    assert sink.of("outcome")[-1].outcome.acceptance == "unmeasured"


def test_deploy_shows_and_reports_unmeasured_acceptance(models, tmp_path, unmeasurable):
    def deploy(run_dir: Path, *options: str) -> subprocess.CompletedProcess:
        argv = [
            sys.executable,
            "-m",
            "specdoctor",
            "deploy",
            "--simulate",
            unmeasurable,
            "--sim-speed",
            str(SPEED),
        ]
        argv += [
            "--once",
            "--no-llm",
            "--run-dir",
            str(run_dir),
            *options,
            "--",
            *spec_command(models).split(),
        ]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)

    shown = deploy(tmp_path / "shown")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert (
        "HEALTHY, ACCEPTANCE UNMEASURED: ready and generating, but EAGLE3 acceptance is unmeasured"
        in shown.stdout
    )
    assert "is working" not in shown.stdout  # ("working command:" is the console's label for the command)
    report = json.loads((tmp_path / "shown" / "report.json").read_text())
    assert report["result"] == "healthy" and report["attempts"][-1]["acceptance"] == "unmeasured"
    required = deploy(tmp_path / "required", "--require-acceptance")
    assert required.returncode == 3, required.stdout + required.stderr
    assert "--require-acceptance makes that fatal" in required.stdout


def test_metrics_measure_what_nothing_else_reports(models, tmp_path, unmeasurable):
    command = spec_command(models, "--enable-metrics")
    result, sink = run(make_loop(command, tmp_path, unmeasurable, require_acceptance=True))
    outcome = sink.of("outcome")[-1].outcome
    assert (outcome.kind, outcome.acceptance, outcome.ownership) == ("healthy", "working", "process")
    assert outcome.accept_length == pytest.approx(2.6, abs=0.3)  # tiny-llama's EAGLE-3 level on the node
    assert result.kind == "healthy"


def run(made: tuple[Loop, Collect]) -> tuple[object, Collect]:
    loop, sink = made
    return loop.run(), sink
