"""Whether a text names a setting: its distinctive words, written as whole words, in any spelling
(`expert_distribution`, `ExpertDistribution`, `expert-distribution`)."""

from __future__ import annotations

import re

# Words too common in logs or flag names to tie an error to one setting.
GENERIC = frozenset(
    [
        "enable",
        "disable",
        "use",
        "spec",
        "speculative",
        "cuda",
        "graph",
        "cache",
        "mode",
        "size",
        "backend",
        "attention",
        "model",
        "decode",
        "prefill",
        "server",
        "support",
        "path",
        "max",
        "min",
        "num",
        "custom",
        "kernel",
        "sglang",
        "sgl",
        "true",
        "false",
        "none",
        "auto",
        "config",
        "type",
        # Words every engine message uses in another sense ("tokens", "requests"): alone they name nothing.
        "token",
        "tokens",
        "total",
        "requests",
        "params",
    ]
)


def squeeze(text: str) -> str:
    """Lower case without separators, so `expert_distribution`, `ExpertDistribution` and
    `expert-distribution` read alike."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def field_of(flag: str) -> str:
    """The ServerArgs field a flag sets, as SGLang's code reads it (`--base-gpu-id` → `base_gpu_id`)."""
    return flag.lstrip("-").replace("-", "_").lower()


def words_of(name: str) -> list[str]:
    """The distinctive words of a flag, value or variable name."""
    parts = re.split(r"[-_.:/=\s]+", name.lower().lstrip("-"))
    return [w for w in parts if len(w) >= 3 and w not in GENERIC and not w.isdigit()]


def named_in(name: str, text: str, every: bool = False) -> tuple[str, ...]:
    """The words of `name` the text shows, when they are most of its words (`every`: all of them) and one
    is long enough to be distinctive (≥5 letters, or the whole of a one-word name); else ()."""
    words = words_of(name)
    if not words:
        # Every word is a common one (`--max-total-tokens`): only the whole name, as one identifier, names it.
        return named_exactly(name, text) if len(re.split(r"[-_.\s]+", name.strip("-"))) > 1 else ()
    squeezed = squeeze(text)
    hits = tuple(w for w in words if w in squeezed and _shown_as_word(w, text))
    enough = (len(hits) == len(words) if every else len(hits) * 2 >= len(words)) and any(
        len(w) >= 5 or len(words) == 1 for w in hits
    )
    return hits if words and enough else ()


def named_exactly(name: str, text: str) -> tuple[str, ...]:
    """The words of `name` when the text writes it as a whole identifier of its own (`block_size`, not
    `weight_block_size`): for another engine's name of a setting, whose words SGLang uses for other things."""
    parts = re.split(r"[-_.\s]+", name.lower().lstrip("-"))
    spelled = r"[-_ ]?".join(re.escape(p) for p in parts)
    found = re.search(rf"(?<![A-Za-z0-9_])(?i:{spelled})(?![A-Za-z0-9_])", text)
    return tuple(parts) if found else ()


def _shown_as_word(word: str, text: str) -> bool:
    """`word` ends a word of the text (`context` in `context_length` or `ContextLength`, not in
    `contextlib`), and a short one also begins it (`fp8` in `Fp8MoEMethod`, not `mla` in `formlayer`); a
    name written run together (`flashinfer` in `FlashInferBackend`) counts as one word."""
    start = r"(?<![A-Za-z0-9])" if len(word) < 5 else ""
    letters = "[^A-Za-z0-9]*".join(re.escape(c) for c in word)
    # A plural is the same word (`embeddings` for --is-embedding).
    return re.search(rf"(?i:{start}{letters}s?)(?![a-z])", text) is not None


_CATEGORIES = (
    (r"speculative|eagle|draft|ngram|spec", "spec-config"),
    # Before attention and MoE: --attn-cp-size and --moe-dp-size size groups of ranks, not kernels.
    (r"(?:tp|pp|dp|ep|cp).size|parallel|nnodes", "tp-config"),
    (r"attention|attn|mla", "attention-backend"),
    (r"quantiz|fp8|fp4|awq|gptq|moe|deepgemm|gemm", "quantization"),
    (r"cuda.graph|graph_runner|torch.compile|piecewise", "cuda-graph"),
    (r"mem.fraction|max.total.tokens|chunked.prefill|memory", "oom"),
    (r"context.len", "context-length"),
)


def category_of(names: str) -> str:
    """The failure family a setting (or a check's fields and file) belongs to."""
    for pattern, category in _CATEGORIES:
        if re.search(pattern, names, re.I):
            return category
    return "other"
