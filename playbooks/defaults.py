"""Features SGLang runs by default, which a failure implicates: turning the default off is the change.

- DeepGEMM: SGLang compiles and runs DeepGEMM kernels for FP8 on Hopper and Blackwell unless told otherwise
  (`SGLANG_ENABLE_JIT_DEEPGEMM`, default true, and its warm-up precompile `SGLANG_JIT_DEEPGEMM_PRECOMPILE`,
  default true, in srt/environ.py); a crash in DeepGEMM's code is a crash in a default the user can turn off.
- A default feature the person reporting the failure names as one of its conditions (`with ... the default
  overlap schedule enabled, ... hangs`): its --disable- switch.
"""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.suspects import MIN_WEIGHT, failing_path, ranked_suspects
from specdoctor.tools.command import SetEnv, SetFlag

_DEEPGEMM = re.compile(r"deep_?gemm", re.I)
_IN_ATTENTION = re.compile(
    r"layers/attention|apis/attention|dsa_backend|nsa_backend|indexer|mqa_logits", re.I
)
_PRECOMPILE = re.compile(r"precompile|JIT Compiling|compile_utils|warmup", re.I)
_DEEPGEMM_SWITCHES = (
    "SGLANG_ENABLE_JIT_DEEPGEMM",
    "SGL_ENABLE_JIT_DEEPGEMM",
    "SGLANG_JIT_DEEPGEMM_PRECOMPILE",
)


@playbook(
    id="sglang.default.deepgemm", category="quantization", when=("exited", "hung", "unhealthy"), priority=82
)
def deepgemm_default(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The failure is in DeepGEMM, which SGLang runs by default: its warm-up precompile off when that is
    where it failed, else JIT DeepGEMM off (SGLang's other FP8 kernels take over)."""
    env = ctx.spec.env_dict()
    if any(name in env for name in _DEEPGEMM_SWITCHES):
        return None  # the user chose; the suspects rule turns a chosen switch back
    if any(s.weight >= MIN_WEIGHT for s in ranked_suspects(ctx)):
        return None  # a setting the user chose is on the failing path: that, not a default, is the lead
    error, stack = failing_path(ctx)
    said = "\n".join(ctx.reported)
    where = "\n".join((error, stack, said))
    if not _DEEPGEMM.search(where) or _IN_ATTENTION.search(f"{where}\n{ctx.search_text}"):
        return None  # sparse attention's indexer calls DeepGEMM itself, whatever the GEMM switches say
    if _PRECOMPILE.search(where):
        name, what = "SGLANG_JIT_DEEPGEMM_PRECOMPILE", "DeepGEMM's warm-up precompile"
    else:
        name, what = "SGLANG_ENABLE_JIT_DEEPGEMM", "JIT DeepGEMM"
    return fix(
        ctx,
        [SetEnv(name=name, value="0")],
        "quantization",
        f"the failure is in DeepGEMM, which SGLang runs by default ({what})",
        why=f"{name}=0 turns {what} off (default on in SGLang's environ.py); the kernels SGLang uses without it "
        "are slower for FP8 but leave DeepGEMM's code path",
        confidence=0.45,
    )


@playbook(
    id="sglang.feature.default-named", category="other", when=("exited", "hung", "unhealthy"), priority=83
)
def default_named(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The person reporting the failure names a feature SGLang runs by default as one of its conditions
    (`with ... and the default overlap schedule enabled, ... hangs`): its --disable- switch is the lead."""
    said = "\n".join(ctx.reported)
    if not said:
        return None
    found = [
        info.name
        for info in ctx.catalog.flags
        if info.name.startswith("--disable-")
        and info.nargs == 0
        and not ctx.view.has(info.name)
        and _named_as_default(info.name.removeprefix("--disable-"), said)
    ]
    if len(found) != 1:
        return None
    return fix(
        ctx,
        [SetFlag(flag=found[0])],
        "other",
        f"the failure is reported with a feature SGLang runs by default, which {found[0]} turns off",
        why="the report names that default as a condition of the failure; running without it is the "
        "smallest change that leaves its code path",
        confidence=0.45,
    )


def _named_as_default(feature: str, said: str) -> bool:
    phrase = r"[\s_-]+".join(re.escape(w) for w in feature.split("-"))
    return bool(
        re.search(rf"\bdefault\s+(?:\w+\s+){{0,2}}{phrase}\b", said, re.I)
        or re.search(rf"\b{phrase}\s+(?:is\s+|being\s+)?(?:enabled|on)\s+by\s+default", said, re.I)
    )
