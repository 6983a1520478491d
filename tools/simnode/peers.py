"""The node ranks of a multi-node launch meeting over real TCP, as torch.distributed makes them meet.

Node rank 0 listens on the `--dist-init-addr` port (torch's TCPStore server) and every other node rank
connects to it; nobody loads weights before all have joined. A missing node is a wait that ends, after the
`--dist-timeout` (torch's default 600 s for a CUDA launch), in torch's own error on each side. The
connections then stay open, standing for the gloo pairs SGLang broadcasts each step's requests over: the
scheduler's event loop uses them, so a node that dies makes every other node fail at its next broadcast
(`Connection reset by peer`). Node rank 0 stops the others on a graceful shutdown (SGLang's ShutdownReq).

The wire protocol is one ASCII word per line: `hello <rank>` and `ready` from a node rank to node rank 0,
`go` and `shutdown` back.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.simnode import dist_tracebacks as dt
from specdoctor.tools.simnode.failure import SchedulerFailure
from specdoctor.tools.simnode.logging_fmt import Log
from specdoctor.tools.simnode.pacing import Pacer, Stopped

DEFAULT_DIST_TIMEOUT_S = 600.0
"""torch's default process-group timeout for NCCL (SGLang passes none unless --dist-timeout is given)."""
POLL_S = 0.05


class NodePlace(BaseModel):
    """Where this node rank sits in the launch: its peers' rendezvous and the TP ranks it hosts."""

    model_config = ConfigDict(frozen=True)
    nnodes: int
    node_rank: int
    addr: str | None = Field(description="`--dist-init-addr` as given.")
    host: str = Field(description="The rendezvous host (`--dist-init-addr`), node rank 0's store.")
    port: int
    tp_ranks: tuple[int, ...] = Field(description="Global TP ranks whose schedulers run on this node.")
    world: int = Field(description="Every rank of the launch, all nodes (torch's world size).")
    timeout_s: float = Field(description="Nominal seconds to wait for the other nodes.")

    @classmethod
    def of(cls, args: dict[str, Any]) -> NodePlace:
        tp, pp, nnodes, node_rank = (
            args["tp_size"],
            args["pp_size"] or 1,
            args["nnodes"] or 1,
            args["node_rank"],
        )
        # Engine._launch_subprocesses: nodes split a pipeline stage's TP ranks when there are more nodes
        # than stages; with fewer, each node hosts whole stages.
        nodes_per_stage = max(nnodes // pp, 1)
        per_node = max(tp // nodes_per_stage, 1)
        first = per_node * (node_rank % nodes_per_stage)
        host, port = _address(args)
        return cls(
            addr=args["dist_init_addr"],
            nnodes=nnodes,
            node_rank=node_rank,
            host=host,
            port=port,
            tp_ranks=tuple(range(first, first + per_node)),
            world=tp * pp,
            timeout_s=float(args["dist_timeout"] or DEFAULT_DIST_TIMEOUT_S),
        )

    @property
    def gpus(self) -> int:
        """GPUs this node uses: its TP ranks in each pipeline stage it hosts."""
        return self.world // self.nnodes if self.nnodes > 1 else self.world


def _address(args: dict[str, Any]) -> tuple[str, int]:
    """`--dist-init-addr host:port`; without it every node picks its own port, so they never meet."""
    addr = args["dist_init_addr"]
    if addr:  # one SGLang refuses fails in `Peers.join`, where SGLang parses it
        host, _, port = addr.rpartition(":")
        return host.strip("[]") or "127.0.0.1", int(port) if port.isdigit() else 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "127.0.0.1", s.getsockname()[1]


class _Link:
    """The connection to one other node rank, read line by line."""

    def __init__(self, sock: socket.socket, peer: int) -> None:
        self.sock, self.peer = sock, peer
        self.peer_port = sock.getpeername()[1]
        self.ready = threading.Event()
        self.lost = threading.Event()
        self._buffer = b""

    def send(self, word: str) -> bool:
        try:
            self.sock.sendall(f"{word}\n".encode())
            return True
        except OSError:
            self.lost.set()
            return False

    def read(self, until: float | None) -> str | None:
        """The next line; None when the connection closed or `until` (monotonic) passed first."""
        while b"\n" not in self._buffer:
            left = None if until is None else until - time.monotonic()
            if left is not None and left <= 0:
                return None
            self.sock.settimeout(None if left is None else min(left, POLL_S))
            try:
                chunk = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                self.lost.set()
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(errors="replace").strip()

    def close(self) -> None:
        self.sock.close()


class Peers:
    """This node rank's connections to the other node ranks of its launch."""

    def __init__(self, place: NodePlace, log: Log, pacer: Pacer) -> None:
        self.place, self.log, self.pacer = place, log, pacer
        self.links: list[_Link] = []
        self._on_lost: Callable[[SchedulerFailure], None] | None = None
        self._closing = threading.Event()

    @property
    def _rank(self) -> int:
        return self.place.tp_ranks[0]

    # ---- meeting ---------------------------------------------------------------------------------
    def join(self) -> None:
        """Block until every node rank has joined; SchedulerFailure as torch fails, Stopped on a signal."""
        if self.place.addr and (refused := dt.bad_address(self.place.addr)):
            raise SchedulerFailure(refused, rank=self._rank)
        timeout = self.place.timeout_s * self.pacer.speed
        if self.place.node_rank == 0:
            self._serve(time.monotonic() + timeout)
        else:
            self._connect(time.monotonic() + timeout)
        for link in self.links:
            threading.Thread(target=self._follow, args=(link,), name=f"peer-{link.peer}", daemon=True).start()

    def _serve(self, deadline: float) -> None:
        server = socket.socket(socket.AF_INET6 if ":" in self.place.host else socket.AF_INET)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            server.bind((self.place.host, self.place.port))
            server.listen()
        except OSError as exc:
            server.close()
            raise SchedulerFailure(
                dt.store_bind_failed(self.place.port, exc.errno or 98), rank=self._rank
            ) from None
        server.settimeout(POLL_S)
        try:
            while len(self.links) < self.place.nnodes - 1:
                self._check(deadline, self._store_timeout)
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                self._greet(conn, deadline)
        finally:
            server.close()
        for link in self.links:
            link.send("go")

    def _greet(self, conn: socket.socket, deadline: float) -> None:
        link = _Link(conn, peer=-1)
        said = link.read(min(deadline, time.monotonic() + 2.0)) or ""
        word, _, rank = said.partition(" ")
        if word != "hello" or not rank.isdigit():
            link.close()  # not one of ours (a port scan, a stale node): torch would drop it too
            return
        link.peer = int(rank)
        self.links.append(link)

    def _store_timeout(self) -> SchedulerFailure:
        per_node = len(self.place.tp_ranks)
        joined = per_node * (1 + len(self.links))
        return SchedulerFailure(
            dt.store_timeout(self.place.timeout_s, joined, self.place.world), rank=self._rank
        )

    def _connect(self, deadline: float) -> None:
        while True:
            self._check(deadline, self._client_timeout)
            try:
                sock = socket.create_connection((self.place.host, self.place.port), timeout=POLL_S * 4)
            except OSError:
                self.pacer.wait(POLL_S)
                continue
            link = _Link(sock, peer=0)
            if link.send(f"hello {self.place.node_rank}") and self._wait_go(link, deadline):
                self.links.append(link)
                return
            link.close()  # node rank 0 went away before everyone joined: keep trying until the timeout

    def _wait_go(self, link: _Link, deadline: float) -> bool:
        while not link.lost.is_set():
            self._check(deadline, self._client_timeout)
            if link.read(min(deadline, time.monotonic() + POLL_S * 4)) == "go":
                return True
        return False

    def _client_timeout(self) -> SchedulerFailure:
        place = self.place
        self.log.raw(dt.client_timeout_lines(place.timeout_s, place.host, place.port))
        return SchedulerFailure(dt.client_timeout(place.timeout_s, place.host, place.port), rank=self._rank)

    def _check(self, deadline: float, failure: Callable[[], SchedulerFailure]) -> None:
        if self.pacer.stop.is_set():
            raise Stopped
        if time.monotonic() > deadline:
            raise failure()

    # ---- serving ---------------------------------------------------------------------------------
    def all_ready(self, on_lost: Callable[[SchedulerFailure], None]) -> None:
        """The schedulers of this node are up. Node rank 0 waits for every other node's (its first broadcast
        needs them all); from here on a lost node is fatal at once, through `on_lost`."""
        for link in self.links:
            link.send("ready")
        while self.place.node_rank == 0 and not all(link.ready.is_set() for link in self.links):
            if any(link.lost.is_set() for link in self.links):
                break
            self.pacer.wait(POLL_S)
        self._on_lost = on_lost
        lost = next((link for link in self.links if link.lost.is_set()), None)
        if lost is not None:
            raise self._lost(lost)

    def _follow(self, link: _Link) -> None:
        while (word := link.read(None)) is not None:
            if word == "ready":
                link.ready.set()
            elif word == "shutdown":
                self._closing.set()  # node rank 0 closes the connection right after
                self.pacer.stop.set()
        # A node that is stopping anyway (a signal, a shutdown) loses its peers without failing.
        if not (self._closing.is_set() or self.pacer.stop.is_set()) and self._on_lost is not None:
            self._on_lost(self._lost(link))

    def _lost(self, link: _Link) -> SchedulerFailure:
        failure = dt.peer_lost(self.place.host, link.peer_port, source=self.place.node_rank == 0)
        return SchedulerFailure(failure, rank=self._rank)

    def close(self) -> None:
        """Leave quietly; node rank 0 first tells the others to shut down (SGLang's ShutdownReq broadcast)."""
        self._closing.set()
        for link in self.links:
            if self.place.node_rank == 0:
                link.send("shutdown")
            link.close()
