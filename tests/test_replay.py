"""Replay: a recorded simulated run re-decides the same with today's playbooks; a changed playbook shows as a
divergence at the right step; bad files get one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specdoctor.agent.transcript import read_transcript

ROOT = Path(__file__).resolve().parent.parent


def specdoctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specdoctor", *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("demo-run")
    proc = specdoctor("demo", "--sim-speed", "0.05", "--quiet-stages", "--run-dir", str(run_dir))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run_dir / "transcript.jsonl"


def test_recorded_run_replays_with_no_divergence(recorded):
    t = read_transcript(recorded)
    assert not t.truncated and t.stop is not None and t.stop.result == "healthy"
    proc = specdoctor("replay", str(recorded))
    assert proc.returncode == 0, proc.stdout
    assert "0 diverged" in proc.stdout
    assert "✓ before launch preflight: same" in proc.stdout and "✓ attempt 1 decision: same" in proc.stdout


def test_a_changed_playbook_diverges_at_the_step_it_decides(recorded, tmp_path):
    # A site rule that answers CUDA-graph capture OOM differently from the built-in playbook.
    (tmp_path / "site.yaml").write_text(
        "- id: site.no-graphs\n  category: cuda-graph\n  trigger: 'Capture cuda graph failed'\n"
        "  message: this site runs without decode CUDA graphs\n"
        "  edits: [{op: set, flag: --cuda-graph-backend-decode, values: [disabled]}]\n"
    )
    proc = specdoctor("replay", str(recorded), "--playbooks", str(tmp_path))
    assert proc.returncode == 1
    assert "✓ before launch preflight: same" in proc.stdout
    assert "✗ attempt 1 decision: DIVERGED" in proc.stdout
    assert "+ --cuda-graph-backend-decode disabled" in proc.stdout


def test_a_transcript_cut_short_still_replays(recorded, tmp_path):
    data = recorded.read_bytes()
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(data[: len(data) - 40])  # a run killed in the middle of writing its last event
    proc = specdoctor("replay", str(cut))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cut short" in proc.stdout + proc.stderr


def test_as_recorded_plays_back(recorded):
    proc = specdoctor("replay", "--as-recorded", "--speed", "1000", str(recorded))
    assert proc.returncode == 0
    assert "HEALTHY" in proc.stdout and "working command:" in proc.stdout


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"", "empty"),
        (b"\x00\xff garbage", "no complete header"),
        (b"\x00\xff garbage\n{}\n", "not a specdoctor transcript"),
        (b'{"hello": 1}\n', "not a specdoctor transcript"),
    ],
)
def test_bad_transcripts_get_one_line(tmp_path, content, says):
    path = tmp_path / "t.jsonl"
    path.write_bytes(content)
    proc = specdoctor("replay", str(path))
    assert proc.returncode == 2 and says in proc.stderr.lower() and proc.stderr.count("\n") == 1


def test_shipped_example_replays_cleanly():
    example = ROOT / "agent" / "data" / "examples" / "seed-story.jsonl"
    proc = specdoctor("replay", str(example))
    assert proc.returncode == 0, proc.stdout
    assert "0 diverged" in proc.stdout


def test_host_dependent_checks_are_replayed_not_copied(monkeypatch):
    """Preflight is re-run with the host facts the recording kept: a check that stops catching the EAGLE-3
    draft run as EAGLE is a divergence, even though the fix depended on reading that draft's config.json."""
    from specdoctor.agent import replay as replay_module
    from specdoctor.playbooks import spec_checks

    example = read_transcript(ROOT / "agent" / "data" / "examples" / "seed-story.jsonl")
    assert all(step.same and not step.skipped for step in replay_module.replay(example))
    monkeypatch.setattr(spec_checks, "_draft_model", lambda *args, **kwargs: [])
    preflight_step = replay_module.replay(example)[0]
    assert preflight_step.what == "preflight" and not preflight_step.same
    assert any("--speculative-algorithm" in change for change in preflight_step.changes)
