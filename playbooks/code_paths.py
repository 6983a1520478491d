"""Which chosen setting governs the code a failure ran through, when no word of the error names it:

- a switch whose own `--help` names the module (`--enable-deterministic-inference` "with batch invariant
  ops", and the trace runs through `batch_invariant_ops.py`);
- a part of SGLang's source that one kind of setting selects: a crash inside `srt/layers/attention/` runs the
  attention backend the command chose, one inside `srt/mem_cache/` the cache it switched on. SGLang's source
  tree is laid out by feature, and the flags that pick each feature's code are its own.
"""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context
from specdoctor.playbooks.naming import GENERIC, squeeze, words_of
from specdoctor.tools.help_parser import FlagInfo

_PLAIN = frozenset(
    [
        "the",
        "a",
        "an",
        "of",
        "to",
        "for",
        "with",
        "and",
        "or",
        "in",
        "on",
        "is",
        "be",
        "by",
        "this",
        "that",
        "when",
        "if",
        "it",
        "as",
        "at",
        "from",
        "use",
        "used",
        "will",
        "not",
        "only",
        "default",
        "which",
        "are",
        "can",
        "its",
        "than",
        "set",
        "into",
        "per",
        "all",
        "each",
    ]
)
_CODE_PLACE = re.compile(r"(?P<file>[\w./-]+\.py)\b(?:\"?,? line \d+|:\d+)?(?:,? +in \w+)?")
"""A source location as a traceback or a pretty-printed trace writes it: `model_runner.py", line 631, in
init_cuda_graphs`, `sglang/srt/layers/x.py:568  in mm`."""
AREAS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("attention backend", re.compile(r"^--(?:(?:prefill|decode|mm|speculative-draft)-)?attention-backend$")),
    ("mixture-of-experts layer", re.compile(r"^--(?:moe-runner-backend|moe-a2a-backend|deepep-mode)$")),
    (
        "KV and prefix cache",
        re.compile(
            r"^--(?:enable-hierarchical-cache|hicache-[a-z-]+|radix-cache-backend|"
            r"disable-radix-cache|enable-unified-memory)$"
        ),
    ),
    ("LoRA adapters", re.compile(r"^--(?:enable-lora|lora-[a-z-]+|max-lora-rank|max-loras-per-batch)$")),
    ("quantized layers", re.compile(r"^--(?:quantization|fp8-gemm-backend|fp4-gemm-backend)$")),
    ("grammar backend", re.compile(r"^--grammar-backend$")),
    ("PD disaggregation", re.compile(r"^--disaggregation-[a-z-]+$")),
)
"""Each part of SGLang's source (by the folder in `_FOLDERS`) and the flags that choose what runs there."""
_FOLDERS = {
    "attention backend": re.compile(r"/srt/layers/attention/"),
    "mixture-of-experts layer": re.compile(r"/srt/layers/moe/"),
    "KV and prefix cache": re.compile(r"/srt/mem_cache/"),
    "LoRA adapters": re.compile(r"/srt/lora/"),
    "quantized layers": re.compile(r"/srt/layers/quantization/"),
    "grammar backend": re.compile(r"/srt/constrained/"),
    "PD disaggregation": re.compile(r"/srt/disaggregation/"),
}


def described_by_help(flag: str, info: FlagInfo | None, ctx: Context) -> tuple[str, ...] | None:
    """The three words of a switch's `--help` that name the failing module, if they do. Three distinctive
    words in a row, found in a frame's file or function, tie them; fewer tie half the engine to every flag,
    and help that restates the flag's own name says no more than the name does."""
    if info is None:
        return None
    frames = " ".join(f"{f.path} {f.function}" for f in ctx.root.frames)
    code = squeeze(f"{frames} {' '.join(source_files(ctx))}")
    words = [w.lower() for w in re.findall(r"[A-Za-z][A-Za-z0-9]*", info.help or "")]
    own = set(words_of(flag))
    for i in range(len(words) - 2):
        three = words[i : i + 3]
        distinctive = all(len(w) >= 3 and w not in _PLAIN and w not in GENERIC for w in three)
        if distinctive and not set(three) <= own and "".join(three) in code:
            return tuple(three)
    return None


def source_files(ctx: Context) -> list[str]:
    """Source files a trace printed in another shape names (`sglang/srt/x/y.py:305  in fn`)."""
    return [m["file"] for m in _CODE_PLACE.finditer(ctx.log_text or ctx.root_text)]


def code_locations(ctx: Context) -> list[str]:
    """Every place in Python code the log shows the failure passing through, in order: traceback frames and
    the file mentions of traces printed in other shapes (rich, loguru, a pasted excerpt)."""
    places = [f"{f.path} in {f.function}" for f in ctx.root.frames]
    places += [m.group(0) for m in _CODE_PLACE.finditer(ctx.log_text or ctx.root_text)]
    return list(dict.fromkeys(places))


def area_of(flag: str, ctx: Context) -> str | None:
    """The part of SGLang's source the failure ran through that `flag` chooses the code of, if any: its
    innermost SGLang frames (or, without frames, the SGLang files the log names)."""
    area = next((name for name, flags in AREAS if flags.match(flag)), None)
    if area is None:
        return None
    places = [f.path for f in ctx.root.frames if "/srt/" in f.path] or [
        path for path in source_files(ctx) if "/srt/" in path
    ]
    # The innermost few places are where it broke; a scheduler frame above every crash says nothing.
    return area if any(_FOLDERS[area].search(path) for path in places[-4:]) else None
