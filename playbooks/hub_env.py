"""The variables that tell the Hugging Face libraries where their cache is, set so that they look in the
wrong folder. The libraries SGLang 0.5.23 runs with (transformers 5, huggingface_hub 1) read HF_HUB_CACHE,
else HF_HOME/hub: an HF_HOME that is already the `hub` folder is looked in one level too deep, and the old
TRANSFORMERS_CACHE is no longer read at all. Offline, or with the Hub out of reach, the model then "is not
in the cache" although it is."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.command import SetEnv

_NOT_CACHED = (
    r"We couldn't connect to 'https://huggingface\.co'|LocalEntryNotFoundError|"
    r"cannot find the requested files in the (?:local|disk) cache|couldn't find them in the cached files"
)
# Cache variables of older transformers releases, which transformers 5 no longer reads.
_RETIRED = ("TRANSFORMERS_CACHE", "PYTORCH_TRANSFORMERS_CACHE", "PYTORCH_PRETRAINED_BERT_CACHE")


@playbook(
    id="sglang.model.cache-variable",
    category="model-path",
    when=("exited", "unhealthy", "hung"),
    pattern=_NOT_CACHED,
    priority=27,
)
def cache_variable_misread(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The model is not found in the cache, and the command's cache variables send the libraries to a
    folder other than the one they name: HF_HOME given as its `hub` folder goes one level up; a retired
    TRANSFORMERS_CACHE is given as HF_HUB_CACHE too."""
    env = ctx.spec.env_dict()
    if env.get("HF_HUB_CACHE") or m is None:
        return None
    home = env.get("HF_HOME", "").rstrip("/")
    if home and PurePosixPath(home).name == "hub":
        parent = str(PurePosixPath(home).parent)
        return fix(
            ctx,
            [SetEnv(name="HF_HOME", value=parent)],
            "model-path",
            f"HF_HOME={home} is the cache's hub folder itself: the libraries look in {home}/hub",
            why="the Hugging Face libraries keep downloads in HF_HOME/hub; with HF_HOME one level up they read "
            f"the repos in {home} (HF_HUB_CACHE={home} does the same)",
            evidence=(m.group(0),),
            confidence=0.6,
        )
    retired = [name for name in _RETIRED if env.get(name)]
    if len(retired) != 1 or home:
        return None
    folder = env[retired[0]]
    return fix(
        ctx,
        [SetEnv(name="HF_HUB_CACHE", value=folder)],
        "model-path",
        f"{retired[0]} is no longer read: the libraries never looked in {folder}",
        why=f"transformers 5 and huggingface_hub 1 (what SGLang 0.5.23 runs with) read only HF_HUB_CACHE or "
        f"HF_HOME; HF_HUB_CACHE={folder} names the same cache ({retired[0]} may stay: nothing reads it)",
        evidence=(m.group(0),),
        confidence=0.6,
    )
