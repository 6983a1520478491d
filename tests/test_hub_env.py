"""Cache variables that send the Hugging Face libraries to another folder than they name: each on its blind
case, a second launch recorded on the real `sglang serve`, and the near misses left alone."""

from __future__ import annotations

from tests.recorded import blind, decided, recorded_lines

RULE = "sglang.model.cache-variable"
SERVE = "sglang serve --model-path acme/tiny-llama --device cpu --max-total-tokens 4096"


def test_hf_home_given_as_its_hub_folder_goes_one_level_up() -> None:
    contract = blind("corpus-real-engine-60", "hf-home-set-to-hub-subfolder-offline")
    assert (contract["playbook"], contract["edits"]) == (
        RULE,
        [{"op": "set_env", "name": "HF_HOME", "value": "/data/hf"}],
    )
    lines = recorded_lines("serve-hf-home-is-the-hub-folder-offline.rc1.txt")
    found = decided(f"HF_HOME=/data/hf/hub/ HF_HUB_OFFLINE=1 {SERVE}", lines)
    assert (found["edits"], found["confidence"]) == (
        [{"op": "set_env", "name": "HF_HOME", "value": "/data/hf"}],
        0.6,
    )
    # HF_HOME elsewhere, or HF_HUB_CACHE given: the libraries read what is named.
    assert decided(f"HF_HOME=/data/hf HF_HUB_OFFLINE=1 {SERVE}", lines)["playbook"] != RULE
    assert (
        decided(f"HF_HUB_CACHE=/x HF_HOME=/data/hf/hub HF_HUB_OFFLINE=1 {SERVE}", lines)["playbook"] != RULE
    )


def test_a_retired_transformers_cache_is_given_as_hf_hub_cache() -> None:
    contract = blind("corpus-real-engine-60", "transformers-cache-env-ignored-offline")
    assert contract["edits"] == [{"op": "set_env", "name": "HF_HUB_CACHE", "value": "/data/hf/hub"}]
    lines = recorded_lines("serve-transformers-cache-not-read-offline.rc1.txt")
    found = decided(f"TRANSFORMERS_CACHE=/data/hf/hub HF_HUB_OFFLINE=1 {SERVE}", lines)
    assert (found["playbook"], found["edits"]) == (
        RULE,
        [{"op": "set_env", "name": "HF_HUB_CACHE", "value": "/data/hf/hub"}],
    )
    # Beside HF_HOME the libraries have a cache they read: the retired name is not why.
    assert decided(f"TRANSFORMERS_CACHE=/a HF_HOME=/b HF_HUB_OFFLINE=1 {SERVE}", lines)["playbook"] != RULE
