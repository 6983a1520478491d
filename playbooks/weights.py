"""The loader found no weight files. SGLang's loader looks for the files its --load-format reads
(`pt`/`npcache`: `*.bin`/`*.pt`; `safetensors`: `*.safetensors`; `auto`: safetensors, then .bin), so a
format the checkpoint does not ship finds nothing in a folder that is full of weights."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook, stop
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.hub import from_the_cache
from specdoctor.tools.command import RemoveFlag

_NO_WEIGHTS = r"Cannot find any model weights with|No model weights found in"
_FORMATS_READING_FILES = ("pt", "safetensors", "npcache", "fastsafetensors", "instanttensor")


@playbook(id="sglang.model.no-weights", category="model-path", pattern=_NO_WEIGHTS, priority=30)
def no_weights(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """No weight files where the loader looked: the wrong format chosen, or a folder without weights."""
    chosen = ctx.view.get("--load-format")
    if chosen in _FORMATS_READING_FILES:
        return fix(
            ctx,
            [RemoveFlag(flag="--load-format")],
            "model-path",
            f"--load-format {chosen} looks for weight files this checkpoint does not ship",
            why="--load-format auto (the default) loads safetensors and falls back to .bin files",
            evidence=(m.group(0),) if m else (),
            confidence=0.6,
        )
    repo = ctx.view.get("--model-path") or ""
    if (
        m is not None
        and f"`{repo}`" in m.string[m.start() : m.start() + 300]
        and (cached := from_the_cache(ctx, repo))
    ):
        return cached  # a Hub repo whose cached snapshot has no weights, another has them
    return stop(
        ctx,
        "model-path",
        f"a model folder has no weight files: {ctx.root.error_line or 'see the log'}",
        "Download the checkpoint's weights (*.safetensors or *.bin) into the folder the error names, or point "
        "--model-path / --speculative-draft-model-path at one that has them.",
    )


@playbook(
    id="sglang.model.adapter-kind-unsupported",
    category="other",
    pattern=r"(?:doesn't|does not|do not|cannot) (?:currently )?(?:support|serve|load) (?P<kind>[\w-]+) adapters?",
    priority=30,
)
def adapter_kind_unsupported(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The adapter file is of a kind SGLang's LoRA serving does not load (DoRA): no flag changes the file,
    and serving without it is not what was launched."""
    assert m is not None
    kind = m.group("kind")
    return stop(
        ctx,
        "other",
        f"SGLang's LoRA serving does not load {kind} adapters",
        f"Merge the {kind} adapter into the base weights and serve the merged model, or train a plain LoRA "
        "adapter; no launch flag makes SGLang load this one.",
        confidence=0.7,
    )
