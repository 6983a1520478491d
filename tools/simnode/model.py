"""What the simulated SGLang reads from a model folder's real config.json, failing as SGLang fails."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.simnode import tracebacks
from specdoctor.tools.simnode.failure import ResolveFailure

# get_context_length's key order (sglang/srt/utils/hf_transformers/common.py): the first present wins.
_REPO_ID = re.compile(r"[\w.-]+/[\w.-]+")
"""`org/name`: SGLang asks the Hub for it; the simulated node is offline and has no Hub cache."""
_CONTEXT_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)


class ModelConfig(BaseModel):
    model_config = ConfigDict(frozen=True)
    path: str
    architectures: tuple[str, ...]
    model_type: str
    num_attention_heads: int = 32
    num_key_value_heads: int = 8
    head_dim: int = 128
    hidden_size: int = 4096
    intermediate_size: int = 14336
    num_hidden_layers: int = 32
    vocab_size: int = 32000
    context_len: int = Field(description="SGLang's derived context length.")
    tie_word_embeddings: bool = False
    mla: bool = Field(default=False, description="Multi-head latent attention (KV not split across TP).")
    dtype: str = "bfloat16"

    @property
    def architecture(self) -> str:
        return self.architectures[0] if self.architectures else "LlamaForCausalLM"

    @property
    def is_eagle3_draft(self) -> bool:
        return any("eagle3" in a.lower() for a in self.architectures)

    def estimated_weights_gib(self) -> float:
        """Parameter count x 2 bytes, for a model the node profile does not list."""
        h, layers = self.hidden_size, self.num_hidden_layers
        attn = h * h * 2 + 2 * h * self.num_key_value_heads * self.head_dim
        mlp = 3 * h * self.intermediate_size
        embed = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return (embed + layers * (attn + mlp)) * 2 / 2**30

    def kv_bytes_per_token(self) -> int:
        """bf16 K and V of every layer at tp 1."""
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * 2


def read_model(path: str, *, draft: bool = False) -> ModelConfig:
    """The folder's config.json; a path that is no folder or has no usable config fails like SGLang."""
    folder = Path(os.path.expanduser(path))
    if not folder.is_dir():
        if _REPO_ID.fullmatch(path):
            raise ResolveFailure(tracebacks.hub_unreachable(draft=draft))
        text = tracebacks.path_missing(path, draft=draft)
        raise ResolveFailure(text)
    try:
        raw = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        raw = {}
    if not isinstance(raw, dict) or not isinstance(raw.get("model_type"), str):
        raise ResolveFailure(tracebacks.config_missing(path))
    text_config = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else {}
    merged = {**raw, **text_config}
    heads = _int(merged, "num_attention_heads", 32)
    hidden = _int(merged, "hidden_size", 4096)
    return ModelConfig(
        path=path,
        architectures=tuple(a for a in raw.get("architectures") or () if isinstance(a, str)),
        model_type=raw["model_type"],
        num_attention_heads=heads,
        num_key_value_heads=_int(merged, "num_key_value_heads", heads),
        head_dim=_int(merged, "head_dim", max(1, hidden // max(1, heads))),
        hidden_size=hidden,
        intermediate_size=_int(merged, "intermediate_size", hidden * 4),
        num_hidden_layers=_int(merged, "num_hidden_layers", 32),
        vocab_size=_int(merged, "vocab_size", 32000),
        context_len=_context_length(merged),
        tie_word_embeddings=bool(merged.get("tie_word_embeddings", False)),
        mla="kv_lora_rank" in merged,
        dtype=str(merged.get("torch_dtype") or merged.get("dtype") or "bfloat16"),
    )


def _int(raw: dict, key: str, default: int) -> int:
    value = raw.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _context_length(raw: dict) -> int:
    rope = raw.get("rope_scaling") if isinstance(raw.get("rope_scaling"), dict) else None
    factor = 1.0
    if rope:
        factor = rope.get("factor", 1)
        if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
            factor = 1
    for key in _CONTEXT_KEYS:
        if isinstance(raw.get(key), int):
            return int(factor * raw[key])
    return 2048
