"""Where specdoctor keeps its caches and a user's own configuration (XDG conventions)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """`$SPECDOCTOR_CACHE_DIR`, else `$XDG_CACHE_HOME/specdoctor`, else `~/.cache/specdoctor`."""
    if explicit := os.environ.get("SPECDOCTOR_CACHE_DIR"):
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specdoctor"


def config_dir() -> Path:
    """`$SPECDOCTOR_CONFIG_DIR`, else `$XDG_CONFIG_HOME/specdoctor`, else `~/.config/specdoctor`."""
    if explicit := os.environ.get("SPECDOCTOR_CONFIG_DIR"):
        return Path(explicit)
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "specdoctor"


def runs_dir() -> Path:
    """Where each run's logs, transcript and report go: `$SPECDOCTOR_RUNS_DIR`, else
    `$XDG_STATE_HOME/specdoctor/runs`, else `~/.local/state/specdoctor/runs`."""
    if explicit := os.environ.get("SPECDOCTOR_RUNS_DIR"):
        return Path(explicit)
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "specdoctor" / "runs"
