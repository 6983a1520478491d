"""Addresses SGLang hands to torch.distributed's rendezvous. On one node SGLang's workers meet at the
command's own --host (or --dist-init-addr) and a port it picks; torch needs an init method written as a
URL (`tcp://host:port`). An address this machine cannot reach, or one written without its scheme, stops
the launch before any model code runs."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.command import Edit, RemoveFlag, SetEnv

# torch's TCPStore client, retrying (a warning, so the launch hangs) or giving up.
_UNREACHED = (
    r"TCP client failed to connect/validate to host ([^\s:]+|\[[^\]]+\]):(\d+)"
    r"|The client socket has timed out after \d+ms while trying to connect to \(([^,]+), (\d+)\)"
    # A name no resolver here knows (copied from a cluster's /etc/hosts): torch retries it for ever.
    r"|network addresses of \(([^,]+), (\d+)\) cannot be retrieved"
)
_HOST_PORT = re.compile(r"^\[?[\w.:-]+?\]?:\d+$")


@playbook(
    id="sglang.network.own-address-unreachable",
    category="other",
    when=("exited", "hung"),
    pattern=_UNREACHED,
    priority=9,
)
def own_address_unreachable(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """On one node the rendezvous is at the command's own --host (or --dist-init-addr); when its workers
    cannot reach that address, it is not one of this machine's (copied from another host, or a stale IP)."""
    assert m is not None
    host = (m.group(1) or m.group(3) or m.group(5) or "").strip("[]")
    if ctx.view.nnodes > 1 or not host:
        return None
    flag = next((f for f in ("--dist-init-addr", "--host") if _host_of(ctx.view.get(f)) == host), None)
    if flag is None:
        return None
    return fix(
        ctx,
        [RemoveFlag(flag=flag)],
        "other",
        f"the workers cannot reach the rendezvous at {host}, this command's {flag}",
        why=f"on one node SGLang's workers meet at {flag}; {host} does not answer from this machine. Without "
        f"{flag} they meet on this machine's loopback (to serve other machines, use one of this machine's "
        "addresses or 0.0.0.0)",
        evidence=(m.group(0),),
        confidence=0.6,
    )


@playbook(
    id="sglang.network.init-method-without-scheme",
    category="other",
    pattern=r"No rendezvous handler for (\w*)://",
    priority=9,
)
def init_method_without_scheme(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """torch read the init method's scheme from the text before `://` and found none it knows: an engine
    variable that overrides the init method holds a bare `host:port`."""
    assert m is not None
    bare = [
        (name, value)
        for name, value in ctx.spec.env_dict().items()
        if re.match(r"(?:SGLANG|SGL)_\w*INIT", name) and _HOST_PORT.match(value)
    ]
    if len(bare) != 1:
        return None
    name, value = bare[0]
    edits: list[Edit] = [SetEnv(name=name, value=f"tcp://{value}")]
    return fix(
        ctx,
        edits,
        "other",
        f"{name}={value} is not an init method URL: torch found no scheme in it",
        why="torch.distributed reads an init method as a URL (tcp://host:port, env://, file://); "
        f"tcp://{value} is the same address written so",
        evidence=(m.group(0),),
        confidence=0.7,
    )


def _host_of(address: str | None) -> str | None:
    """The host of `host`, `host:port` or `[v6]:port`."""
    if not address:
        return None
    if address.startswith("["):
        return address[1:].split("]", 1)[0]
    return address.rsplit(":", 1)[0] if address.count(":") == 1 else address
