"""Ports another program holds, read from what the command gives each port: another port flag of the
command (the gate of a gated launch), a one-node --dist-init-addr, and the block of ports SGLang derives
from it. Each on its blind case (corpus-real-engine-64) and a launch recorded on the real `sglang serve`
while `python3 -m http.server` held the port."""

from __future__ import annotations

from tests.recorded import blind, decided, recorded_lines

SERVE = "sglang serve --model-path /models/tiny-llama --device cpu --max-total-tokens 4096 --port 32290"


def test_another_port_flag_of_the_command_moves_past_every_port_it_names() -> None:
    contract = blind("corpus-real-engine-64", "gated-launch-port-on-first-instance-http-port")
    assert contract["edits"] == [{"op": "set_free_port", "flag": "--gated-launch-port", "start": 40321}]
    lines = recorded_lines("serve-gated-launch-port-held-by-another-program.rc124.txt")
    found = decided(f"{SERVE} --gated-launch-port 32295", lines, "hang")
    assert found["edits"] == [{"op": "set_free_port", "flag": "--gated-launch-port", "start": 32305}]
    # The busy port is none of the command's own: one derived from --port, which moves instead.
    assert decided(f"{SERVE} --gated-launch-port 32299", lines, "hang")["edits"][0]["flag"] == "--port"


def test_a_one_node_rendezvous_port_that_is_taken_is_sglangs_to_choose() -> None:
    contract = blind("corpus-real-engine-64", "second-instance-dist-init-addr-copied-from-first")
    assert contract["edits"] == [{"op": "remove", "flag": "--dist-init-addr"}]
    lines = recorded_lines("serve-dist-init-addr-port-held-one-node.rc137.txt")
    assert decided(f"{SERVE} --dist-init-addr 127.0.0.1:32301", lines)["edits"] == [
        {"op": "remove", "flag": "--dist-init-addr"}
    ]
    # Across nodes every node names that address: the person frees the port or moves all of them.
    two = f"{SERVE} --dist-init-addr 127.0.0.1:32301 --nnodes 2 --node-rank 0"
    assert decided(two, lines)["action"] == "stop"


def test_ports_derived_from_the_rendezvous_held_by_another_program_drop_the_rendezvous() -> None:
    contract = blind("corpus-real-engine-64", "dp-attention-derived-port-held-by-other-process")
    assert contract["edits"] == [{"op": "remove", "flag": "--dist-init-addr"}]
    lines = recorded_lines("serve-dp-attention-derived-port-held-by-another-program.rc1.txt")
    command = f"{SERVE} --tp-size 2 --attn-dp-size 2 --dist-init-addr 127.0.0.1:32310"
    assert decided(command, lines)["edits"] == [{"op": "remove", "flag": "--dist-init-addr"}]
    # SGLang's wait names the holder: another program, so waiting longer for "a server shutting down" is
    # not proposed even without --dist-init-addr.
    alone = decided(f"{SERVE} --tp-size 2 --attn-dp-size 2", lines)
    assert alone["edits"][0]["op"] == "set_free_port"
