"""A zero (or a negative number) the user chose for a count, a size or an interval: SGLang divides by it,
takes it modulo, or asserts it positive. People write 0 meaning "off" or -1 meaning "unlimited", as other
engines allow; for these settings SGLang has no such value, and its default is what they wanted."""

from __future__ import annotations

import json
import re

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.json_values import json_container
from specdoctor.playbooks.naming import category_of, field_of, named_exactly, named_in
from specdoctor.playbooks.take_back import its_settings
from specdoctor.playbooks.view import as_float
from specdoctor.tools.command import Edit, RemoveFlag, SetFlag, UnsetEnv

_ZERO_FAILURE = (
    r"ZeroDivisionError|division (?:or modulo )?by zero|modulo by zero|"
    r"should (?:contain|be) (?:a )?positive|must be (?:a )?positive|must be (?:greater than|> ?) ?0\b|"
    r"must be non-?zero|\btoo small\b|assert \w+ > 0\b"
)
_NUMERIC = frozenset({"int", "float", "human_readable_int"})


@playbook(
    id="sglang.value.zero-chosen",
    category="other",
    when=("exited", "unhealthy"),
    pattern=_ZERO_FAILURE,
    priority=60,
)
def zero_the_user_chose(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """SGLang failed on a zero or a size below one, and the command set a numeric setting to 0 or below (a
    flag, a key of a flag's JSON, an engine variable; a negative only where SGLang's help gives negatives no
    meaning): that setting goes back to its default (sure when the failing code names it, a guess when it is
    the command's only such value)."""
    zeros = _zero_settings(ctx)
    text = ctx.root_text
    named = [s for s in zeros if named_exactly(_as_flag(s), text) or named_in(_as_flag(s), text, every=True)]
    if len(named) > 1 or (not named and len(zeros) != 1):
        return None
    setting = (named or list(zeros))[0]
    value, edits = zeros[setting]
    said = (ctx.root.error_line or (m.group(0) if m else "")).strip()
    meant = '"off"' if value == "0" else '"unlimited"'
    return fix(
        ctx,
        list(edits),
        category_of(setting.split(" ")[0]),
        f"{setting} {value} is not {meant} for SGLang: it failed on it ({said})",
        why=(
            f"the failing code reads {setting}"
            if named
            else f"{setting} is the only setting of the command at {value}"
        )
        + "; back at SGLang's default the launch has a value it can use",
        confidence=0.6 if named else 0.45,
    )


def _shown_at_zero(flag: str, log: str) -> bool:
    """The log prints the setting's field (or its last words: `watchdog_timeout` of
    `--soft-watchdog-timeout`) at 0, as the code using it reports it."""
    field = field_of(flag)
    for name in re.findall(r"\b([a-z][a-z0-9_]*)=0(?:\.0)?\b", log):
        if "_" in name and (field == name or field.endswith("_" + name)):
            return True
    return False


def _as_flag(setting: str) -> str:
    """How the failing code would name a setting: `--x-y`, the key of `--flag key`, `SGLANG_X_Y` as `--x-y`."""
    last = setting.split(" ")[-1]
    if last.startswith("--"):
        return last
    return "--" + re.sub(r"^(?:SGLANG|SGL)_", "", last).lower().replace("_", "-")


def _zero_settings(ctx: Context) -> dict[str, tuple[str, tuple[Edit, ...]]]:
    """Numeric settings of the command written as 0 (any of their values, for a list), or as a negative
    number where SGLang's help gives negatives no meaning, each with that value and the edits that take it
    back: flags, keys of a flag's JSON object, engine variables."""
    found: dict[str, tuple[str, tuple[Edit, ...]]] = {}
    for option in ctx.spec.options():
        info = ctx.catalog.get(option.name)
        if info is None or info.choices or info.nargs == 0:
            continue
        numeric = info.value_type in _NUMERIC or info.value_type is None
        if numeric and (value := _unusable(option.values, info.help or "")):
            found.setdefault(info.name, (value, (RemoveFlag(flag=info.name), *its_settings(info.name, ctx))))
        elif isinstance(obj := json_container(" ".join(option.values)), dict):
            for key, value in obj.items():
                if type(value) in (int, float) and value == 0:
                    rest = {k: v for k, v in obj.items() if k != key}
                    edit = (
                        SetFlag(flag=info.name, values=(json.dumps(rest),))
                        if rest
                        else RemoveFlag(flag=info.name)
                    )
                    found.setdefault(f"{info.name} {key}", ("0", (edit,)))
    for name, value in ctx.spec.env_dict().items():
        if re.match(r"(?:SGLANG|SGL)_", name) and as_float(value) == 0 and value.strip() not in ("", "false"):
            found.setdefault(name, ("0", (UnsetEnv(name=name),)))
    return found


def _unusable(values: tuple[str, ...] | list[str], help_text: str) -> str | None:
    """The value a count or size cannot take: 0, or below 0 when the help says nothing of negatives (for
    `--chunked-prefill-size` it does: -1 turns chunking off)."""
    for value in values:
        number = as_float(value)
        if number == 0:
            return "0"
        if number is not None and number < 0 and not re.search(r"-\d|negative|< ?0\b", help_text):
            return value.strip()
    return None


@playbook(id="sglang.value.zero-stalls", category="other", when=("hung", "degraded"), priority=86)
def zero_stalls_the_server(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The server hangs with nothing failing, and the command set exactly one count, limit or timeout to 0
    or below (a flag or an engine variable): a scheduler that may take 0 requests (`--prefill-max-requests 0`) never
    runs SGLang's own warm-up request, a health check with 0 s to answer kills every worker.
    A guess (the hang names nothing), taken back to SGLang's default."""
    if ctx.outcome.fatal_line or ctx.root.kind not in ("none", "message"):
        return None
    zeros = {s: found for s, found in _zero_settings(ctx).items() if " " not in s}
    if len(zeros) != 1:
        return None
    flag, (value, edits) = next(iter(zeros.items()))
    if ctx.outcome.kind == "degraded" and not _shown_at_zero(flag, ctx.log_text):
        return None  # a server that runs: only when its log shows the setting at work with that zero
    return fix(
        ctx,
        list(edits),
        category_of(flag),
        f"the server hangs, and {flag} is {value}: a limit below 1 lets nothing through"
        if ctx.outcome.kind == "hung"
        else f"the server runs but misbehaves, and its log shows {flag} at work with {value}",
        why=f"{flag} is the only setting of the command at {value} and nothing failed; there a count or limit admits "
        "no work (SGLang's warm-up request never runs) or a timer fires all the time, and back at SGLang's "
        "default the launch has a value it can use",
        confidence=0.45,
    )
