"""LaunchCommand: the launch command as data, and typed edits to it.

A command is kept token-exact: parse a shell line or an argv list, edit it with typed edits, render it
back to argv (to run) or to a copy-pasteable shell line (to show). Nothing here runs anything.

A command is `[NAME=value ...] [wrappers ...] ENTRYPOINT ARGS`: the wrappers (`docker run … IMAGE`,
`uv run`, `nohup`, `numactl`, …; `tools/wrappers.py`) are a preserved prefix that edits never touch, but for
the environment of a containerised engine, which is the container's `-e NAME=VALUE`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from pathlib import PurePath
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.container import Container
from specdoctor.tools.wrappers import (
    ENV_ASSIGN,
    PYTHON_CHOOSERS,
    CommandError,
    Wrapper,
    container_index,
    engine_environment,
    read_wrapper,
    set_env,
    unset_env,
)

_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
# argparse treats "-1" and "-.5" as values when no option looks like a negative number.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
# Interpreter options that take a separate argument (python -X dev, -W error, -c is not allowed).
_PY_OPTS_WITH_ARG = {"-X", "-W", "-Q"}

_SHELLS = ("sh", "bash", "zsh", "dash", "ksh")

SGLANG_MODULES = ("sglang.launch_server",)
KNOWN_OTHER_ENGINES = {
    "vllm": "vLLM",
    "vllm.entrypoints.openai.api_server": "vLLM",
    "trtllm-serve": "TensorRT-LLM",
    "lmdeploy": "LMDeploy",
    "text-generation-launcher": "TGI",
}


class Option(BaseModel):
    """One `--flag [values...]` group as written on the command line."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    kind: Literal["option"] = "option"
    name: str = Field(description="The flag as written, e.g. `--tp` or `--reasoning_parser`.")
    values: tuple[str, ...] = Field(default=(), description="Values that follow the flag, in order.")
    inline: bool = Field(default=False, description="Written as `--flag=value` (one value).")

    def tokens(self) -> list[str]:
        if self.inline and len(self.values) == 1:
            return [f"{self.name}={self.values[0]}"]
        return [self.name, *self.values]


class Positional(BaseModel):
    """A bare word in the argument list (e.g. `sglang serve MODEL`)."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    kind: Literal["positional"] = "positional"
    value: str

    def tokens(self) -> list[str]:
        return [self.value]


Arg = Annotated[Option | Positional, Field(discriminator="kind")]
Canon = Callable[[str], str]
"""Maps a flag as written to the name it means (alias/prefix resolution); identity without a catalog."""


def _same(name: str) -> str:
    return name


class LaunchCommand(BaseModel):
    """A launch command: environment overrides, wrappers, the entrypoint, and the ordered arguments."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    env: tuple[tuple[str, str], ...] = Field(
        default=(), description="The leading `NAME=value` words, in order: the first program's environment."
    )
    prefix: tuple[Wrapper, ...] = Field(
        default=(),
        description="What the engine runs through (`docker run … IMAGE`, `uv run`, `nohup`, `numactl …`), "
        "word for word; edits never touch it, but for a container's `-e NAME=VALUE` on an environment edit.",
    )
    entrypoint: tuple[str, ...] = Field(description="e.g. (`python`, `-m`, `sglang.launch_server`).")
    args: tuple[Arg, ...] = ()

    # ---- parsing -------------------------------------------------------------------------------
    @classmethod
    def parse(cls, command: str | Sequence[str]) -> LaunchCommand:
        """Parse one shell line or an argv list. Raises CommandError with a one-line reason."""
        tokens = _split(command) if isinstance(command, str) else list(command)
        if not tokens or all(not t.strip() for t in tokens):
            raise CommandError(
                "empty launch command: give it after `--`, e.g. `-- python -m sglang.launch_server ...`"
            )
        env: list[tuple[str, str]] = []
        # `env -i ...` is a wrapper with options; a bare `env A=1` is the same as `A=1`.
        i = 1 if tokens[0] == "env" and len(tokens) > 1 and not tokens[1].startswith("-") else 0
        while i < len(tokens) and (m := ENV_ASSIGN.match(tokens[i])):
            env.append((m.group(1), m.group(2)))
            i += 1
        prefix: list[Wrapper] = []
        while i < len(tokens) and (found := read_wrapper(tokens[i:])) is not None:
            prefix.append(found[0])
            i += found[1]
        if prefix and i < len(tokens) and ENV_ASSIGN.match(tokens[i]):
            raise CommandError(
                f"`{tokens[i]}` after `{prefix[-1].program[0]}` would be run as a program (only a shell reads "
                f"NAME=value before a command): write `env {tokens[i]}`"
            )
        entry_len = _entrypoint_length(tokens[i:])
        return cls(
            env=tuple(env),
            prefix=tuple(prefix),
            entrypoint=tuple(tokens[i : i + entry_len]),
            args=tuple(group_args(tokens[i + entry_len :])),
        )

    # ---- rendering -----------------------------------------------------------------------------
    def argv(self) -> list[str]:
        """The argument vector to execute, wrappers included (the leading environment is not)."""
        return [*(t for w in self.prefix for t in w.words()), *self.entrypoint, *self.arguments()]

    def arguments(self) -> list[str]:
        """The engine's own arguments, after its entrypoint."""
        return [t for a in self.args for t in a.tokens()]

    def env_dict(self) -> dict[str, str]:
        """The variables the command sets for the engine: the leading `NAME=value` words and `env`
        wrappers, or for a containerised engine what the container sets (`-e`)."""
        if not self.prefix:
            return dict(self.env)
        return engine_environment(self.env, self.prefix)

    def host_env(self) -> dict[str, str]:
        """The leading `NAME=value` words: the environment of the first program run (a wrapper's, if any)."""
        return dict(self.env)

    def shell(self) -> str:
        """A copy-pasteable shell line, environment prefixes included."""
        env = [f"{k}={shlex.quote(v)}" for k, v in self.env]
        return " ".join([*env, *(shlex.quote(t) for t in self.argv())])

    def __str__(self) -> str:
        return self.shell()

    # ---- reading -------------------------------------------------------------------------------
    @property
    def is_serve_cli(self) -> bool:
        return len(self.entrypoint) >= 2 and self.entrypoint[-1] == "serve"

    @property
    def interpreter(self) -> str | None:
        """The python the command names (`python3`, `/opt/venv/bin/python`), or None for `sglang serve`."""
        first = self.entrypoint[0]
        return first if _PYTHON.match(PurePath(first).name) else None

    @property
    def container(self) -> Container | None:
        """The container the engine runs in (the innermost, if containers are nested), or None."""
        at = container_index(self.prefix)
        return Container.of(self.prefix[at]) if at is not None else None

    @property
    def python_chooser(self) -> Wrapper | None:
        """A wrapper that picks the engine's python when it runs (`uv run`, `conda run -n X`), so the
        python on PATH says nothing of it; None when the command's own words name it."""
        found = [w for w in self.prefix if w.kind in PYTHON_CHOOSERS]
        return found[-1] if found else None

    def launch_problem(self) -> str | None:
        """Why this command cannot be launched and watched as a server (one line), or None."""
        asked = [o.name for o in self.options() if o.name in ("--help", "-h")]
        if asked:
            return f"`{asked[0]}` prints the flags and exits; it does not launch: drop it to deploy"
        box = self.container
        return box.launch_problem() if box is not None else None

    def options(self) -> list[Option]:
        return [a for a in self.args if isinstance(a, Option)]

    def positionals(self) -> list[str]:
        return [a.value for a in self.args if isinstance(a, Positional)]

    def find(self, flag: str, canon: Canon = _same) -> list[Option]:
        """Every occurrence of `flag`, under any spelling `canon` maps to the same name."""
        want = canon(flag)
        return [o for o in self.options() if canon(o.name) == want]

    def has(self, flag: str, canon: Canon = _same) -> bool:
        return bool(self.find(flag, canon))

    def value(self, flag: str, canon: Canon = _same) -> str | None:
        """The effective value of a single-valued flag (argparse keeps the last occurrence)."""
        found = self.find(flag, canon)
        if not found or not found[-1].values:
            return None
        return found[-1].values[-1]

    def values(self, flag: str, canon: Canon = _same) -> tuple[str, ...] | None:
        found = self.find(flag, canon)
        return found[-1].values if found else None

    # ---- editing -------------------------------------------------------------------------------
    def apply(self, edit: Edit, canon: Canon = _same) -> LaunchCommand:
        return edit.apply_to(self, canon)

    def apply_all(self, edits: Iterable[Edit], canon: Canon = _same) -> LaunchCommand:
        spec = self
        for edit in edits:
            spec = edit.apply_to(spec, canon)
        return spec


def _split(line: str) -> list[str]:
    # Users paste multi-line commands with backslash continuations, which a shell reads as one space.
    try:
        return shlex.split(line.replace("\\\r\n", " ").replace("\\\n", " "), comments=False, posix=True)
    except ValueError as exc:
        raise CommandError(f"cannot parse the command line ({exc}): check its quotes") from None


def _entrypoint_length(tokens: list[str]) -> int:
    """How many leading tokens name the program; raises CommandError for anything that is not SGLang."""
    if not tokens:
        raise CommandError("the command has environment settings but no program: add the SGLang entrypoint")
    first = PurePath(tokens[0]).name
    if _PYTHON.match(first):
        i = 1
        while i < len(tokens) and tokens[i].startswith("-") and tokens[i] != "-m":
            if tokens[i] == "-c":
                raise CommandError(
                    "`python -c` is not a launch command: use `python -m sglang.launch_server ...`"
                )
            i += 2 if tokens[i] in _PY_OPTS_WITH_ARG else 1
        if i < len(tokens) and PurePath(tokens[i]).parts[-2:] == ("sglang", "launch_server.py"):
            return i + 1  # SGLang's own launcher script, run from a source checkout
        if i + 1 >= len(tokens) or tokens[i] != "-m":
            raise CommandError(
                f"`{' '.join(tokens[: i + 1])}` runs a script, not SGLang: use `{tokens[0]} -m sglang.launch_server ...`"
            )
        module = tokens[i + 1]
        if module in SGLANG_MODULES:
            return i + 2
        raise CommandError(_unknown_engine(module))
    if first in _SHELLS and "-c" in tokens[1:3]:
        raise CommandError(
            f"`{first} -c '...'` runs a shell line, which specdoctor does not parse: give the SGLang command "
            "itself (the words inside the quotes)"
        )
    if first == "sglang":
        if len(tokens) > 1 and tokens[1] == "serve":
            return 2
        sub = tokens[1] if len(tokens) > 1 else "(nothing)"
        raise CommandError(f"`sglang {sub}` does not launch a server: use `sglang serve ...`")
    raise CommandError(_unknown_engine(first))


def _unknown_engine(name: str) -> str:
    engine = KNOWN_OTHER_ENGINES.get(name) or KNOWN_OTHER_ENGINES.get(name.split(".")[0])
    if engine:
        return f"{engine} launches are not supported yet; specdoctor drives SGLang (`python -m sglang.launch_server` or `sglang serve`)"
    return f"unknown engine `{name}`: specdoctor launches SGLang (`python -m sglang.launch_server ...` or `sglang serve ...`)"


def group_args(tokens: Sequence[str]) -> list[Option | Positional]:
    """Group tokens into options with their following values; without a catalog every bare word after a
    flag is taken as its value (the catalog regroups by nargs later)."""
    out: list[Option | Positional] = []
    current: list[str] | None = None
    name = ""
    for tok in tokens:
        # A flag pasted from a web page starts with an en or em dash; argparse takes it for a word, but it
        # was written as a flag, and is grouped as one so that it can be respelled.
        if (
            tok.startswith(("-", "\u2013", "\u2014"))
            and tok not in ("-", "\u2013", "\u2014")
            and not _NEGATIVE_NUMBER.match(tok)
        ):
            if current is not None:
                out.append(Option(name=name, values=tuple(current)))
            current = None
            if tok.startswith("--") and "=" in tok:
                flag, _, val = tok.partition("=")
                out.append(Option(name=flag, values=(val,), inline=True))
            else:
                name, current = tok, []
        elif current is not None:
            current.append(tok)
        else:
            out.append(Positional(value=tok))
    if current is not None:
        out.append(Option(name=name, values=tuple(current)))
    return out


# ---- edits ---------------------------------------------------------------------------------------


class _EditBase(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    def describe(self) -> str:
        raise NotImplementedError


class SetFlag(_EditBase):
    """Give a flag these values (a boolean flag has none); added at the end when absent."""

    op: Literal["set"] = "set"
    flag: str
    values: tuple[str, ...] = ()

    def apply_to(self, spec: LaunchCommand, canon: Canon) -> LaunchCommand:
        want = canon(self.flag)
        # Written under its full name: an edit never brings back an abbreviation or an `_` spelling.
        name = want if want.startswith("--") else self.flag
        args: list[Option | Positional] = []
        placed = False
        for a in spec.args:
            if isinstance(a, Option) and canon(a.name) == want:
                if not placed:
                    inline = a.inline and len(self.values) == 1
                    args.append(Option(name=name, values=self.values, inline=inline))
                    placed = True
                continue
            args.append(a)
        if not placed:
            args.append(Option(name=name, values=self.values))
        return spec.model_copy(update={"args": tuple(args)})

    def describe(self) -> str:
        return f"set {' '.join([self.flag, *self.values])}"


class RemoveFlag(_EditBase):
    """Drop every occurrence of a flag."""

    op: Literal["remove"] = "remove"
    flag: str

    def apply_to(self, spec: LaunchCommand, canon: Canon) -> LaunchCommand:
        want = canon(self.flag)
        kept = tuple(a for a in spec.args if not (isinstance(a, Option) and canon(a.name) == want))
        return spec.model_copy(update={"args": kept})

    def describe(self) -> str:
        return f"remove {self.flag}"


class RenameFlag(_EditBase):
    """Respell a flag in place, keeping its values unless new ones are given."""

    op: Literal["rename"] = "rename"
    flag: str
    to: str
    values: tuple[str, ...] | None = None

    def apply_to(self, spec: LaunchCommand, canon: Canon) -> LaunchCommand:
        # The old spelling is matched literally first: it is often one the catalog cannot resolve.
        def hit(o: Option) -> bool:
            return o.name == self.flag or canon(o.name) == canon(self.flag)

        args: list[Option | Positional] = []
        for a in spec.args:
            if isinstance(a, Option) and hit(a):
                values = a.values if self.values is None else self.values
                args.append(Option(name=self.to, values=values, inline=a.inline and len(values) == 1))
            else:
                args.append(a)
        return spec.model_copy(update={"args": tuple(args)})

    def describe(self) -> str:
        tail = "" if self.values is None else " " + " ".join(self.values)
        return f"rename {self.flag} → {self.to}{tail}"


class SetEnv(_EditBase):
    """Set an environment variable for the engine: in the leading `NAME=value` words, or where a wrapper
    sets the engine's environment (a container's `-e`, an `env` wrapper)."""

    op: Literal["set_env"] = "set_env"
    name: str
    value: str

    def apply_to(self, spec: LaunchCommand, canon: Canon) -> LaunchCommand:
        env, prefix = set_env(spec.env, spec.prefix, self.name, self.value)
        return spec.model_copy(update={"env": env, "prefix": prefix})

    def describe(self) -> str:
        return f"set env {self.name}={self.value}"


class UnsetEnv(_EditBase):
    """Remove an environment variable from the engine's overrides (a container's `-e NAME` included)."""

    op: Literal["unset_env"] = "unset_env"
    name: str

    def apply_to(self, spec: LaunchCommand, canon: Canon) -> LaunchCommand:
        env, prefix = unset_env(spec.env, spec.prefix, self.name)
        return spec.model_copy(update={"env": env, "prefix": prefix})

    def describe(self) -> str:
        return f"unset env {self.name}"


class PositionalToFlag(_EditBase):
    """Turn a bare word into a flag's value (`launch_server MODEL` → `--model-path MODEL`)."""

    op: Literal["positional_to_flag"] = "positional_to_flag"
    value: str
    flag: str

    def apply_to(self, spec: LaunchCommand, canon: Canon) -> LaunchCommand:
        args: list[Option | Positional] = []
        for a in spec.args:
            if isinstance(a, Positional) and a.value == self.value:
                args.append(Option(name=self.flag, values=(self.value,)))
            elif isinstance(a, Option) and self.value in a.values and a.values[-1] == self.value:
                # A bare word the lexer attached to the flag before it.
                args.append(a.model_copy(update={"values": a.values[:-1]}))
                args.append(Option(name=self.flag, values=(self.value,)))
            else:
                args.append(a)
        return spec.model_copy(update={"args": tuple(args)})

    def describe(self) -> str:
        return f"pass {self.value} as {self.flag}"


class SetFreePort(_EditBase):
    """Move a port flag to the first port from `start` on that is free where the command runs.

    Rules cannot know which ports are free (they are pure functions of the evidence), so they say this;
    the loop resolves it on the host just before launching. Unresolved, the command shows `start`."""

    op: Literal["set_free_port"] = "set_free_port"
    flag: str = "--port"
    start: int = Field(ge=1, le=65535)

    def apply_to(self, spec: LaunchCommand, canon: Canon) -> LaunchCommand:
        return SetFlag(flag=self.flag, values=(str(self.start),)).apply_to(spec, canon)

    def describe(self) -> str:
        return f"set {self.flag} to a free port from {self.start}"


Edit = Annotated[
    SetFlag | RemoveFlag | RenameFlag | SetEnv | UnsetEnv | PositionalToFlag | SetFreePort,
    Field(discriminator="op"),
]


# ---- diff ----------------------------------------------------------------------------------------


class DiffLine(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    change: Literal["added", "removed", "changed"]
    what: str = Field(description="The flag or `env NAME`.")
    before: str | None = None
    after: str | None = None

    def text(self) -> str:
        if self.change == "added":
            return f"+ {self.what} {self.after or ''}".rstrip()
        if self.change == "removed":
            return f"- {self.what} {self.before or ''}".rstrip()
        if self.before == self.after:
            return f"~ {self.what} {self.after or ''}".rstrip()
        return f"~ {self.what} {self.before or ''} → {self.after or ''}"


def diff(old: LaunchCommand, new: LaunchCommand, canon: Canon = _same) -> list[DiffLine]:
    """What changed between two commands, flag by flag, for people to read."""
    lines: list[DiffLine] = []
    old_env, new_env = old.env_dict(), new.env_dict()
    for k in old_env.keys() | new_env.keys():
        a, b = old_env.get(k), new_env.get(k)
        if a != b:
            change = "added" if a is None else "removed" if b is None else "changed"
            lines.append(DiffLine(change=change, what=f"env {k}", before=a, after=b))
    if _wrapper_words(old) != _wrapper_words(new):
        lines.append(
            DiffLine(
                change="changed",
                what="wrapper",
                before=" ".join(_wrapper_words(old)),
                after=" ".join(_wrapper_words(new)),
            )
        )
    if old.entrypoint != new.entrypoint:
        lines.append(
            DiffLine(
                change="changed",
                what="program",
                before=" ".join(old.entrypoint),
                after=" ".join(new.entrypoint),
            )
        )
    before = _flag_table(old, canon)
    after = _flag_table(new, canon)
    for key in [*before, *(k for k in after if k not in before)]:
        a, b = before.get(key), after.get(key)
        if a == b:
            continue
        if a is None and b is not None:
            lines.append(DiffLine(change="added", what=b[0], after=b[1]))
        elif b is None and a is not None:
            lines.append(DiffLine(change="removed", what=a[0], before=a[1]))
        elif a is not None and b is not None:
            what = a[0] if a[0] == b[0] else f"{a[0]} → {b[0]}"
            lines.append(DiffLine(change="changed", what=what, before=a[1], after=b[1]))
    old_pos, new_pos = old.positionals(), new.positionals()
    if old_pos != new_pos:
        lines.append(
            DiffLine(change="changed", what="positional", before=" ".join(old_pos), after=" ".join(new_pos))
        )
    return lines


def _wrapper_words(spec: LaunchCommand) -> list[str]:
    """The wrappers' words without the environment they set (that shows as `env NAME` lines)."""
    words: list[str] = []
    for w in spec.prefix:
        bare = w.without_groups({i for i, _, _ in w.env_items()})
        words += bare.words()
    return words


def _flag_table(spec: LaunchCommand, canon: Canon) -> dict[str, tuple[str, str]]:
    table: dict[str, tuple[str, str]] = {}
    for o in spec.options():
        table[canon(o.name)] = (o.name, " ".join(o.values))
    return table
