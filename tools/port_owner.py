"""Whose server answers on a TCP port: one of the given processes (our engine's), another process, or,
where the host cannot say, unknown.

SGLang binds its HTTP port late, after the weights are loaded; until then, or when its bind fails, another
server on the same port answers `/health` with 200. So "ready" counts only when the listening socket that
takes connections to our URL belongs to our engine. On Linux the kernel lists listening sockets with their
inode in /proc/net/tcp and tcp6, and a process holds a socket as an fd linked to `socket:[inode]`.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from collections.abc import Iterable
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Listener", "PortOwner", "held_by", "listeners", "port_owner"]

_LISTEN = "0A"
_TABLES = (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6))
_TABLE_MAX_BYTES = 64 << 20
_CMDLINE_MAX_BYTES = 4096
_SHOWN_CHARS = 80


class Listener(NamedTuple):
    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    port: int
    inode: int


class PortOwner(BaseModel):
    """Who listens where a client of our URL connects."""

    model_config = ConfigDict(frozen=True)
    state: Literal["ours", "foreign", "nobody", "unknown"] = Field(
        description="ours: a given process holds the listening socket; foreign: another process does; nobody: "
        "no listening socket in this network namespace; unknown: /proc could not say (not Linux, no permission)."
    )
    pids: tuple[int, ...] = Field(default=(), description="Foreign holders found (where /proc lets us see).")
    detail: str = Field(description="One line for a person.")


def listeners() -> list[Listener] | None:
    """Every listening TCP socket of this network namespace; None where /proc/net/tcp cannot be read."""
    found: list[Listener] = []
    readable = False
    for path, family in _TABLES:
        try:
            with open(path, "rb") as f:
                text = f.read(_TABLE_MAX_BYTES).decode("ascii", "replace")
        except OSError:
            continue
        readable = True
        found += [x for line in text.splitlines()[1:] if (x := _parse_row(line.split(), family))]
    return found if readable else None


def _parse_row(fields: list[str], family: int) -> Listener | None:
    if len(fields) < 10 or fields[3] != _LISTEN:
        return None
    address, _, port = fields[1].partition(":")
    try:
        # The kernel prints each 32-bit word of the address in host byte order.
        words = [int(address[i : i + 8], 16) for i in range(0, len(address), 8)]
        packed = struct.pack(f"={len(words)}I", *words)
        return Listener(ipaddress.ip_address(packed), int(port, 16), int(fields[9]))
    except (ValueError, struct.error):
        return None


def _answering(all_listeners: list[Listener], host: str, port: int) -> list[Listener]:
    """The listeners a connection to (host, port) can reach: an exact address wins over a wildcard."""
    try:
        target = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return [x for x in all_listeners if x.port == port]  # a name: any address may be it
    on_port = [x for x in all_listeners if x.port == port]
    mapped = ipaddress.IPv6Address(f"::ffff:{target}") if target.version == 4 else None
    exact = [x for x in on_port if x.address in (target, mapped)]
    if exact:
        return exact
    same_family = [x for x in on_port if x.address.is_unspecified and x.address.version == target.version]
    # An IPv6 wildcard socket also takes IPv4 connections unless it is IPV6_V6ONLY, which /proc does not show.
    return same_family or [x for x in on_port if x.address.is_unspecified]


def socket_inodes(pid: int) -> set[int] | None:
    """Inodes of the sockets `pid` holds (none once it is gone); None when we may not read its fd table."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except PermissionError:
        return None
    except OSError:
        return set()
    inodes = set()
    for name in names:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue  # closed meanwhile
        if link.startswith("socket:["):
            inodes.add(int(link[8:-1]))
    return inodes


def port_owner(host: str, port: int, ours: Iterable[int]) -> PortOwner:
    """Whether the server that answers on `host`:`port` is one of the processes `ours`."""
    table = listeners()
    if table is None:
        return PortOwner(state="unknown", detail="/proc/net/tcp cannot be read on this host")
    answering = {x.inode for x in _answering(table, host, port)}
    if not answering:
        return PortOwner(state="nobody", detail=f"nothing in this network namespace listens on port {port}")
    unreadable = []
    for pid in ours:
        held = socket_inodes(pid)
        if held is None:
            unreadable.append(pid)
        elif held & answering:
            return PortOwner(state="ours", detail=f"port {port} is held by pid {pid} of this launch")
    if unreadable:
        listed = ", ".join(map(str, unreadable))
        return PortOwner(state="unknown", detail=f"the open sockets of pid(s) {listed} cannot be read")
    holders = _holders(answering)
    who = f"pid {', '.join(map(str, holders))}" if holders else "a process we cannot see"
    return PortOwner(
        state="foreign", pids=tuple(holders), detail=f"port {port} is held by {who}, not by this launch"
    )


def _holders(inodes: set[int]) -> list[int]:
    """The pids (that /proc lets us see) holding any of these sockets; for the message only."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (held := socket_inodes(int(entry))) and held & inodes:
            found.append(int(entry))
    return sorted(found)


def held_by(host: str, port: int) -> str | None:
    """Who listens where a client of `host`:`port` connects, for a person: `port 30000 is held by pid 1234
    (python -m vllm…)`; None when nobody does or /proc cannot say. The command line is the other process's
    own text: secrets in it are masked and it is cut short."""
    table = listeners()
    if table is None:
        return None
    answering = {x.inode for x in _answering(table, host, port)}
    if not answering:
        return None
    holders = _holders(answering)
    if not holders:
        return (
            f"port {port} is held by a process this user cannot see (another user's, or another container's)"
        )
    shown = ", ".join(
        f"pid {pid}" + (f" ({cmd})" if (cmd := _command_line(pid)) else "") for pid in holders[:3]
    )
    return f"port {port} is held by {shown}"


def _command_line(pid: int) -> str:
    from specdoctor.tools.redact import redact_argv

    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(_CMDLINE_MAX_BYTES)
    except OSError:
        return ""
    argv = [w.decode("utf-8", "replace") for w in raw.split(b"\0") if w]
    text = " ".join(redact_argv(argv))
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"
