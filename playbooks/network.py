"""Ports, NCCL and proxies."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook, stop
from specdoctor.playbooks.decision import Decision, Retry
from specdoctor.playbooks.host_checks import DEFAULT_PORT
from specdoctor.tools.command import RemoveFlag, SetEnv, SetFreePort

_BIND = re.compile(r"\[Errno 98\].*?\('([^']*)', (\d+)\)")


@playbook(
    id="sglang.network.http-port",
    category="port-in-use",
    when=("exited", "hung"),
    pattern=r"\[Errno 98\]|address already in use",
    priority=15,
)
def http_port_busy(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The HTTP port is taken; SGLang then hangs forever. Move to a free port."""
    current = ctx.view.int("--port") or DEFAULT_PORT
    bound = _BIND.search(ctx.search_text)
    busy = int(bound.group(2)) if bound else current
    if busy == current and (own := _same_port_twice(ctx, busy)):
        return own
    if busy != current and (other := _another_port_flag(ctx, busy)):
        return other
    # Ports other than --port are derived from it, so moving --port moves them too.
    which = "" if busy == current else f" (a port SGLang derives from --port {current})"
    return fix(
        ctx,
        [SetFreePort(start=max(busy, current) + 10)],
        "port-in-use",
        f"port {busy}{which} is already in use (another server?), so SGLang cannot serve and hangs",
        why="a free port at least 10 above it: SGLang also takes a few ports above --port",
        confidence=0.9 if busy == current else 0.75,
    )


@playbook(
    id="sglang.network.privileged-port",
    category="port-in-use",
    when=("exited", "hung"),
    pattern=r"\[Errno 13\][^\n]*bind|bind[^\n]*\b[Pp]ermission denied",
    priority=15,
)
def privileged_port(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The server may not bind its port: below 1024 only root (or a process given CAP_NET_BIND_SERVICE) can
    listen. Serve on an unprivileged port (put a proxy or the container's port mapping in front for 80/443)."""
    port = ctx.view.int("--port")
    if port is None or port >= 1024:
        return None
    return fix(
        ctx,
        [SetFreePort(start=DEFAULT_PORT)],
        "port-in-use",
        f"--port {port} is a privileged port this user may not bind, so SGLang cannot serve",
        why="ports below 1024 need root or CAP_NET_BIND_SERVICE; on SGLang's default port range the server "
        f"starts, and a proxy or the container's port mapping can still publish it as {port}",
        evidence=(m.group(0),) if m else (),
        confidence=0.6,
    )


def _another_port_flag(ctx: Context, busy: int) -> Decision | None:
    """The busy port is the one the command gives another port flag (`--gated-launch-port`), not one derived
    from --port: that flag moves, past every port the command names."""
    given = [
        (ctx.view.canon(o.name), o.values)
        for o in ctx.spec.options()
        if ctx.view.canon(o.name).endswith("-port")
    ]
    named = [flag for flag, values in given if flag != "--port" and values == (str(busy),)]
    if len(named) != 1:
        return None
    ports = [int(v[0]) for _, v in given if len(v) == 1 and v[0].isdigit()]
    return fix(
        ctx,
        [SetFreePort(flag=named[0], start=max(ports) + 10)],
        "port-in-use",
        f"{named[0]} {busy} is already in use (another server?), so SGLang cannot serve",
        why=f"{named[0]} moves to a free port above every port the command names; the server's address stays",
        confidence=0.8,
    )


def _same_port_twice(ctx: Context, busy: int) -> Decision | None:
    """The command gives the busy port to --port and to another port flag of its own (`--nccl-port` equal to
    `--port`): the clash is the command's, and the server's address stays; the other port goes back to
    SGLang's choice (a free NCCL port, or one derived from --port)."""
    twice = [
        o.name
        for o in ctx.spec.options()
        if ctx.view.canon(o.name) != "--port"
        and ctx.view.canon(o.name).endswith("-port")
        and o.values == (str(busy),)
    ]
    if len(twice) != 1:
        return None
    return fix(
        ctx,
        [RemoveFlag(flag=twice[0])],
        "port-in-use",
        f"the command gives port {busy} to both --port and {twice[0]}: the second bind fails and SGLang hangs",
        why=f"the server keeps its address; without {twice[0]} SGLang picks that port itself",
        confidence=0.8,
    )


@playbook(
    id="sglang.network.internal-port",
    category="port-in-use",
    pattern=r"is not available in \d+ seconds|Port is already in use\.|ZMQError: Address already in use",
    priority=20,
)
def internal_port_busy(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A port SGLang derives from --port (scheduler, detokenizer, RPC, NCCL) is taken."""
    waited = re.search(r"is not available in (\d+) seconds", ctx.search_text)
    if (
        waited
        and not _held_by_another_program(ctx)
        and (
            _holder(ctx) is not None
            or re.search(r"sglang|scheduler", ctx.search_text.split(waited.group(0), 1)[1][:600], re.I)
        )
    ):
        # The holder is an SGLang server still shutting down: waiting longer is enough.
        seconds = max(120, 4 * int(waited.group(1)))
        decision = fix(
            ctx,
            [SetEnv(name="SGLANG_WAIT_PORT_TIMEOUT", value=str(seconds))],
            "port-in-use",
            f"a previous SGLang server still holds an internal port after SGLang's {waited.group(1)} s wait",
            why="it is still shutting down; SGLANG_WAIT_PORT_TIMEOUT lets the new launch wait for it",
            confidence=0.7,
        )
        if decision is not None:
            return decision
    if own_rendezvous := _derived_from_the_rendezvous(ctx):
        return own_rendezvous
    current = ctx.view.int("--port") or DEFAULT_PORT
    return fix(
        ctx,
        [SetFreePort(start=current + 30)],
        "port-in-use",
        "an internal port SGLang derives from --port is taken (often a previous server still running)",
        why="moving --port moves every port derived from it",
        confidence=0.75,
    )


@playbook(
    id="sglang.network.nccl-shm",
    category="nccl",
    pattern=r"NCCL WARN Error while creating shared memory|failed to extend /dev/shm|posix_fallocate failed",
    priority=25,
)
def nccl_shm(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """NCCL cannot create its shared-memory segments: /dev/shm is too small (Docker's default 64 MB)."""
    decision = fix(
        ctx,
        [SetEnv(name="NCCL_SHM_DISABLE", value="1")],
        "nccl",
        "NCCL ran out of shared memory (/dev/shm) while setting up tensor parallelism",
        why="NCCL_SHM_DISABLE=1 makes NCCL use other transports; the real fix is a larger --shm-size or --ipc=host",
        confidence=0.7,
    )
    return decision or stop(
        ctx, "nccl", "NCCL has no shared memory", "Start the container with --shm-size=16g or --ipc=host."
    )


@playbook(
    id="sglang.network.nccl-system",
    category="nccl",
    pattern=r"NCCL error: unhandled system error|ncclSystemError|ncclUnhandledCudaError",
    priority=50,
)
def nccl_system(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """NCCL failed to initialise for a system reason (shared memory, interfaces, P2P)."""
    if not ctx.view.truthy_env("NCCL_P2P_DISABLE") and re.search(r"p2p|peer|P2P", ctx.search_text):
        return fix(
            ctx,
            [SetEnv(name="NCCL_P2P_DISABLE", value="1")],
            "nccl",
            "NCCL's peer-to-peer transport failed",
            why="NCCL_P2P_DISABLE=1 routes through host memory",
            confidence=0.6,
        )
    return stop(
        ctx,
        "nccl",
        "NCCL could not initialise the tensor-parallel group (a system error)",
        "Rerun with NCCL_DEBUG=INFO to see why; in Docker give --shm-size=16g or --ipc=host; on multi-node set NCCL_SOCKET_IFNAME.",
    )


@playbook(
    id="sglang.network.hub-transient",
    category="model-path",
    pattern=r"(?:50[0-4]|429) (?:Server|Client) Error|Read timed out|Connection reset by peer.*huggingface",
    priority=45,
)
def hub_transient(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The Hugging Face Hub answered 5xx/429 or timed out: retry the same command later."""
    if not re.search(r"huggingface\.co|hf\.co|huggingface_hub|hf-mirror", ctx.search_text, re.I):
        return None
    return Retry(
        category="model-path",
        summary="the Hugging Face Hub failed transiently while downloading",
        why="a 5xx/429/timeout from the Hub is not caused by the command",
        evidence=ctx.evidence(),
        confidence=0.7,
    )


# ---- the nodes of a multi-node launch --------------------------------------------------------------
# No flag of one node's command brings another node up or back: each is a stop that names what to do.
# `scope="root"`: in the logs of several nodes the one that failed first is the cause; another node's
# timeout or lost connection only counts when it is the first failure there is.

_JOINED = re.compile(r"Timed out after (\d+) seconds waiting for clients\. (\d+)/(\d+) clients joined")


def _rendezvous(ctx: Context) -> str:
    return ctx.view.get("--dist-init-addr") or "the --dist-init-addr"


@playbook(
    id="sglang.network.nodes-missing",
    category="nccl",
    pattern=_JOINED.pattern,
    priority=10,
    scope="root",
)
def nodes_missing(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """Node rank 0's rendezvous (torch's TCPStore) timed out before every node's ranks joined."""
    assert m is not None
    seconds, joined, world = m.groups()
    return stop(
        ctx,
        "nccl",
        f"node rank 0 waited {seconds} s at {_rendezvous(ctx)} and only {joined} of {world} ranks joined: "
        "the other node(s) never reached it",
        "Start every node with this same command, its own --node-rank and the same --dist-init-addr (node "
        "rank 0's address, reachable from every node: open that port between them); if the nodes start far "
        "apart, give --dist-timeout more seconds.",
    )


@playbook(
    id="sglang.network.rendezvous-unreachable",
    category="nccl",
    pattern=r"The client socket has timed out after \d+ms while trying to connect to \(([^,]+), (\d+)\)",
    priority=10,
    scope="root",
)
def rendezvous_unreachable(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A node rank above 0 never reached node rank 0's rendezvous."""
    assert m is not None
    return stop(
        ctx,
        "nccl",
        f"this node never reached node rank 0's rendezvous at {m.group(1)}:{m.group(2)}",
        "Start node rank 0 too (it listens there once its schedulers start); check that --dist-init-addr is "
        "node rank 0's address and port on every node and that this node can reach it (firewall, interface).",
    )


def _holder(ctx: Context) -> str | None:
    """The command line of the process holding the port, as SGLang's own wait message prints it."""
    found = re.search(r"process\.cmdline\(\)=\[([^\]\n]*)\]", ctx.search_text)
    return found.group(1) if found else None


def _held_by_another_program(ctx: Context) -> bool:
    holder = _holder(ctx)
    return holder is not None and "sglang" not in holder


def _derived_from_the_rendezvous(ctx: Context) -> Decision | None:
    """On one node, the ports SGLang waits for (scheduler, detokenizer, ...) are the block above the
    --dist-init-addr port; without --dist-init-addr it derives them from --port instead."""
    address = ctx.view.get("--dist-init-addr") or ""
    busy = re.search(r"port (\d+) is in use\. Waiting", ctx.search_text)
    rendezvous = re.search(r":(\d+)$", address)
    if ctx.view.nnodes > 1 or not busy or not rendezvous:
        return None
    if not 0 < int(busy.group(1)) - int(rendezvous.group(1)) <= 64:
        return None
    return fix(
        ctx,
        [RemoveFlag(flag="--dist-init-addr")],
        "port-in-use",
        f"port {busy.group(1)}, one SGLang derives from --dist-init-addr {address}, is held by another program",
        why="on one node --dist-init-addr only places SGLang's own ports; without it SGLang derives them from "
        "--port and checks they are free",
        confidence=0.75,
    )


@playbook(
    id="sglang.network.rendezvous-port",
    category="port-in-use",
    pattern=r"The server socket has failed to listen on any local network address\. port: (\d+).*?name: (\w+)",
    priority=10,
    scope="root",
)
def rendezvous_port(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """Node rank 0 cannot listen on the --dist-init-addr port (taken, often by an earlier launch); on one
    node, a port the command pinned with --nccl-port is SGLang's to choose instead."""
    assert m is not None
    if ctx.view.nnodes <= 1 and ctx.view.get("--nccl-port") == m.group(1):
        return fix(
            ctx,
            [RemoveFlag(flag="--nccl-port")],
            "port-in-use",
            f"--nccl-port {m.group(1)} is taken ({m.group(2)})",
            why="without --nccl-port SGLang picks a free port for its workers' rendezvous",
            confidence=0.8,
        )
    address = ctx.view.get("--dist-init-addr") or ""
    if ctx.view.nnodes <= 1 and address.endswith(f":{m.group(1)}"):
        return fix(
            ctx,
            [RemoveFlag(flag="--dist-init-addr")],
            "port-in-use",
            f"the --dist-init-addr port {m.group(1)} is taken ({m.group(2)})",
            why="on one node no other node needs the address; without --dist-init-addr SGLang picks a free port "
            "for its workers' rendezvous",
            confidence=0.8,
        )
    return stop(
        ctx,
        "port-in-use",
        f"node rank 0 cannot listen on its rendezvous port {m.group(1)} ({m.group(2)}): every node names "
        "that port in --dist-init-addr",
        "Stop what holds the port on node rank 0 (an earlier launch still shutting down?), or give every node "
        "the same new port in --dist-init-addr.",
    )


@playbook(
    id="sglang.network.peer-node-lost",
    category="nccl",
    pattern=r"gloo/transport/tcp/pair\.cc:\d+\] (?:Read error \[[^\]]*\]:\d+: Connection reset by peer|"
    r"Connection closed by peer)",
    priority=20,
    scope="root",
)
def peer_node_lost(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """Another node of the launch went away; this node's broadcast to it failed."""
    return stop(
        ctx,
        "nccl",
        "another node of this launch went away (its connection was reset), and this node failed with it",
        "The cause is on the other node: read its log first (in specdoctor's run folder, the `[rank N]` "
        "parts of attempt-N.log and attempt-N.rankN.log). A node that printed nothing was killed outright: "
        "check that host's kernel log for the OOM killer, GPU Xid errors or a reboot.",
    )
