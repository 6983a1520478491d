"""Is HEALTHY ours? Two deploys on one port, and what the ownership check costs.

    python bench/bench_health.py [--trials 20] [--speed 0.05] [--cli]

1. Two deploys of the same command on one port (tiny Llama on the simulated 8x H200 node whose weights
   take 3 s to load, as real ones take minutes; `--once`), the second started 0..3 s after the first,
   `--trials` staggers spread evenly. A HEALTHY is false when the
   engine of that launch never bound the port itself (no `Uvicorn running on` in its log) or logged that it
   was taken (`[Errno 98]`): /health was answered by the other server. In-process loops (real engines) with
   the ownership check, then with it disabled (what the loop did before: any 200 on the URL counted);
   `--cli` runs the with-check figure through `python -m specdoctor deploy` subprocesses instead.
2. The ownership check itself: /proc/net/tcp + the engine's fd tables, on this host's process count.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specdoctor.agent import watch  # noqa: E402
from specdoctor.agent.approve import PolicyApprover  # noqa: E402
from specdoctor.agent.diagnose import default_planner  # noqa: E402
from specdoctor.agent.events import EventBus  # noqa: E402
from specdoctor.agent.launcher import SimulatedLauncher  # noqa: E402
from specdoctor.agent.loop import Loop  # noqa: E402
from specdoctor.agent.policy import Budget, LoopSettings  # noqa: E402
from specdoctor.agent.transcript import read_transcript  # noqa: E402
from specdoctor.agent.watch import StageDeadlines, WatchSettings  # noqa: E402
from specdoctor.tools.catalog_load import bundled  # noqa: E402
from specdoctor.tools.command import LaunchCommand  # noqa: E402
from specdoctor.tools.port_owner import PortOwner, port_owner  # noqa: E402
from specdoctor.tools.system import find_free_port  # noqa: E402
from tests.tiny_models import TINY_LLAMA  # noqa: E402


class Outcomes:
    def __init__(self) -> None:
        self.outcomes: list = []

    def handle(self, event) -> None:
        if event.type == "outcome":
            self.outcomes.append(event.outcome)

    def close(self) -> None:
        return None


def verdicts(outcomes: list) -> tuple[int, int]:
    """(true, false) HEALTHY among these outcomes, judged from each launch's own log."""
    true = false = 0
    for o in outcomes:
        if o.kind != "healthy":
            continue
        log = Path(o.log_path).read_text()
        if "Uvicorn running on" in log and "[Errno 98]" not in log:
            true += 1
        else:
            false += 1
    return true, false


def slow_node(folder: Path) -> str:
    from specdoctor.tools.simnode.profile import load_profile

    profile = load_profile("h200x8").model_dump(mode="json")
    profile["inject"]["slow_stage"] = {"weights": 3.0}
    path = folder / "h200x8-slow-weights.json"
    path.write_text(json.dumps(profile))
    return str(path)


NODE: list[str] = []


def in_process(command: str, run_dir: Path, speed: float) -> list:
    sink = Outcomes()
    # As `deploy --simulate` sets it: deadlines and the /health poll run on the node's compressed clock.
    settings = LoopSettings(
        log_dir=run_dir,
        when_healthy="stop",
        budget=Budget(max_launches=1),
        grace_s=1.0,
        watch=WatchSettings(deadlines=StageDeadlines().scaled(speed), health_poll_s=max(speed, 0.05)),
    )
    launcher = SimulatedLauncher(NODE[0], speed=speed)
    Loop(
        LaunchCommand.parse(command),
        bundled(),
        launcher,
        default_planner(),
        PolicyApprover(0.5),
        EventBus([sink]),
        settings,
    ).run()
    return sink.outcomes


def by_cli(command: str, run_dir: Path, speed: float) -> list:
    argv = [sys.executable, "-m", "specdoctor", "deploy", "--simulate", NODE[0], "--sim-speed", str(speed)]
    argv += ["--once", "--no-llm", "--max-launches", "1", "--run-dir", str(run_dir), "--", *command.split()]
    subprocess.run(argv, capture_output=True, timeout=300)
    return [e.outcome for e in read_transcript(run_dir / "transcript.jsonl").outcomes()]


def trials(models: Path, count: int, speed: float, deploy) -> tuple[int, int, list[float]]:
    true = false = 0
    seconds = []
    for i in range(count):
        stagger = 3.0 * i / max(count - 1, 1)
        port = find_free_port(41000 + 20 * i)
        command = f"python -m sglang.launch_server --model-path {models / 'tiny-llama'} --port {port}"
        with tempfile.TemporaryDirectory() as tmp:
            found: list = []
            started = time.monotonic()
            first = threading.Thread(
                target=lambda found=found, command=command, tmp=tmp: found.extend(
                    deploy(command, Path(tmp) / "a", speed)
                )
            )
            first.start()
            time.sleep(stagger)
            found += deploy(command, Path(tmp) / "b", speed)
            first.join()
            seconds.append(time.monotonic() - started)
            t, f = verdicts(found)
            true, false = true + t, false + f
    return true, false, seconds


def check_cost() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        timings = {}
        for label, ours in (("ours", [os.getpid()]), ("foreign", [])):
            runs = []
            for _ in range(20):
                began = time.perf_counter()
                port_owner("127.0.0.1", port, ours)
                runs.append(time.perf_counter() - began)
            timings[label] = statistics.median(runs) * 1000
    processes = sum(1 for e in os.listdir("/proc") if e.isdigit())
    return (
        f"ownership check ({processes} processes on this host): {timings['ours']:.2f} ms when ours, "
        f"{timings['foreign']:.2f} ms when foreign (every fd table scanned to name the holder); "
        f"at most one per /health poll (1 s)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--speed", type=float, default=0.05)
    ap.add_argument("--cli", action="store_true", help="run the with-check deploys as CLI subprocesses")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp)
        (models / "tiny-llama").mkdir()
        (models / "tiny-llama" / "config.json").write_text(json.dumps(TINY_LLAMA))
        NODE.append(slow_node(models))
        deploy = by_cli if args.cli else in_process
        true, false, seconds = trials(models, args.trials, args.speed, deploy)
        how = "CLI deploys" if args.cli else "in-process loops"
        print(
            f"two deploys on one port, {args.trials} trials staggered 0-3 s ({how}), ownership checked: "
            f"{false} false HEALTHY, {true} true; {statistics.mean(seconds):.1f} s per trial"
        )
        watch.port_owner = lambda host, port, ours: PortOwner(state="ours", detail="not checked")
        true, false, seconds = trials(models, args.trials, args.speed, in_process)
        print(
            f"the same without the ownership check (in-process): {false} false HEALTHY, {true} true; "
            f"{statistics.mean(seconds):.1f} s per trial"
        )
    print(check_cost())


if __name__ == "__main__":
    main()
