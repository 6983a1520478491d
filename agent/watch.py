"""Watch one launch until it is healthy, dead, stuck, or serving badly, and say which (an Outcome).

A crash is noticed the moment the process ends (or prints a line after which SGLang hangs), not after a
health timeout; a hang is a stage that stops printing for longer than that stage may take. "Healthy" needs
the server that answers to be ours: the port's listening socket held by our engine's processes (where the
host cannot say, our own log's bind line), and our log never saying the port was taken; another server on
the same port answers `/health` too. Then a real generation, and for speculative launches a measured accept
length, judged against the algorithm's level in the SGLang facts table: `working`, `low` (kept and
reported), none accepted (`degraded`), or `unmeasured` (never called working).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from specdoctor.agent.launcher import Engine
from specdoctor.tools.engines import SGLANG
from specdoctor.tools.health import (
    GenerateCheck,
    HealthError,
    HealthPolicy,
    SpecVerdict,
    accept_length,
    check_chat,
    check_generate,
    judge_speculation,
    metrics_accept_length,
    probe_ready,
)
from specdoctor.tools.log_stages import StageChange, StageTracker
from specdoctor.tools.outcome import AcceptanceVerdict, Outcome, OutcomeKind, Ownership
from specdoctor.tools.port_owner import PortOwner, port_owner
from specdoctor.tools.sglang_facts import Acceptance, facts_for

_STAGE_IDS = [stage.id for stage in SGLANG.stages]
_BOUND_STAGES = frozenset(_STAGE_IDS[_STAGE_IDS.index("http") :])
"""Stages reached only after uvicorn printed `Uvicorn running on`, which it does once its bind succeeded."""


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


class Server(BaseModel):
    """The server a launch should bring up: where it answers, and what "working" means for it."""

    model_config = ConfigDict(frozen=True)
    url: str
    host: str = Field(description="The address clients connect to (a wildcard bind is reached on loopback).")
    port: int
    speculative: str | None = Field(None, description="--speculative-algorithm as SGLang resolves it.")
    metrics: bool = Field(False, description="--enable-metrics: /metrics reports sglang:spec_accept_length.")
    embedding: bool = Field(False, description="--is-embedding: the server embeds; it has no chat to check.")
    api_key: SecretStr | None = Field(
        None, description="--api-key: generation and info routes answer only with it (health stays open)."
    )
    acceptance: Acceptance = Field(
        default_factory=lambda: facts_for().acceptance, description="Accept-length levels per algorithm."
    )
    contained: bool = Field(
        False,
        description="The engine runs in a container: its port is held by the container's runtime (docker-proxy, "
        "a process of the container), never by a process of ours, so our log's bind line decides.",
    )


def watch(
    engine: Engine,
    server: Server,
    settings: WatchSettings,
    *,
    on_stage: Callable[[StageChange], None] = lambda change: None,
    deadline_at: float | None = None,
) -> Outcome:
    """Block until the launch's fate is known. `deadline_at` (monotonic) is the run's wall budget."""
    return _Watch(engine, server, settings, on_stage, deadline_at).run()


class _Watch:
    def __init__(
        self,
        engine: Engine,
        server: Server,
        settings: WatchSettings,
        on_stage: Callable[[StageChange], None],
        deadline_at: float | None,
    ) -> None:
        self.engine, self.server, self.settings = engine, server, settings
        self.on_stage, self.deadline_at = on_stage, deadline_at
        self.tracker = StageTracker()
        self.lines: queue.Queue[str] = queue.Queue()
        self.started = self.next_probe = time.monotonic()
        self.ready_line_seen = False
        self.foreign: PortOwner | None = None
        """The last answer on our port that came from another process."""
        self.unknown_owner: str | None = None
        """Why the port's owner could not be read, when it could not."""
        self._key = server.api_key.get_secret_value() if server.api_key else None

    def run(self) -> Outcome:
        unsubscribe = self.engine.subscribe(self.lines.put, replay=True)
        try:
            while (outcome := self._step(time.monotonic())) is None:
                time.sleep(self.settings.poll_s)
            return outcome
        finally:
            unsubscribe()

    def _step(self, now: float) -> Outcome | None:
        self._drain()
        code = self.engine.poll()
        if code is not None:
            self._drain()
            return _ended(self.tracker, code, now - self.started, self.engine)
        if self.tracker.fatal_line:
            return self._fatal(now)
        if self._answers(now) and (ownership := self._ownership()) is not None:
            outcome = self._judge(now - self.started, ownership)
            self._drain()
            # Our log saying the port was taken outweighs any answer: that answer was not ours.
            return self._fatal(now) if self.tracker.fatal_line else outcome
        return self._overdue(now)

    def _drain(self) -> None:
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return
            change = self.tracker.feed(line)
            if change is not None:
                self.on_stage(change)

    def _answers(self, now: float) -> bool:
        """Whether a server says it is ready on our URL: at once when our log says so, else /health, asked
        at most every `health_poll_s`."""
        if self.tracker.ready and not self.ready_line_seen:
            self.ready_line_seen, self.next_probe = True, now
        if now < self.next_probe:
            return False
        self.next_probe = now + self.settings.health_poll_s
        return self.tracker.ready or probe_ready(self.server.url, timeout=2.0).state == "ready"

    def _ownership(self) -> Ownership | None:
        """How the answering server is known to be ours, or None (remembered for the outcome) if it is not."""
        pids = [self.engine.pid, *(p.pid for p in self.engine.processes())]
        owner = port_owner(self.server.host, self.server.port, pids)
        if owner.state == "ours":
            return "process"
        if owner.state == "unknown" or self.server.contained:
            self.unknown_owner = (
                f"the engine runs in a container ({owner.detail})" if self.server.contained else owner.detail
            )
            return "log" if self.tracker.stage in _BOUND_STAGES else None
        self.foreign = owner
        return None

    def _fatal(self, now: float) -> Outcome:
        detail = f"SGLang printed a fatal line and will not recover: {self.tracker.fatal_line}"
        if self.foreign is not None:
            detail += f"; what answered on {self.server.url} was another server ({self.foreign.detail})"
        return _outcome(self.tracker, "hung", detail, now - self.started, self.engine)

    def _overdue(self, now: float) -> Outcome | None:
        quiet = self.tracker.seconds_since_progress(now)
        limit = self.settings.deadlines.for_stage(self.tracker.stage)
        if quiet > limit:
            detail = (
                f"no progress for {quiet:.0f} s in stage `{self.tracker.stage_label}` (limit {limit:.0f} s)"
            )
        elif self.deadline_at is not None and now > self.deadline_at:
            detail = "the run's wall-time budget ran out during startup"
        else:
            return None
        if self.foreign is not None:
            detail += f"; meanwhile another server answered on {self.server.url} ({self.foreign.detail})"
        return _outcome(self.tracker, "hung", detail, now - self.started, self.engine)

    def _judge(self, elapsed: float, ownership: Ownership) -> Outcome:
        """Ready, and ours; now prove it: a real generation, and for speculation a real accept length."""
        algorithm = self.server.speculative
        tokens = self.settings.health.generation_tokens
        check = check_generate(
            self.server.url, speculative=algorithm is not None, max_new_tokens=tokens, api_key=self._key
        )
        tracker, engine = self.tracker, self.engine
        if not check.ok:
            if (code := engine.poll()) is not None:
                return _ended(tracker, code, elapsed, engine)
            detail = f"ready, but generation fails: {check.message}"
            return _outcome(tracker, "unhealthy", detail, elapsed, engine, ownership=ownership)
        if (chat := self._chat_fails()) is not None:
            if (code := engine.poll()) is not None:
                return _ended(tracker, code, elapsed, engine)
            detail = f"ready and generating, but chat requests fail: {chat}"
            return _outcome(tracker, "unhealthy", detail, elapsed, engine, ownership=ownership)
        note = self._ownership_note(ownership)
        if algorithm is None:
            detail = f"ready and generating ({check.message}){note}"
            return _outcome(tracker, "healthy", detail, elapsed, engine, ownership=ownership)
        verdict = judge_speculation(self._accept_samples(check), algorithm, self.server.acceptance)
        kind, acceptance, detail = _spec_verdict(verdict, self.server)
        return _outcome(
            tracker,
            kind,
            detail + note,
            elapsed,
            engine,
            ownership=ownership,
            acceptance=acceptance,
            accept_length=verdict.accept_length,
        )

    def _chat_fails(self) -> str | None:
        """Why a chat request fails on a server that generates (None when it answers, or is not asked:
        the policy turns it off, or the server embeds rather than generates)."""
        if not self.settings.health.chat or self.server.embedding:
            return None
        chat = check_chat(self.server.url, api_key=self._key)
        return None if chat.ok else chat.message

    def _ownership_note(self, ownership: Ownership) -> str:
        if ownership == "process":
            return ""
        return f" [port owner not checked: {self.unknown_owner}; trusted our log's bind line]"

    def _accept_samples(self, first: GenerateCheck) -> list[float]:
        """Accept lengths: per request first, then the server's averages (/server_info, /metrics), then
        the log's decode lines; whichever answers first."""
        url, tokens = self.server.url, self.settings.health.generation_tokens
        samples = [first.spec_accept_length] if first.spec_accept_length is not None else []
        for _ in range(self.settings.spec_probes - 1):
            more = check_generate(url, speculative=True, max_new_tokens=tokens, api_key=self._key)
            if more.ok and more.spec_accept_length is not None:
                samples.append(more.spec_accept_length)
        sources = [accept_length, *([metrics_accept_length] if self.server.metrics else [])]
        for source in sources:
            if samples:
                break
            try:
                value = source(url, api_key=self._key)
            except HealthError:
                value = None
            samples = [value] if value is not None else []
        if not samples and self.tracker.accept_length is not None:
            samples = [self.tracker.accept_length]
        return samples


def _spec_verdict(verdict: SpecVerdict, server: Server) -> tuple[OutcomeKind, AcceptanceVerdict, str]:
    """(outcome kind, acceptance, detail) of a generating speculative server."""
    if verdict.status == "degraded":
        return "degraded", "none", verdict.message
    if verdict.status == "low":
        return "healthy", "low", f"ready and generating; {verdict.message}"
    if verdict.status == "working":
        return "healthy", "working", verdict.message
    where = (
        "/generate, /server_info, /metrics or the log"
        if server.metrics
        else "/generate, /server_info or the log"
    )
    hint = (
        ""
        if server.metrics
        else "; launch with --enable-metrics so /metrics reports sglang:spec_accept_length"
    )
    return (
        "healthy",
        "unmeasured",
        f"ready and generating, but {server.speculative} acceptance is unmeasured: no accept length in {where}"
        f" (is speculative decoding on?){hint}",
    )


def _outcome(tracker: StageTracker, kind, detail: str, elapsed: float, engine: Engine, **extra) -> Outcome:
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


def _ended(tracker: StageTracker, code: int, elapsed: float, engine: Engine) -> Outcome:
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
