"""Reading a launch's --config file as data (never run) the way its author meant it. SGLang's
ConfigArgumentMerger (srt/utils/server_args_config_parser.py) takes one YAML mapping of flag names; people
also write the flags as a YAML list of command-line words (`- --max-running-requests=8`), put them under one
section (`server:`), leave a key empty, or break the YAML in one value. Each of those still says which
settings were meant; what had to be repaired to read it is reported with the settings."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.command import Edit, LaunchCommand, SetFlag

_MAX_BYTES = 1 << 20
_TOP_LEVEL = re.compile(r"^([A-Za-z][\w-]*)\s*:\s*(.*?)\s*$")


@dataclass(frozen=True)
class Settings:
    values: dict[str, object]
    repaired: str = ""
    """How the file had to be read ("" when it is a clean mapping)."""


def read_config(path: str) -> dict[str, object] | str:
    """The file's settings, or why they cannot be read here."""
    found = read_settings(path)
    return found.values if isinstance(found, Settings) else found


def read_settings(path: str) -> Settings | str:
    """The file's settings and how they were read, or why they cannot be read here (a JSON file is read as
    JSON)."""
    import yaml

    file = Path(path)
    try:
        if file.stat().st_size > _MAX_BYTES:
            return f"{path} is larger than {_MAX_BYTES >> 20} MiB"
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return f"{path} cannot be read here ({type(exc).__name__})"
    try:
        data = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        said = str(exc).splitlines()[0]
        lines = _line_by_line(text)
        if lines is None:
            return f"{path} is neither YAML nor JSON: {said}"
        return Settings(lines, f"its YAML does not parse ({said}), so it was read line by line")
    if isinstance(data, dict):
        return Settings(data)
    if (words := _command_line_words(data)) is not None:
        return Settings(words, "it lists command-line words, not a mapping of settings")
    return f"{path} holds no mapping of settings"


def _command_line_words(data: object) -> dict[str, object] | None:
    """`- --max-running-requests=8`, `- --enable-metrics`: a list of flags as on a command line."""
    if (
        not isinstance(data, list)
        or not data
        or not all(isinstance(w, str) and w.startswith("--") for w in data)
    ):
        return None
    out: dict[str, object] = {}
    for word in data:
        name, sep, value = word[2:].partition("=")
        out[name] = value if sep else True
    return out


def _line_by_line(text: str) -> dict[str, object] | None:
    """Top-level `key: value` lines of a file whose YAML does not parse, each value read alone (a JSON value
    whose braces were left open is closed); None when a line is neither such a pair nor blank nor a
    comment."""
    import yaml

    out: dict[str, object] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _TOP_LEVEL.match(line)
        if m is None:
            return None
        try:
            out[m.group(1)] = yaml.safe_load(_closed(m.group(2))) if m.group(2) else None
        except yaml.YAMLError:
            out[m.group(1)] = m.group(2)
    return out or None


def _closed(value: str) -> str:
    """A flow value with its open brackets closed, innermost first."""
    opened: list[str] = []
    for ch in value:
        if ch in "{[":
            opened.append("}" if ch == "{" else "]")
        elif ch in "}]" and opened:
            opened.pop()
    return value + "".join(reversed(opened))


def config_values(path: str) -> frozenset[str]:
    """Every value the file writes, as the command line would carry it (none when it cannot be read). The
    gate asks once per value it checks: the file is read again only when it changed."""
    try:
        stat = Path(path).stat()
    except OSError:
        return frozenset()
    return _values_of(path, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=16)
def _values_of(path: str, mtime_ns: int, size: int) -> frozenset[str]:
    settings = read_config(path)
    if isinstance(settings, str):
        return frozenset()
    return frozenset(_text(v) for v in _leaves(settings))


def _leaves(settings: dict[str, object]) -> list[object]:
    out: list[object] = []
    for value in settings.values():
        if (
            isinstance(value, dict)
            and value
            and all(isinstance(v, (str, int, float, bool, list)) for v in value.values())
        ):
            out += _leaves(value)  # a section of settings, or a JSON value: both are the user's words
        out += value if isinstance(value, list) else [value]
    return out


def as_flags(
    settings: dict[str, object], catalog: FlagCatalog, command: LaunchCommand
) -> tuple[list[Edit], list[str]]:
    """The settings as edits in the catalog's spelling, and the keys no flag of the catalog takes. A flag
    the command line already gives keeps its value there (SGLang lets the command line win); an empty key
    sets nothing; one section whose keys are flags (`server:`) is read as the settings it holds."""
    written = {catalog.canonical(o.name) for o in command.options()}
    edits: list[Edit] = []
    unknown: list[str] = []
    for key, value in settings.items():
        info = catalog.resolve("--" + str(key).replace("_", "-")).flag
        if info is None and isinstance(value, dict):
            inner, rest = as_flags(value, catalog, command)
            if not rest:
                edits += inner
                continue
        if info is None:
            unknown.append(str(key))
        elif info.name not in written and value is not None:
            edits += _edit(info.name, info.nargs, value)
    return edits, unknown


def _edit(flag: str, nargs: object, value: object) -> list[Edit]:
    if nargs == 0:
        on = value is True or str(value).strip().lower() in ("true", "1", "yes", "on")
        return [SetFlag(flag=flag)] if on else []
    values = value if isinstance(value, list) else [value]
    return [SetFlag(flag=flag, values=tuple(_text(v) for v in values))]


def _text(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, str) and value.startswith("~/"):
        return str(Path(value).expanduser())  # SGLang does not expand `~` in the file; a shell would have
    return str(value)
