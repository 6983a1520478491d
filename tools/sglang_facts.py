"""What SGLang does, as data read from its source, per release: the one table that preflight checks,
runtime playbooks, health probes and the simulated node all read, so that no copy drifts.

Each entry names the source it was read from. A release without its own entry uses the nearest older
one (facts change rarely; flags are versioned separately, in the flag catalog).
"""

from __future__ import annotations

from functools import cache

from pydantic import BaseModel, ConfigDict, Field


class SpeculativeFacts(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    algorithms: tuple[str, ...] = Field(
        description="Built-in `--speculative-algorithm` names, after aliases are resolved."
    )
    aliases: dict[str, str] = Field(description="Names SGLang rewrites to another algorithm before checks.")
    eagle_family: tuple[str, ...] = Field(
        description="Algorithms that run a draft head with steps/topk/tokens."
    )
    mtp_targets: tuple[str, ...] = Field(
        description="Target architectures whose checkpoint carries its own MTP layers: with no draft path, "
        "SGLang uses the target path as the draft (`_handle_eagle_family`)."
    )
    mtp_targets_with_separate_draft: tuple[str, ...] = Field(
        description="MTP targets for which a separate draft path is normal (no 'does not require' warning)."
    )
    no_spec_backends: tuple[str, ...] = Field(
        description="Attention backends that cannot verify draft tokens: SGLang accepts them and crashes later."
    )
    tree_paged_backends: tuple[str, ...] = Field(
        description="The only backends that run tree drafting (topk > 1) with --page-size > 1."
    )
    chain_only_backends: tuple[str, ...] = Field(description="Backends that verify only topk = 1 drafts.")
    no_dp_attention: tuple[str, ...] = Field(description="Algorithms SGLang refuses with DP attention.")
    pd_decode_algorithms: tuple[str, ...] = Field(
        description="Algorithms whose draft state the prefill→decode hand-over of PD disaggregation carries."
    )
    draft_kinds: dict[str, str] = Field(
        default_factory=dict,
        description="The kind of draft model each algorithm loads from --speculative-draft-model-path (an "
        "EAGLE-3 head is no EAGLE head, and a plain small model is neither); NGRAM loads none.",
    )

    def same_draft(self, algorithm: str, other: str) -> bool:
        """Whether a draft made for `algorithm` is also one `other` loads."""
        kind = self.draft_kinds.get(algorithm.upper())
        return kind is not None and kind == self.draft_kinds.get(other.upper())


class Acceptance(BaseModel):
    """Mean accepted tokens per verify step that a working drafter reaches (1.0: no draft token accepted).

    A measured value at or under `none_accepted` means the draft is useless; under `working` it is weak
    (reported, never a reason to kill a server by itself)."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    none_accepted: float = 1.05
    working: dict[str, float] = Field(
        description="Per algorithm: the accept length a matched drafter clearly exceeds. NGRAM drafts from "
        "the prompt, so its level depends on the text and is far lower on a short probe."
    )
    default_working: float = 1.3

    def working_for(self, algorithm: str | None) -> float:
        return self.working.get(algorithm or "", self.default_working)


class Endpoints(BaseModel):
    """HTTP paths of a running server (`http_server.py`)."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    health: str = Field("/health", description="503 while starting; also runs a 1-token generation.")
    health_generate: str = Field("/health_generate", description="Always generates one token.")
    ready: str = Field("/ready", description="200 once the tokenizer manager is ready; no generation.")
    server_info: str = Field("/server_info", description="Resolved server args, `internal_states`.")
    server_info_old: str = Field("/get_server_info", description="Old name of /server_info, logs a warning.")
    model_info: str = "/model_info"
    model_info_old: str = "/get_model_info"
    models: str = Field("/v1/models", description="200 before the server is ready: not a readiness signal.")
    generate: str = "/generate"
    chat: str = "/v1/chat/completions"
    completions: str = "/v1/completions"
    metrics: str = Field("/metrics", description="404 unless --enable-metrics.")
    ping: str = "/ping"


OPENAI_SAMPLING_NAMES = {
    "max_tokens": "max_new_tokens",
    "max_completion_tokens": "max_new_tokens",
    "min_tokens": "min_new_tokens",
    "seed": "sampling_seed",
}
"""The OpenAI API's names (vLLM's and OpenAI's docs) of SGLang's sampling parameters."""


_SAMPLING_PARAMS = (
    "max_new_tokens",
    "stop",
    "stop_token_ids",
    "stop_regex",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "min_new_tokens",
    "n",
    "beam_width",
    "json_schema",
    "regex",
    "ebnf",
    "structural_tag",
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "no_stop_trim",
    "stream_interval",
    "logit_bias",
    "sampling_seed",
    "custom_params",
    "watermark",
    "stop_strs",
    "stop_regex_strs",
    "stop_str_max_len",
    "stop_regex_max_len",
    "is_normalized",
    "ebnf_full_assistant",
)
"""srt/sampling/sampling_params.py (0.5.23): the fields of `class SamplingParams(msgspec.Struct)`."""


class EngineFacts(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    version: str = Field(description="The release these facts were read from.")
    source: str = Field(description="Where in that release's source they come from.")
    speculative: SpeculativeFacts
    acceptance: Acceptance
    endpoints: Endpoints = Endpoints()
    portable_values: tuple[str, ...] = Field(
        default=("triton", "flashinfer", "fa3", "auto"),
        description="Backend names that run on most NVIDIA/AMD GPUs, preferred when a check allows several.",
    )
    serve_options: dict[str, tuple[str, ...]] = Field(
        default_factory=dict,
        description="Options `sglang serve` itself takes before handing the rest to a backend, with their "
        "choices (its --help's 'Optional override' line).",
    )
    chat_templates: tuple[str, ...] = Field(
        default=(),
        description="Names --chat-template accepts besides a file: the conversation templates SGLang registers.",
    )
    random_id_warmups: tuple[str, ...] = Field(
        default=(),
        description="--warmups names whose requests are random token ids drawn from [0, 65536) "
        "(srt/entrypoints/warmup.py), which index past a smaller vocabulary's embedding.",
    )
    completion_templates: tuple[str, ...] = Field(
        default=(),
        description="Names --completion-template accepts besides a file: the code-completion (fill-in-the-middle) "
        "templates SGLang registers; chat templates are not among them.",
    )

    sampling_params: tuple[str, ...] = Field(
        default=(),
        description="Keys SamplingParams takes (--preferred-sampling-params, a request's sampling_params); "
        "empty where not read.",
    )

    def named_values(self, flag: str) -> tuple[str, ...]:
        """Values of a free-text flag that name something built into SGLang (not a user's file or text)."""
        named = {"--chat-template": self.chat_templates, "--completion-template": self.completion_templates}
        return named.get(flag, ())


# srt/parser/conversation.py: register_conv_template(Conversation(name=...)).
_CHAT_TEMPLATES = (
    "llama-2",
    "mistral",
    "devstral",
    "llama-4",
    "phi-4-mm",
    "chatml",
    "chatml-llava",
    "vicuna_v1.1",
    "llama_3_vision",
    "llava_llama_3",
    "internlm2-chat",
    "internvl-2-5",
    "qwen2-vl",
    "deepseek-vl2",
    "gemma-it",
    "minicpmv",
    "janus-pro",
    "minicpmo",
    "kimi-vl",
    "qwen2-audio",
)
# srt/parser/code_completion_parser.py: register_completion_template(CompletionTemplate(name=...)).
_COMPLETION_TEMPLATES = ("deepseek_coder", "star_coder", "qwen_coder")


_MTP_TARGETS = (
    "DeepseekV3ForCausalLM",
    "DeepseekV32ForCausalLM",
    "DeepseekV4ForCausalLM",
    "Glm4MoeForCausalLM",
    "Glm4MoeLiteForCausalLM",
    "GlmMoeDsaForCausalLM",
    "BailingMoeForCausalLM",
    "BailingMoeV2ForCausalLM",
    "BailingMoeV2_5ForCausalLM",
    "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration",
    "HYV3ForCausalLM",
    "HYV4ForCausalLM",
    "Qwen4ExpForConditionalGeneration",
)


# srt/speculative/spec_info.py: each algorithm's draft worker and the model class it builds.
_DRAFT_KINDS = {
    "EAGLE": "eagle",
    "NEXTN": "eagle",
    "EAGLE3": "eagle3",
    "STANDALONE": "model",
    "DFLASH": "dflash",
    "DSPARK": "dspark",
    "UNO": "uno",
    "FROZEN_KV_MTP": "frozen-kv-mtp",
}


@cache
def releases() -> dict[str, EngineFacts]:
    """The table, built on first use (a command-line run that needs no facts does not pay for it)."""
    return {
        "0.5.23": EngineFacts(
            version="0.5.23",
            source="srt/arg_groups/speculative_hook.py (_handle_eagle_family, resolve checks), "
            "srt/entrypoints/http_server.py, srt/speculative/spec_info.py",
            speculative=SpeculativeFacts(
                algorithms=(
                    "DFLASH",
                    "UNO",
                    "DSPARK",
                    "EAGLE",
                    "EAGLE3",
                    "FROZEN_KV_MTP",
                    "STANDALONE",
                    "NGRAM",
                ),
                aliases={"NEXTN": "EAGLE"},
                eagle_family=("EAGLE", "EAGLE3", "NEXTN", "STANDALONE"),
                mtp_targets=_MTP_TARGETS,
                mtp_targets_with_separate_draft=(
                    "MistralLarge3ForCausalLM",
                    "PixtralForConditionalGeneration",
                ),
                no_spec_backends=("torch_native", "flex_attention"),
                tree_paged_backends=("flashinfer", "fa3", "triton"),
                chain_only_backends=("trtllm_mha",),
                no_dp_attention=("NGRAM", "STANDALONE"),
                pd_decode_algorithms=("EAGLE", "EAGLE3", "NEXTN"),
                draft_kinds=_DRAFT_KINDS,
            ),
            acceptance=Acceptance(working={"NGRAM": 1.1}),
            serve_options={"--model-type": ("auto", "llm", "diffusion")},
            chat_templates=_CHAT_TEMPLATES,
            completion_templates=_COMPLETION_TEMPLATES,
            random_id_warmups=("voice_chat", "prefill_shapes"),
            sampling_params=_SAMPLING_PARAMS,
        ),
    }


def _key(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.split("."):
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


@cache
def facts_for(version: str | None = None) -> EngineFacts:
    """The facts of `version`: its own entry, the nearest older one, or (unknown/older than all) the oldest."""
    ordered = sorted(releases().values(), key=lambda f: _key(f.version))
    if version is None:
        return ordered[-1]
    older = [f for f in ordered if _key(f.version) <= _key(version)]
    return older[-1] if older else ordered[0]
