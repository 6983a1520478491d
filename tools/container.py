"""What a `docker run` / `podman run` wrapper tells about the engine inside it: its image (and the SGLang
release its tag names), whether it shares the host's network, which host port reaches an engine port, which
host folder a path inside the container is, and the options that decide whether specdoctor can watch and stop
it (`-d`, `-it`, `--sig-proxy=false`, `--name` without `--rm`)."""

from __future__ import annotations

import os
import re
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict

from specdoctor.tools.wrappers import Wrapper

_TAG_VERSION = re.compile(r"^v?(\d+\.\d+\.\d+(?:\.?post\d+)?)(?:$|[-_+.])")
_FALSE = ("false", "0", "no")


class Published(BaseModel):
    """One `-p [IP:][HOST:]CONTAINER[/proto]`: the host address and port that reach a container port."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    address: str
    host_port: int | None
    container_port: int


class Container(BaseModel):
    """A container wrapper read for what it means to the engine."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    runtime: str
    image: str
    options: tuple[tuple[str, str | None], ...]
    """Every option as (long name where known, value)."""

    @classmethod
    def of(cls, wrapper: Wrapper) -> Container:
        return cls(runtime=wrapper.program_name, image=wrapper.operand[0], options=tuple(wrapper.pairs()))

    def values(self, name: str) -> list[str]:
        return [v for n, v in self.options if n == name and v is not None]

    def switched(self, name: str) -> bool:
        """A boolean option that is on (`--rm`, `-d`; not `--rm=false`)."""
        found = [v for n, v in self.options if n == name]
        return bool(found) and (found[-1] is None or found[-1].lower() not in _FALSE)

    @property
    def tag_version(self) -> str | None:
        """The release an image tag names (`lmsysorg/sglang:v0.5.6-cu129` → `0.5.6`), if it names one."""
        ref = self.image.split("@", 1)[0]
        name, colon, tag = ref.rpartition(":")
        if not colon or not name or "/" in tag:
            return None
        m = _TAG_VERSION.match(tag)
        return m.group(1).replace("post", ".post").replace("..", ".") if m else None

    @property
    def host_network(self) -> bool:
        return any(v == "host" for v in self.values("--network") + self.values("--net"))

    def published(self) -> list[Published]:
        return [p for v in self.values("--publish") for p in _published(v)]

    def reach(self, port: int) -> tuple[str, int] | None:
        """The host address and port a client uses to reach the engine's `port`, or None when the host
        cannot reach it (bridge network, port not published, or published to a random port)."""
        if self.host_network:
            return None
        for p in self.published():
            if p.container_port == port and p.host_port is not None:
                address = p.address.strip("[]")
                address = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(address, address)
                return address, p.host_port
        return None

    def mounts(self) -> list[tuple[str, str]]:
        """(host folder, container folder) of every bind mount."""
        found = [m for v in self.values("--volume") if (m := _volume(v))]
        return found + [m for v in self.values("--mount") if (m := _mount(v))]

    def host_path(self, path: str) -> str | None:
        """The host path of `path` inside the container, when a bind mount holds it; None otherwise."""
        inside = PurePosixPath(path)
        if not inside.is_absolute():
            return None
        for source, target in sorted(self.mounts(), key=lambda m: -len(m[1])):
            if inside == PurePosixPath(target) or PurePosixPath(target) in inside.parents:
                rest = inside.relative_to(target)
                return str(PurePosixPath(os.path.expanduser(source)) / rest)
        return None

    def launch_problem(self) -> str | None:
        """Why specdoctor cannot run this container as its engine (one line), or None."""
        flag = f"`{self.runtime} run"
        if self.switched("--detach"):
            return (
                f"{flag} -d` returns at once and leaves the container running on its own: specdoctor could "
                "neither watch nor stop it; drop -d (`specdoctor deploy --detach` leaves a healthy server running)"
            )
        if self.runtime == "docker" and self.switched("--interactive") and self.switched("--tty"):
            return (
                f"{flag} -it` needs a terminal (docker: 'the input device is not a TTY') and specdoctor "
                "launches the engine without one: drop -i and -t"
            )
        return None


def _published(value: str) -> list[Published]:
    spec = value.split("/", 1)[0]
    address = ""
    if spec.startswith("["):
        address, _, spec = spec[1:].partition("]:")
        address = f"[{address}]"
    parts = spec.split(":")
    if len(parts) == 3:
        address, parts = parts[0], parts[1:]
    container = _port_range(parts[-1])
    host = _port_range(parts[0]) if len(parts) == 2 and parts[0] else None
    if container is None:
        return []
    ports = range(container[0], container[1] + 1)
    return [
        Published(address=address, host_port=host[0] + k if host else None, container_port=port)
        for k, port in enumerate(ports)
    ]


def _port_range(text: str) -> tuple[int, int] | None:
    first, _, last = text.partition("-")
    if not first.isdigit() or (last and not last.isdigit()):
        return None
    return int(first), int(last or first)


def _volume(value: str) -> tuple[str, str] | None:
    source, _, rest = value.partition(":")
    target = rest.split(":", 1)[0]
    if not target or not source.startswith(("/", "~", ".")):
        return None  # an anonymous or named volume: no host folder to read
    return source, target


def _mount(value: str) -> tuple[str, str] | None:
    fields = dict(f.partition("=")[::2] for f in value.split(","))
    source = fields.get("source") or fields.get("src")
    target = fields.get("target") or fields.get("dst") or fields.get("destination")
    if fields.get("type") != "bind" or not source or not target:
        return None
    return source, target
