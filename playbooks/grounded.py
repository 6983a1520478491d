"""Diagnosis read from the engine's own source: the check that stopped SGLang, the ServerArgs fields it
reads, which of them the command set, and what the check (or its message) allows instead.

The agent finds the check (`Context.engine_check`: from the installed engine, the traceback's quoted line
or the bundled index); this rule only reads it. It works on failures no other rule was written for:
- a check that reads a flag the user set away from its default → change that flag as the message says,
  to a value the check allows, or back to its default;
- a check whose fields are all at their defaults → not the command's fault: an engine bug (or an
  unsupported model/hardware) to report, with the facts a bug report needs.
"""

from __future__ import annotations

import ast
import re

from specdoctor.playbooks.base import Context, fix, playbook, stop
from specdoctor.playbooks.check_paths import (
    brought_in_by_the_command,
    check_category,
    check_evidence,
    past_the_remedy,
    resolved_from_the_command,
    set_by_sglang_for,
    still_fails,
    switch_off_the_path,
    switch_on_the_variable,
    where,
)
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.feature_code import in_a_features_code
from specdoctor.playbooks.gate import invalid_edits
from specdoctor.playbooks.naming import named_in
from specdoctor.playbooks.suspects import TRUTHY, WHAT_IS_SERVED, is_tuning, prime_suspect
from specdoctor.playbooks.take_back import its_settings, setting_of_a_chosen_feature
from specdoctor.tools.command import Edit, RemoveFlag, SetEnv, SetFlag
from specdoctor.tools.edit_policy import edit_policy
from specdoctor.tools.engine_source.index import bundled_index
from specdoctor.tools.engine_source.remedies import remedies
from specdoctor.tools.engine_source.suspects import FieldRead, SiteReading, read_site

_CHECKS = ("raise", "assert", "error")
_SIZES = re.compile(r"^--(?:tp|pp|dp|ep|attn-cp|moe-dp|attn-dp)-size$|^--nnodes$")


@playbook(id="sglang.source.check", category="other", when=("exited", "hung", "unhealthy"), priority=65)
def engine_check(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """SGLang stopped at one of its own checks: change the flag of the user's that the check reads, or,
    when it reads none the user set, report an engine bug with the raising site."""
    located = ctx.engine_check
    if located is None or located.site.kind not in _CHECKS or ctx.outcome.ready_seen:
        return None
    site = located.site
    release = site.release or ctx.catalog.version
    index = bundled_index()
    known = index.release(release)
    dests = index.dests(known) if known else {}
    reading = read_site(site, ctx.spec, ctx.catalog, dests)
    if (off := _env_switch_off(ctx, reading)) is not None:
        return off
    if [r.flag for r in _culprits(reading)] in ([], ["--device"]) and (
        owned := in_a_features_code(ctx, reading)
    ):
        return owned
    if _culprits(reading):
        return _change_a_suspect(ctx, reading, dests, index.types(known) if known else {}) or (
            resolved_from_the_command(ctx, reading, dests)
        )
    if (
        reading.all_default
        and (site.fields or site.guard_fields)
        and not _in_a_chosen_feature(ctx, reading)
        and not _message_names_a_chosen_flag(ctx)
        and not _failure_names_a_chosen_value(ctx)
    ):
        return (
            set_by_sglang_for(ctx, reading, dests)
            or resolved_from_the_command(ctx, reading, dests)
            or brought_in_by_the_command(ctx, reading)
            or _engine_bug(ctx, reading)
        )
    return switch_off_the_path(ctx, reading) or switch_on_the_variable(ctx, reading)


def _failure_names_a_chosen_value(ctx: Context) -> bool:
    """The error or its stack names a value the command chose ("Flashinfer MoE A2A requires ..." for
    --moe-a2a-backend flashinfer): the check is on that choice's path, whatever fields the index saw."""
    found = prime_suspect(ctx)
    return found is not None and found.how in ("value in error", "value in stack")


def _message_names_a_chosen_flag(ctx: Context) -> bool:
    """The error spells out a flag the command sets ("--prefill-only-disable-kv-cache currently requires
    --is-embedding"): the check is about the user's choice, whatever fields the index saw it read."""
    said = ctx.root.error_line or ""
    return any(
        re.search(rf"(?<![\w-]){re.escape(o.name)}(?![\w-])", said)
        for o in ctx.spec.options()
        if o.name != "--device"
    )


def _in_a_chosen_feature(ctx: Context, reading: SiteReading) -> bool:
    """The check sits in the code of a feature the command switched on (`--enable-multi-layer-eagle` and
    `multi_layer_eagle_worker.py`): that code runs only because of the switch, so the command is not
    blameless even when the check reads nothing the user set."""
    where = f"{reading.site.file} {reading.site.function}"
    return any(
        named_in(o.name, where) for o in ctx.spec.options() if o.name.startswith(("--enable-", "--use-"))
    )


def _culprits(reading: SiteReading) -> list[FieldRead]:
    """The user's flags to change, smallest change first: tuning flags the check objects to, then optional
    switches of the user's that put the launch on the check's path, then the other flags it objects to.
    An outer condition on a core setting (`tp_size > 1` before a memory check) is never one."""
    policy = edit_policy()
    objected = [r for r in reading.suspects if not r.guard and r.trips is not False and r.flag]
    switches = [r for r in reading.suspects if r.guard and r.flag and r.value == "true"]
    if not reading.site.fields:
        # The check itself reads only the platform (`not is_cuda`): the value of the user's that led there
        # (`kv_cache_dtype in ("nvfp4", ...)`) is the choice to take back, unless it sizes the deployment
        # or defines what is served.
        switches += [
            r
            for r in reading.suspects
            if r.guard
            and r.flag
            and r.trips
            and r not in switches
            and not _SIZES.match(r.flag)
            and r.flag not in WHAT_IS_SERVED
        ]
    tuning = [r for r in objected if policy.flag(r.flag or "").edit_class == "tuning"]
    ordered = [*tuning, *switches, *(r for r in objected if r not in tuning)]
    # What is served (the speculative algorithm, the device) changes last, whatever its policy class.
    # The device is the machine's: a feature it does not run goes before it.
    ordered = sorted(ordered, key=lambda r: (r.flag in WHAT_IS_SERVED, r.flag == "--device"))
    return list({r.field: r for r in reversed(ordered)}.values())[::-1]


def _env_switch_off(ctx: Context, reading: SiteReading) -> Decision | None:
    """An engine switch the user turned on (`SGLANG_ENABLE_X=1`) that the check reads, when the flags it
    objects to define what is served, or when it objects to none of the user's flags (the switch alone put
    the launch on the check's path): turning the switch back off is the smaller change."""
    on = [e for e in reading.envs if e.set_by_user and (e.value or "") in TRUTHY]
    if len(on) != 1 or any(r.flag not in WHAT_IS_SERVED for r in _culprits(reading)):
        return None
    env = on[0]
    return fix(
        ctx,
        [SetEnv(name=env.name, value=TRUTHY[env.value or ""])],
        check_category(reading),
        f"SGLang's check at {where(reading)} runs because {env.name}={env.value}: {ctx.root.error_line or ''}".strip(),
        why=f"the check ({reading.site.condition or reading.site.template}) is on {env.name}'s path; with it off "
        "the launch keeps its speculative algorithm and other settings",
        evidence=check_evidence(ctx, reading),
        confidence=0.6,
    )


def _change_a_suspect(
    ctx: Context, reading: SiteReading, dests: dict[str, str], types: dict[str, str]
) -> Decision | None:
    message = ctx.root.error_line or reading.site.template
    culprits = _culprits(reading)
    # The engine's remedy may act on any flag its check reads (`requires --enable-x`): the name comes from
    # the engine's source, not from free log text.
    # A flag the user did not set is the engine's remedy only when it tunes how the same model runs or
    # completes a feature the user switched on: `requires --is-embedding` would change what is served.
    suspects = {
        r.flag
        for r in reading.reads
        if r.flag and (r.set_by_user or is_tuning(r.flag) or setting_of_a_chosen_feature(r.flag, ctx))
    }
    found = remedies(message, ctx.catalog, dests, types)
    # "specify both --max-lora-rank and --lora-target-modules": setting one while the other stays unset (the
    # message gives no value for it) is half a fix.
    half = {
        r.phrase
        for r in found
        if r.edit is None
        and r.action == "set"
        and re.search(r"\b(?:both|and)\b", r.phrase)
        and not ctx.view.has(r.flag or "")
    }
    named = _nearest_first([r.edit for r in found if r.edit is not None and r.phrase not in half], ctx)
    if named and (past := past_the_remedy(ctx, reading)) is not None:
        return past
    # The engine's own remedy, when it acts on a flag the check reads and the user set.
    for edit in named:
        if not _valid(ctx, [edit]):
            continue  # the engine's alternative would break something else (a draft made for another algorithm)
        if getattr(edit, "flag", None) in suspects or getattr(edit, "to", None) in suspects:
            decision = fix(
                ctx,
                [edit],
                check_category(reading),
                f"SGLang's check at {where(reading)} failed on {edit.flag}: {ctx.root.error_line or ''}".strip(),
                why=f"the engine's message says what to do, and {edit.flag} is a flag this command set",
                evidence=check_evidence(ctx, reading),
                confidence=0.75,
            )
            if decision is not None:
                return decision
    if (checked := _checked_before_launch(ctx, reading)) is not None:
        return checked
    for read in culprits:
        decision = _to_allowed_or_default(ctx, reading, read, several=len(culprits) > 1)
        if decision is not None:
            return decision
    return None


def _checked_before_launch(ctx: Context, reading: SiteReading) -> Decision | None:
    """Preflight's own value check found the fault in a flag this engine check reads (`all` among other
    LoRA modules): its edit keeps the feature the user asked for, where taking a flag back would not."""
    read = {r.flag for r in reading.reads if r.flag and r.set_by_user}
    for finding in ctx.findings:
        if finding.severity != "error" or not finding.edits or ctx.view.canon(finding.flag or "") not in read:
            continue
        decision = fix(
            ctx,
            list(finding.edits),
            check_category(reading),
            f"SGLang's check at {where(reading)} failed on {finding.flag}: {finding.message}",
            why=finding.why,
            evidence=check_evidence(ctx, reading),
            confidence=min(0.75, finding.confidence),
        )
        if decision is not None:
            return decision
    return None


def _nearest_first(edits: list[Edit], ctx: Context) -> list[Edit]:
    """Values the message lists for one numeric flag, nearest to the command's own first (`not in [0, 1,
    3, 5, 7]` for 6 gives 5), the lower of two as near; among words, `default`/`auto` first, then the
    message's order."""
    flags = {getattr(e, "flag", None) for e in edits}
    current = ctx.view.float(next(iter(flags))) if len(flags) == 1 and None not in flags else None
    numbers = [_single_number(e) for e in edits]
    if current is None or None in numbers:
        # Among words, the engine's own default (`default`, `auto`) asks least of the user.
        return sorted(edits, key=lambda e: getattr(e, "values", ()) not in (("default",), ("auto",)))
    ranked = sorted(zip(numbers, edits, strict=True), key=lambda p: (abs(p[0] - current), p[0]))
    return [e for _, e in ranked]


def _single_number(edit: Edit) -> float | None:
    values = getattr(edit, "values", ())
    try:
        return float(values[0]) if len(values) == 1 else None
    except ValueError:
        return None


def _to_allowed_or_default(
    ctx: Context, reading: SiteReading, read: FieldRead, several: bool
) -> Decision | None:
    if read.flag is None:
        return None
    allowed = _allowed_value(read, ctx.view.facts.portable_values)
    if allowed and not _valid(ctx, [SetFlag(flag=read.flag, values=(allowed,))]):
        allowed = None
    if allowed and allowed != read.default and not is_tuning(read.flag):
        # Another value of what is loaded (a quantization describes the checkpoint) is no smaller change
        # than none: SGLang's default takes it from the model.
        allowed = None
    # Back at its default, the setting takes its own settings with it (a speculative algorithm its draft).
    edits: list[Edit] = (
        [SetFlag(flag=read.flag, values=(allowed,))]
        if allowed
        else [RemoveFlag(flag=read.flag), *its_settings(read.flag, ctx)]
    )
    what = f"to {allowed}, a value the check accepts" if allowed else "back to SGLang's default"
    if still_fails(ctx, reading, edits):
        return None  # the check's own arithmetic fails again with this change
    if _every_part_must_hold(reading):
        rest = _also_needed(reading, read)
        if rest is None:
            return None  # another part of the check would still fail, and no flag of the catalog mends it
        edits += rest
        what += "".join(f", and {e.describe()}" for e in rest) + " (the check needs every part of it to hold)"
    return fix(
        ctx,
        edits,
        check_category(reading),
        f"SGLang's check at {where(reading)} reads {read.flag}, which this command set to {read.value}",
        why=f"the check ({reading.site.condition or reading.site.template}) fails on {read.flag} {read.value}; "
        f"setting it {what} takes the launch off the failing path",
        evidence=check_evidence(ctx, reading),
        confidence=_confidence(read, several),
    )


def _valid(ctx: Context, edits: list[Edit]) -> bool:
    return not invalid_edits(ctx.spec, edits, ctx.catalog)


def _confidence(read: FieldRead, several: bool) -> float:
    """One suspect the check trips on is a finding; several the user set are a ranking, not a proof, and
    so is one whose value the check's comparisons do not show to fail. Taking back a capability the user
    chose (LoRA, a quantization) changes what is served: a person's call whatever the grounds."""
    ranked = several or read.trips is None
    found = 0.45 if ranked else 0.7 if read.trips else 0.55
    return found if is_tuning(read.flag or "") else min(found, 0.45)


def _every_part_must_hold(reading: SiteReading) -> bool:
    """The check passes only when each of its parts does: `assert a and b`, or `if a or b: raise`. Then
    mending one part is not enough when another still trips."""
    site = reading.site
    try:
        test = ast.parse(site.condition or "", mode="eval").body
    except SyntaxError:
        return False
    joined = type(test.op) if isinstance(test, ast.BoolOp) else None
    return (site.kind == "assert" and joined is ast.And) or (site.kind == "raise" and joined is ast.Or)


def _also_needed(reading: SiteReading, mended: FieldRead) -> list[Edit] | None:
    """The edits that make every other part of the check hold too (a switch it needs on, a flag it needs
    unset), or None when one of them cannot be made from the command line."""
    edits: list[Edit] = []
    for read in reading.reads:
        if read.guard or read.field == mended.field or read.trips is False:
            continue
        if read.trips is None or read.flag is None:
            return None
        edit = _untrip(read)
        if edit is None:
            return None
        edits.append(edit)
    return edits


def _untrip(read: FieldRead) -> Edit | None:
    """One edit that stops a field from meeting the check's failing comparisons."""
    assert read.flag is not None
    ops = {c.op for c in read.failing}
    if ops == {"falsy"} and read.default in ("False", "false", None) and read.value is None:
        return SetFlag(flag=read.flag)  # a switch the check needs on
    if ops <= {"truthy", "is not None"} and read.set_by_user:
        return RemoveFlag(flag=read.flag)
    return None


def _allowed_value(read: FieldRead, portable: tuple[str, ...]) -> str | None:
    """A literal the check itself accepts for this field, when the flag can take it: its default if the
    check allows that, else one that runs on most hardware (a list of backends often opens with an NPU's)."""
    allowed = [
        str(v)
        for c in read.allowed
        if c.op in ("in", "==")
        for v in c.values
        if read.choices is None or str(v) in read.choices
    ]
    ranked = sorted(
        allowed, key=lambda v: (v != read.default, portable.index(v) if v in portable else len(portable))
    )
    return ranked[0] if ranked else None


def _engine_bug(ctx: Context, reading: SiteReading) -> Decision:
    site = reading.site
    version = site.release or ctx.catalog.version
    fields = ", ".join(r.flag or r.field for r in reading.reads) or "no flag"
    return stop(
        ctx,
        "engine-bug",
        f"SGLang stopped at its own check {where(reading)}, which reads only settings this command leaves at "
        f"their defaults ({fields}): no flag of the command causes it",
        f"Report it upstream (sglang {version}) with: the raising site {site.file}:{site.line} "
        f"({site.function}), the check `{site.condition or site.text}`, the GPU, the command (redacted) and the "
        "last log lines; or try another SGLang release.",
        evidence=check_evidence(ctx, reading),
        confidence=0.6,
    )
