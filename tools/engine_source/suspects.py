"""From a check's fields to the user's flags: which flag sets each field, whether the launch command set
it (and to what), whether the check's comparisons trip on that value, and what they allow instead."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.command import LaunchCommand, Option
from specdoctor.tools.engine_source.declarations import default_flag
from specdoctor.tools.engine_source.model import Constraint, Literal_, Site
from specdoctor.tools.help_parser import FlagInfo

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def flag_for_field(
    field: str, catalog: FlagCatalog, dests: Mapping[str, str] | None = None
) -> FlagInfo | None:
    """The catalog flag that sets a ServerArgs field: the release's own flag name for it when it is not
    `--field-name` (`fp8_gemm_runner_backend` → `--fp8-gemm-backend`), else `--field-name`; None when the
    catalog has no such flag (a derived field, or one this release lacks)."""
    for name in ((dests or {}).get(field), default_flag(field)):
        if name and (flag := catalog.get(name)) is not None:
            return flag
    return None


class FieldRead(BaseModel):
    """One ServerArgs field a check reads, seen from the launch command."""

    model_config = ConfigDict(frozen=True)
    field: str
    flag: str | None = Field(description="The canonical flag that sets it; None when no flag does.")
    set_by_user: bool = Field(description="The command writes this flag (any spelling).")
    value: str | None = Field(
        description="The value the command gives (`true`/`false` for a switch); None when not set."
    )
    default: str | None = Field(default=None, description="The catalog's default, when known.")
    at_default: bool = Field(description="Not set, or set to the default value.")
    guard: bool = Field(description="Only the check's outer conditions read it.")
    failing: tuple[Constraint, ...] = Field(default=(), description="The check's comparisons on it.")
    trips: bool | None = Field(
        default=None,
        description="Whether the effective value meets every failing comparison on it (None: not known).",
    )
    allowed: tuple[Constraint, ...] = Field(default=(), description="The comparisons turned around.")
    choices: tuple[str, ...] | None = Field(default=None, description="The flag's choices, if it has them.")


class EnvRead(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    set_by_user: bool
    value: str | None = None


class SiteReading(BaseModel):
    """A check read against a launch command: the flags it reads and what the user did with them."""

    model_config = ConfigDict(frozen=True)
    site: Site
    reads: tuple[FieldRead, ...]
    envs: tuple[EnvRead, ...] = ()

    @property
    def suspects(self) -> tuple[FieldRead, ...]:
        """Fields the user set away from their default, the check's own condition first, then values that
        trip its comparisons."""
        chosen = [r for r in self.reads if r.set_by_user and not r.at_default]
        return tuple(sorted(chosen, key=lambda r: (r.guard, r.trips is not True, r.field)))

    @property
    def all_default(self) -> bool:
        """Nothing the check reads was chosen by the user: the fault is not in the command's flags."""
        return not self.suspects and not any(e.set_by_user for e in self.envs)


def read_site(
    site: Site, command: LaunchCommand, catalog: FlagCatalog, dests: Mapping[str, str] | None = None
) -> SiteReading:
    """Which of the fields a check reads the command set, to what, and what the check allows."""
    reads = [_field_read(f, False, site, command, catalog, dests) for f in site.fields]
    reads += [_field_read(f, True, site, command, catalog, dests) for f in site.guard_fields]
    env = command.env_dict()
    envs = tuple(EnvRead(name=n, set_by_user=n in env, value=env.get(n)) for n in site.envs)
    return SiteReading(site=site, reads=tuple(reads), envs=envs)


def _field_read(
    field: str,
    guard: bool,
    site: Site,
    command: LaunchCommand,
    catalog: FlagCatalog,
    dests: Mapping[str, str] | None,
) -> FieldRead:
    flag = flag_for_field(field, catalog, dests)
    failing = tuple(c for c in site.constraints if c.field == field and not c.env)
    value = written_value(command, flag, catalog) if flag is not None else None
    default = flag.default if flag is not None else None
    effective = value if value is not None else default
    return FieldRead(
        field=field,
        flag=flag.name if flag else None,
        set_by_user=value is not None,
        value=value,
        default=default,
        at_default=value is None or _same(value, default, flag),
        guard=guard,
        failing=failing,
        trips=_trips(failing, effective, value is None and default is None) if failing else None,
        allowed=tuple(c.allowed() for c in failing),
        choices=flag.choices if flag else None,
    )


def written_value(command: LaunchCommand, flag: FlagInfo, catalog: FlagCatalog) -> str | None:
    """The flag's effective value in the command (argparse keeps the last occurrence)."""
    spellings = {flag.name, flag.negation}
    found: list[Option] = [o for o in command.options() if catalog.canonical(o.name) in spellings]
    if not found:
        return None
    last = found[-1]
    if flag.negation and catalog.canonical(last.name) == flag.negation:
        return "false"
    if flag.nargs == 0:
        return "true"
    return " ".join(last.values)


def _same(value: str, default: str | None, flag: FlagInfo | None) -> bool:
    if default is None:
        return False
    if flag is not None and flag.nargs == 0:
        return value.lower() == default.lower()
    a, b = _number(value), _number(default)
    return a == b if a is not None and b is not None else value == default


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _trips(failing: tuple[Constraint, ...], value: str | None, unset: bool) -> bool | None:
    verdicts = [_meets(c, value, unset) for c in failing]
    if any(v is None for v in verdicts):
        return None
    return all(verdicts)


def _meets(c: Constraint, value: str | None, unset: bool) -> bool | None:
    """Whether a value (as written on the command line) meets one comparison; None when not knowable."""
    if c.other is not None:
        return None
    if c.op in ("is None", "is not None"):
        return unset if c.op == "is None" else not unset
    if value is None:
        return None
    if c.op in ("truthy", "falsy"):
        # Python's truth of the value SGLang holds: a number unless 0, any other non-empty text (a path).
        number = _number(value)
        truth = value.lower() in _TRUE or (
            value.lower() not in _FALSE and (number != 0 if number is not None else value != "")
        )
        return truth if c.op == "truthy" else not truth
    if c.op in ("in", "not in", "==", "!="):
        hit = any(_equal(value, v) for v in c.values)
        return hit if c.op in ("in", "==") else not hit
    number, bound = _number(value), _number(str(c.values[0])) if c.values else None
    if number is None or bound is None:
        return None
    return {">": number > bound, ">=": number >= bound, "<": number < bound, "<=": number <= bound}[c.op]


def _equal(text: str, literal: Literal_) -> bool:
    if isinstance(literal, bool):
        return text.lower() in (_TRUE if literal else _FALSE)
    if isinstance(literal, (int, float)):
        return _number(text) == literal
    if literal is None:
        return False
    return text == literal
