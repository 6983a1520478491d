"""Static checks of a containerised launch (`docker run … IMAGE python3 -m sglang.launch_server …`): what
keeps specdoctor from watching or stopping the container, and what keeps the server out of reach.

The container's own options are the user's (edits never change them), so their faults carry no edit; the
engine's flags can be fixed (`--host 0.0.0.0` for a published port).
"""

from __future__ import annotations

from typing import Literal

from specdoctor.playbooks.decision import Finding
from specdoctor.playbooks.view import CommandView
from specdoctor.tools.command import SetFlag
from specdoctor.tools.container import Container

DEFAULT_PORT = 30000
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def check_container(view: CommandView) -> list[Finding]:
    box = view.spec.container
    if box is None:
        return []
    found = []
    problem = box.launch_problem()
    if problem is not None:
        found.append(_finding("container-unwatchable", "error", problem))
    if not box.switched("--sig-proxy") and box.values("--sig-proxy"):
        found.append(
            _finding(
                "container-no-signals",
                "warning",
                f"`{box.runtime} run --sig-proxy=false` keeps signals from the container: stopping the launch "
                f"ends `{box.runtime} run` but leaves the container running",
            )
        )
    name = box.values("--name")
    if name and not box.switched("--rm"):
        found.append(
            _finding(
                "container-name-kept",
                "warning",
                f"`--name {name[-1]}` without `--rm`: the stopped container keeps the name, so every relaunch "
                f'fails (`Conflict. The container name "/{name[-1]}" is already in use`); add --rm',
            )
        )
    return found + _reachability(view, box)


def _reachability(view: CommandView, box: Container) -> list[Finding]:
    if box.host_network:
        return []
    port = view.int("--port") or DEFAULT_PORT
    if box.reach(port) is None:
        return [
            _finding(
                "container-port-unpublished",
                "warning",
                f"the container neither publishes port {port} nor shares the host's network: nothing on this "
                f"host reaches the server, so it cannot be seen ready; add `-p {port}:{port}` (or --network host)",
            )
        ]
    host = view.get("--host") or "127.0.0.1"
    if host.strip("[]") not in _LOOPBACK:
        return []
    return [
        Finding(
            code="container-listens-inside",
            severity="error",
            category="other",
            flag="--host",
            message=f"SGLang listens on {host} inside the container (its default), which the port published "
            f"with -p cannot reach: nothing outside the container reaches the server",
            edits=(SetFlag(flag="--host", values=("0.0.0.0",)),),
            why="a published port forwards to the container's own address, so the server must listen on all "
            "of the container's addresses",
            confidence=0.9,
        )
    ]


def check_published_port(view: CommandView, free: bool | None) -> list[Finding]:
    """`free`: whether the host port that reaches the engine's port is free (None: unknown)."""
    box = view.spec.container
    port = view.int("--port") or DEFAULT_PORT
    reach = box.reach(port) if box is not None else None
    if reach is None or free is not False:
        return []
    address, host_port = reach
    return [
        Finding(
            code="container-port-busy",
            severity="error",
            category="port-in-use",
            message=f"host port {host_port} on {address}, published to the container's port {port}, is already "
            f"taken: {box.runtime if box else 'docker'} cannot start the container; publish another host port "
            f"(`-p NEW:{port}`)",
            evidence=(f"Bind for {address}:{host_port} failed: port is already allocated",),
        )
    ]


def _finding(code: str, severity: Literal["error", "warning"], message: str) -> Finding:
    return Finding(code=code, severity=severity, category="other", message=message)
