"""The edit that takes a setting the command chose off a failing path."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context
from specdoctor.playbooks.device_checks import RUNS_ON
from specdoctor.tools.command import Edit, RemoveFlag, SetFlag
from specdoctor.tools.engine_source.requirements import needing
from specdoctor.tools.help_parser import FlagInfo

# Backends that run every model on every GPU SGLang supports, per kind of attention.
_PORTABLE_BACKEND = {
    "--attention-backend": "triton",
    "--prefill-attention-backend": "triton",
    "--decode-attention-backend": "triton",
    "--speculative-draft-attention-backend": "triton",
    "--mm-attention-backend": "triton_attn",
}
# MLA and sparse-attention models (DeepSeek's family) run on backends of their own kind, which SGLang's
# default picks for them per GPU.
_OWN_ATTENTION = re.compile(r"\b(?:nsa|dsa|mla)\b|_mla\b|index_topk|indexer|deepseek", re.I)


def _own_kind(value: str, ctx: Context) -> bool:
    """An MLA or sparse-attention model: its backend, the failing code or the model names the kind."""
    frames = " ".join(f"{f.path} {f.function}" for f in ctx.root.frames)
    model = " ".join([ctx.view.get("--model-path") or "", *(ctx.model.architectures if ctx.model else ())])
    return _OWN_ATTENTION.search(f"{value} {ctx.root_text} {frames} {model}") is not None


def take_back(flag: str, value: str, info: FlagInfo | None, ctx: Context) -> tuple[Edit, ...]:
    """The edit that takes a chosen setting off the failing path. For an attention backend, removing the
    flag hands the choice back to SGLang, whose default on this GPU may be the very backend that failed
    (trtllm_mha on Blackwell, aiter on ROCm, flashinfer elsewhere): the portable backend is the change
    that certainly leaves it, except for MLA and sparse-attention models, whose default is of their kind."""
    if info is not None and info.nargs in ("+", "*") and (kept := _without_the_named_entry(flag, ctx)):
        return (SetFlag(flag=flag, values=kept),)
    # triton is portable across GPUs; on an NPU, CPU or Apple device the device's own backend is the default.
    on_gpu = (ctx.view.get("--device") or "cuda").lower() not in RUNS_ON
    portable = _PORTABLE_BACKEND.get(flag) if on_gpu else None
    if (
        portable
        and value != portable
        and info is not None
        and portable in (info.choices or ())
        and not _own_kind(value, ctx)
    ):
        return (SetFlag(flag=flag, values=(portable,)),)
    return (RemoveFlag(flag=flag), *its_settings(flag, ctx))


def _without_the_named_entry(flag: str, ctx: Context) -> tuple[str, ...]:
    """The list's other entries when the error names one of them (`Failed to load LoRA adapter loha`), or
    names one twice (`LoRA with name sql already exists`: SGLang kept the first); () otherwise."""
    values = [v for o in ctx.spec.find(flag, ctx.view.canon) for v in o.values]
    said = ctx.root.error_line or ""
    # Named entries (adapters, paths), not numbers: a bucket list's `128` is a value of the whole list.
    if len(values) < 2 or not said or any(re.fullmatch(r"[-+.\d]+", v) for v in values):
        return ()
    keys = [v.split("=", 1)[0] for v in values]
    hits = [i for i, k in enumerate(keys) if re.search(rf"(?<![\w/.=-]){re.escape(k)}(?![\w/.=-])", said)]
    if len({keys[i] for i in hits}) != 1:
        return ()  # none named, or several: the list is not guessed at
    drop = hits[1:] if len(hits) > 1 else hits  # the same name twice: SGLang kept the first
    return tuple(v for i, v in enumerate(values) if i not in drop)


def its_settings(flag: str, ctx: Context) -> tuple[Edit, ...]:
    """The feature's own settings the command also gave (`--kv-canary-sweep-interval` with `--kv-canary`,
    the draft model with `--speculative-algorithm`): without the feature SGLang rejects them ("requires
    --kv-canary"), so they go with it: those named after it, and those SGLang's messages say need it."""
    prefixes = _FAMILY.get(flag, (f"{flag}-", f"--{flag.removeprefix('--enable-')}-"))
    need_it = needing(ctx.catalog.version).get(flag, frozenset())
    own = [
        o.name for o in ctx.spec.options() if o.name.startswith(prefixes) or ctx.view.canon(o.name) in need_it
    ]
    return tuple(RemoveFlag(flag=name) for name in dict.fromkeys(own) if name != flag)


def setting_of_a_chosen_feature(flag: str, ctx: Context) -> bool:
    """`flag` is one of the settings of a feature the command switched on (`--lora-target-modules` of
    `--enable-lora`): giving it completes the user's choice rather than making a new one."""
    for option in ctx.spec.options():
        chosen = ctx.view.canon(option.name)
        if chosen != flag and flag.startswith(
            _FAMILY.get(chosen, (f"{chosen}-", f"--{chosen.removeprefix('--enable-')}-"))
        ):
            return chosen.startswith("--enable-") or chosen in _FAMILY
    return False


# Features whose settings are not all named `<flag>-...` (SGLang's argument groups for them).
_FAMILY = {
    "--speculative-algorithm": ("--speculative-",),
    "--enable-lora": ("--lora-", "--max-lora-", "--max-loras-", "--max-loaded-loras"),
    # A node's rank and the first node's address mean something only with more than one node.
    "--nnodes": ("--node-rank", "--dist-init-addr"),
}
