"""A port below 1024 the server's user may not bind: uvicorn says "permission denied" and the server waits
forever. On its blind case and a second launch recorded on the real `sglang serve` as a non-root user."""

from __future__ import annotations

from tests.recorded import DATA, blind, decided

RULE = "sglang.network.privileged-port"


def test_a_privileged_port_moves_to_sglangs_own_range() -> None:
    contract = blind("corpus-real-engine-60", "nonroot-user-port-80-permission-denied-hang")
    assert (contract["playbook"], contract["confidence"]) == (RULE, 0.6)
    assert contract["edits"][0]["op"] == "set_free_port"
    lines = (
        (DATA / "sglang-outputs" / "serve-nonroot-port-443-permission-denied.hang.txt")
        .read_text()
        .splitlines()
    )
    serve = "sglang serve --model-path /models/tiny-llama --device cpu --max-total-tokens 4096"
    assert decided(f"{serve} --port 443", lines, "hang")["playbook"] == RULE
    # An unprivileged port refused for another reason is not this rule's.
    assert decided(f"{serve} --port 8080", lines, "hang")["playbook"] != RULE
