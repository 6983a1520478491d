"""What the process environment must give a server on this host: a temporary folder it can write, with
paths short enough for the local sockets SGLang's processes talk over, network interfaces that exist, and
HTTP requests to itself that no proxy intercepts. Deployments copy these variables from elsewhere (a CI runner's TMPDIR, a cluster's GLOO_SOCKET_IFNAME);
the host they land on decides whether they hold."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook, stop
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.command import SetEnv

_PROXIED = r"ProxyError[^\n]*?url: https?://(?:127\.0\.0\.1|localhost|\[::1\])[:/]|Unable to connect to proxy"
_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")

_IPC_TOO_LONG = r'ipc path "(?P<path>[^"]+)" is longer than (?P<max>\d+) characters'
_NO_TEMP = r"No usable temporary directory found in"
_NO_INTERFACE = r"Unable to find address for: (?P<name>[\w.:-]+)"


@playbook(id="sglang.host.socket-path-too-long", category="other", pattern=_IPC_TOO_LONG, priority=35)
def socket_path_too_long(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """SGLang's processes talk over local (ipc://) sockets made in the temporary folder; a socket path has at
    most 107 characters, so a deep TMPDIR breaks every one of them. /tmp is short and always there."""
    if m is None or m["path"].startswith("/tmp/tmp"):
        return None
    tmpdir = ctx.spec.env_dict().get("TMPDIR", "")
    ours = bool(tmpdir) and m["path"].startswith(tmpdir.rstrip("/") + "/")
    return fix(
        ctx,
        [SetEnv(name="TMPDIR", value="/tmp")],
        "other",
        f"the temporary folder {'TMPDIR=' + tmpdir if ours else 'of this environment'} is too deep for a "
        f"local socket path (at most {m['max']} characters)",
        why="SGLang makes its processes' ipc:// sockets in the temporary folder, and the operating system "
        "limits a socket path's length; with TMPDIR=/tmp each path is short",
        evidence=(m.group(0),),
        confidence=0.6 if ours else 0.45,
    )


@playbook(id="sglang.host.no-writable-temp", category="other", pattern=_NO_TEMP, priority=35)
def no_writable_temp(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """Python found no temporary folder it can write (a read-only root filesystem): every one it tried is
    listed. /dev/shm is memory-backed and writable in containers that make the rest read-only."""
    if m is None or ctx.spec.env_dict().get("TMPDIR", "").rstrip("/") == "/dev/shm":
        return None
    return fix(
        ctx,
        [SetEnv(name="TMPDIR", value="/dev/shm")],
        "other",
        "no writable temporary folder (a read-only filesystem?): Python cannot create a temporary file",
        why="SGLang and its libraries create temporary files and sockets from the start; /dev/shm is the "
        "memory-backed folder containers keep writable (or mount a writable volume at /tmp)",
        evidence=(m.group(0),),
        confidence=0.45,
    )


@playbook(id="sglang.host.network-interface-missing", category="other", pattern=_NO_INTERFACE, priority=35)
def network_interface_missing(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A *_SOCKET_IFNAME variable names an interface this host does not have. On one node SGLang's ranks
    meet on the loopback interface, which every host has; across nodes the person names the interface
    that reaches the others."""
    if m is None:
        return None
    named = [n for n, v in ctx.spec.env_dict().items() if n.endswith("_SOCKET_IFNAME") and v == m["name"]]
    if len(named) != 1:
        return None
    if ctx.view.nnodes > 1:
        return stop(
            ctx,
            "other",
            f"{named[0]}={m['name']}: this host has no network interface of that name",
            f"Set {named[0]} to the interface that reaches the other nodes (`ip -br addr` lists this host's).",
            evidence=(m.group(0),),
            confidence=0.7,
        )
    return fix(
        ctx,
        [SetEnv(name=named[0], value="lo")],
        "other",
        f"{named[0]}={m['name']}: this host has no network interface of that name",
        why="on one node SGLang's ranks meet at a loopback address, which the loopback interface `lo` carries "
        "on every host",
        evidence=(m.group(0),),
        confidence=0.6,
    )


@playbook(id="sglang.host.proxy-for-own-requests", category="other", pattern=_PROXIED, priority=30)
def proxy_for_own_requests(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """SGLang sends its warm-up and readiness requests to itself over HTTP; a proxy variable without NO_PROXY
    for the loopback address sends them to the proxy instead, which cannot reach this server."""
    env = ctx.spec.env_dict()
    bypass = env.get("NO_PROXY", env.get("no_proxy", ""))
    if m is None or "127.0.0.1" in bypass:
        return None
    proxied = [name for name in _PROXY_VARS if env.get(name)]
    value = ",".join(p for p in (bypass, "127.0.0.1", "localhost") if p)
    return fix(
        ctx,
        [SetEnv(name="NO_PROXY", value=value)],
        "other",
        "SGLang's requests to itself (warm-up, readiness) go through the HTTP proxy, which cannot reach it",
        why=f"{' and '.join(proxied) or 'a proxy variable of this environment'} sends every HTTP request to the "
        "proxy; NO_PROXY=127.0.0.1,localhost keeps the server's own requests local (requests to the Hub still "
        "use the proxy)",
        evidence=(m.group(0),),
        confidence=0.6 if proxied else 0.45,
    )
