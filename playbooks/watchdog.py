"""SGLang's scheduler watchdog: a forward step that has not finished within --watchdog-timeout seconds
is taken for a hang, and the watchdog SIGQUITs the server (srt/utils/watchdog.py; `soft` ones only dump).
It logs `... watchdog timeout (self.watchdog_timeout=T, self.soft=False)` and nothing else explains the
death, so the rule reads the timeout from that line."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, line_of, playbook, stop
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.command import RemoveFlag

_FIRED = r"[Ww]atchdog timeout \(self\.watchdog_timeout=(?P<seconds>[\d.]+)(?:, self\.soft=(?P<soft>\w+))?\)"


@playbook(
    id="sglang.scheduler.watchdog", category="other", when=("exited", "hung", "unhealthy"), pattern=_FIRED
)
def watchdog_fired(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The watchdog killed the server: a timeout the command set too short, or a step that really hung."""
    if m is None or m["soft"] == "True":
        return None  # a soft watchdog only dumps the stacks; whatever killed the server is elsewhere
    seconds = float(m["seconds"])
    info = ctx.catalog.get("--watchdog-timeout")
    default = float(info.default) if info and info.default else None
    if ctx.view.has("--watchdog-timeout") and default is not None and seconds < default:
        return fix(
            ctx,
            [RemoveFlag(flag="--watchdog-timeout")],
            "other",
            f"--watchdog-timeout {ctx.view.get('--watchdog-timeout')} is shorter than a forward step, so "
            "SGLang's watchdog took a working server for a hung one and killed it",
            why=f"the watchdog kills the server when a step runs longer than this many seconds (0 does not turn "
            f"it off); back at SGLang's default ({info.default if info else '300'} s) only a real hang trips it",
            evidence=(line_of(m),),
            confidence=0.7,
        )
    return stop(
        ctx,
        "engine-bug",
        f"a forward step ran for more than {m['seconds']} s and SGLang's watchdog killed the server",
        "A step that long is a hang (a collective waiting on a rank that died, a kernel that never returns) "
        "or a first-time JIT compile. If the log shows kernels compiling (DeepGEMM, Triton autotune), raise "
        "--watchdog-timeout; otherwise find the stuck rank (`py-spy dump` on each scheduler, NCCL_DEBUG=INFO) "
        "and report it with this log.",
        evidence=(line_of(m),),
        confidence=0.6,
    )
