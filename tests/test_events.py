"""Events and the bus: stamping, failing sinks, and every event type surviving a JSON round trip."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest

from specdoctor.agent.events import (
    EVENT_TYPE_NAMES,
    TOOL_TEXT_LIMIT,
    ApprovalEvent,
    BudgetEvent,
    DecisionEvent,
    DetachEvent,
    EditEvent,
    EnvFingerprint,
    Event,
    EventBus,
    EvidenceEvent,
    HealthEvent,
    LaunchEvent,
    OutcomeEvent,
    PreflightEvent,
    RunStartEvent,
    StageEvent,
    StopEvent,
    SuperviseEvent,
    ToolCallEvent,
    ToolResultEvent,
    bounded,
    event_adapter,
    redacted_event,
)
from specdoctor.playbooks.decision import Finding, Fix
from specdoctor.tools.command import LaunchCommand, RenameFlag, SetEnv, SetFlag
from specdoctor.tools.detached import DetachedServer
from specdoctor.tools.gpu import parse_gpus_description
from specdoctor.tools.logs import extract_root_cause
from specdoctor.tools.outcome import Outcome
from specdoctor.tools.system import ModelFacts

DATA = Path(__file__).parent / "data"

# Secrets planted in a run; none may reach a transcript or a report.
API_KEY = "sk-proj-4fJ9q2LmX8vT1rZa"
HF_TOKEN = "hf_QmT7aZ3kLp9XwV2rB8nC"
BEARER = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0"
SECRETS = (API_KEY, HF_TOKEN, BEARER)

SEED = (
    f"HF_TOKEN={HF_TOKEN} python -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp 8 "
    "--trust-remote-code --speculative-algorithm EAGLE "
    "--speculative-draft-model-path lightseekorg/kimi-k2.5-eagle3 --num-speculative-tokens 16 "
    f"--api-key {API_KEY}"
)


def _log_line(name: str, needle: str) -> str:
    """A line of a real SGLang 0.5.23 output."""
    for line in (DATA / "sglang-outputs" / name).read_text().splitlines():
        if needle in line:
            return line
    raise AssertionError(f"{needle!r} is not in {name}")


def whole_run() -> list[Event]:
    """The story specdoctor automates: a misspelt flag fixed in preflight, then EAGLE on an EAGLE-3 draft
    (healthy but accept length 1.0) fixed by the planner, then a healthy server, supervised and (to cover
    every event type) then left running as `deploy --detach` leaves it."""
    seed = LaunchCommand.parse(SEED)
    rename = RenameFlag(flag="--num-speculative-tokens", to="--speculative-num-draft-tokens")
    first = seed.apply(rename)
    eagle3 = SetFlag(flag="--speculative-algorithm", values=("EAGLE3",))
    second = first.apply(eagle3)
    unknown = Finding(
        code="unknown-flag",
        severity="error",
        category="flag-name",
        message="--num-speculative-tokens is not an SGLang flag: SGLang spells it --speculative-num-draft-tokens",
        flag="--num-speculative-tokens",
        evidence=(_log_line("wrong-flag-num-speculative-tokens.rc2.txt", "unrecognized arguments"),),
        edits=(rename,),
        why="--help lists --speculative-num-draft-tokens for the number of draft tokens",
    )
    mismatch = Fix(
        category="spec-draft-mismatch",
        summary="The draft is an EAGLE-3 model (LlamaForCausalLMEagle3) but the algorithm is EAGLE: "
        "every draft token is rejected.",
        evidence=("accept_len: 1.00", "architectures: ['LlamaForCausalLMEagle3']"),
        playbook="speculative.eagle3-draft-with-eagle",
        confidence=0.95,
        edits=(eagle3,),
        why="EAGLE3 captures the auxiliary hidden states the EAGLE-3 draft's fc layer reads",
    )
    log = "/var/log/specdoctor/attempt-{}.log"
    weights = _log_line("serve-module.log", "Load weight begin")
    kv = _log_line("serve-module.log", "KV Cache is allocated")
    ready = _log_line("serve-module.log", "fired up and ready")
    return [
        RunStartEvent.for_spec(
            seed,
            mode="deploy",
            engine_version="0.5.23",
            catalog_note="parsed from `python -m sglang.launch_server --help` (SGLang 0.5.23)",
            catalog_hash="3f2a9c1d0b7e",
            gpu_summary="8x NVIDIA H200 (143771 MiB)",
            gpu_count=8,
            policy={"yes": True, "allow_kill": False, "max_launches": 5, "max_wall_s": 3600.0},
        ),
        PreflightEvent(findings=(unknown,), corrected_command=first.shell(), elapsed_ms=41.7),
        DecisionEvent(
            attempt=0,
            planner="preflight",
            decision=Fix(
                category="flag-name",
                summary=unknown.message,
                evidence=unknown.evidence,
                playbook="preflight.unknown-flag",
                edits=(rename,),
            ),
        ),
        ApprovalEvent(attempt=0, approved=True, by="policy", note="--yes"),
        EditEvent(attempt=0, edits=(rename,), old_command=seed.shell(), new_command=first.shell()),
        LaunchEvent.for_spec(first, attempt=1, log_path=log.format(1), pid=48213),
        StageEvent(attempt=1, stage="weights", label="loading weights", line=weights),
        StageEvent(attempt=1, stage="kv_cache", label="allocating KV cache", line=kv),
        StageEvent(
            attempt=1,
            stage="http",
            label="HTTP server up",
            line=f'[2026-12-03 08:22:36] INFO: 127.0.0.1:41036 - "GET /v1/models HTTP/1.1" 200 OK '
            f"Authorization: Bearer {BEARER}",
        ),
        StageEvent(attempt=1, stage="ready", label="ready", line=ready),
        HealthEvent(attempt=1, probe="health_generate", ok=True, detail="200 OK in 0.41 s"),
        HealthEvent(
            attempt=1,
            probe="accept_length",
            ok=False,
            detail="mean accept length 1.00 over 64 tokens (expected > 2.0 for EAGLE3 with 16 draft tokens)",
            accept_length=1.0,
        ),
        OutcomeEvent(
            attempt=1,
            outcome=Outcome(
                kind="degraded",
                detail="speculative accept length is 1.00: the drafter never helps",
                stage="ready",
                ready_seen=True,
                accept_length=1.0,
                elapsed_s=312.4,
                log_path=log.format(1),
            ),
        ),
        ToolCallEvent(
            attempt=1,
            call_id="call_1",
            name="model_config",
            arguments={"path": "lightseekorg/kimi-k2.5-eagle3", "hf_token": HF_TOKEN},
        ),
        ToolResultEvent(
            attempt=1,
            call_id="call_1",
            name="model_config",
            arguments={"path": "lightseekorg/kimi-k2.5-eagle3"},
            status="ok",
            summary="architectures: ['LlamaForCausalLMEagle3']",
            text='{"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1, '
            f'"hidden_size": 7168}}\nfetched with HF_TOKEN={HF_TOKEN}',
        ),
        EvidenceEvent(
            attempt=1,
            root_cause=extract_root_cause(
                [ready, "[2026-12-03 08:27:01] Decode batch, #running-req: 1, accept len: 1.00"]
            ),
            log_text=f"{ready}\nDecode batch, #running-req: 1, accept len: 1.00 (token hf_{'x' * 30})",
            gpus=parse_gpus_description("8x H200"),
            draft=ModelFacts(
                path="/models/kimi-k2.5-eagle3",
                local=True,
                exists=True,
                has_config=True,
                architectures=("LlamaForCausalLMEagle3",),
            ),
        ),
        DecisionEvent(
            attempt=1,
            planner="playbooks",
            decision=mismatch,
            prompt_tokens=1834,
            completion_tokens=212,
        ),
        ApprovalEvent(attempt=1, approved=True, by="user", note="accepted in the diff view"),
        EditEvent(attempt=1, edits=(eagle3,), old_command=first.shell(), new_command=second.shell()),
        BudgetEvent(
            launches_used=1,
            launches_left=4,
            wall_s_used=331.0,
            wall_s_left=3269.0,
            tokens_used=2046,
            tokens_left=97954,
        ),
        LaunchEvent.for_spec(second, attempt=2, log_path=log.format(2), pid=49120),
        StageEvent(attempt=2, stage="weights", label="loading weights", line=weights),
        StageEvent(attempt=2, stage="ready", label="ready", line=ready),
        HealthEvent(
            attempt=2, probe="accept_length", ok=True, detail="3.41 over 64 tokens", accept_length=3.41
        ),
        OutcomeEvent(
            attempt=2,
            outcome=Outcome(
                kind="healthy", stage="ready", ready_seen=True, accept_length=3.41, elapsed_s=298.0
            ),
        ),
        SuperviseEvent(attempt=2, url="http://127.0.0.1:30000", pid=49120, command=second.shell()),
        DetachEvent(
            attempt=2,
            server=DetachedServer(
                pid=49120,
                pgid=49120,
                start_time=8812345,
                engine_id="525720a5f96a4d56b6ef9387fe869860",
                url="http://127.0.0.1:30000",
                log_path=log.format(2),
                command=second.shell(),
            ),
        ),
        StopEvent(
            result="healthy",
            message="the server is healthy and speculative decoding works (accept length 3.41)",
            final_command=second.shell(),
            exit_code=0,
        ),
    ]


class FakeClock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.closed = 0

    def handle(self, event: Event) -> None:
        self.events.append(event)

    def close(self) -> None:
        self.closed += 1


class Exploding(Recorder):
    """A sink whose disk fills up on its second event."""

    def handle(self, event: Event) -> None:
        super().handle(event)
        if len(self.events) == 2:
            raise OSError(28, "No space left on device")


def test_bus_stamps_seq_time_and_elapsed():
    wall, mono = FakeClock(1_760_000_000.0), FakeClock(500.0)
    sink = Recorder()
    bus = EventBus([sink], wall=wall, clock=mono)
    events = whole_run()[:3]
    stamped = []
    for i, event in enumerate(events):
        mono.now = 500.0 + 1.5 * i
        wall.now = 1_760_000_000.0 + 1.5 * i
        stamped.append(bus.emit(event))
    assert [e.seq for e in sink.events] == [1, 2, 3]
    assert [e.elapsed_s for e in sink.events] == [0.0, 1.5, 3.0]
    assert [e.t for e in sink.events] == [1_760_000_000.0, 1_760_000_001.5, 1_760_000_003.0]
    assert stamped == sink.events
    # Events are values: the one passed in is not changed, the stamped copy is otherwise the same.
    assert events[0].seq == 0
    assert stamped[0].model_copy(update={"seq": 0, "t": 0.0, "elapsed_s": 0.0}) == events[0]


def test_raising_sink_is_detached_reported_once_and_others_keep_receiving():
    err = io.StringIO()
    good, bad = Recorder(), Exploding()
    bus = EventBus([bad, good], stderr=err)
    run = whole_run()
    for event in run:
        bus.emit(event)
    assert len(good.events) == len(run)
    assert [e.seq for e in good.events] == list(range(1, len(run) + 1))
    assert len(bad.events) == 2, "a detached sink gets nothing more"
    assert bad.closed == 1, "a detached sink is closed so it can release its file"
    assert bus.sinks == (good,)
    lines = err.getvalue().splitlines()
    assert len(lines) == 1
    assert "Exploding" in lines[0] and "No space left on device" in lines[0]
    assert "goes on" in lines[0]
    bus.close()
    assert good.closed == 1 and bad.closed == 1


def test_close_reaches_every_sink_even_when_one_fails_to_close():
    class BadClose(Recorder):
        def close(self) -> None:
            raise RuntimeError("terminal gone")

    err = io.StringIO()
    first, last = BadClose(), Recorder()
    with EventBus([first, last], stderr=err) as bus:
        bus.emit(whole_run()[0])
    assert last.closed == 1
    assert "BadClose failed to close (terminal gone)" in err.getvalue()


def test_seq_is_contiguous_and_ordered_when_threads_emit_together():
    sink = Recorder()
    bus = EventBus([sink])
    stage = StageEvent(attempt=1, stage="weights", label="loading weights", line="Load weight begin.")

    def emit_many() -> None:
        for _ in range(200):
            bus.emit(stage)

    threads = [threading.Thread(target=emit_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [e.seq for e in sink.events] == list(range(1, 801))
    elapsed = [e.elapsed_s for e in sink.events]
    assert elapsed == sorted(elapsed)


def test_whole_run_covers_every_event_type():
    assert {e.type for e in whole_run()} == EVENT_TYPE_NAMES


@pytest.mark.parametrize("event", whole_run(), ids=lambda e: e.type)
def test_every_event_round_trips_through_json(event):
    stamped = EventBus().emit(event)
    text = stamped.model_dump_json()
    assert type(stamped).model_validate_json(text) == stamped
    # Through the discriminated union, as a reader sees it: the `type` field picks the class.
    back = event_adapter().validate_json(text)
    assert type(back) is type(stamped)
    assert back == stamped


def test_decision_keeps_its_edits_typed_after_a_round_trip():
    decision = next(e for e in whole_run() if isinstance(e, DecisionEvent) and e.attempt == 1)
    back = event_adapter().validate_json(decision.model_dump_json())
    assert isinstance(back, DecisionEvent) and isinstance(back.decision, Fix)
    assert back.decision.edits == (SetFlag(flag="--speculative-algorithm", values=("EAGLE3",)),)
    assert back.tokens == 2046


def test_run_start_carries_the_command_and_a_fingerprint_without_the_hostname():
    import socket

    start = whole_run()[0]
    assert isinstance(start, RunStartEvent)
    assert start.argv[:3] == ("python", "-m", "sglang.launch_server")
    assert start.env == {"HF_TOKEN": HF_TOKEN}
    assert LaunchCommand.parse(start.command) == LaunchCommand.parse(SEED)
    fp = start.fingerprint
    assert fp == EnvFingerprint.current()
    assert len(fp.host_hash) == 12 and socket.gethostname() not in fp.model_dump_json()


def test_tool_text_is_bounded_and_stays_the_same_when_read_back():
    log = (DATA / "sglang-outputs" / "serve-module.log").read_text()
    assert len(log) > TOOL_TEXT_LIMIT
    result = ToolResultEvent(name="log_excerpt", status="ok", summary="server_args and stages", text=log)
    assert len(result.text) == TOOL_TEXT_LIMIT
    assert result.text.startswith(log[:100])
    assert "more chars cut]" in result.text
    assert ToolResultEvent.model_validate_json(result.model_dump_json()) == result
    assert bounded(result.text, TOOL_TEXT_LIMIT) == result.text


def test_redaction_masks_secrets_only_the_shape_reveals():
    plain = "hunter2hunter2"
    launch = LaunchEvent(
        attempt=1,
        command=f"python -m sglang.launch_server --model-path /models/tiny --api-key {plain}",
        argv=("python", "-m", "sglang.launch_server", "--model-path", "/models/tiny", "--api-key", plain),
    )
    edit = EditEvent(
        attempt=1,
        edits=(SetFlag(flag="--api-key", values=(plain,)), SetEnv(name="HF_TOKEN", value=plain)),
        old_command="python -m sglang.launch_server --model-path /models/tiny",
        new_command=f"HF_TOKEN={plain} python -m sglang.launch_server --model-path /models/tiny --api-key {plain}",
    )
    for event in (launch, edit):
        data = redacted_event(event)
        assert plain not in str(data)
        assert type(event).model_validate(data).type == event.type, "redacted data is still a valid event"
    assert redacted_event(launch)["argv"][-2:] == ["--api-key", "***"]
    assert redacted_event(edit)["edits"][1] == {"op": "set_env", "name": "HF_TOKEN", "value": "***"}
    # Not secrets: left as they are.
    assert redacted_event(launch)["argv"][4] == "/models/tiny"
