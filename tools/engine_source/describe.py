"""Checks as text for people and for the LLM: the site in a few lines, the source around a frame."""

from __future__ import annotations

from pathlib import Path

from specdoctor.tools.engine_source.model import Site
from specdoctor.tools.engine_source.suspects import FieldRead, SiteReading

CONTEXT_LINES = 20


def site_text(site: Site, reading: SiteReading | None = None) -> str:
    """Where the check is, what raises, under which conditions, and (with a reading) the user's flags."""
    where = f"sglang {site.release} " if site.release else ""
    lines = [
        f"{where}{site.file}:{site.line} in {site.function} ({site.kind}{_exc(site)}, from {site.source})"
    ]
    if site.condition:
        label = "asserts" if site.kind == "assert" else "when"
        lines.append(f"{label}: {site.condition}")
    lines += [f"inside: {g}" for g in site.guards]
    if site.template:
        lines.append(f"message: {' '.join(site.template.split())}")
    if reading is not None:
        lines += [_read_text(r) for r in reading.reads]
        lines += [
            f"env {e.name}: {'set to ' + repr(e.value) if e.set_by_user else 'not set'}" for e in reading.envs
        ]
        if reading.all_default:
            lines.append(
                "every flag this check reads is at its default: the command's flags are not the cause"
            )
    else:
        reads = [*site.fields, *site.guard_fields, *(f"env {e}" for e in site.envs)]
        if reads:
            lines.append(f"reads: {', '.join(reads)}")
    return "\n".join(lines)


def _exc(site: Site) -> str:
    return f" {site.exception}" if site.exception else ""


def _read_text(r: FieldRead) -> str:
    flag = r.flag or "(no flag)"
    state = f"set to {r.value!r}" if r.set_by_user else f"not set (default {r.default!r})"
    default = " = the default" if r.set_by_user and r.at_default else ""
    trips = {True: "; this value trips the check", False: "; this value passes", None: ""}[r.trips]
    allowed = "; allowed: " + ", ".join(c.text() for c in r.allowed) if r.allowed else ""
    role = "outer condition" if r.guard else "condition/message"
    return f"field {r.field} ({role}) ← {flag}: {state}{default}{trips}{allowed}"


def source_context(package: Path, rel: str, line: int, around: int = CONTEXT_LINES) -> str | None:
    """Lines `line ± around` of an installed engine file, numbered, the frame's line marked; None if absent."""
    try:
        text = (package / rel).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    if not 1 <= line <= len(text):
        return None
    first, last = max(1, line - around), min(len(text), line + around)
    return "\n".join(f"{'>>' if n == line else '  '} {n:5d}  {text[n - 1]}" for n in range(first, last + 1))
