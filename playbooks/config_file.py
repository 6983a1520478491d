"""A launch that fails on its own `--config` file. SGLang's ConfigArgumentMerger
(srt/server_args_config_parser.py) takes only `.yaml`/`.yml` files, turns each key into `--<key>` as
written (an `_` spelling is then no flag argparse knows), a `true` into a bare switch but a quoted "true"
into `--switch true`, refuses keys of deprecated or multi-value actions, and puts the file's flags before
the command line's, which wins. The same settings written on the command line, in SGLang's own spelling,
are what the file meant: the fix drops --config and writes them out. The file is the user's data, read as
data (never run), and its values cross the one gate like any other edit."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from specdoctor.playbooks.base import Context, fix, playbook, stop
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.command import Edit, LaunchCommand, RemoveFlag, SetFlag

_MAX_BYTES = 1 << 20
_IN_THE_MERGER = "server_args_config_parser"
_UNRECOGNIZED = re.compile(r"error: unrecognized arguments: (.*)")


def read_config(path: str) -> dict[str, object] | str:
    """The file's settings, or why they cannot be read here (a JSON file is read as JSON)."""
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
        return f"{path} is neither YAML nor JSON: {str(exc).splitlines()[0]}"
    return data if isinstance(data, dict) else f"{path} holds no mapping of settings"


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
    return frozenset(
        _text(v) for value in settings.values() for v in (value if isinstance(value, list) else [value])
    )


def as_flags(
    settings: dict[str, object], catalog: FlagCatalog, command: LaunchCommand
) -> tuple[list[Edit], list[str]]:
    """The settings as edits in the catalog's spelling, and the keys no flag of the catalog takes. A flag
    the command line already gives keeps its value there (SGLang lets the command line win)."""
    written = {catalog.canonical(o.name) for o in command.options()}
    edits: list[Edit] = []
    unknown: list[str] = []
    for key, value in settings.items():
        resolved = catalog.resolve("--" + str(key).replace("_", "-"))
        info = resolved.flag
        if info is None:
            unknown.append(str(key))
            continue
        if info.name in written:
            continue
        if info.nargs == 0:
            if value is True or str(value).strip().lower() in ("true", "1", "yes", "on"):
                edits.append(SetFlag(flag=info.name))
            continue
        values = value if isinstance(value, list) else [value]
        edits.append(SetFlag(flag=info.name, values=tuple(_text(v) for v in values)))
    return edits, unknown


def _text(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


@playbook(id="sglang.flag.config-file", category="flag-name", priority=9)
def config_file(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The launch failed reading or applying its --config file: write its settings out instead."""
    path = ctx.view.get("--config")
    if not path or not _failed_on_the_file(ctx):
        return None
    settings = read_config(path)
    if isinstance(settings, str) and _UNRECOGNIZED.search(ctx.root.error_line or ""):
        return None  # the argparse rule names each rejected key and its SGLang spelling
    if isinstance(settings, str):
        return stop(
            ctx,
            "flag-name",
            f"the launch failed on its --config file, and {settings}",
            "Write the file's settings on the command line in SGLang's spelling (`--max-running-requests 8`, "
            "a bare `--enable-metrics`), or fix the file: YAML, dashed or underscored ServerArgs keys, real "
            "booleans for switches.",
            evidence=(ctx.root.error_line or "",),
        )
    edits, unknown = as_flags(settings, ctx.catalog, ctx.spec)
    if unknown:
        return stop(
            ctx,
            "flag-name",
            f"the --config file {path} has keys no SGLang flag takes: {', '.join(unknown)}",
            "Remove or rename them in the file (`specdoctor check` lists SGLang's flags).",
            evidence=(ctx.root.error_line or "",),
        )
    return fix(
        ctx,
        [RemoveFlag(flag="--config"), *edits],
        "flag-name",
        f"SGLang could not apply its --config file {path}: {ctx.root.error_line or ''}".strip(),
        why="SGLang turns each key of the file into a flag as written; the same settings on the command line, "
        "in SGLang's spelling, are what the file meant: "
        + (", ".join(e.describe() for e in edits) or "(the file sets nothing)"),
        confidence=0.6,
    )


def _failed_on_the_file(ctx: Context) -> bool:
    """The failure is in SGLang's reading of the file, or argparse rejects words only the file gave."""
    if any(_IN_THE_MERGER in f.path for f in ctx.root.frames):
        return True
    said = _UNRECOGNIZED.search(ctx.root.error_line or "")
    if said is None:
        return False
    on_the_line = {t for o in ctx.spec.options() for t in (o.name, *o.values)}
    return not set(said.group(1).split()) <= on_the_line
