"""Requests that send `input_embeds` (prompt embeddings instead of text). SGLang takes them only with the
radix cache off (it keys on token ids, which such a prompt does not have), and its model runner casts them
to bfloat16 (`forward_batch.input_embeds.bfloat16()` in srt/model_executor/model_runner.py): a model that
runs in float16 or float32 then fails in its first linear layer on a bfloat16 × float16 product. Both
settings are what the user's request needs, so both are proposed together."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.command import Edit, SetFlag

_RADIX = r"input_embeds is provided while disable_radix_cache is False"
_BF16_MISMATCH = (
    r"c10::BFloat16 != (?:c10::)?(?:Half|Float|half|float)\b|BFloat16 and (?:Half|Float)|Half and BFloat16"
)


@playbook(
    id="sglang.request.input-embeds",
    category="other",
    when=("exited", "unhealthy", "degraded"),
    pattern=f"{_RADIX}|{_BF16_MISMATCH}",
    priority=30,
)
def input_embeds(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    text = ctx.search_text
    asked_radix = re.search(_RADIX, text) is not None
    if not asked_radix and not re.search(r"input_embeds|\bembeds\b", ctx.log_text):
        return None  # a dtype clash without embeddings sent is another fault's
    edits: list[Edit] = []
    if asked_radix and not ctx.view.has("--disable-radix-cache"):
        edits.append(SetFlag(flag="--disable-radix-cache"))
    running = _model_dtype(ctx)
    if running not in ("bfloat16", None) or (not asked_radix and running is None):
        edits.append(SetFlag(flag="--dtype", values=("bfloat16",)))
    if not edits:
        return None
    needs = ["the radix cache off"] if asked_radix else []
    if len(edits) > len(needs) or not asked_radix:
        needs.append(f"the model in bfloat16 (it runs in {running or 'another dtype'} here)")
    return fix(
        ctx,
        edits,
        "other",
        f"requests with input_embeds need {' and '.join(needs)}",
        why="SGLang refuses input_embeds while the radix cache is on, and casts them to bfloat16 before the "
        "model's first layer; --dtype bfloat16 keeps the weights in the same dtype",
        evidence=(m.group(0),) if m else (),
        confidence=0.6,
    )


def _model_dtype(ctx: Context) -> str | None:
    """The dtype the model runs in: the command's --dtype, else what the log says the KV cache holds (it
    follows the model's dtype unless --kv-cache-dtype says otherwise)."""
    given = ctx.view.get("--dtype")
    if given and given != "auto":
        return {"half": "float16", "float": "float32"}.get(given, given)
    if ctx.view.has("--kv-cache-dtype"):
        return None
    found = re.search(r"KV Cache is allocated\. dtype: torch\.(\w+)", ctx.log_text)
    return found.group(1) if found else None
