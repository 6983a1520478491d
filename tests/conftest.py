"""Shared fixtures: real recorded data, the real SGLang environment, and a check that tests leave no
process of ours behind."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.procs import TEST_TOKEN

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def sglang_env():
    """The real SGLang 0.5.23 CPU environment (built and cached on first use, ~2 minutes)."""
    from tests.sglang_env import ensure_env

    return ensure_env()


@pytest.fixture(autouse=True)
def _test_token(monkeypatch):
    """Marks every process this test starts (see tests/procs.py)."""
    monkeypatch.setenv(TEST_TOKEN, uuid.uuid4().hex)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Each test session gets its own catalog cache, so a test never reads a developer's stale cache."""
    monkeypatch.setenv("SPECDOCTOR_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.setenv("SPECDOCTOR_CONFIG_DIR", str(tmp_path_factory.getbasetemp() / "config"))


def corpus_cases() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((DATA / "corpus").glob("*.json"))]
