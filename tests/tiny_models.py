"""config.json contents of the tiny models the simulated node and the real CPU SGLang load in tests and
benches (the same shapes as the real tiny models built by tests/sglang_env/make_tiny_models.py)."""

from __future__ import annotations

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "head_dim": 16,
    "max_position_embeddings": 512,
    "vocab_size": 1000,
}
TINY_EAGLE3 = {**TINY_LLAMA, "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1}
