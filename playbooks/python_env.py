"""What the Python interpreter is told that SGLang's start cannot live with: warnings turned into errors
(PYTHONWARNINGS=error, `python -W error`: SGLang and its libraries warn on every start, deprecations
mostly) and docstrings stripped (PYTHONOPTIMIZE=2, `python -OO`: transformers parses them at import)."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook, stop
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.command import SetEnv

_WARNING_RAISED = r"^(?:[\w.]+\.)?\w*Warning: "


@playbook(
    id="sglang.host.warnings-as-errors", category="other", pattern=_WARNING_RAISED, priority=30, scope="root"
)
def warnings_as_errors(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A warning raised as an error: Python was told to turn warnings into exceptions (PYTHONWARNINGS=error,
    `python -W error`), and SGLang or a library it imports warns on every start (a deprecation)."""
    said = (ctx.root.error_line or "").strip()
    if not re.match(_WARNING_RAISED, said):
        return None
    if "error" in ctx.spec.env_dict().get("PYTHONWARNINGS", "").lower():
        return fix(
            ctx,
            [SetEnv(name="PYTHONWARNINGS", value="default")],
            "other",
            f"PYTHONWARNINGS turns every warning into an error, and SGLang's start warns: {said}",
            why="the warning is not a fault of the launch; with PYTHONWARNINGS=default Python prints it and "
            "goes on (keep `error` for your own tests, not for the server)",
            evidence=(said,),
            confidence=0.6,
        )
    if re.search(r"(?:^| )-W ?error", " ".join(ctx.spec.entrypoint)):
        return stop(
            ctx,
            "other",
            f"`python -W error` turns every warning into an error, and SGLang's start warns: {said}",
            "Launch without `-W error` (or with `-W default`): the warning is not a fault of the launch.",
            evidence=(said,),
            confidence=0.7,
        )
    return None


@playbook(
    id="sglang.host.docstrings-stripped", category="other", pattern=r"docstring", priority=30, scope="root"
)
def docstrings_stripped(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """PYTHONOPTIMIZE=2 (python -OO) strips docstrings, and transformers builds its model outputs from them."""
    level = ctx.spec.env_dict().get("PYTHONOPTIMIZE", "")
    if not level.isdigit() or int(level) < 2:
        return None
    return fix(
        ctx,
        [SetEnv(name="PYTHONOPTIMIZE", value="0")],
        "other",
        f"PYTHONOPTIMIZE={level} strips docstrings, which transformers reads when it is imported",
        why="-OO removes every docstring, and transformers parses its classes' docstrings at import; at 0 "
        "Python also keeps the assert statements SGLang checks its settings with (-O removes those)",
        evidence=((ctx.root.error_line or "").strip(),),
        confidence=0.6,
    )
