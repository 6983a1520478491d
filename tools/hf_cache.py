"""The Hugging Face Hub cache on this host, read as folders (nothing imported, nothing fetched): where the
Hub libraries look for a repo (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub), and what a
repo's folder holds there (`models--org--name/refs/<branch>` → a commit, `snapshots/<commit>/` → files)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_WEIGHTS = ("*.safetensors", "*.bin", "*.pt")


def hub_cache(env: dict[str, str]) -> Path:
    """The folder the Hub libraries read for a command with these environment settings."""
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    home = env.get("HF_HOME") or os.environ.get("HF_HOME")
    if home:
        return Path(home).expanduser() / "hub"
    xdg = env.get("XDG_CACHE_HOME") or os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(xdg).expanduser() / "huggingface" / "hub"


def repo_folder(cache: Path, repo: str) -> Path:
    return cache / ("models--" + repo.replace("/", "--"))


@dataclass(frozen=True)
class CachedRepo:
    folder: Path
    main: str | None
    """The commit `refs/main` names, None without one."""
    complete: tuple[str, ...]
    """Snapshots with a config.json and weights, newest first."""

    @property
    def main_is_complete(self) -> bool:
        return self.main is not None and self.main in self.complete


def cached(cache: Path, repo: str) -> CachedRepo | None:
    """What the cache holds of `repo`, None when it holds nothing of it."""
    folder = repo_folder(cache, repo)
    try:
        snapshots = sorted(
            (p for p in (folder / "snapshots").iterdir() if p.is_dir()),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        main = (
            (folder / "refs" / "main").read_text().strip() if (folder / "refs" / "main").is_file() else None
        )
    except OSError:
        return None
    complete = tuple(p.name for p in snapshots if (p / "config.json").is_file() and _has_weights(p))
    return CachedRepo(folder=folder, main=main, complete=complete)


def _has_weights(snapshot: Path) -> bool:
    return any(next(snapshot.glob(pattern), None) is not None for pattern in _WEIGHTS)
