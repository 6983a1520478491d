"""What torch.distributed and gloo print when the nodes of a multi-node launch cannot meet or lose each other.

Frames and messages are copied from real SGLang 0.5.23 runs with torch 2.13 (CPU, two node ranks on one
host): tests/data/sglang-outputs/multinode-rank0-peer-missing.rc137.txt (node rank 0 alone: the TCPStore
times out waiting for clients), multinode-rank1-peer-missing.rc137.txt (node rank 1 alone: its client
socket times out) and multinode-rank0-peer-killed.rc137.txt (node rank 1 SIGKILLed while serving: rank 0's
request broadcast fails). Only the install prefix is the simulator's own. A `--dist-init-addr` SGLang cannot
parse is built from the 0.5.23 source instead (`bad_address`).
"""

from __future__ import annotations

import errno
import os
import time

from specdoctor.tools.simnode.tracebacks import SITE

_S = SITE + "/sglang/srt"
_TORCH = SITE + "/torch"
_GLOO_PAIR = "/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537"

_RENDEZVOUS = f"""Traceback (most recent call last):
  File "{_S}/managers/scheduler.py", line 6362, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args)
                ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/managers/scheduler.py", line 536, in __init__
    bootstrap.init_parallel_runtime(
  File "{_S}/distributed/bootstrap.py", line 152, in init_parallel_runtime
    _init_parallel_groups(
  File "{_S}/distributed/bootstrap.py", line 322, in _init_parallel_groups
    init_distributed_environment(
  File "{_S}/distributed/parallel_state.py", line 2517, in init_distributed_environment
    torch.distributed.init_process_group(
  File "{_TORCH}/distributed/c10d_logger.py", line 83, in wrapper
    return func(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^
  File "{_TORCH}/distributed/c10d_logger.py", line 97, in wrapper
    func_return = func(*args, **kwargs)
                  ^^^^^^^^^^^^^^^^^^^^^
  File "{_TORCH}/distributed/distributed_c10d.py", line 1892, in init_process_group
    store, rank, world_size = next(rendezvous_iterator)
                              ^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_TORCH}/distributed/rendezvous.py", line 232, in _tcp_rendezvous_handler
    store = _create_c10d_store(
            ^^^^^^^^^^^^^^^^^^^
  File "{_TORCH}/distributed/rendezvous.py", line 199, in _create_c10d_store
    return TCPStore(
           ^^^^^^^^^
"""

_BROADCAST = f"""Traceback (most recent call last):
  File "{_S}/managers/scheduler.py", line 6368, in run_scheduler_process
    scheduler.run_event_loop()
  File "{_S}/managers/scheduler.py", line 2010, in run_event_loop
    dispatch_event_loop(self)
  File "{_S}/managers/scheduler.py", line 6215, in dispatch_event_loop
    return _dispatch_event_loop_once(scheduler)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/managers/scheduler.py", line 6231, in _dispatch_event_loop_once
    scheduler.event_loop_overlap()
  File "{_TORCH}/utils/_contextlib.py", line 124, in decorate_context
    return func(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/managers/scheduler.py", line 2078, in event_loop_overlap
    self.ingest_requests()
  File "{_S}/managers/scheduler.py", line 2205, in ingest_requests
    self.request_receiver.recv_requests(local_reqs=local_reqs)
  File "{_S}/observability/scheduler_stage_metrics.py", line 186, in wrapper
    return profiled_func(self, *args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/utils/nvtx_utils.py", line 109, in wrapper
    return func(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/managers/scheduler_components/request_receiver.py", line 101, in recv_requests
    recv_reqs = self._broadcast_reqs_across_ranks(recv_reqs, local_reqs)
                ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/managers/scheduler_components/request_receiver.py", line 206, in _broadcast_reqs_across_ranks
    recv_reqs = broadcast_pyobj(
                ^^^^^^^^^^^^^^^^
  File "{_S}/utils/common.py", line @LINE@, in broadcast_pyobj
    dist.broadcast(tensor_size, src=src, group=dist_group)
  File "{_TORCH}/distributed/c10d_logger.py", line 83, in wrapper
    return func(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^
  File "{_TORCH}/distributed/distributed_c10d.py", line 3151, in broadcast
    work.wait()
"""
_BROADCAST_SOURCE, _BROADCAST_RECEIVER = 2715, 2730
"""broadcast_pyobj's lines on the source rank (TP0 of node 0) and on every other rank."""


def store_timeout(timeout_s: float, joined: int, world: int) -> str:
    """Node rank 0's TCPStore gave up waiting for the other nodes' ranks to connect."""
    return (
        _RENDEZVOUS + f"torch.distributed.DistStoreError: Timed out after {int(timeout_s) + 1} seconds "
        f"waiting for clients. {joined}/{world} clients joined.\n"
    )


def store_bind_failed(port: int, code: int) -> str:
    """Node rank 0 could not listen on the --dist-init-addr port."""
    name = errno.errorcode.get(code, str(code))
    return (
        _RENDEZVOUS
        + "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
        f"network address. port: {port}, useIpv6: false, code: -{code}, name: {name}, "
        f"message: {os.strerror(code).lower()}\n"
    )


def client_timeout_lines(timeout_s: float, host: str, port: int) -> str:
    """The c10d lines a node rank prints when it never reaches node rank 0's store (before the traceback)."""
    ms = int(timeout_s * 1000)
    said = f"The client socket has timed out after {ms}ms while trying to connect to ({host}, {port})."
    return (
        f"[E{_glog_stamp()} socket.cpp:1028] [c10d] {said}\n"
        f"[E{_glog_stamp()} TCPStore.cpp:328] [c10d] TCP client failed to connect/validate to host "
        f"{host}:{port} - timed out (try=1, timeout={ms}ms): {said}\n"
    )


def client_timeout(timeout_s: float, host: str, port: int) -> str:
    ms = int(timeout_s * 1000)
    return (
        _RENDEZVOUS
        + f"torch.distributed.DistNetworkError: The client socket has timed out after {ms}ms while "
        f"trying to connect to ({host}, {port}).\n"
    )


def peer_lost(host: str, peer_port: int, *, source: bool) -> str:
    """A node's broadcast of the next requests fails: the other end of a gloo pair is gone."""
    line = _BROADCAST_SOURCE if source else _BROADCAST_RECEIVER
    return (
        _BROADCAST.replace("@LINE@", str(line))
        + f"RuntimeError: [{_GLOO_PAIR}] Read error [{host}]:{peer_port}: "
        "Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the "
        "application. Check the logs of the remote worker before reporting an error. GLHF! \U0001f3d6\ufe0f\n"
    )


def _glog_stamp() -> str:
    """`MMDD HH:MM:SS.nanoseconds`, the timestamp of torch's C++ log lines."""
    now = time.time()
    return time.strftime("%m%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1e9):09d}"


_PARSE = f"""  File "{_S}/managers/scheduler.py", line 536, in __init__
    bootstrap.init_parallel_runtime(
  File "{_S}/distributed/bootstrap.py", line 127, in init_parallel_runtime
    dist_init_method = _resolve_dist_init_method(dist_port=dist_port)
                       ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/distributed/bootstrap.py", line 242, in _resolve_dist_init_method
    na = NetworkAddress.parse(get_parallel().dist_init_addr)
         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
"""
"""Built from the 0.5.23 source (utils/network.py NetworkAddress.parse): no CPU run recorded these."""


def bad_address(addr: str) -> str | None:
    """The traceback of `--dist-init-addr` that NetworkAddress.parse refuses (a plain host:port form), or
    None when it parses."""
    host, sep, port = addr.rpartition(":")
    head = _RENDEZVOUS.split('  File "' + _S + '/managers/scheduler.py", line 536')[0] + _PARSE
    if not sep:
        return head + (
            f'  File "{_S}/utils/network.py", line 635, in parse\n'
            '    raise ValueError(f"Missing port in address (expected host:port): {addr!r}")\n'
            f"ValueError: Missing port in address (expected host:port): {addr!r}\n"
        )
    if not host:
        return head + (
            f'  File "{_S}/utils/network.py", line 638, in parse\n'
            '    raise ValueError(f"Empty host in address: {addr!r}")\n'
            f"ValueError: Empty host in address: {addr!r}\n"
        )
    if port.isdigit() and int(port) <= 65535:
        return None
    parse_port = (
        f'  File "{_S}/utils/network.py", line 645, in parse\n'
        "    return NetworkAddress(host, _parse_port(port_str))\n"
        "                                ^^^^^^^^^^^^^^^^^^^^^\n"
    )
    if port.isdigit():
        return (
            head
            + parse_port
            + (
                f'  File "{_S}/utils/network.py", line 537, in _parse_port\n'
                '    raise ValueError(f"Port out of range (0-65535): {port}")\n'
                f"ValueError: Port out of range (0-65535): {int(port)}\n"
            )
        )
    return (
        "Traceback (most recent call last):\n"
        f'  File "{_S}/utils/network.py", line 533, in _parse_port\n'
        "    port = int(s)\n"
        "           ^^^^^^\n"
        f"ValueError: invalid literal for int() with base 10: {port!r}\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        + head
        + parse_port
        + f'  File "{_S}/utils/network.py", line 535, in _parse_port\n'
        '    raise ValueError(f"Invalid port number: {s!r}")\n'
        f"ValueError: Invalid port number: {port!r}\n"
    )
