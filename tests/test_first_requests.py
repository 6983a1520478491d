"""Launch settings the server starts with and its first requests fail on, and other lessons of
corpus-real-engine-7 (2/12 on arrival): each rule on its blind case and on a second real launch of SGLang
0.5.23 recorded here (most with a request sent after ready), with the near miss it must not take."""

from __future__ import annotations

import pytest

from specdoctor.playbooks.value_checks import check_values, out_of_range
from specdoctor.playbooks.view import CommandView
from specdoctor.tools.command import LaunchCommand
from tests.recorded import PY, SERVE, blind, decided, recorded_lines
from tests.test_corpus_scores import CAT


def _decided(command: str, name: str, kind: str = "startup-crash") -> dict:
    return decided(command, recorded_lines(name), kind)


def _blind(name: str) -> dict:
    return blind("corpus-real-engine-7", name)


CASES = [
    # (blind case, its rule, second recording, its command, outcome kind, the edits on the second)
    (
        "skip-tokenizer-init-chat-request-500",
        "sglang.request.no-tokenizer",
        "skip-tokenizer-init-completions-request.rc0.txt",
        f"{SERVE} --port 32290 --skip-tokenizer-init",
        "runs-but-degraded",
        [{"op": "remove", "flag": "--skip-tokenizer-init"}],
    ),
    (
        "is-embedding-on-causal-lm-crashes-on-chat",
        "sglang.request.embedding-model-generates",
        "is-embedding-completions-request.rc137.txt",
        f"{SERVE} --port 32290 --is-embedding",
        "runtime-crash",
        [{"op": "remove", "flag": "--is-embedding"}],
    ),
    (
        "generation-config-top-k-zero-rejects-chat",
        "sglang.request.sampling-default-rejected",
        "generation-config-top-p-zero-chat-request.rc0.txt",
        "python -m sglang.launch_server --model-path /models/tiny-llama-topp0 --device cpu --max-total-tokens 4096 "
        "--port 32290",
        "runs-but-degraded",
        [{"op": "set", "flag": "--sampling-defaults", "values": ["openai"]}],
    ),
    (
        "preferred-sampling-params-top-p-as-percent-fails-warmup",
        "sglang.request.sampling-default-rejected",
        "preferred-sampling-params-min-p-above-one.rc137.txt",
        f"{PY} --port 32290 --preferred-sampling-params '{{\"min_p\": 2}}'",
        "startup-crash",
        [{"op": "remove", "flag": "--preferred-sampling-params"}],
    ),
    (
        "chat-template-jinja-unclosed-for-block",
        "sglang.request.chat-template-broken",
        "chat-template-file-unclosed-for.rc137.txt",
        f"{PY} --port 32290 --chat-template /tmp/rec/broken-template.jinja",
        "runs-but-degraded",
        [{"op": "remove", "flag": "--chat-template"}],
    ),
    (
        "max-total-tokens-zero-not-enough-memory",
        "sglang.memory.kv-pool-empty",
        "max-total-tokens-zero-serve.rc137.txt",
        "sglang serve --model-path /models/tiny-llama --device cpu --port 32290 --max-total-tokens 0",
        "startup-crash",
        [{"op": "remove", "flag": "--max-total-tokens"}],
    ),
    (
        "env-external-model-package-not-importable",
        "sglang.hardware.missing-module",
        "external-model-package-missing-serve.rc137.txt",
        f"SGLANG_EXTERNAL_MODEL_PACKAGE=acme_sglang_models {SERVE} --port 32290",
        "startup-crash",
        [{"op": "set_env", "name": "SGLANG_EXTERNAL_MODEL_PACKAGE", "value": ""}],
    ),
]


@pytest.mark.parametrize(
    ("blind", "rule", "recorded", "command", "kind", "edits"), CASES, ids=[c[0] for c in CASES]
)
def test_each_rule_on_its_blind_case_and_a_second_real_launch(
    blind: str, rule: str, recorded: str, command: str, kind: str, edits: list
) -> None:
    assert _blind(blind)["playbook"] == rule
    second = _decided(command, recorded, kind)
    assert second["playbook"] == rule, second
    assert second["edits"] == edits


@pytest.mark.parametrize(
    ("recorded", "command", "kind"),
    [
        # The same answers without the setting that caused them: nothing of the command to take back.
        ("skip-tokenizer-init-completions-request.rc0.txt", f"{SERVE} --port 32290", "runs-but-degraded"),
        ("is-embedding-completions-request.rc137.txt", f"{SERVE} --port 32290", "runtime-crash"),
        ("external-model-package-missing-serve.rc137.txt", f"{SERVE} --port 32290", "startup-crash"),
    ],
)
def test_without_the_setting_the_rule_takes_nothing_back(recorded: str, command: str, kind: str) -> None:
    decided = _decided(command, recorded, kind)
    assert decided["playbook"] not in (
        "sglang.request.no-tokenizer",
        "sglang.request.embedding-model-generates",
    )
    assert {"op": "set_env", "name": "SGLANG_EXTERNAL_MODEL_PACKAGE", "value": ""} not in decided["edits"]


def test_an_adapter_sglang_cannot_load_is_a_stop() -> None:
    assert _blind("lora-dora-adapter-unsupported")["action"] == "stop"
    second = _decided(
        f"{SERVE} --port 32290 --enable-lora --lora-paths d2=/adapters/dora", "dora-adapter-serve.rc137.txt"
    )
    assert (second["playbook"], second["action"]) == ("sglang.model.adapter-kind-unsupported", "stop")


def test_sampling_defaults_are_checked_before_launch_as_sglang_verifies_them() -> None:
    assert out_of_range({"top_p": 95, "top_k": 0, "min_p": 0.5, "temperature": 0.7}).keys() == {
        "top_p",
        "top_k",
    }
    (bad,) = check_values(
        CommandView(LaunchCommand.parse(f"{PY} --preferred-sampling-params '{{\"top_p\": 95}}'"), CAT)
    )
    assert bad.severity == "error" and "warm-up" in bad.message
    # The warm-up sends its own temperature: a bad default one fails only requests that leave it out.
    (warned,) = check_values(
        CommandView(LaunchCommand.parse(f"{PY} --preferred-sampling-params '{{\"temperature\": -1}}'"), CAT)
    )
    assert warned.severity == "warning"
    (empty,) = check_values(CommandView(LaunchCommand.parse(f"{PY} --max-total-tokens 0"), CAT))
    assert empty.edits and empty.flag == "--max-total-tokens"


def test_a_request_without_the_servers_api_key_is_the_clients_to_fix_never_the_keys_removal() -> None:
    contract = blind("corpus-real-engine-14", "api-key-chat-request-without-bearer", solved=False)
    assert (contract["action"], contract["playbook"], contract["edits"]) == (
        "stop",
        "sglang.request.api-key-missing",
        [],
    )
    lines = recorded_lines("api-key-generate-request-without-key.rc137.txt")
    keyed = decided(f"{SERVE} --api-key sk-recorded-test", lines, "runs-but-degraded")
    assert (keyed["playbook"], keyed["action"]) == ("sglang.request.api-key-missing", "stop")
    # A 401 from a server launched without a key is not about this one's key.
    assert decided(SERVE, lines, "runs-but-degraded")["playbook"] != "sglang.request.api-key-missing"


def test_a_chat_template_file_sglang_cannot_read_as_one_is_taken_back() -> None:
    contract = blind("corpus-real-engine-14", "chat-template-hf-tokenizer-config-json")
    assert (contract["playbook"], contract["edits"]) == (
        "sglang.request.chat-template-unreadable",
        [{"op": "remove", "flag": "--chat-template"}],
    )
    lines = recorded_lines("chat-template-generation-config-json-serve.rc1.txt")
    command = f"{SERVE} --chat-template /models/tiny-llama/generation_config.json"
    assert decided(command, lines)["playbook"] == "sglang.request.chat-template-unreadable"
    # The same crash in a launch without --chat-template is the model's template: not this rule's.
    assert decided(SERVE, lines)["playbook"] != "sglang.request.chat-template-unreadable"


def test_a_completion_template_sglang_does_not_register_is_respelled_or_taken_back() -> None:
    # --completion-template has its own short list (fill-in-the-middle templates), not the chat ones.
    contract = blind("corpus-real-engine-21", "completion-template-given-chat-template-name")
    assert contract["edits"] == [{"op": "remove", "flag": "--completion-template"}]
    lines = recorded_lines("completion-template-dash-spelling.rc1.txt")
    respelled = decided(f"{PY} --completion-template deepseek-coder", lines)
    assert (respelled["playbook"], respelled["edits"]) == (
        "sglang.serving.unknown-chat-template",
        [{"op": "set", "flag": "--completion-template", "values": ["deepseek_coder"]}],
    )
    # Without the flag the same line is not this command's to fix.
    assert decided(PY, lines)["playbook"] != "sglang.serving.unknown-chat-template"


def test_a_named_chat_template_the_model_does_not_have_is_taken_back() -> None:
    # SGLang logs the names the tokenizer_config.json holds, then dies elsewhere on the unselected list.
    # The names are the log's (untrusted) words: shown to the person, never set by the tool.
    contract = blind("corpus-real-engine-21", "hf-chat-template-name-not-in-named-templates")
    assert contract["edits"] == [{"op": "remove", "flag": "--hf-chat-template-name"}]
    lines = recorded_lines("hf-chat-template-name-wrong-case.rc1.txt")
    command = "python -m sglang.launch_server --model-path /models/tiny-llama-named-templates --device cpu"
    wrong_case = decided(f"{command} --hf-chat-template-name RAG", lines)
    assert (wrong_case["playbook"], wrong_case["edits"]) == (
        "sglang.serving.unknown-hf-template-name",
        [{"op": "remove", "flag": "--hf-chat-template-name"}],
    )
    assert decided(command, lines)["playbook"] != "sglang.serving.unknown-hf-template-name"


def test_a_tokenizer_file_given_for_the_tokenizer_folder_becomes_its_folder() -> None:
    # SGLang reads a --tokenizer-path ending in .json as a tiktoken file: a HF file there fails in that reader.
    contract = blind("corpus-real-engine-21", "tokenizer-path-points-at-tokenizer-json-file")
    assert contract["edits"] == [{"op": "remove", "flag": "--tokenizer-path"}]
    lines = recorded_lines("tokenizer-path-tokenizer-config-json-file.rc1.txt")  # tiktoken not installed
    own = decided(f"{PY} --tokenizer-path /models/tiny-llama/tokenizer_config.json", lines)
    assert (own["playbook"], own["edits"]) == (
        "sglang.model.tokenizer-file-read-as-tiktoken",
        [{"op": "remove", "flag": "--tokenizer-path"}],
    )
    other = decided(f"{PY} --tokenizer-path /data/tok/tokenizer.json", lines)
    assert other["edits"] == [{"op": "set", "flag": "--tokenizer-path", "values": ["/data/tok"]}]
    # A real tiktoken file needs the package: not this rule's.
    tiktoken = decided(f"{PY} --tokenizer-path /data/tok/grok-2.json", lines)
    assert tiktoken["playbook"] != "sglang.model.tokenizer-file-read-as-tiktoken"


def test_a_warmup_of_random_ids_past_the_models_vocabulary_is_taken_back() -> None:
    # voice_chat and prefill_shapes draw token ids from [0, 65536): a smaller vocabulary's embedding fails.
    contract = blind("corpus-real-engine-21", "warmups-voice-chat-on-small-vocab-model")
    assert contract["edits"] == [{"op": "remove", "flag": "--warmups"}]
    lines = recorded_lines("warmups-prefill-shapes-small-vocab.rc137.txt")
    assert decided(f"{PY} --warmups prefill_shapes", lines)["edits"] == [
        {"op": "remove", "flag": "--warmups"}
    ]
    # Another warm-up of the user's stays.
    assert decided(f"{PY} --warmups prefill_shapes,mine", lines)["edits"] == [
        {"op": "set", "flag": "--warmups", "values": ["mine"]}
    ]
    # The same crash without those warm-ups is the model's (a tokenizer from a larger vocabulary).
    assert decided(PY, lines)["playbook"] != "sglang.serving.warmup-ids-beyond-the-vocabulary"


def test_relaunch_with_a_flag_is_the_engines_remedy() -> None:
    # "Please relaunch with --enable-streaming-session" (tokenizer_control_mixin), "Re-run with --x=v".
    from specdoctor.tools.engine_source.remedies import remedies

    contract = blind("corpus-real-engine-25", "streaming-session-open-without-server-flag")
    assert contract["edits"] == [{"op": "set", "flag": "--enable-streaming-session", "values": []}]
    lines = recorded_lines("streaming-session-disabled-serve.rc137.txt")
    first = decided(SERVE, lines, "runs-but-degraded")
    assert first["edits"] == [{"op": "set", "flag": "--enable-streaming-session", "values": []}]
    found = remedies("Re-run with --fp8-gemm-backend=flashinfer_cutlass.", CAT)
    assert [r.edit.values for r in found if r.edit] == [("flashinfer_cutlass",)]


def test_a_completion_budget_over_the_context_is_cut_by_sglang_when_allowed() -> None:
    # tokenizer_manager: with --allow-auto-truncate, max_new_tokens shrinks to what the context leaves.
    contract = blind("corpus-real-engine-25", "max-tokens-1024-over-model-context-512")
    assert contract["edits"] == [{"op": "set", "flag": "--allow-auto-truncate", "values": []}]
    lines = recorded_lines("completion-budget-over-model-context-serve.rc137.txt")
    first = decided(SERVE, lines, "runs-but-degraded")
    assert (first["playbook"], first["edits"]) == (
        "sglang.model.prompt-too-long",
        [{"op": "set", "flag": "--allow-auto-truncate", "values": []}],
    )
    # Already allowed and still refused (the prompt alone is too long): not this rule's.
    allowed = decided(f"{SERVE} --allow-auto-truncate", lines, "runs-but-degraded")
    assert {"op": "set", "flag": "--allow-auto-truncate", "values": []} not in allowed["edits"]


@pytest.mark.parametrize(
    "name",
    [
        "tool-call-parser-glm47-on-llama-required-ignored",
        "tool-call-parser-kimi-k3-on-llama-structural-tag-vocab",
    ],
)
def test_a_tool_parser_of_another_family_becomes_the_models_own(name: str) -> None:
    from tests.recorded import blind

    contract = blind("corpus-real-engine-46", name)
    assert contract["edits"] == [{"op": "set", "flag": "--tool-call-parser", "values": ["llama3"]}]
    assert contract["confidence"] < 0.5


def test_the_models_family_is_read_from_its_name_and_only_one_parser_of_it_is_taken() -> None:
    from tests.recorded import DATA, SERVE, decided

    # Recorded on the real `sglang serve`: mistral's parser on a Llama, `tool_choice: required`.
    path = DATA / "sglang-outputs" / "serve-tool-call-parser-mistral-on-llama-required.degraded.txt"
    lines = path.read_text().splitlines()
    found = decided(f"{SERVE} --tool-call-parser mistral", lines, "runs-but-degraded")
    assert (found["playbook"], found["edits"]) == (
        "sglang.request.tool-parser-of-another-family",
        [{"op": "set", "flag": "--tool-call-parser", "values": ["llama3"]}],
    )
    qwen = SERVE.replace("tiny-llama", "Qwen2.5-7B-Instruct")
    assert decided(f"{qwen} --tool-call-parser mistral", lines, "runs-but-degraded")["edits"] == [
        {"op": "set", "flag": "--tool-call-parser", "values": ["qwen25"]}
    ]
    # The parser of the model's own family failing is another fault; a family with no parser gets no guess.
    assert (
        decided(f"{SERVE} --tool-call-parser llama3", lines, "runs-but-degraded")["playbook"]
        != found["playbook"]
    )
    phi = SERVE.replace("tiny-llama", "phi-4")
    assert (
        decided(f"{phi} --tool-call-parser mistral", lines, "runs-but-degraded")["playbook"]
        != found["playbook"]
    )
