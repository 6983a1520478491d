"""The simulated node as one node of a multi-node launch: node ranks meeting over real TCP on 127.0.0.1,
failing as real SGLang 0.5.23 does when a node never comes or dies (compared with the real recordings in
tests/data/sglang-outputs/multinode-*), and stopping together."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import time

from specdoctor.tools.logs import extract_root_cause
from tests import test_simnode as sim

launch = sim.launch
models = sim.models
RECORDED_SITE = "/opt/sglang-cpu/lib/python3.11/site-packages"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _nodes(launch, *args: str, nnodes: int = 2, addr: str | None = None, profile: str | None = None) -> list:
    addr = addr or f"127.0.0.1:{_port()}"
    multi = ("--nnodes", str(nnodes), "--dist-init-addr", addr)
    return [launch(*args, *multi, "--node-rank", str(rank), profile=profile) for rank in range(nnodes)]


def _recorded(name: str) -> str:
    return (sim.OUTPUTS / name).read_text().split("# ---- stdout+stderr ----\n")[1]


def _as_recorded(text: str) -> str:
    """Our traceback in the recording's install prefix, with the numbers a run chooses (ports) masked."""
    text = text.replace(sim.SITE, RECORDED_SITE)
    return re.sub(r"\[127\.0\.0\.1\]:\d+", "[127.0.0.1]:PORT", text)


def _traceback(text: str) -> str:
    start = text.index("Traceback (most recent call last):")
    return _as_recorded(text[start : text.index("\n\n", start)])


def test_tp16_over_two_h200_nodes_meets_and_only_node_rank_0_serves(launch, models) -> None:
    zero, one = _nodes(launch, "--model-path", models["Llama-3.1-70B-Instruct"], "--tp-size", "16")
    zero.ready()
    one.wait_for("Tree cache initialized")
    # Each node hosts eight of the sixteen TP ranks on its own eight GPUs, each GPU a 1/16 share.
    assert {f"TP{r}]" for r in range(8)} <= {x.split()[2] for x in zero.lines if " TP" in x}
    assert {f"TP{r}]" for r in range(8, 16)} == {x.split()[2] for x in one.lines if " TP" in x}
    share = next(x for x in zero.lines if "Load weight end" in x)
    assert share == next(x for x in one.lines if "Load weight end" in x).replace(" TP8]", " TP0]")
    assert "max_total_num_tokens=" in zero.text and "max_total_num_tokens=" not in one.text
    assert "Uvicorn running" not in one.text and "Using default HuggingFace chat template" not in one.text
    code, out = zero.post("/generate", {"text": "Hello", "sampling_params": {"max_new_tokens": 8}})
    assert code == 200 and len(out["output_ids"]) == 8
    assert json.loads(zero.get("/server_info")[1])["tp_size"] == 16
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", one.port)) != 0  # node rank 1 serves no HTTP
    # Node rank 1 waits for node rank 0's ShutdownReq; stopping node rank 0 stops both, cleanly.
    one.proc.send_signal(signal.SIGTERM)
    one.wait_for("SIGTERM received on node_rank 1; waiting for the rank-0 ShutdownReq broadcast")
    time.sleep(0.3)
    assert one.proc.poll() is None
    zero.proc.send_signal(signal.SIGTERM)
    assert zero.exit_code() == 0 and one.exit_code() == 0


def test_node_rank_0_alone_times_out_like_torchs_store(launch, models) -> None:
    args = ("--model-path", models["tiny-llama"], "--tp-size", "2", "--dist-timeout", "10")
    node = launch(*args, "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", f"127.0.0.1:{_port()}")
    node.wait_for("Init parallel begin.")
    time.sleep(0.1)
    assert node.proc.poll() is None and "Load weight" not in node.text  # waiting: a hang, not a crash
    assert node.exit_code() == -signal.SIGKILL
    recorded = _recorded("multinode-rank0-peer-missing.rc137.txt")
    assert _traceback(node.text) == _traceback(recorded)
    assert node.lines[-2].endswith(
        "Received sigquit from a child process. It usually means the child failed."
    )


def test_node_rank_1_alone_times_out_like_torchs_client(launch, models) -> None:
    addr = "127.0.0.1:29721"  # the recording's; nothing listens there
    args = ("--model-path", models["tiny-llama"], "--tp-size", "2", "--dist-timeout", "10")
    node = launch(*args, "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", addr)
    assert node.exit_code() == -signal.SIGKILL
    recorded = _recorded("multinode-rank1-peer-missing.rc137.txt")
    assert _traceback(node.text) == _traceback(recorded)
    said = "The client socket has timed out after 10000ms while trying to connect to (127.0.0.1, 29721)."
    c10d = [re.sub(r"^\[E\d{4} [\d:.]+ ", "[E ", x) for x in node.lines if x.startswith("[E")]
    assert c10d == [
        f"[E socket.cpp:1028] [c10d] {said}",
        "[E TCPStore.cpp:328] [c10d] TCP client failed to connect/validate to host 127.0.0.1:29721 - timed out "
        f"(try=1, timeout=10000ms): {said}",
    ]
    assert f"[c10d] {said}" in recorded
    assert " TP1] Scheduler hit an exception" in node.text


def test_a_taken_rendezvous_port_fails_node_rank_0_as_torch_does(launch, models) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        node = launch(
            "--model-path", models["tiny-llama"], "--tp-size", "2", "--nnodes", "2", "--node-rank", "0",
            "--dist-init-addr", f"127.0.0.1:{port}",
        )  # fmt: skip
        assert node.exit_code() == -signal.SIGKILL
    assert (
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
        f"address. port: {port}, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use"
    ) in node.lines


def test_a_node_that_dies_takes_the_other_down_like_real_sglang(launch, models) -> None:
    zero, one = _nodes(launch, "--model-path", models["tiny-llama"], "--tp-size", "2")
    zero.ready()
    one.wait_for("Tree cache initialized")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(one.proc.pid, signal.SIGKILL)
    assert zero.exit_code() == -signal.SIGKILL
    recorded = _recorded("multinode-rank0-peer-killed.rc137.txt")
    assert _traceback(zero.text) == _traceback(recorded)
    assert " TP0] Scheduler hit an exception" in zero.text
    ending = [re.sub(r"^\[[^]]*\] ", "", x) for x in zero.lines[-4:]]
    assert ending[:3] == [re.sub(r"^\[[^]]*\] ", "", x) for x in recorded.splitlines()[-4:-1]]
    assert ending[3].startswith("kill_process_tree called: parent_pid=")


def test_a_fault_injected_on_one_node_only_hits_that_node(launch, models, tmp_path) -> None:
    profile = sim.write_profile(tmp_path, crash_after_ready_s=0.3, node_rank=1)
    zero, one = _nodes(launch, "--model-path", models["tiny-llama"], "--tp-size", "2", profile=profile)
    zero.ready()
    assert one.exit_code() == -signal.SIGKILL and zero.exit_code() == -signal.SIGKILL
    assert "an illegal memory access was encountered" in one.text
    assert " TP1] Scheduler hit an exception" in one.text
    assert "illegal memory access" not in zero.text and "Connection reset by peer" in zero.text
    # Node rank 1 runs no tokenizer manager: its launch-phase SIGQUIT handler answers.
    assert "Received sigquit from a child process" in one.text and "SIGQUIT received" in zero.text


def test_a_rendezvous_address_without_a_port_is_refused_by_the_scheduler(launch, models) -> None:
    args = ("--model-path", models["tiny-llama"], "--tp-size", "2", "--nnodes", "2", "--node-rank", "0")
    node = launch(*args, "--dist-init-addr", "10.0.0.1")
    assert node.exit_code() == -signal.SIGKILL
    assert "ValueError: Missing port in address (expected host:port): '10.0.0.1'" in node.lines
    assert (
        extract_root_cause(node.lines).message == "Missing port in address (expected host:port): '10.0.0.1'"
    )
    assert "Load weight" not in node.text
