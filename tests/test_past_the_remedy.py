"""An engine remedy that leads into the next check of the same path, one this device fails whatever the
settings: the switch the user gave goes instead (two blind cases, -10 and -26, and the real launch that
follows the remedy and meets that next check)."""

from __future__ import annotations

import json

from tests.recorded import DATA, SERVE, blind, decided, recorded_lines

OFF = {"op": "remove", "flag": "--enable-mamba-cache-stochastic-rounding"}


def test_the_remedy_that_meets_a_cuda_only_check_is_not_proposed_on_cpu() -> None:
    # "Run with --mamba-ssm-dtype float16 or disable --enable-mamba-cache-stochastic-rounding"; the next
    # check under the same switch is `not get_platform().is_cuda`.
    assert blind("corpus-real-engine-26", "mamba-stochastic-rounding-on-non-mamba-cpu")["edits"] == [OFF]
    assert blind("corpus-real-engine-10", "mamba-stochastic-rounding-without-float16")["edits"] == [OFF]
    # Following the remedy on the real engine meets exactly that check.
    lines = recorded_lines("mamba-stochastic-rounding-float16-on-cpu-serve.rc1.txt")
    assert any("only supported on NVIDIA CUDA platforms" in line for line in lines)
    command = f"{SERVE} --enable-mamba-cache-stochastic-rounding --mamba-ssm-dtype float16"
    assert decided(command, lines)["edits"] == [OFF]


def test_on_a_gpu_the_engines_remedy_stands() -> None:
    # The same failure from a launch on the default device (a GPU): the CUDA check passes there.
    case = json.loads(
        (DATA / "corpus-real-engine-26" / "mamba-stochastic-rounding-on-non-mamba-cpu.json").read_text()
    )
    on_gpu = decided(case["command"].replace("--device cpu ", ""), case["log"].splitlines())
    assert on_gpu["edits"] == [{"op": "set", "flag": "--mamba-ssm-dtype", "values": ["float16"]}]


def test_a_host_pool_larger_than_the_free_host_memory_gets_half_of_it() -> None:
    # --hicache-size is in GB and overrides --hicache-ratio; SGLang reports what the host has free.
    assert blind("corpus-real-engine-26", "hicache-size-exceeds-host-memory")["edits"] == [
        {"op": "set", "flag": "--hicache-size", "values": ["5"]}
    ]
    assert blind("corpus-fresh-3", "hicache-size-exceeds-free-host-memory")["edits"] == [
        {"op": "set", "flag": "--hicache-size", "values": ["22"]}
    ]
    name = next(
        p.name for p in (DATA / "sglang-outputs").glob("hicache-size-200-over-free-host-memory-serve.rc*")
    )
    first = decided(f"{SERVE} --enable-hierarchical-cache --hicache-size 200", recorded_lines(name))
    assert first["playbook"] == "sglang.memory.hicache-host-too-small"
    assert first["edits"] == [{"op": "set", "flag": "--hicache-size", "values": ["6"]}]


def test_the_commands_own_port_given_twice_keeps_the_servers_address() -> None:
    # --nccl-port equal to --port: the HTTP bind fails ([Errno 98]) and SGLang hangs; --port is the address.
    drop = [{"op": "remove", "flag": "--nccl-port"}]
    assert blind("corpus-real-engine-28", "nccl-port-equals-http-port-hangs")["edits"] == drop
    assert blind("corpus-real-engine-11", "nccl-port-same-as-http-port-hangs")["edits"] == drop
    lines = recorded_lines("nccl-port-equals-port-serve-hangs.rc137.txt")
    first = decided(f"{SERVE} --port 32290 --nccl-port 32290", lines, "hang")
    assert (first["playbook"], first["edits"]) == ("sglang.network.http-port", drop)
    # Another server on the port: the server moves, as before.
    other = decided(f"{SERVE} --port 32290", lines, "hang")
    assert other["edits"] and other["edits"][0]["op"] == "set_free_port"
