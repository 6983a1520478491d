"""Whose socket listens on a port, read from /proc against real sockets and real processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from specdoctor.tools.port_owner import listeners, port_owner


@pytest.fixture
def listening() -> socket.socket:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s


def test_our_listening_socket_is_ours(listening):
    port = listening.getsockname()[1]
    found = port_owner("127.0.0.1", port, [os.getpid()])
    assert (
        found.state == "ours" and found.detail == f"port {port} is held by pid {os.getpid()} of this launch"
    )
    assert any(x.port == port and str(x.address) == "127.0.0.1" for x in listeners())


def test_another_process_socket_is_foreign_and_named(listening):
    port = listening.getsockname()[1]
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        found = port_owner("127.0.0.1", port, [child.pid])
    finally:
        child.kill()
        child.wait()
    assert found.state == "foreign" and os.getpid() in found.pids
    assert found.detail.endswith("not by this launch")


def test_a_wildcard_listener_answers_loopback_and_an_exact_one_wins():
    with socket.socket() as wildcard:
        wildcard.bind(("0.0.0.0", 0))
        wildcard.listen()
        port = wildcard.getsockname()[1]
        assert port_owner("127.0.0.1", port, [os.getpid()]).state == "ours"
        assert port_owner("127.0.0.1", port, []).state == "foreign"


def test_nobody_listening(listening):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening
        assert port_owner("127.0.0.1", port, [os.getpid()]).state == "nobody"


def test_ipv6_loopback():
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with s:
        s.listen()
        port = s.getsockname()[1]
        assert port_owner("::1", port, [os.getpid()]).state == "ours"
        assert port_owner("::1", port, []).state == "foreign"
