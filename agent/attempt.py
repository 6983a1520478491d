"""One launch: start the engine, watch it to its outcome, and tell the sinks each step."""

from __future__ import annotations

import time

from specdoctor.agent.events import EventBus, HealthEvent, LaunchEvent, OutcomeEvent, StageEvent
from specdoctor.agent.launcher import Engine, Launcher
from specdoctor.agent.policy import LoopSettings
from specdoctor.agent.results import Attempt, Stopped
from specdoctor.agent.spending import Spending
from specdoctor.agent.watch import Server, watch
from specdoctor.playbooks.view import CommandView
from specdoctor.tools.command import LaunchCommand
from specdoctor.tools.outcome import Outcome
from specdoctor.tools.process import EngineStartError


def start(
    launcher: Launcher, command: LaunchCommand, attempt: Attempt, settings: LoopSettings, bus: EventBus
) -> Engine:
    """The engine for this attempt, its log in the run folder; raises Stopped when it cannot start."""
    log_path = settings.log_dir / f"attempt-{attempt.number}.log"
    try:
        engine = launcher.start(command, log_path, to_file=settings.when_healthy == "detach")
    except EngineStartError as exc:
        raise Stopped(f"cannot start the engine: {exc}", command) from None
    bus.emit(LaunchEvent.for_spec(command, attempt=attempt.number, log_path=str(log_path), pid=engine.pid))
    return engine


def watch_attempt(
    engine: Engine,
    view: CommandView,
    attempt: Attempt,
    settings: LoopSettings,
    bus: EventBus,
    spending: Spending,
) -> Outcome:
    """Block until the launch is healthy, dead, stuck or serving badly; record it on `attempt`."""
    started = time.monotonic()
    outcome = watch(
        engine,
        server_for(view),
        settings.watch,
        on_stage=lambda c: bus.emit(
            StageEvent(attempt=attempt.number, stage=c.stage, label=c.label, line=c.line)
        ),
        deadline_at=spending.deadline,
    )
    spending.launched(time.monotonic() - started, view.world)
    attempt.outcome = outcome
    bus.emit(OutcomeEvent(attempt=attempt.number, outcome=outcome))
    if outcome.kind in ("healthy", "degraded"):
        bus.emit(
            HealthEvent(
                attempt=attempt.number,
                probe="generation",
                ok=outcome.kind == "healthy",
                detail=outcome.detail,
                accept_length=outcome.accept_length,
            )
        )
    return outcome


def base_url(view: CommandView) -> str:
    host, port = _client_address(view)
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal needs brackets in a URL
    return f"http://{host}:{port}"


def server_for(view: CommandView) -> Server:
    """What the watcher must find: our server at the command's address, judged by its engine's facts."""
    host, port = _client_address(view)
    return Server(
        url=base_url(view),
        host=host,
        port=port,
        speculative=view.algorithm,
        metrics=view.has("--enable-metrics"),
        embedding=view.has("--is-embedding"),
        api_key=view.get("--api-key"),
        acceptance=view.facts.acceptance,
        contained=view.spec.container is not None,
    )


def _client_address(view: CommandView) -> tuple[str, int]:
    """Where a client reaches the server: the command's address, or for a container on a bridge network
    the host port published to the engine's port (`-p 8000:30000` → 127.0.0.1:8000)."""
    port = view.int("--port") or 30000
    box = view.spec.container
    reach = box.reach(port) if box is not None else None
    return reach if reach is not None else (_client_host(view), port)


def _client_host(view: CommandView) -> str:
    """The address a client of this server connects to: a wildcard bind is reached on loopback."""
    host = (view.get("--host") or "127.0.0.1").strip("[]")
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    return "::1" if host == "::" else host
