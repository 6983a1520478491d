"""A request longer than the server takes: the KV pool the command capped, or a model config whose context
is shorter than SGLang's own warm-up request (each on its blind case and a second real log)."""

from __future__ import annotations

from tests.recorded import SERVE, blind, decided, recorded_lines

TOO_LONG = "sglang.model.prompt-too-long"


def test_a_model_config_shorter_than_the_warm_up_gets_a_context_the_server_can_start_with() -> None:
    contract = blind("corpus-real-engine-17", "config-max-position-embeddings-below-warmup-prompt")
    assert contract["edits"] == [
        {"op": "set", "flag": "--context-length", "values": ["4096"]},
        {"op": "set_env", "name": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "value": "1"},
    ]
    lines = recorded_lines("model-context-20-below-warmup-serve.rc137.txt")
    command = SERVE.replace("/models/tiny-llama", "/tmp/rec/models/tiny-llama-ctx20")
    decision = decided(command, lines)
    assert (decision["playbook"], decision["confidence"]) == (TOO_LONG, 0.45)
    # A pool of 4096 tokens is not what turned a 28-token prompt away.
    assert {"op": "remove", "flag": "--max-total-tokens"} not in decision["edits"]


def test_a_pool_the_command_capped_is_the_limit_only_when_the_limit_is_the_pools() -> None:
    contract = blind("corpus-real-engine-13", "max-total-tokens-too-small-rejects-prompt")
    assert contract["edits"] == [{"op": "remove", "flag": "--max-total-tokens"}]


def test_a_page_as_large_as_the_pool_is_taken_back() -> None:
    # One page in the whole KV pool: the warm-up request is never scheduled (it waits, then times out).
    contract = blind("corpus-real-engine-15", "page-size-equals-kv-pool-hangs-warmup")
    assert contract["edits"] == [{"op": "remove", "flag": "--page-size"}]
    lines = recorded_lines("page-size-one-page-pool-hangs-serve.rc137.txt")
    command = SERVE.replace("--max-total-tokens 4096", "--page-size 4096 --max-total-tokens 6000")
    assert decided(command, lines)["edits"] == [{"op": "remove", "flag": "--page-size"}]
    # Two pages leave room: no such finding (the timeout is then another fault's).
    two = SERVE.replace("--max-total-tokens 4096", "--page-size 2048 --max-total-tokens 4096")
    assert {"op": "remove", "flag": "--page-size"} not in decided(two, lines)["edits"]


def test_an_embedding_input_over_the_context_is_truncated_for_the_person_to_confirm() -> None:
    # An embedding generates nothing after its input: the first tokens are embedded (the usual remedy of
    # embedding pipelines); a generation prompt over the context stays a stop (no room left to answer).
    contract = blind("corpus-real-engine-58", "embedding-input-longer-than-context-without-auto-truncate")
    assert (contract["playbook"], contract["edits"], contract["confidence"]) == (
        TOO_LONG,
        [{"op": "set", "flag": "--allow-auto-truncate", "values": []}],
        0.45,
    )
    lines = recorded_lines("serve-embedding-input-over-context.rc137.txt")
    assert decided(f"{SERVE} --is-embedding", lines)["edits"] == [
        {"op": "set", "flag": "--allow-auto-truncate", "values": []}
    ]
    assert decided(SERVE, lines)["action"] == "stop"
