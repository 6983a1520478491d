"""Watch one launch until it is healthy, dead, stuck, or serving badly, and say which (an Outcome).

A crash is noticed the moment the process ends (or prints a line after which SGLang hangs), not after a
health timeout; a hang is a stage that stops printing for longer than that stage may take; "healthy"
needs a real generation, and for speculative launches an accept length clearly above 1.0.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.health import (
    HealthPolicy,
    accept_length,
    check_generate,
    judge_speculation,
    probe_ready,
)
from specdoctor.tools.log_stages import StageChange, StageTracker
from specdoctor.tools.outcome import Outcome
from specdoctor.tools.process import EngineProcess


class StageDeadlines(BaseModel):
    """Seconds a stage may go without printing anything before the launch counts as hung."""

    model_config = ConfigDict(frozen=True)
    default_s: float = Field(600.0, gt=0, description="Any stage not listed below.")
    launch_s: float = Field(300.0, gt=0, description="From start to the first log line (imports).")
    weights_s: float = Field(
        3600.0, gt=0, description="Loading weights: big checkpoints print little for a long time."
    )
    cuda_graph_s: float = Field(1800.0, gt=0, description="Capturing CUDA graphs.")
    ready_s: float = Field(900.0, gt=0, description="From `Uvicorn running` to ready (warm-up requests).")

    def for_stage(self, stage: str) -> float:
        return {
            "launch": self.launch_s,
            "weights": self.weights_s,
            "weights_done": self.weights_s,
            "cuda_graph": self.cuda_graph_s,
            "http": self.ready_s,
            "warmup": self.ready_s,
        }.get(stage, self.default_s)

    def scaled(self, factor: float) -> StageDeadlines:
        return StageDeadlines(**{k: v * factor for k, v in self.model_dump().items()})


class WatchSettings(BaseModel):
    model_config = ConfigDict(frozen=True)
    poll_s: float = Field(0.1, gt=0, description="How often the watcher looks at the process and its log.")
    health_poll_s: float = Field(1.0, gt=0, description="How often /health is asked before the ready line.")
    deadlines: StageDeadlines = StageDeadlines()
    health: HealthPolicy = HealthPolicy()
    spec_probes: int = Field(3, ge=1, description="Generations used to measure the accept length.")


def watch(
    engine: EngineProcess,
    base_url: str,
    settings: WatchSettings,
    *,
    speculative: str | None,
    on_stage: Callable[[StageChange], None] = lambda change: None,
    deadline_at: float | None = None,
) -> Outcome:
    """Block until the launch's fate is known. `deadline_at` (monotonic) is the run's wall budget."""
    lines: queue.Queue[str] = queue.Queue()
    unsubscribe = engine.subscribe(lines.put, replay=True)
    tracker = StageTracker()
    started = time.monotonic()
    next_probe = started
    try:
        while True:
            now = time.monotonic()
            _drain(lines, tracker, on_stage)
            code = engine.poll()
            if code is not None:
                _drain(lines, tracker, on_stage)
                return _ended(tracker, code, now - started, engine)
            if tracker.fatal_line:
                return _outcome(
                    tracker,
                    "hung",
                    f"SGLang printed a fatal line and will not recover: {tracker.fatal_line}",
                    now - started,
                    engine,
                )
            if tracker.ready or (now >= next_probe and probe_ready(base_url, timeout=2.0).state == "ready"):
                return _judge(engine, tracker, base_url, settings, speculative, now - started)
            next_probe = now + settings.health_poll_s if now >= next_probe else next_probe
            quiet = tracker.seconds_since_progress(now)
            limit = settings.deadlines.for_stage(tracker.stage)
            if quiet > limit:
                return _outcome(
                    tracker,
                    "hung",
                    f"no progress for {quiet:.0f} s in stage `{tracker.stage_label}` (limit {limit:.0f} s)",
                    now - started,
                    engine,
                )
            if deadline_at is not None and now > deadline_at:
                return _outcome(
                    tracker,
                    "hung",
                    "the run's wall-time budget ran out during startup",
                    now - started,
                    engine,
                )
            time.sleep(settings.poll_s)
    finally:
        unsubscribe()


def _drain(lines: queue.Queue[str], tracker: StageTracker, on_stage: Callable[[StageChange], None]) -> None:
    while True:
        try:
            line = lines.get_nowait()
        except queue.Empty:
            return
        change = tracker.feed(line)
        if change is not None:
            on_stage(change)


def _outcome(
    tracker: StageTracker, kind, detail: str, elapsed: float, engine: EngineProcess, **extra
) -> Outcome:
    return Outcome(
        kind=kind,
        detail=detail,
        stage=tracker.stage,
        ready_seen=tracker.ready,
        fatal_line=tracker.fatal_line,
        elapsed_s=round(elapsed, 3),
        log_path=str(engine.log_path),
        **extra,
    )


def _ended(tracker: StageTracker, code: int, elapsed: float, engine: EngineProcess) -> Outcome:
    how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    when = "after it was ready" if tracker.ready else f"during `{tracker.stage_label}`"
    return _outcome(
        tracker,
        "exited",
        f"the server exited ({how}) {when}",
        elapsed,
        engine,
        exit_code=code,
        parse_error=code == 2,
    )


def _judge(
    engine: EngineProcess,
    tracker: StageTracker,
    base_url: str,
    settings: WatchSettings,
    speculative: str | None,
    elapsed: float,
) -> Outcome:
    """Ready by its own account; now prove it: a real generation, and a real accept length."""
    check = check_generate(
        base_url, speculative=speculative is not None, max_new_tokens=settings.health.generation_tokens
    )
    if not check.ok:
        if engine.poll() is not None:
            return _ended(tracker, engine.poll() or 0, elapsed, engine)
        return _outcome(
            tracker, "unhealthy", f"ready, but generation fails: {check.message}", elapsed, engine
        )
    if speculative is None:
        return _outcome(tracker, "healthy", f"ready and generating ({check.message})", elapsed, engine)
    samples = [check.spec_accept_length] if check.spec_accept_length is not None else []
    for _ in range(settings.spec_probes - 1):
        more = check_generate(base_url, speculative=True, max_new_tokens=settings.health.generation_tokens)
        if more.ok and more.spec_accept_length is not None:
            samples.append(more.spec_accept_length)
    if not samples:
        try:
            server_side = accept_length(base_url)
        except Exception:
            server_side = None
        samples = [server_side] if server_side is not None else []
    if not samples and tracker.accept_length is not None:
        samples = [tracker.accept_length]
    verdict = judge_speculation(samples, speculative, expected_min=settings.health.min_accept_length)
    if verdict.status == "unknown":
        detail = f"ready and generating, but no accept length was reported for {speculative}: check that speculative decoding is on"
        return _outcome(tracker, "healthy", detail, elapsed, engine)
    kind = "degraded" if verdict.status == "degraded" else "healthy"
    return _outcome(tracker, kind, verdict.message, elapsed, engine, accept_length=verdict.accept_length)
