"""SGLang syncs and pads every batch across ranks before the MLP (`ForwardBatch.prepare_mlp_sync_batch`)
only when the layout asks for it: `require_mlp_sync()` in srt/utils/common.py is attention data parallelism
or an MLP all-gathered across attention groups (`--moe-dense-tp-size 1`, a DP LM head). The padding asks the
attention backend for CUDA-graph fill values; a backend without them (torch_native, which CPU hosts without
AMX fall back to) raises NotImplementedError there. The layout settings that switched the sync on are what
to take back; the rest of the command keeps running as one attention group."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.command import RemoveFlag

# What makes `require_mlp_sync()` true, as the command line sets it.
_SYNCING = ("--enable-dp-attention", "--attn-dp-size", "--moe-dense-tp-size", "--enable-dp-lm-head")


@playbook(
    id="sglang.parallel.mlp-sync-unsupported-backend",
    category="tp-config",
    pattern=r"NotImplementedError",
    priority=40,
    scope="root",
)
def mlp_sync_unsupported_backend(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    functions = [f.function for f in ctx.root.frames]
    backend = [f for f in ctx.root.frames if "layers/attention" in f.path]
    if (
        "prepare_mlp_sync_batch" not in " ".join(functions)
        or not backend
        or backend[-1] != ctx.root.frames[-1]
    ):
        return None  # not the MLP sync's padding, or not an attention backend that lacks what it asks
    chosen = [flag for flag in _SYNCING if ctx.view.has(flag)]
    if not chosen:
        return None
    lacking = backend[-1].function
    return fix(
        ctx,
        [RemoveFlag(flag=flag) for flag in chosen],
        "tp-config",
        f"the attention backend has no {lacking}(), which the cross-rank MLP sync that {' and '.join(chosen)} "
        "switches on asks for",
        why="SGLang pads each batch for the MLP sync only under attention data parallelism or an all-gathered "
        f"MLP (require_mlp_sync); without {', '.join(chosen)} the batch is not padded, or use an attention "
        "backend that implements it",
        evidence=(ctx.root.error_line or "NotImplementedError",),
        confidence=0.5,
    )
