"""A launch that fails on its own `--config` file. SGLang's ConfigArgumentMerger
(srt/utils/server_args_config_parser.py) takes exactly one `.yaml`/`.yml` file, turns each key into
`--<key>` as written (an `_` spelling is then no flag argparse knows, an empty key the text 'None', `~` is
not expanded), a `true` into a bare switch but a quoted "true" into `--switch true`, refuses keys of
deprecated or multi-value actions, and puts the file's flags before the command line's, which wins but does
not stop argparse from refusing the file's value first. The same settings written on the command line, in
SGLang's spelling, are what the file meant: the fix drops --config and writes them out (`config_read` reads
the file as its author meant it). A file that is not there may be a near-named one beside it."""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from pathlib import Path

from specdoctor.playbooks.base import Context, fix, playbook, stop

# Re-exported: the gate and tests read a config file through this module.
from specdoctor.playbooks.config_read import Settings, as_flags, config_values, read_config, read_settings  # noqa: F401
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.command import RemoveFlag, SetFlag

_IN_THE_MERGER = "server_args_config_parser"
_UNRECOGNIZED = re.compile(r"error: unrecognized arguments: (.*)")
_REFUSED_VALUE = re.compile(r"argument (--[\w-]+): invalid [^']*?value: '([^']*)'", re.I)
_CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


@playbook(id="sglang.flag.config-file", category="flag-name", priority=9)
def config_file(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The launch failed reading or applying its --config file: write its settings out instead."""
    paths = [o.values[0] for o in ctx.spec.options() if ctx.view.canon(o.name) == "--config" and o.values]
    read = [(path, read_settings(path)) for path in paths]  # each file read once
    if not paths or not _failed_on_the_file(ctx, read):
        return None
    unreadable = [(path, why) for path, why in read if isinstance(why, str)]
    if unreadable and _UNRECOGNIZED.search(ctx.root.error_line or ""):
        return None  # the argparse rule names each rejected key and its SGLang spelling
    if unreadable:
        return _near_named(ctx, *unreadable[0]) or _cannot_read(ctx, unreadable[0][1])
    merged: dict[str, object] = {}
    repaired = []
    for path, settings in read:
        assert isinstance(settings, Settings)
        merged.update(settings.values)  # a later file wins, as a later flag does
        repaired += [f"{path}: {settings.repaired}"] if settings.repaired else []
    return _written_out(ctx, paths, merged, repaired)


def _written_out(ctx: Context, paths: list[str], merged: dict[str, object], repaired: list[str]) -> Decision:
    edits, unknown = as_flags(merged, ctx.catalog, ctx.spec)
    shown = " and ".join(paths)
    if unknown:
        return stop(
            ctx,
            "flag-name",
            f"the --config file {shown} has keys no SGLang flag takes: {', '.join(unknown)}",
            "Remove or rename them in the file (`specdoctor check` lists SGLang's flags).",
            evidence=(ctx.root.error_line or "",),
        )
    how = f" ({'; '.join(repaired)})" if repaired else ""
    return fix(
        ctx,
        [RemoveFlag(flag="--config"), *edits],
        "flag-name",
        f"SGLang could not apply its --config file {shown}: {ctx.root.error_line or ''}".strip(),
        why="SGLang turns each key of the file into a flag as written; the same settings on the command line, "
        f"in SGLang's spelling, are what the file meant{how}: "
        + (", ".join(e.describe() for e in edits) or "(the file sets nothing)"),
        # A file read past its own syntax is a reading of what it meant, for a person to confirm.
        confidence=0.45 if repaired else 0.6,
    )


def _cannot_read(ctx: Context, why: str) -> Decision:
    return stop(
        ctx,
        "flag-name",
        f"the launch failed on its --config file, and {why}",
        "Write the file's settings on the command line in SGLang's spelling (`--max-running-requests 8`, "
        "a bare `--enable-metrics`), or fix the file: YAML, dashed or underscored ServerArgs keys, real "
        "booleans for switches.",
        evidence=(ctx.root.error_line or "",),
    )


def _near_named(ctx: Context, path: str, why: str) -> Decision | None:
    """The file is not there, and beside it is one config file whose name is that name mistyped."""
    wanted = Path(path)
    if "FileNotFoundError" not in why or not wanted.parent.is_dir():
        return None
    ranked = sorted(
        (SequenceMatcher(None, wanted.name, p.name).ratio(), str(p))
        for p in wanted.parent.iterdir()
        if p.suffix in _CONFIG_SUFFIXES and p.is_file()
    )[::-1]
    if not ranked or ranked[0][0] < 0.8 or (len(ranked) > 1 and ranked[0][0] - ranked[1][0] < 0.05):
        return None
    near = ranked[0][1]
    return fix(
        ctx,
        [SetFlag(flag="--config", values=(near,))],
        "flag-name",
        f"the --config file {path} does not exist; {Path(near).name} beside it is that name mistyped",
        why=f"{near} is the one config file in {wanted.parent} whose name is close to {wanted.name}",
        evidence=(ctx.root.error_line or "",),
        confidence=0.5,
    )


def _failed_on_the_file(ctx: Context, read: list[tuple[str, Settings | str]]) -> bool:
    """The failure is in SGLang's reading of the file, or argparse rejects what only the file gave (a key,
    a value), or a value only the file gives is what the error names."""
    if _IN_THE_MERGER in ctx.root_text or any(path in ctx.root_text for path, _ in read):
        return True  # SGLang's reader, or a parser (YAML's) naming the file
    error = ctx.root.error_line or ""
    on_the_line = {t for o in ctx.spec.options() for t in (o.name, *o.values)}
    if said := _UNRECOGNIZED.search(error):
        return not set(said.group(1).split()) <= on_the_line
    if said := _REFUSED_VALUE.search(error):
        return said.group(2) not in on_the_line
    return any(_names_a_value_of(error, settings, on_the_line) for _, settings in read)


def _names_a_value_of(error: str, settings: Settings | str, on_the_line: set[str]) -> bool:
    if not isinstance(settings, Settings):
        return False
    texts = [v for v in settings.values.values() if isinstance(v, str) and len(v) >= 3]
    return any(f"'{v}'" in error and v not in on_the_line for v in texts)
