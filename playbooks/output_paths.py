"""A place SGLang writes to (request logs, crash dumps, metrics files, profiles) that cannot be written: an
existing file where a folder belongs, a read-only folder, a `~` no shell expanded, a URL where a path
belongs. The error quotes the path; the command's setting holding it is the fault. Without the setting
SGLang writes nothing there (or to its own default place); a writable folder is the person's to name."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.take_back import its_settings
from specdoctor.tools.command import Edit, RemoveFlag, UnsetEnv

_UNWRITABLE = (
    r"(?:FileExistsError|NotADirectoryError|IsADirectoryError|PermissionError|OSError): "
    r"\[Errno (?P<errno>13|17|20|21|30)\][^\n]*?'(?P<path>[^'\n]+)'"
)
_WHY = {
    "13": "this user may not write there",
    "17": "a file of that name is already there, where a folder belongs",
    "20": "a file stands where a folder belongs",
    "21": "a folder stands where a file belongs",
    "30": "the filesystem is read-only there",
}


@playbook(
    id="sglang.path.output-unwritable",
    category="other",
    when=("exited", "unhealthy", "degraded", "hung"),
    pattern=_UNWRITABLE,
    priority=38,
    scope="root",
)
def output_unwritable(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    if m is None:
        return None
    holding = _settings_holding(ctx, m["path"])
    if len(holding) != 1:
        return None
    setting, value, edits = holding[0]
    unexpanded = " (`~` is expanded by a shell, not by SGLang)" if value.startswith("~") else ""
    return fix(
        ctx,
        list(edits),
        "other",
        f"SGLang cannot write where {setting} {value} points: {_WHY[m['errno']]}{unexpanded}",
        why=f"the error quotes {m['path']}, which {setting} names; without it SGLang writes nothing there (or "
        "to its own default place); give a writable absolute folder instead if you need the output",
        evidence=(m.group(0),),
        confidence=0.45,
    )


def _settings_holding(ctx: Context, path: str) -> list[tuple[str, str, tuple[Edit, ...]]]:
    """The command's flags and engine variables whose value is that path, holds it, or begins with it (a
    relative value's first part: `~`, `http:`)."""
    found: list[tuple[str, str, tuple[Edit, ...]]] = []
    for option in ctx.spec.options():
        flag = ctx.view.canon(option.name)
        if len(option.values) == 1 and _holds(option.values[0], path):
            found.append((flag, option.values[0], (RemoveFlag(flag=flag), *_with_its_switch(flag, ctx))))
    for name, value in ctx.spec.env_dict().items():
        if re.match(r"(?:SGLANG|SGL)_", name) and _holds(value, path):
            found.append((name, value, (UnsetEnv(name=name),)))
    return found


def _holds(value: str, path: str) -> bool:
    value = value.strip().removeprefix("./").rstrip("/")
    if not value or value in ("stdout", "stderr"):
        return False
    first = value.split("/", 1)[0]
    return (
        path == value
        or path.startswith(value + "/")
        or path.endswith("/" + value)
        or (not value.startswith("/") and path == first)
    )


def _with_its_switch(flag: str, ctx: Context) -> tuple[Edit, ...]:
    """The switch whose setting this is (`--export-metrics-to-file` for `--export-metrics-to-file-dir`):
    SGLang rejects the switch without it, so they go together, with the flag's own settings."""
    switches = [
        ctx.view.canon(o.name)
        for o in ctx.spec.options()
        if not o.values and flag.startswith(ctx.view.canon(o.name) + "-")
    ]
    return (*its_settings(flag, ctx), *(RemoveFlag(flag=s) for s in switches))
