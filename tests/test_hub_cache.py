"""Lessons of corpus-real-engine-33 (where the model comes from: Hub ids, caches, offline mode, paths; 0 of
13 on arrival): which Hub repo failed is the command's only Hub setting; what this host's Hub cache holds
decides where the repo is read from. Each on its blind case; the cache cases on a cache laid out in a temp
folder as the recording's was (`models--org--name/refs/main`, `snapshots/<commit>/`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdoctor.agent.diagnose import decide
from specdoctor.tools.hf_cache import cached, hub_cache
from tests.recorded import blind, context

DATA = Path(__file__).parent / "data" / "corpus-real-engine-33"
RECORDED = "/tmp/harvest-SG/hfhome"
GOOD = "3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39"


def _snapshot(hub: Path, repo: str, commit: str, weights: bool = True, main: str | None = None) -> None:
    folder = hub / ("models--" + repo.replace("/", "--"))
    snap = folder / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    (snap / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    if weights:
        (snap / "model.safetensors").write_bytes(b"\0" * 8)
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(main or commit)


def _decided(name: str, home: Path) -> list[str]:
    case = json.loads((DATA / f"{name}.json").read_text())
    command = case["command"].replace(RECORDED, str(home))
    lines = [ln.replace(RECORDED, str(home)) for ln in case["log"].splitlines()]
    decision = decide(context(command, lines, case["exit_kind"]))
    return [e.describe() for e in getattr(decision, "edits", ())]


def test_a_repo_cached_one_folder_off_is_read_where_it_is(tmp_path: Path) -> None:
    _snapshot(tmp_path / "hub", "tinyorg/tiny-llama", GOOD)
    assert _decided("hf-hub-cache-points-at-hf-home-not-hub", tmp_path) == [
        f"set env HF_HUB_CACHE={tmp_path}/hub"
    ]
    assert _decided("download-dir-not-used-for-config-lookup", tmp_path) == [
        f"set env HF_HUB_CACHE={tmp_path}/hub"
    ]


def test_a_main_ref_without_a_complete_snapshot_pins_the_complete_one(tmp_path: Path) -> None:
    _snapshot(
        tmp_path / "hub", "tinyorg/tiny-llama-chat", GOOD, main="9c8e1f2a3b4c5d6e7f8091a2b3c4d5e6f7a8b9c0"
    )
    assert _decided("hub-refs-main-points-at-missing-snapshot", tmp_path) == [f"set --revision {GOOD}"]
    _snapshot(
        tmp_path / "hub", "tinyorg/tiny-llama-base", "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678", weights=False
    )
    _snapshot(
        tmp_path / "hub", "tinyorg/tiny-llama-base", GOOD, main="a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"
    )
    assert _decided("hub-snapshot-missing-weights-file", tmp_path) == [f"set --revision {GOOD}"]


def test_without_the_cache_nothing_is_made_up(tmp_path: Path) -> None:
    for name in ("hf-hub-cache-points-at-hf-home-not-hub", "hub-refs-main-points-at-missing-snapshot"):
        assert _decided(name, tmp_path) == []


def test_the_cache_is_read_where_the_hub_libraries_read_it(tmp_path: Path) -> None:
    assert hub_cache({"HF_HUB_CACHE": "/x"}) == Path("/x")
    assert hub_cache({"HF_HOME": "/h"}) == Path("/h/hub")
    _snapshot(tmp_path, "org/m", GOOD, weights=False)
    found = cached(tmp_path, "org/m")
    assert found is not None and found.main == GOOD and found.complete == () and not found.main_is_complete


@pytest.mark.parametrize(
    "name, edits",
    [
        ("tokenizer-path-repo-id-offline", ["remove --tokenizer-path"]),
        ("hub-revision-branch-not-in-offline-cache", ["remove --revision"]),
        ("hub-cache-present-but-online-retries-hang", ["set env HF_HUB_OFFLINE=1"]),
        ("model-path-is-weights-file-not-folder", ["set --model-path /models/tiny-llama"]),
        ("model-path-with-space-unquoted", ["set --model-path /tmp/harvest-SG/my models/tiny-llama"]),
    ],
)
def test_what_the_command_alone_tells(name: str, edits: list[str]) -> None:
    blind("corpus-real-engine-33", name)
    case = json.loads((DATA / f"{name}.json").read_text())
    decision = decide(context(case["command"], case["log"].splitlines(), case["exit_kind"]))
    assert [e.describe() for e in decision.edits] == edits


def test_an_unreachable_draft_repo_is_named_in_the_stop() -> None:
    case = json.loads((DATA / "speculative-draft-model-path-repo-id-offline.json").read_text())
    decision = decide(context(case["command"], case["log"].splitlines(), case["exit_kind"]))
    assert decision.action == "stop" and "--speculative-draft-model-path repo" in decision.summary
    assert "hf download yuhuili/EAGLE3-LLaMA3.1-Instruct-8B" in decision.advice
