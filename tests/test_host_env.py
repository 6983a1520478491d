"""The process environment a server needs on its host: a writable temporary folder, socket paths short
enough, network interfaces that exist. Each on its blind case and a second launch recorded on the real
`sglang serve` (a deep TMPDIR, /tmp and /var/tmp read-only, GLOO_SOCKET_IFNAME of an absent interface)."""

from __future__ import annotations

from tests.recorded import blind, decided, recorded_lines

SERVE = "sglang serve --model-path /models/tiny-llama --device cpu --max-total-tokens 4096"
DEEP = "/tmp/rec/gitlab-builds/group-platform/inference-serving/pipelines/job-8812734551/workspace/.cache/tmp"


def test_a_temporary_folder_too_deep_for_socket_paths_becomes_tmp() -> None:
    contract = blind("corpus-real-engine-60", "tmpdir-too-long-zmq-ipc-path")
    assert contract["edits"] == [{"op": "set_env", "name": "TMPDIR", "value": "/tmp"}]
    lines = recorded_lines("serve-tmpdir-too-deep-for-ipc-socket.rc1.txt")
    found = decided(f"TMPDIR={DEEP} {SERVE}", lines)
    # The command's own TMPDIR holds the socket: sure; one from the environment around it: a guess.
    assert (found["playbook"], found["confidence"]) == ("sglang.host.socket-path-too-long", 0.6)
    assert decided(SERVE, lines)["confidence"] == 0.45


def test_no_writable_temporary_folder_gets_the_memory_backed_one() -> None:
    contract = blind("corpus-real-engine-60", "readonly-rootfs-no-writable-tmp")
    assert contract["edits"] == [{"op": "set_env", "name": "TMPDIR", "value": "/dev/shm"}]
    lines = recorded_lines("serve-read-only-tmp-no-temp-folder.rc1.txt")
    assert decided(SERVE, lines)["edits"] == [{"op": "set_env", "name": "TMPDIR", "value": "/dev/shm"}]
    # Already there: nothing more to say by this rule.
    assert decided(f"TMPDIR=/dev/shm {SERVE}", lines)["playbook"] != "sglang.host.no-writable-temp"


def test_an_absent_network_interface_is_loopback_on_one_node_and_the_persons_across_nodes() -> None:
    contract = blind("corpus-real-engine-60", "gloo-socket-ifname-missing-interface")
    assert contract["edits"] == [{"op": "set_env", "name": "GLOO_SOCKET_IFNAME", "value": "lo"}]
    lines = recorded_lines("serve-gloo-socket-ifname-ens5-absent.rc137.txt")
    assert decided(f"GLOO_SOCKET_IFNAME=ens5 {SERVE}", lines)["edits"] == [
        {"op": "set_env", "name": "GLOO_SOCKET_IFNAME", "value": "lo"}
    ]
    two = decided(
        f"GLOO_SOCKET_IFNAME=ens5 {SERVE} --nnodes 2 --node-rank 0 --dist-init-addr 10.0.0.1:5000", lines
    )
    assert (two["playbook"], two["action"]) == ("sglang.host.network-interface-missing", "stop")
    # A variable naming another interface than the one the error names is not the one at fault.
    assert (
        decided(f"GLOO_SOCKET_IFNAME=eth0 {SERVE}", lines)["playbook"]
        != "sglang.host.network-interface-missing"
    )


def test_warnings_turned_into_errors_are_turned_back_into_warnings() -> None:
    from tests.recorded import PY

    contract = blind("corpus-real-engine-68", "pythonwarnings-error-sglang-serve")
    assert contract["edits"] == [{"op": "set_env", "name": "PYTHONWARNINGS", "value": "default"}]
    lines = recorded_lines("pythonwarnings-error-launch-server.rc1.txt")
    found = decided(f"PYTHONWARNINGS=error {PY}", lines)
    assert (found["playbook"], found["edits"]) == (
        "sglang.host.warnings-as-errors",
        [{"op": "set_env", "name": "PYTHONWARNINGS", "value": "default"}],
    )
    # The interpreter's own `-W error` is the person's to drop: said, not edited.
    stopped = decided(PY.replace("python ", "python -W error ", 1), lines)
    assert (stopped["playbook"], stopped["action"]) == ("sglang.host.warnings-as-errors", "stop")
    # No warnings-as-errors setting: the warning is not this rule's.
    assert decided(PY, lines)["playbook"] != "sglang.host.warnings-as-errors"


def test_a_proxy_without_a_loopback_bypass_is_given_one() -> None:
    contract = blind("corpus-real-engine-69", "env-http-proxy-breaks-local-warmup")
    assert (contract["edits"], contract["confidence"]) == (
        [{"op": "set_env", "name": "NO_PROXY", "value": "127.0.0.1,localhost"}],
        0.6,
    )
    lines = recorded_lines("serve-http-proxy-without-no-proxy.rc137.txt")
    proxied = f"HTTP_PROXY=http://127.0.0.1:32299 HTTPS_PROXY=http://127.0.0.1:32299 {SERVE}"
    assert decided(proxied, lines)["edits"] == [
        {"op": "set_env", "name": "NO_PROXY", "value": "127.0.0.1,localhost"}
    ]
    # The user's own bypass list is kept and extended; one that already holds the loopback is not this rule's.
    kept = decided(f"NO_PROXY=hub.internal {proxied}", lines)["edits"]
    assert kept == [{"op": "set_env", "name": "NO_PROXY", "value": "hub.internal,127.0.0.1,localhost"}]
    assert decided(f"NO_PROXY=127.0.0.1 {proxied}", lines)["playbook"] != "sglang.host.proxy-for-own-requests"


def test_docstrings_stripped_by_pythonoptimize_2_are_kept() -> None:
    contract = blind("corpus-real-engine-69", "env-pythonoptimize-2-strips-docstrings")
    assert contract["edits"] == [{"op": "set_env", "name": "PYTHONOPTIMIZE", "value": "0"}]
    lines = recorded_lines("serve-pythonoptimize-2-docstrings.rc1.txt")
    assert decided(f"PYTHONOPTIMIZE=2 {SERVE}", lines)["edits"] == [
        {"op": "set_env", "name": "PYTHONOPTIMIZE", "value": "0"}
    ]
    assert decided(f"PYTHONOPTIMIZE=1 {SERVE}", lines)["playbook"] != "sglang.host.docstrings-stripped"
