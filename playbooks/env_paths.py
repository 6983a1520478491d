"""An environment variable of the command names a folder that is not there, and a library fails writing
into it (`PROMETHEUS_MULTIPROC_DIR=/var/run/prometheus` with --enable-metrics: "No such file or directory:
'/var/run/prometheus/tmpnq8ne9zk'"). Variables like it are often copied from another deployment's
environment. Left empty, the library picks a folder of its own; or create the folder."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.command import SetEnv

_MISSING = r"(?:FileNotFoundError|No such file or directory)[^\n]*?'(?P<path>/[^'\n]+)'"


@playbook(id="sglang.env.folder-not-there", category="other", pattern=_MISSING, priority=40, scope="root")
def folder_not_there(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    if m is None:
        return None
    path = m["path"]
    named = [
        (name, value)
        for name, value in ctx.spec.env_dict().items()
        if value.startswith("/")
        and len(value) > 1
        and (path == value or path.startswith(value.rstrip("/") + "/"))
    ]
    if len(named) != 1:
        return None
    name, value = named[0]
    return fix(
        ctx,
        [SetEnv(name=name, value="")],
        "other",
        f"{name}={value} names a folder that was missing where SGLang ran: it failed writing into it",
        why=f"the missing path {path} is inside {value}; with {name} empty the library picks a folder of its "
        f"own (or create {value} first)",
        evidence=(m.group(0),),
        confidence=0.45,
    )
