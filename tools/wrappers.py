"""Wrappers: the programs a launch command runs the engine through, kept word for word.

`docker run … IMAGE`, `podman run … IMAGE`, `uv run …`, `conda run …` (and `mamba`, `micromamba`), `nohup`,
`numactl …`, `taskset [-c] MASK` and `env …`, alone or chained (`nohup numactl -N 0 python -m …`). A wrapper
is read only as far as is needed to know where it ends and the engine's command begins, and, for a container,
what it tells the engine: its environment (`-e NAME=VALUE`), the ports it publishes, the folders it mounts.
Edits never change a wrapper, with one exception: on a containerised command an environment edit is an
`-e NAME=VALUE` of the container, since the engine never sees the host's environment.

Each program's options are read with its own grammar, getopt style: options end at the first word that is not
one (the image, the mask, the command); `--` ends them too; `-xyz` is a cluster of one-letter options in which
the first one that takes a value takes the rest of the word (`-p8000:30000`, `-e=A=1`) or else the next word.
Which options take a value is listed per program below. **An option the list does not name takes no value
unless it is written `--option=value`**: a boolean option a new release adds parses right as it is, and a new
option with a value parses right when written with `=`.

Not read: the contents of `--env-file`, podman's `--env-host`, and a `docker run --entrypoint X` (refused: the
engine's command would be split between the option and the words after the image).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePath
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

ENV_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)

WrapperKind = Literal["docker", "podman", "uv", "conda", "nohup", "numactl", "taskset", "env"]
CONTAINER_KINDS = ("docker", "podman")
PYTHON_CHOOSERS = ("uv", "conda")
"""Wrappers that pick the python the engine runs (a project's or an environment's, not the one on PATH)."""


class CommandError(ValueError):
    """A launch command that cannot be understood; the message says what is wrong and what to do."""


# ---- grammars ----------------------------------------------------------------------------------------

_DOCKER_SHORT = {
    "a": "--attach",
    "c": "--cpu-shares",
    "d": "--detach",
    "e": "--env",
    "h": "--hostname",
    "i": "--interactive",
    "l": "--label",
    "m": "--memory",
    "p": "--publish",
    "P": "--publish-all",
    "q": "--quiet",
    "t": "--tty",
    "u": "--user",
    "v": "--volume",
    "w": "--workdir",
}


def _valued(shorts: str, longs: str) -> frozenset[str]:
    """Option spellings that take a value: one-letter ones, then long ones (without their dashes)."""
    return frozenset({f"-{c}" for c in shorts} | {f"--{name}" for name in longs.split()})


_DOCKER_RUN_VALUED = _valued(
    "acehlmpuvw",
    """add-host annotation attach blkio-weight blkio-weight-device cap-add cap-drop cgroup-parent cgroupns
    cidfile cpu-count cpu-percent cpu-period cpu-quota cpu-rt-period cpu-rt-runtime cpu-shares cpus
    cpuset-cpus cpuset-mems detach-keys device device-cgroup-rule device-read-bps device-read-iops
    device-write-bps device-write-iops dns dns-opt dns-option dns-search domainname entrypoint env env-file
    expose gpus group-add health-cmd health-interval health-retries health-start-interval
    health-start-period health-timeout hostname io-maxbandwidth io-maxiops ip ip6 ipc isolation
    kernel-memory label label-file link link-local-ip log-driver log-opt mac-address memory
    memory-reservation memory-swap memory-swappiness mount name net net-alias network network-alias
    oom-score-adj pid pids-limit platform publish pull restart runtime security-opt shm-size stop-signal
    stop-timeout storage-opt sysctl tmpfs ulimit user userns uts volume volume-driver volumes-from workdir""",
)
_PODMAN_RUN_VALUED = _DOCKER_RUN_VALUED | _valued(
    "",
    """arch authfile cgroup-conf cgroups chrootdirs conmon-pidfile decryption-key env-merge gidmap
    group-entry health-log-destination health-max-log-count health-max-log-size health-on-failure
    health-startup-cmd health-startup-interval health-startup-retries health-startup-success
    health-startup-timeout hostuser image-volume init-path os passwd-entry personality pidfile pod
    pod-id-file preserve-fd preserve-fds rdt-class requires retry retry-delay sdnotify seccomp-policy secret
    shm-size-systemd subgidname subuidname systemd timeout tz uidmap umask unsetenv variant""",
)
_DOCKER_GLOBAL_VALUED = _valued("cHl", "config context host log-level tlscacert tlscert tlskey")
_PODMAN_GLOBAL_VALUED = _valued(
    "c",
    """cdi-spec-dir cgroup-manager config conmon connection db-backend events-backend hooks-dir identity
    imagestore log-level module network-cmd-path network-config-dir out root runroot runtime runtime-flag
    ssh storage-driver storage-opt tmpdir url volumepath""",
)
_UV_VALUED = _valued(
    "pifPC",
    """allow-insecure-host cache-dir color config-file config-setting config-settings-package default-index
    directory env-file exclude-newer exclude-newer-package extra extra-index-url find-links fork-strategy
    group index index-strategy index-url keyring-provider link-mode no-binary-package
    no-build-isolation-package no-build-package no-extra no-group no-sources-package only-group package
    prerelease project python python-platform python-preference refresh-package reinstall-package
    resolution upgrade-package with with-editable with-requirements""",
)
_CONDA_VALUED = _valued("npra", "name prefix root-prefix attach cwd label")
_NUMACTL_VALUED = _valued(
    "iwmNCpPMISfoL",
    """interleave weighted-interleave membind cpunodebind physcpubind preferred preferred-many shmmode shmid
    shm file offset length""",
)
_ENV_VALUED = _valued("uCS", "unset chdir split-string")


class _Program(NamedTuple):
    kind: WrapperKind
    valued: frozenset[str]
    global_valued: frozenset[str] | None = None
    """Options before the subcommand, for programs that have one (`docker [OPTIONS] run`)."""
    operand: str | None = None
    """The word after the options that belongs to the wrapper (`IMAGE`, `MASK`)."""


_PROGRAMS: dict[str, _Program] = {
    "docker": _Program("docker", _DOCKER_RUN_VALUED, _DOCKER_GLOBAL_VALUED, "IMAGE"),
    "podman": _Program("podman", _PODMAN_RUN_VALUED, _PODMAN_GLOBAL_VALUED, "IMAGE"),
    "uv": _Program("uv", _UV_VALUED, _UV_VALUED),
    "conda": _Program("conda", _CONDA_VALUED, frozenset()),
    "mamba": _Program("conda", _CONDA_VALUED, frozenset()),
    "micromamba": _Program("conda", _CONDA_VALUED, frozenset()),
    "nohup": _Program("nohup", frozenset()),
    "numactl": _Program("numactl", _NUMACTL_VALUED),
    "taskset": _Program("taskset", frozenset(), operand="MASK"),
    "env": _Program("env", _ENV_VALUED),
}
_ELEVATORS = ("sudo", "doas", "pkexec", "runuser", "su")


def read_options(
    tokens: Sequence[str], start: int, valued: frozenset[str]
) -> tuple[list[tuple[str, ...]], int]:
    """The option groups from `start` on (each option with its value, as written) and where they end."""
    groups: list[tuple[str, ...]] = []
    i = start
    while i < len(tokens) and tokens[i].startswith("-") and tokens[i] != "-":
        tok = tokens[i]
        if tok == "--":
            return [*groups, (tok,)], i + 1
        width = _long_width(tok, valued) if tok.startswith("--") else _short_width(tok, valued)
        if i + width > len(tokens):
            raise CommandError(f"`{tok}` needs a value: nothing follows it")
        groups.append(tuple(tokens[i : i + width]))
        i += width
    return groups, i


def _long_width(tok: str, valued: frozenset[str]) -> int:
    return 2 if "=" not in tok and tok in valued else 1


def _short_width(tok: str, valued: frozenset[str]) -> int:
    for k, letter in enumerate(tok[1:], start=1):
        if f"-{letter}" in valued:
            return 1 if k + 1 < len(tok) else 2
    return 1


def option_pairs(
    group: Sequence[str], valued: frozenset[str], shorts: dict[str, str] | None = None
) -> list[tuple[str, str | None]]:
    """One option group as (name, value) pairs: a cluster `-it` is two; a short name is given long when
    `shorts` knows it (`-e` → `--env`)."""
    first, shorts = group[0], shorts or {}
    if first.startswith("--"):
        name, eq, value = first.partition("=")
        return [(name, value if eq else (group[1] if len(group) > 1 else None))]
    pairs: list[tuple[str, str | None]] = []
    for k, letter in enumerate(first[1:], start=1):
        name = shorts.get(letter, f"-{letter}")
        if f"-{letter}" in valued:
            rest = first[k + 1 :]
            value = rest.removeprefix("=") if rest else (group[1] if len(group) > 1 else None)
            return [*pairs, (name, value)]
        pairs.append((name, None))
    return pairs


# ---- the wrapper ---------------------------------------------------------------------------------------


class Wrapper(BaseModel):
    """One program the engine runs through, word for word: its name (with global options and subcommand,
    `docker --context x run`), its options as groups (each with its value), and its operand (the image, the
    CPU mask)."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    kind: WrapperKind
    program: tuple[str, ...] = Field(description="e.g. (`docker`, `run`), (`nohup`,).")
    options: tuple[tuple[str, ...], ...] = Field(
        default=(),
        description="Each option with its value as written; for `env`, its `NAME=value` words too.",
    )
    operand: tuple[str, ...] = Field(default=(), description="The image (docker, podman) or mask (taskset).")

    def words(self) -> list[str]:
        return [*self.program, *(t for g in self.options for t in g), *self.operand]

    @property
    def is_container(self) -> bool:
        return self.kind in CONTAINER_KINDS

    def pairs(self) -> list[tuple[str, str | None]]:
        """Every option as (name, value), short names given long where known (`-e` → `--env`)."""
        valued = _PROGRAMS[self.program_name].valued
        shorts = _DOCKER_SHORT if self.is_container else None
        return [
            p
            for g in self.options
            if not _is_assignment(self.kind, g)
            for p in option_pairs(g, valued, shorts)
        ]

    @property
    def program_name(self) -> str:
        return PurePath(self.program[0]).name

    # ---- the environment it sets ----------------------------------------------------------------------
    def env_items(self) -> list[tuple[int, str, str | None]]:
        """(group index, name, value) of every variable this wrapper sets; value None passes the
        variable on from outside (`docker run -e NAME`)."""
        found = []
        for index, group in enumerate(self.options):
            parts = self._env_parts(group)
            if parts is not None:
                found.append((index, parts[2], parts[3]))
        return found

    def _env_parts(self, group: tuple[str, ...]) -> tuple[tuple[str, ...], str, str, str | None] | None:
        """(words before the assignment, text before NAME in its word, NAME, value) of an env group."""
        if self.kind == "env":
            m = ENV_ASSIGN.match(group[0]) if _is_assignment("env", group) else None
            return ((), "", m.group(1), m.group(2)) if m else None
        if not self.is_container:
            return None
        pairs = option_pairs(group, _PROGRAMS[self.program_name].valued, _DOCKER_SHORT)
        if not pairs or pairs[-1][0] != "--env" or not pairs[-1][1]:
            return None
        text, last = pairs[-1][1], group[-1]
        name, eq, value = text.partition("=")
        return group[:-1], last[: len(last) - len(text)], name, value if eq else None

    def with_env_value(self, index: int, value: str) -> Wrapper:
        """The assignment in group `index` given `value`, written in the group's own style."""
        parts = self._env_parts(self.options[index])
        assert parts is not None, "not an environment group"
        lead, stem, name, _ = parts
        group = (*lead, f"{stem}{name}={value}")
        return self.model_copy(update={"options": (*self.options[:index], group, *self.options[index + 1 :])})

    def with_env_added(self, name: str, value: str) -> Wrapper:
        group = (f"{name}={value}",) if self.kind == "env" else ("-e", f"{name}={value}")
        return self.model_copy(update={"options": (*self.options, group)})

    def without_groups(self, indexes: set[int]) -> Wrapper:
        kept = tuple(g for i, g in enumerate(self.options) if i not in indexes)
        return self.model_copy(update={"options": kept})

    def clears_env(self) -> bool:
        """`env -i` (or `env -`): the command starts from an empty environment."""
        return self.kind == "env" and any(
            g == ("-",) or any(n in ("-i", "--ignore-environment") for n, _ in option_pairs(g, _ENV_VALUED))
            for g in self.options
            if not _is_assignment("env", g)
        )

    def unsets(self) -> list[str]:
        """Variables `env -u NAME` removes."""
        if self.kind != "env":
            return []
        return [v for n, v in self.pairs() if n in ("-u", "--unset") and v]


def _is_assignment(kind: str, group: tuple[str, ...]) -> bool:
    return kind == "env" and len(group) == 1 and not group[0].startswith("-") and "=" in group[0]


# ---- reading a chain ------------------------------------------------------------------------------------


def read_wrapper(tokens: Sequence[str]) -> tuple[Wrapper, int] | None:
    """The wrapper `tokens` start with and how many words it takes, or None when they start with no wrapper.
    Raises CommandError for a wrapper that does not launch (`docker exec`, `taskset -p`, `sudo`)."""
    name = PurePath(tokens[0]).name
    if name in _ELEVATORS:
        raise CommandError(
            f"`{name}` in the launch command: specdoctor does not launch the engine as another user (it could "
            f"not stop a process it may not signal); drop `{name}`, or run specdoctor itself as that user"
        )
    program = _PROGRAMS.get(name)
    if program is None:
        return None
    i = _after_subcommand(tokens, program, name) if program.global_valued is not None else 1
    head = i
    groups, i = read_options(tokens, i, program.valued)
    if program.kind == "env":
        if tokens[i : i + 1] == ["-"]:  # the old spelling of `env -i`
            groups.append(("-",))
            i += 1
        while i < len(tokens) and ENV_ASSIGN.match(tokens[i]):
            groups.append((tokens[i],))
            i += 1
    wrapper = Wrapper(kind=program.kind, program=tuple(tokens[:head]), options=tuple(groups))
    _refuse_options(wrapper)
    if program.operand is not None:
        if i >= len(tokens):
            raise CommandError(f"`{' '.join(wrapper.program)}` needs its {program.operand}: nothing follows")
        wrapper = wrapper.model_copy(update={"operand": (tokens[i],)})
        i += 1
    if i >= len(tokens):
        raise CommandError(_wraps_nothing(wrapper))
    return wrapper, i


def _after_subcommand(tokens: Sequence[str], program: _Program, name: str) -> int:
    """Where `docker [OPTIONS] run`, `docker container run`, `uv run`, `conda run` end."""
    _, i = read_options(tokens, 1, program.global_valued or frozenset())
    if program.kind in CONTAINER_KINDS and tokens[i : i + 1] == ["container"]:
        i += 1
    if tokens[i : i + 1] == ["run"]:
        return i + 1
    sub = tokens[i] if i < len(tokens) else "(nothing)"
    if program.kind in CONTAINER_KINDS:
        usage = f"`{name} run [options] IMAGE python3 -m sglang.launch_server ...`"
    else:
        usage = f"`{name} run [options] python -m sglang.launch_server ...`"
    raise CommandError(f"`{name} {sub}` does not launch a server: specdoctor understands {usage}")


def _refuse_options(wrapper: Wrapper) -> None:
    names = {n for n, _ in wrapper.pairs()}
    if wrapper.kind == "uv" and names & {"-m", "--module"}:
        raise CommandError(
            "`uv run -m MODULE`: write `uv run python -m sglang.launch_server ...` (specdoctor reads the "
            "engine's command from its python)"
        )
    if wrapper.kind == "taskset" and names & {"-p", "--pid"}:
        raise CommandError("`taskset -p` changes a running process: use `taskset [-c] MASK python -m ...`")
    if wrapper.kind == "env" and names & {"-S", "--split-string"}:
        raise CommandError("`env -S` splits a string into a command: write the words themselves")
    entry = [v for n, v in wrapper.pairs() if n == "--entrypoint" and v]
    if wrapper.is_container and entry:
        raise CommandError(
            f"`--entrypoint {entry[-1]}` splits the engine's command between the option and the words after "
            "the image: put the whole SGLang command after the image (with no --entrypoint, or `--entrypoint ''`)"
        )


def _wraps_nothing(wrapper: Wrapper) -> str:
    if wrapper.is_container:
        return (
            f"`{' '.join(wrapper.program)} ... {wrapper.operand[0]}` runs the image's own command, which "
            "specdoctor cannot see: write the SGLang command after the image "
            f"(`... {wrapper.operand[0]} python3 -m sglang.launch_server ...`)"
        )
    return f"`{' '.join(wrapper.words())}` wraps no command: add the SGLang command after it"


def container_index(prefix: Sequence[Wrapper]) -> int | None:
    """The last container of a chain: from there on, the engine sees only what the container gives it."""
    found = [i for i, w in enumerate(prefix) if w.is_container]
    return found[-1] if found else None


# ---- the engine's environment ---------------------------------------------------------------------------

Env = tuple[tuple[str, str], ...]


def engine_environment(host_env: Env, prefix: Sequence[Wrapper]) -> dict[str, str]:
    """What the command sets in the engine's environment: the leading `NAME=value` words and every `env`
    wrapper, or, from a container on, only what the container sets (`-e`) and what runs inside it."""
    start = container_index(prefix)
    if start is None:
        found = dict(host_env)
        for w in prefix:
            _apply(w, found, {})
        return found
    outside = dict(host_env)
    for w in prefix[:start]:
        _apply(w, outside, {})
    found = {}
    for w in prefix[start:]:
        _apply(w, found, outside)
    return found


def _apply(wrapper: Wrapper, env: dict[str, str], outside: dict[str, str]) -> None:
    if wrapper.clears_env():
        env.clear()
    for name in wrapper.unsets():
        env.pop(name, None)
    for _, name, value in wrapper.env_items():
        if value is not None:
            env[name] = value
        elif name in outside:  # `docker run -e NAME` passes the value docker itself was given
            env[name] = outside[name]


def set_env(
    host_env: Env, prefix: tuple[Wrapper, ...], name: str, value: str
) -> tuple[Env, tuple[Wrapper, ...]]:
    """Set `name` for the engine where the command sets its environment: where it is set already (its
    last setting, the others dropped), else the innermost `env` wrapper, else the container's `-e`, else
    the leading `NAME=value` words."""
    start = container_index(prefix)
    scope = range(start or 0, len(prefix))
    if start is None:
        host_env = tuple((k, v) for k, v in host_env if k != name)
    places = [(w, index) for w in scope for index, n, _ in prefix[w].env_items() if n == name]
    wrappers = list(prefix)
    if places:
        w, index = places[-1]
        wrappers[w] = wrappers[w].with_env_value(index, value)
        wrappers = _drop_env(wrappers, name, scope, keep=(w, index))
        return host_env, tuple(wrappers)
    inner = [w for w in scope if prefix[w].kind == "env"]
    if inner:
        wrappers[inner[-1]] = wrappers[inner[-1]].with_env_added(name, value)
    elif start is not None:
        wrappers[start] = wrappers[start].with_env_added(name, value)
    else:
        host_env = (*host_env, (name, value))
    return host_env, tuple(wrappers)


def unset_env(host_env: Env, prefix: tuple[Wrapper, ...], name: str) -> tuple[Env, tuple[Wrapper, ...]]:
    """Remove every setting of `name` the engine would see (the container's `-e NAME` included)."""
    start = container_index(prefix)
    scope = range(start or 0, len(prefix))
    if start is None:
        host_env = tuple((k, v) for k, v in host_env if k != name)
    return host_env, tuple(_drop_env(list(prefix), name, scope))


def _drop_env(
    wrappers: list[Wrapper], name: str, scope: range, keep: tuple[int, int] | None = None
) -> list[Wrapper]:
    out: list[Wrapper] = []
    for w, wrapper in enumerate(wrappers):
        drop = {i for i, n, _ in wrapper.env_items() if n == name and (w, i) != keep} if w in scope else set()
        if not drop:
            out.append(wrapper)
            continue
        slimmer = wrapper.without_groups(drop)
        if slimmer.kind != "env" or slimmer.options:  # a bare `env` sets nothing: it goes too
            out.append(slimmer)
    return out
