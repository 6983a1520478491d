"""The loop on the simulated 8x H200 node: launches and wall time to healthy for 1..4 stacked faults,
against a blind-restart policy (relaunch the same command), and crash → decision latency.

    python bench/bench_loop.py [--speed 0.05]

Faults, stacked in this order on the seed command (Kimi-K2.5 + EAGLE-3 draft, TP 8):
  1. --mem-fraction-static 0.97: CUDA-graph capture runs out of memory (only visible at runtime)
  2. --speculative-algorithm EAGLE for an EAGLE-3 draft: healthy-looking, accept length 1.0
  3. vLLM's --num-speculative-tokens 16: argparse rejects it
  4. a port another server already holds: SGLang would load, fail to bind, and hang
Each scenario runs with preflight (the default) and with preflight off (every fault must be met at runtime).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specdoctor.agent.approve import PolicyApprover  # noqa: E402
from specdoctor.agent.diagnose import default_planner  # noqa: E402
from specdoctor.agent.events import EventBus  # noqa: E402
from specdoctor.agent.launcher import SimulatedLauncher  # noqa: E402
from specdoctor.agent.loop import Loop  # noqa: E402
from specdoctor.agent.planner import Planned  # noqa: E402
from specdoctor.agent.policy import Backoff, Budget, LoopSettings  # noqa: E402
from specdoctor.agent.watch import StageDeadlines, WatchSettings  # noqa: E402
from specdoctor.playbooks.decision import Retry  # noqa: E402
from specdoctor.tools.catalog_load import bundled  # noqa: E402
from specdoctor.tools.command import LaunchCommand  # noqa: E402
from specdoctor.tools.edit_policy import Allowance  # noqa: E402
from specdoctor.tools.system import find_free_port  # noqa: E402

MODELS = ROOT / "agent" / "data" / "demo"


class BlindRestart:
    """What a supervisor without diagnosis does: relaunch the same command."""

    name = "blind"

    def plan(self, ctx) -> Planned:
        return Planned(decision=Retry(category="other", summary="restart", evidence=()), planner=self.name)


def command(faults: int, port: int) -> str:
    algo = "EAGLE" if faults >= 2 else "EAGLE3"
    tokens = (
        "--num-speculative-tokens 16"
        if faults >= 3
        else "--speculative-num-steps 3 --speculative-num-draft-tokens 4"
    )
    return (
        f"python -m sglang.launch_server --model-path {MODELS / 'Kimi-K2.5'} --tp-size 8 --trust-remote-code "
        f"--speculative-algorithm {algo} --speculative-draft-model-path {MODELS / 'kimi-k2.5-eagle3'} "
        f"--speculative-eagle-topk 1 {tokens} --mem-fraction-static 0.97 --port {port}"
    )


def run(faults: int, speed: float, planner, preflight: bool) -> tuple[str, int, float, list[float]]:
    with socket.socket() as squatter, tempfile.TemporaryDirectory() as tmp:
        port = find_free_port(38000)
        if faults >= 4:
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            squatter.bind(("127.0.0.1", port))
            squatter.listen()
        settings = LoopSettings(
            log_dir=Path(tmp),
            preflight=preflight,
            watch=WatchSettings(deadlines=StageDeadlines().scaled(max(speed, 0.05)), spec_probes=2),
            backoff=Backoff(initial_s=10 * speed, max_s=300 * speed, max_restarts=5),
            budget=Budget(max_launches=6, wall_time_s=600),
        )
        loop = Loop(
            LaunchCommand.parse(command(faults, port)),
            bundled(),
            SimulatedLauncher("h200x8", speed=speed),
            planner,
            # The faults include a port another server holds: the bench lets both strategies move it.
            PolicyApprover(0.5, Allowance(flags=frozenset({"--port"}))),
            EventBus([]),
            settings,
        )
        started = time.monotonic()
        result = loop.run()
        latencies = [a.decided_in_s for a in result.attempts if a.decided_in_s is not None]
        return result.kind, len(result.attempts), time.monotonic() - started, latencies


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--speed", type=float, default=0.05)
    speed = ap.parse_args().speed
    print(f"simulated node h200x8, time scale {speed} (a real node takes ~1/{speed:g} as long per launch)\n")
    print(f"{'faults':>6} | {'specdoctor':>22} | {'preflight off':>22} | {'blind restart':>22}")
    latencies: list[float] = []
    for faults in (1, 2, 3, 4):
        cells = []
        for planner, preflight in (
            (default_planner(), True),
            (default_planner(), False),
            (BlindRestart(), False),
        ):
            kind, launches, wall, lat = run(faults, speed, planner, preflight)
            latencies += lat if not isinstance(planner, BlindRestart) else []
            cells.append(f"{kind:>8} {launches} launch {wall:5.1f}s")
        print(f"{faults:>6} | " + " | ".join(f"{c:>22}" for c in cells))
    print(
        f"\ncrash → decision latency over {len(latencies)} decisions: median {statistics.median(latencies) * 1000:.1f} ms, "
        f"max {max(latencies) * 1000:.1f} ms (goal <= 100 ms); each: {sorted(round(x * 1000) for x in latencies)}"
    )


if __name__ == "__main__":
    main()
