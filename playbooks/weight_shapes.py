"""The checkpoint's tensors do not have the shapes the model config says. SGLang builds every layer from
the config (hidden size, heads, vocabulary, ...) and copies each checkpoint tensor into it; a tensor of
another size fails in the layer's weight loader. When the command's --json-model-override-args changed a
field that sizes tensors, that override is why; otherwise the model folder's config.json and weights
disagree, which no launch flag repairs by itself."""

from __future__ import annotations

import json
import re

from specdoctor.playbooks.base import Context, fix, playbook, stop
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.command import Edit, RemoveFlag, SetFlag

# transformers config fields that size a checkpoint tensor (the others change behaviour, not shapes).
SHAPE_FIELDS = frozenset(
    {
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "vocab_size",
        "num_hidden_layers",
        "moe_intermediate_size",
        "num_experts",
        "n_routed_experts",
        "num_local_experts",
        "n_shared_experts",
        "kv_lora_rank",
        "q_lora_rank",
        "qk_nope_head_dim",
        "qk_rope_head_dim",
        "v_head_dim",
    }
)
_SHAPE_ERROR = (
    r"exceeds dimension size|size mismatch|Attempted to load weight|loaded_weight\.shape|"
    r"shape mismatch|must match the size|The size of tensor a"
)


@playbook(
    id="sglang.model.weights-do-not-fit-the-config", category="model-path", pattern=_SHAPE_ERROR, priority=45
)
def weights_do_not_fit_the_config(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    if not any(re.search(r"weight_loader|load_weights", f.function) for f in ctx.root.frames):
        return None
    override = _override(ctx)
    reshaped = sorted(SHAPE_FIELDS & override.keys())
    said = ctx.root.error_line or (m.group(0) if m else "")
    if reshaped:
        kept = {k: v for k, v in override.items() if k not in SHAPE_FIELDS}
        edit: Edit = (
            SetFlag(flag="--json-model-override-args", values=(json.dumps(kept),))
            if kept
            else RemoveFlag(flag="--json-model-override-args")
        )
        return fix(
            ctx,
            [edit],
            "model-path",
            f"--json-model-override-args changes {', '.join(reshaped)}, which sizes the model's tensors: the "
            f"checkpoint's weights no longer fit ({said})",
            why="the checkpoint was trained with its config's shapes; an override can change behaviour "
            "(context, rope, flags) but not the size of weights already saved",
            evidence=(said,),
            confidence=0.7,
        )
    if ctx.view.tp > 1 or ctx.view.has("--quantization") or ctx.view.spec.find("--json-model-override-args"):
        return None  # a shard split or a quantized layout may be why: not this rule's to say
    if vocab := _checkpoint_vocabulary(ctx.root_text):
        return _vocab_from_the_checkpoint(ctx, *vocab, said)
    return stop(
        ctx,
        "model-path",
        f"the checkpoint's weights do not have the shapes its config.json gives ({said})",
        "Compare config.json with the weights (a field such as vocab_size, num_key_value_heads or "
        "hidden_size copied from another model); fix config.json, or give the true value with "
        "--json-model-override-args '{\"FIELD\": VALUE}'.",
        evidence=(said,),
    )


def _override(ctx: Context) -> dict[str, object]:
    try:
        parsed = json.loads(ctx.view.get("--json-model-override-args") or "{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _checkpoint_vocabulary(text: str) -> tuple[int, int] | None:
    """(config's, checkpoint's) vocabulary size when the embedding's loader quotes both: its assertion
    prints `org_vocab_size` (config.json's vocab_size) beside the loaded tensor's rows, unsharded."""
    found = re.search(
        r"org_vocab_size=(\d+)\s+self\.use_presharded_weights=False\s+loaded_weight\.shape\[output_dim\]=(\d+)",
        text,
    )
    if not found or found.group(1) == found.group(2):
        return None
    return int(found.group(1)), int(found.group(2))


def _vocab_from_the_checkpoint(ctx: Context, configured: int, saved: int, said: str) -> Decision:
    """config.json's vocab_size disagrees with the embedding the checkpoint saved: the tensor is what was
    trained, so the model is served with the checkpoint's size (a person confirms: the folder is theirs)."""
    override = json.dumps({"vocab_size": saved})
    return fix(
        ctx,
        [SetFlag(flag="--json-model-override-args", values=(override,))],
        "model-path",
        f"config.json gives vocab_size {configured}, the checkpoint's embedding has {saved} rows ({said})",
        why="SGLang sizes the embedding from config.json's vocab_size and asserts the checkpoint's tensor has "
        "as many rows; the saved tensor is what was trained, so the override serves the model at its size "
        "(mending config.json does the same for good)",
        evidence=(said,),
        confidence=0.45,
    )
