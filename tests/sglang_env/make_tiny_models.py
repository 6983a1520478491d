"""Build, offline, the tiny models the real-SGLang tests launch.

usage: python make_tiny_models.py OUTDIR
  OUTDIR/tiny-llama   LlamaForCausalLM, 2 layers, random safetensors weights, a byte-level BPE tokenizer
  OUTDIR/tiny-eagle3  an EAGLE-3 draft config (LlamaForCausalLMEagle3) with the same tokenizer, no weights
                      (launch it with --speculative-draft-load-format dummy)

Runs inside the SGLang test venv (transformers, tokenizers, torch, safetensors).
"""

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers


def train_tokenizer():
    from transformers import PreTrainedTokenizerFast

    words = [f"tok{i}" for i in range(1500)] + ["hello", "world", "the", "quick", "brown", "fox", "jumps"]
    lines = [" ".join(words[i : i + 16]) for i in range(0, len(words), 16)] * 2
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(lines, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    return fast


def main(out: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    target, draft = out / "tiny-llama", out / "tiny-eagle3"
    target.mkdir(parents=True, exist_ok=True)
    draft.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer()
    tokenizer.save_pretrained(target)
    shape = dict(
        hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16
    )
    config = LlamaConfig(
        vocab_size=1000,
        num_hidden_layers=2,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
        torch_dtype="float32",
        **shape,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(target, safe_serialization=True)
    draft_config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "num_hidden_layers": 1,
        "vocab_size": 1000,
        "draft_vocab_size": 1000,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "rope_theta": 10000.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        **shape,
    }
    (draft / "config.json").write_text(json.dumps(draft_config, indent=2))
    tokenizer.save_pretrained(draft)
    print("tiny models in", out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
