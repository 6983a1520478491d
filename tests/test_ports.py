"""Port probing and the server URL, for IPv4, IPv6 and names, against real sockets."""

from __future__ import annotations

import socket

import pytest

from specdoctor.agent.attempt import base_url
from specdoctor.playbooks.view import CommandView
from specdoctor.tools.catalog_load import bundled
from specdoctor.tools.command import LaunchCommand
from specdoctor.tools.system import find_free_port, port_is_free

CAT = bundled("0.5.23")


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_a_listening_ipv4_port_is_busy() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert not port_is_free(port, "127.0.0.1")
        assert find_free_port(port, "127.0.0.1") != port


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback")
def test_a_listening_ipv6_port_is_busy() -> None:
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
        s.bind(("::1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert not port_is_free(port, "::1")
        assert not port_is_free(port, "[::1]")


def test_an_unresolvable_host_is_not_called_a_busy_port() -> None:
    assert port_is_free(30000, "no-such-host.invalid")


@pytest.mark.parametrize(
    ("host", "url"),
    [
        (None, "http://127.0.0.1:8000"),
        ("0.0.0.0", "http://127.0.0.1:8000"),
        ("::", "http://[::1]:8000"),
        ("::1", "http://[::1]:8000"),
        ("[fe80::1]", "http://[fe80::1]:8000"),
        ("node-3", "http://node-3:8000"),
    ],
)
def test_base_url(host: str | None, url: str) -> None:
    cmd = "python -m sglang.launch_server --model-path m --port 8000" + (f" --host {host}" if host else "")
    assert base_url(CommandView(LaunchCommand.parse(cmd), CAT)) == url


def test_a_free_port_edit_is_resolved_on_this_host_before_launch() -> None:
    """Rules say "a free port from N" (they cannot probe); the loop picks one that is free here."""
    from specdoctor.agent.review import resolve_ports
    from specdoctor.playbooks.decision import Fix
    from specdoctor.tools.command import SetFreePort

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        command = LaunchCommand.parse(f"python -m sglang.launch_server --model-path M --port {busy - 1}")
        fix = Fix(category="port-in-use", summary="port taken", edits=(SetFreePort(start=busy),))
        nominal = command.apply_all(fix.edits)
        assert nominal.value("--port") == str(busy)  # unresolved: the start
        resolved = resolve_ports(nominal, fix)
        port = int(resolved.value("--port"))
        assert port > busy and port_is_free(port, "127.0.0.1")


@pytest.mark.parametrize(
    "name",
    [
        "ssl-key-cert-mismatch",
        "ssl-encrypted-key-without-password",
        "ssl-encrypted-key-wrong-password",
        "ssl-certificate-passed-as-keyfile",
    ],
)
def test_a_tls_pair_that_does_not_load_is_served_without_tls_for_a_person_to_confirm(name: str) -> None:
    from tests.recorded import blind

    contract = blind("corpus-real-engine-50", name)
    assert contract["playbook"] == "sglang.network.tls-pair-does-not-load" and contract["confidence"] < 0.5


def test_which_file_to_mend_is_said_from_uvicorns_error() -> None:
    from specdoctor.agent.diagnose import decide
    from tests.recorded import SERVE, context, recorded_lines

    lines = recorded_lines("serve-ssl-key-of-another-certificate.rc1.txt")
    command = f"{SERVE} --ssl-certfile /certs/a.crt --ssl-keyfile /certs/b.key"
    decision = decide(context(command, lines))
    assert [e.describe() for e in decision.edits] == ["remove --ssl-certfile", "remove --ssl-keyfile"]
    assert "not the certificate's" in decision.why
    # Without TLS flags in the command, a TLS error is someone else's (a client's, a proxy's).
    assert decide(context(SERVE, lines)).playbook != "sglang.network.tls-pair-does-not-load"


def test_sglangs_own_warmup_refusing_its_certificate_drops_the_ca_it_verifies_with() -> None:
    from tests.recorded import SERVE, blind, decided, recorded_lines

    assert blind("corpus-real-engine-50", "ssl-ca-certs-cert-without-ip-san-warmup-fails")["edits"] == [
        {"op": "remove", "flag": "--ssl-ca-certs"}
    ]
    lines = recorded_lines("serve-ssl-ca-certs-cert-without-ip-san.rc137.txt")
    tls = f"{SERVE} --ssl-certfile /certs/a.crt --ssl-keyfile /certs/a.key"
    found = decided(f"{tls} --ssl-ca-certs /certs/a.crt", lines)
    assert (found["playbook"], found["edits"]) == (
        "sglang.network.tls-own-warmup-unverified",
        [{"op": "remove", "flag": "--ssl-ca-certs"}],
    )
    assert decided(tls, lines)["playbook"] != found["playbook"]  # no CA of the command's to take back
