"""The transcript (written durably and redacted, read back strictly but tolerating a killed run's cut
last line) and the final report (derived from the same events, written atomically at any moment)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdoctor.agent.events import (
    EVENT_TYPES,
    DecisionEvent,
    Event,
    EventBus,
    OutcomeEvent,
    RunStartEvent,
    StageEvent,
    StopEvent,
    parse_event,
    redacted_event,
)
from specdoctor.agent.report import ReportBuilder, ReportError, RunReport
from specdoctor.agent.transcript import (
    SCHEMA,
    VERSION,
    Transcript,
    TranscriptError,
    TranscriptWriter,
    read_transcript,
)
from specdoctor.tools.command import SetFlag
from tests.test_events import API_KEY, BEARER, HF_TOKEN, SECRETS, whole_run

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"


def record(path: Path, events: list[Event] | None = None) -> list[Event]:
    """Run `events` (default: the whole story) through a bus into a transcript; the stamped events."""
    with EventBus([TranscriptWriter(path)]) as bus:
        return [bus.emit(e) for e in (whole_run() if events is None else events)]


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(exc.value)
    assert "\n" not in text and "Traceback" not in text
    return text


# ---- writing and reading a whole run -------------------------------------------------------------


def test_a_whole_run_reads_back_as_written_apart_from_redaction(tmp_path):
    path = tmp_path / "run.jsonl"
    emitted = record(path)
    transcript = read_transcript(path)

    assert transcript.header.schema_name == SCHEMA and transcript.header.version == VERSION
    assert not transcript.truncated and transcript.warnings == ()
    assert list(transcript.events) == [parse_event(redacted_event(e)) for e in emitted]
    # Events with nothing secret in them come back exactly.
    stages = [e for e in emitted if isinstance(e, StageEvent) and e.stage == "weights"]
    assert stages and all(s in transcript.events for s in stages)

    assert isinstance(transcript.run_start, RunStartEvent)
    assert transcript.run_start.gpu_count == 8
    assert isinstance(transcript.stop, StopEvent) and transcript.stop.result == "healthy"
    assert [o.outcome.kind for o in transcript.outcomes()] == ["degraded", "healthy"]
    assert [d.decision.category for d in transcript.decisions()] == ["flag-name", "spec-draft-mismatch"]

    attempts = transcript.attempts()
    assert [a.number for a in attempts] == [1, 2]
    first = attempts[0]
    assert first.launch is not None and first.launch.pid == 48213
    assert [s.stage for s in first.stages] == ["weights", "kv_cache", "http", "ready"]
    assert first.decision is not None and first.decision.decision.action == "fix"
    assert first.edit is not None
    assert first.edit.edits == (SetFlag(flag="--speculative-algorithm", values=("EAGLE3",)),)
    assert [h.accept_length for h in first.health] == [None, 1.0]
    assert attempts[1].outcome is not None and attempts[1].outcome.outcome.kind == "healthy"
    assert "--speculative-algorithm EAGLE3" in transcript.stop.final_command


def test_secrets_never_reach_the_file(tmp_path):
    path = tmp_path / "run.jsonl"
    emitted = record(path)
    raw = path.read_bytes()
    for secret in SECRETS:
        assert secret in "".join(e.model_dump_json() for e in emitted), "the run really carried it"
        assert secret.encode() not in raw
    transcript = read_transcript(path)
    start = transcript.run_start
    assert start is not None
    assert start.env == {"HF_TOKEN": "***"}
    assert start.argv[-2:] == ("--api-key", "***")
    assert "--api-key ***" in start.command and "HF_TOKEN=***" in start.command
    bearer = next(e for e in transcript.events if isinstance(e, StageEvent) and e.stage == "http")
    assert bearer.line.endswith("Authorization: Bearer ***")
    # Masked, not mangled: the rest of the command is intact.
    assert "--speculative-draft-model-path lightseekorg/kimi-k2.5-eagle3" in start.command


def test_every_line_is_json_and_the_file_is_owner_only(tmp_path):
    path = tmp_path / "run.jsonl"
    emitted = record(path)
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    assert header["type"] == "header" and header["schema"] == SCHEMA and header["version"] == 1
    assert header["created"].endswith("+00:00")
    assert [json.loads(line)["seq"] for line in lines[1:]] == [e.seq for e in emitted]
    assert path.stat().st_mode & 0o777 == 0o600


def test_writer_creates_missing_folders(tmp_path):
    path = tmp_path / "runs" / "2026-12-03" / "kimi.jsonl"
    record(path, whole_run()[:2])
    assert len(read_transcript(path).events) == 2


def test_unwritable_path_is_one_clear_line(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where a folder should be")
    with pytest.raises(TranscriptError) as exc:
        TranscriptWriter(blocker / "run.jsonl")
    assert "cannot write the transcript" in one_line(exc) and "writable path" in str(exc.value)


def test_a_write_cut_by_ctrl_c_does_not_corrupt_the_next_event(tmp_path, monkeypatch):
    """Ctrl-C between two partial writes leaves half a line; the next event must not be glued onto it."""
    path = tmp_path / "run.jsonl"
    run = whole_run()
    writer = TranscriptWriter(path)
    bus = EventBus()
    writer.handle(bus.emit(run[0]))

    real_write = os.write
    calls = []

    def half_then_interrupt(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise KeyboardInterrupt

    monkeypatch.setattr("specdoctor.agent.transcript.os.write", half_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        writer.handle(bus.emit(run[1]))
    monkeypatch.setattr("specdoctor.agent.transcript.os.write", real_write)
    assert not path.read_bytes().endswith(b"\n"), "half a line is on disk"

    stop = bus.emit(run[-1])
    writer.handle(stop)
    writer.close()
    transcript = read_transcript(path)
    assert not transcript.truncated
    assert [e.type for e in transcript.events] == ["run_start", "stop"]


# ---- kill -9 -------------------------------------------------------------------------------------

_CHILD = """
import sys
from specdoctor.agent.events import EventBus, StageEvent
from specdoctor.agent.transcript import TranscriptWriter

line = open(sys.argv[2]).read()[:3000]
bus = EventBus([TranscriptWriter(sys.argv[1])])
n = 0
while True:
    n += 1
    bus.emit(StageEvent(attempt=1, stage="weights", label="loading weights", line=f"{n} {line}"))
"""


def test_kill_9_mid_run_leaves_every_complete_event_readable(tmp_path):
    path = tmp_path / "killed.jsonl"
    log = DATA / "sglang-outputs" / "serve-module.log"
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path), str(log)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and child.poll() is None:
            if path.exists() and path.read_bytes().count(b"\n") > 40:
                break
            time.sleep(0.01)
        assert child.poll() is None, child.stderr.read().decode() if child.stderr else ""
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL

    raw = path.read_bytes()
    complete = raw.count(b"\n") - 1  # the header is the first complete line
    transcript = read_transcript(path)
    assert complete >= 40
    assert len(transcript.events) == complete
    assert [e.seq for e in transcript.events] == list(range(1, complete + 1))
    assert transcript.truncated == (not raw.endswith(b"\n"))
    assert transcript.stop is None
    assert any("no stop event" in w or "cut short" in w for w in transcript.warnings)


@pytest.mark.parametrize("keep", [1, 2, 17, -1])
def test_a_cut_last_line_is_skipped_and_reported(tmp_path, keep):
    path = tmp_path / "run.jsonl"
    emitted = record(path)
    raw = path.read_bytes()
    last_start = raw.rstrip(b"\n").rfind(b"\n") + 1
    cut = last_start + keep if keep > 0 else len(raw) - 2
    path.write_bytes(raw[:cut])
    transcript = read_transcript(path)
    assert transcript.truncated
    assert len(transcript.events) == len(emitted) - 1
    assert transcript.stop is None
    line_no = raw[:cut].count(b"\n") + 1
    assert f"line {line_no} is cut short" in transcript.warnings[0]


def test_a_cut_multibyte_character_at_the_end_counts_as_a_cut(tmp_path):
    path = tmp_path / "run.jsonl"
    stage = StageEvent(attempt=1, stage="weights", label="loading weights", line="Gewichte geladen — ✓")
    record(path, [whole_run()[0], stage])
    raw = path.read_bytes()
    path.write_bytes(raw[: raw.rindex("✓".encode()) + 1])
    transcript = read_transcript(path)
    assert transcript.truncated and [e.type for e in transcript.events] == ["run_start"]


# ---- reader errors -------------------------------------------------------------------------------


def test_a_corrupt_line_in_the_middle_names_its_line(tmp_path):
    path = tmp_path / "run.jsonl"
    record(path)
    lines = path.read_bytes().split(b"\n")
    lines[5] = lines[5][: len(lines[5]) // 2]
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(TranscriptError) as exc:
        read_transcript(path)
    assert "line 6" in one_line(exc) and "not a JSON object" in str(exc.value)


def test_an_invalid_event_in_the_middle_says_what_is_wrong(tmp_path):
    path = tmp_path / "run.jsonl"
    record(path)
    original = path.read_text().split("\n")

    def read_with(line_index: int, change) -> str:
        lines = list(original)
        event = json.loads(lines[line_index])
        change(event)
        lines[line_index] = json.dumps(event)
        path.write_text("\n".join(lines))
        with pytest.raises(TranscriptError) as exc:
            read_transcript(path)
        return one_line(exc)

    assert json.loads(original[3])["type"] == "decision"
    msg = read_with(3, lambda e: e["decision"]["edits"][0].update(op="frobnicate"))
    assert "line 4: invalid `decision` event: decision.fix.edits.0" in msg and "frobnicate" in msg
    msg = read_with(6, lambda e: e.update(type="telemetry"))
    assert "line 7: unknown event type 'telemetry'" in msg
    msg = read_with(6, lambda e: e.pop("type"))
    assert "line 7: an event without a `type`" in msg


def test_a_newer_transcript_says_which_specdoctor_reads_it(tmp_path):
    path = tmp_path / "future.jsonl"
    record(path, whole_run()[:1])
    lines = path.read_text().split("\n")
    header = json.loads(lines[0])
    path.write_text("\n".join([json.dumps({**header, "version": 3, "specdoctor": "0.4.0"}), *lines[1:]]))
    with pytest.raises(TranscriptError) as exc:
        read_transcript(path)
    msg = one_line(exc)
    assert "version-3 transcript" in msg and "specdoctor 0.4.0 or newer" in msg


def test_a_foreign_json_file_is_not_a_transcript(tmp_path):
    case = DATA / "corpus" / "eagle-algo-with-eagle3-draft-accept-1.json"
    with pytest.raises(TranscriptError) as exc:
        read_transcript(case)
    assert "is not a specdoctor transcript" in one_line(exc)
    other = tmp_path / "other.jsonl"
    other.write_text('{"type": "header", "schema": "otel-traces", "version": 1}\n{"span": 1}\n')
    with pytest.raises(TranscriptError) as exc:
        read_transcript(other)
    assert "is not a specdoctor transcript" in one_line(exc)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"", "is empty"),
        (b"\n\n  \n", "is empty"),
        (bytes(range(256)) * 4, "not a specdoctor transcript"),
        ((DATA / "sglang-outputs" / "serve-module.log").read_bytes(), "not a specdoctor transcript"),
        (b'{"type": "header", "schema": "specdoctor-tr', "no complete header"),
        (b'{"type": "header", "schema": "specdoctor-transcript", "version": "one"}\n', "no valid version"),
    ],
)
def test_unreadable_content_is_one_clear_line(tmp_path, content, says):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(TranscriptError) as exc:
        read_transcript(path)
    assert says in one_line(exc)


def test_a_missing_file_or_a_folder_is_one_clear_line(tmp_path):
    with pytest.raises(TranscriptError) as exc:
        read_transcript(tmp_path / "nope.jsonl")
    assert "no transcript at" in one_line(exc)
    with pytest.raises(TranscriptError) as exc:
        read_transcript(tmp_path)
    assert "is a directory" in one_line(exc)


def test_a_header_only_transcript_is_a_run_that_never_started(tmp_path):
    path = tmp_path / "empty-run.jsonl"
    TranscriptWriter(path).close()
    transcript = read_transcript(path)
    assert transcript.events == () and transcript.run_start is None and transcript.stop is None
    assert transcript.attempts() == [] and not transcript.truncated


# ---- fuzzing the reader --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def valid_bytes(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("fuzz") / "valid.jsonl"
    record(path)
    return path.read_bytes()


@pytest.fixture(scope="module")
def fuzz_path(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "case.jsonl"


def read_or_error(path: Path, content: bytes) -> Transcript | TranscriptError:
    """The reader's only two answers; anything else it raises fails the test."""
    path.write_bytes(content)
    try:
        return read_transcript(path)
    except TranscriptError as exc:
        assert str(exc) and "\n" not in str(exc)
        return exc


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(data=st.data())
def test_fuzz_any_cut_after_the_header_reads_every_complete_event(valid_bytes, fuzz_path, data):
    header_end = valid_bytes.index(b"\n") + 1
    cut = data.draw(st.integers(min_value=0, max_value=len(valid_bytes)))
    result = read_or_error(fuzz_path, valid_bytes[:cut])
    if cut < header_end - 1:
        assert isinstance(result, TranscriptError)
        return
    assert isinstance(result, Transcript), result
    kept = valid_bytes[:cut]
    # A last line cut exactly before its newline is still a whole event.
    rest = kept[kept.rfind(b"\n") + 1 :]
    whole = cut < header_end or rest == b"" or rest in valid_bytes.split(b"\n")
    assert len(result.events) == max(kept.count(b"\n") - 1, 0) + (bool(rest) and whole and cut > header_end)
    assert result.truncated == (not whole)


line_garbage = st.one_of(
    st.binary(max_size=80).map(lambda b: b.replace(b"\n", b"")),
    st.text(max_size=80).map(lambda s: s.replace("\n", "").encode()),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
        lambda c: (
            st.lists(c, max_size=4) | st.dictionaries(st.sampled_from(["type", "seq", "x"]), c, max_size=4)
        ),
        max_leaves=10,
    ).map(lambda v: json.dumps(v).encode()),
    st.sampled_from([b'{"type": "stage"}', b'{"type": "stop", "seq": "x"}', b"[" * 5000, b"1" * 5000]),
)


@FUZZ
@given(data=st.data(), garbage=st.lists(line_garbage, min_size=1, max_size=3))
def test_fuzz_garbage_lines_inserted_or_appended(valid_bytes, fuzz_path, data, garbage):
    lines = valid_bytes.split(b"\n")
    for g in garbage:
        lines.insert(data.draw(st.integers(min_value=1, max_value=len(lines))), g)
    result = read_or_error(fuzz_path, b"\n".join(lines))
    if isinstance(result, Transcript):
        assert all(isinstance(e, EVENT_TYPES) for e in result.events)


@FUZZ
@given(version=st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5))
def test_fuzz_header_versions(valid_bytes, fuzz_path, version):
    header, _, rest = valid_bytes.partition(b"\n")
    changed = {**json.loads(header), "version": version}
    result = read_or_error(fuzz_path, json.dumps(changed).encode() + b"\n" + rest)
    if version == 1 and type(version) is int:
        assert isinstance(result, Transcript) and result.stop is not None
    else:
        assert isinstance(result, TranscriptError)


@FUZZ
@given(content=st.binary(max_size=400))
def test_fuzz_random_bytes(fuzz_path, content):
    read_or_error(fuzz_path, content)


# ---- the report ----------------------------------------------------------------------------------


def test_report_from_a_whole_run(tmp_path):
    builder = ReportBuilder()
    with EventBus([builder]) as bus:
        for e in whole_run():
            bus.emit(e)
    path = builder.write(tmp_path / "report.json")
    raw = path.read_text()
    for secret in SECRETS:
        assert secret not in raw
    report = RunReport.model_validate_json(raw)
    assert report.complete and report.result == "healthy" and report.exit_code == 0
    assert report.final_command is not None and "--speculative-algorithm EAGLE3" in report.final_command
    assert report.launches_used == 2
    assert [a.outcome for a in report.attempts] == ["degraded", "healthy"]
    first = report.attempts[0]
    assert first.diagnosis is not None
    assert first.diagnosis.category == "spec-draft-mismatch"
    assert first.diagnosis.playbook == "speculative.eagle3-draft-with-eagle"
    assert first.edits == (SetFlag(flag="--speculative-algorithm", values=("EAGLE3",)),)
    assert first.accept_length == 1.0 and first.approved is True
    assert first.stage == "ready"
    assert report.preflight is not None
    assert report.preflight.findings[0].startswith("error unknown-flag:")
    assert report.preflight.edits[0].op == "rename"
    assert report.tokens.prompt == 1834 and report.tokens.total == 2046
    assert report.timings.preflight_ms == 41.7
    assert len(report.timings.per_attempt_s) == 2 and len(report.timings.to_decision_s) == 2
    assert "--api-key ***" in (report.command or "")
    detached = report.detached
    assert detached is not None and (detached.pid, detached.pgid) == (49120, 49120)
    # What `specdoctor stop` checks the process against survives the redaction of the report.
    assert detached.engine_id == "525720a5f96a4d56b6ef9387fe869860" and detached.start_time == 8812345
    assert "--api-key ***" in detached.command


def test_report_timings_follow_the_clock():
    clock = iter(float(i) for i in range(1000))
    builder = ReportBuilder()
    bus = EventBus([builder], clock=lambda: next(clock))
    emitted = [bus.emit(e) for e in whole_run()]
    report = builder.report()
    launch1 = next(e for e in emitted if e.type == "launch")
    outcome1 = next(e for e in emitted if isinstance(e, OutcomeEvent))
    decision1 = next(e for e in emitted if isinstance(e, DecisionEvent) and e.attempt == 1)
    assert report.attempts[0].duration_s == outcome1.elapsed_s - launch1.elapsed_s
    assert report.attempts[0].decision_s == decision1.elapsed_s - outcome1.elapsed_s
    assert report.timings.total_s == emitted[-1].elapsed_s


def test_report_written_after_sigint_midway_is_valid(tmp_path):
    """Ctrl-C arrives while attempt 1 is being watched; the handler writes the report as it stands."""
    path = tmp_path / "out" / "report.json"
    path.parent.mkdir()  # a report's folder is never made for it
    builder = ReportBuilder(path)
    bus = EventBus([builder])
    run = whole_run()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            for event in run:
                bus.emit(event)
                if isinstance(event, StageEvent) and event.stage == "http":
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(5)  # the interrupt lands here
    finally:
        signal.signal(signal.SIGINT, previous)
    bus.close()  # closing the builder writes the report

    report = RunReport.model_validate(json.loads(path.read_text()))
    assert not report.complete and report.result == "incomplete" and report.exit_code is None
    assert report.launches_used == 1
    assert report.attempts[0].outcome is None and report.attempts[0].duration_s is None
    assert report.last_command == report.attempts[0].command
    assert API_KEY not in path.read_text() and HF_TOKEN not in path.read_text()
    assert BEARER not in path.read_text()


def test_an_interrupted_report_write_keeps_the_previous_report(tmp_path, monkeypatch):
    path = tmp_path / "report.json"
    builder = ReportBuilder()
    bus = EventBus([builder])
    run = whole_run()
    for event in run[:6]:
        bus.emit(event)
    builder.write(path)
    before = path.read_bytes()

    def interrupted(fd):
        raise KeyboardInterrupt

    for event in run[6:]:
        bus.emit(event)
    monkeypatch.setattr("specdoctor.agent.report.os.fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        builder.write(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"], "no temporary file is left"
    assert RunReport.model_validate_json(before).launches_used == 1


def test_report_to_an_unwritable_path_is_one_clear_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ReportError) as exc:
        ReportBuilder().write(blocker / "report.json")
    assert "cannot write the report" in one_line(exc)


def test_a_report_never_makes_its_folder(tmp_path):
    missing = tmp_path / "results" / "nested"
    with pytest.raises(ReportError) as exc:
        ReportBuilder().write(missing / "report.json")
    assert f"the folder {missing} does not exist" in one_line(exc)
    assert not (tmp_path / "results").exists()


def test_report_of_nothing_yet_is_still_valid(tmp_path):
    path = ReportBuilder().write(tmp_path / "r.json")
    report = RunReport.model_validate_json(path.read_text())
    assert report.result == "incomplete" and report.attempts == () and report.timings.total_s == 0.0
