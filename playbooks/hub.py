"""Where the model comes from when the Hugging Face Hub cannot be reached. The Hub libraries say so in one
sentence whichever repo failed ("We couldn't connect to 'https://huggingface.co' ... couldn't find them in
the cached files"), so the command tells which one it was: the only setting that names a Hub repo. What each
needs without the Hub: a tokenizer repo next to a local model folder is the folder's own tokenizer; a pinned
--revision the cache does not hold is the cached default; a cached repo the libraries keep re-checking
online is read offline (HF_HUB_OFFLINE=1), as they say themselves ("Using cached commit hash"). What the
cache on this host holds decides the rest: a repo cached one folder off (HF_HUB_CACHE set to HF_HOME's
folder, a --download-dir the config lookup does not read) is read where it is; a `refs/main` that names no
complete snapshot is replaced by the complete one (--revision)."""

from __future__ import annotations

import re
from pathlib import Path

from specdoctor.playbooks.base import Context, fix, playbook, stop
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.repo_ids import looks_like_a_path, valid_repo_id
from specdoctor.tools.command import RemoveFlag, SetEnv, SetFlag
from specdoctor.tools.hf_cache import cached, hub_cache

_UNREACHABLE = (
    r"We couldn't connect to 'https://huggingface\.co'|LocalEntryNotFoundError|"
    r"cannot find the requested files in the (?:local|disk) cache|Could not reach the Hub \((?P<why>[^)]*)\)\. "
    r"Using cached commit hash for '(?P<cached>[^']+)'"
)
_REPO_FLAGS = ("--model-path", "--tokenizer-path", "--speculative-draft-model-path")
_OFFLINE = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


@playbook(
    id="sglang.model.hub-unreachable",
    category="model-path",
    when=("exited", "unhealthy", "hung"),
    pattern=_UNREACHABLE,
    priority=28,
)
def hub_unreachable(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    if m is None:
        return None
    if m["cached"]:
        return _read_the_cache_offline(ctx, m["cached"], m.group(0))
    repos = [flag for flag in _REPO_FLAGS if _hub_repo(ctx.view.get(flag))]
    if repos == ["--model-path"] and (found := from_the_cache(ctx, ctx.view.get("--model-path") or "")):
        return found
    if repos == ["--tokenizer-path"]:
        return fix(
            ctx,
            [RemoveFlag(flag="--tokenizer-path")],
            "model-path",
            f"the tokenizer repo {ctx.view.get('--tokenizer-path')} is neither cached nor reachable",
            why="--model-path is a local folder; without --tokenizer-path SGLang reads the tokenizer from it, "
            "where checkpoints keep theirs (or download the tokenizer while the Hub is reachable)",
            evidence=(m.group(0),),
            confidence=0.5,
        )
    if repos == ["--speculative-draft-model-path"]:
        return _named_repo_unreachable(ctx, repos[0], m.group(0))
    if repos == ["--model-path"] and ctx.view.has("--revision") and _offline(ctx):
        return fix(
            ctx,
            [RemoveFlag(flag="--revision")],
            "model-path",
            f"--revision {ctx.view.get('--revision')} of {ctx.view.get('--model-path')} is not in the offline cache",
            why="offline, only what was downloaded can load; without --revision the cached default branch is "
            "used, if the cache holds it (or download that revision while the Hub is reachable)",
            evidence=(m.group(0),),
            confidence=0.45,
        )
    return None


def _named_repo_unreachable(ctx: Context, flag: str, said: str) -> Decision:
    """The one Hub repo of the command is the draft's: say so, with what to do (no flag names a local copy)."""
    repo = ctx.view.get(flag)
    return stop(
        ctx,
        "model-path",
        f"the {flag} repo {repo} is neither cached on this host nor reachable",
        f"Download it while the Hub is reachable (`hf download {repo}`) and point {flag} at the local folder, "
        "or set HF_HOME / HF_HUB_CACHE to the cache that holds it.",
        evidence=(said,),
        confidence=0.7,
    )


def _read_the_cache_offline(ctx: Context, repo: str, said: str) -> Decision | None:
    if _offline(ctx) or not any(ctx.view.get(flag) == repo for flag in _REPO_FLAGS):
        return None
    return fix(
        ctx,
        [SetEnv(name="HF_HUB_OFFLINE", value="1")],
        "model-path",
        f"the Hub cannot be reached and {repo} is cached, but every file is re-checked online first",
        why="the Hub library says it is using the cached copy of the repo; HF_HUB_OFFLINE=1 reads the cache "
        "without asking the Hub (each online check waits out its retries)",
        evidence=(said,),
        confidence=0.6,
    )


def _hub_repo(value: str | None) -> bool:
    return value is not None and "/" in value and not looks_like_a_path(value) and valid_repo_id(value)


def _offline(ctx: Context) -> bool:
    env = ctx.spec.env_dict()
    return any(env.get(name, "").lower() in ("1", "true", "yes", "on") for name in _OFFLINE)


def from_the_cache(ctx: Context, repo: str) -> Decision | None:
    """The repo where this host's cache really holds it: one folder off, or another snapshot."""
    env = ctx.spec.env_dict()
    where = hub_cache(env)
    here = cached(where, repo)
    if here is None or not here.complete:
        return _one_folder_off(ctx, repo, where)
    if here.main_is_complete or ctx.view.has("--revision"):
        return None
    commit = here.complete[0]
    return fix(
        ctx,
        [SetFlag(flag="--revision", values=(commit,))],
        "model-path",
        f"the cache's refs/main of {repo} names {here.main or 'nothing'}, which is no complete snapshot",
        why=f"{here.folder}/snapshots/{commit} holds the config and the weights; --revision {commit} loads it "
        "without the Hub",
        confidence=0.6,
    )


def _one_folder_off(ctx: Context, repo: str, where: Path) -> Decision | None:
    env = ctx.spec.env_dict()
    download = ctx.view.get("--download-dir")
    candidates = [where / "hub", *([Path(download).expanduser()] if download else [])]
    if env.get("HF_HOME"):
        candidates.append(Path(env["HF_HOME"]).expanduser() / "hub")
    found = next((c for c in candidates if c != where and (r := cached(c, repo)) and r.complete), None)
    if found is None:
        return None
    return fix(
        ctx,
        [SetEnv(name="HF_HUB_CACHE", value=str(found))],
        "model-path",
        f"{repo} is cached in {found}, not in {where}, where the Hub libraries look",
        why=f"HF_HUB_CACHE is the folder that holds the models--* folders; {found} is that folder for {repo} "
        "(--download-dir only places weights, the config is looked up in the Hub cache)",
        confidence=0.6,
    )
