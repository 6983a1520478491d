"""How a launch came onto the path of the engine check that stopped it, when the check objects to no
setting the user chose: an optional switch of SGLang's at its default, an engine variable whose other
branch handles the combination, or a setting SGLang turned on itself because of one the user chose (in the
check's own function, or as its log says)."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix
from specdoctor.playbooks.brought_in import brought_in
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.naming import category_of
from specdoctor.playbooks.suspects import WHAT_IS_SERVED, chosen, is_tuning
from specdoctor.playbooks.take_back import its_settings, take_back
from specdoctor.playbooks.view import CommandView
from specdoctor.tools.command import Edit, RemoveFlag, SetEnv, SetFlag
from specdoctor.tools.edit_policy import edit_policy
from specdoctor.tools.engine_source.holds import holds
from specdoctor.tools.engine_source.index import bundled_index
from specdoctor.tools.engine_source.model import Site
from specdoctor.tools.engine_source.suspects import SiteReading, flag_for_field


def switch_on_the_variable(ctx: Context, reading: SiteReading) -> Decision | None:
    """The check runs only while an engine variable the command did not set is off (`else` of
    `if envs.SGLANG_ENABLE_PP_SPEC.get()`), on a path the user's choices led to: SGLang's own code has
    the other branch for exactly this combination, and the variable takes the launch there."""
    chosen = [r for r in reading.suspects if r.guard]
    given = ctx.spec.env_dict()
    off = [
        c.field
        for c in reading.site.constraints
        if c.env and c.guard and c.op == "falsy" and c.field not in given and c.field.startswith("SGLANG_")
    ]
    if not chosen or len(set(off)) != 1:
        return None
    kept = ", ".join(f"{r.flag} {r.value}" for r in chosen)
    return fix(
        ctx,
        [SetEnv(name=off[0], value="1")],
        check_category(reading),
        f"SGLang's check at {where(reading)} applies only while {off[0]} is off, and rejects {kept}",
        why=f"SGLang's code has a path for this combination behind {off[0]}=1 (newer, less tried than its "
        f"default); the alternative is to give up {kept}",
        evidence=check_evidence(ctx, reading),
        confidence=0.45,
    )


def switch_off_the_path(ctx: Context, reading: SiteReading) -> Decision | None:
    """The check runs only while an optional switch of SGLang's is at its default (`not
    self.disable_radix_cache`), and the setting it objects to is one the user chose (speculative
    decoding): turning that tuning switch takes the launch off the check's path and keeps the choice."""
    policy = edit_policy()
    chosen = [r for r in reading.suspects if r.guard]
    switches = [
        r
        for r in reading.reads
        if r.guard
        and not r.set_by_user
        and r.flag
        and r.default in ("False", "false")
        and {c.op for c in r.failing} == {"falsy"}
        and policy.flag(r.flag).edit_class == "tuning"
    ]
    if not chosen or len(switches) != 1:
        return None
    switch = switches[0]
    assert switch.flag is not None
    info = ctx.catalog.get(switch.flag)
    if info is None or info.nargs != 0:
        return None  # a valued setting: turning it "on" means nothing
    kept = ", ".join(f"{r.flag} {r.value}" for r in chosen)
    return fix(
        ctx,
        [SetFlag(flag=switch.flag)],
        check_category(reading),
        f"SGLang's check at {where(reading)} applies only while {switch.flag} is off, and rejects {kept}",
        why=f"with {switch.flag} the launch never reaches the check, and {kept} stays as chosen",
        evidence=check_evidence(ctx, reading),
        confidence=0.6,
    )


def set_by_sglang_for(ctx: Context, reading: SiteReading, dests: dict[str, str]) -> Decision | None:
    """The check reads a setting the command left alone, which SGLang's own code turned on a few lines
    before because of one the command chose (`if cfg.enable_unified_memory: declare_resolution(...,
    enable_page_major_kv_layout=True)`): the chosen one put the launch on the failing path."""
    left_alone = {r.field for r in reading.reads if not r.set_by_user}
    for entry in reading.site.brought_in:
        field, _, cause = entry.partition("=")
        flag = dests.get(cause) or f"--{cause.replace('_', '-')}"
        info = ctx.catalog.get(flag)
        if (
            field not in left_alone
            or info is None
            or not ctx.view.has(info.name)
            or info.name in WHAT_IS_SERVED
        ):
            continue
        return fix(
            ctx,
            [RemoveFlag(flag=info.name), *its_settings(info.name, ctx)],
            check_category(reading),
            f"SGLang's check at {where(reading)} fails on {field}, which SGLang set because the command "
            f"gives {info.name}",
            why=f"the check's own function turns {field} on when {cause} is set; without {info.name} the "
            "launch does not take that path",
            evidence=check_evidence(ctx, reading),
            confidence=0.6 if is_tuning(info.name) else 0.45,
        )
    return None


def resolved_from_the_command(ctx: Context, reading: SiteReading, dests: dict[str, str]) -> Decision | None:
    """The check reads a field the command left alone whose value SGLang's argument code takes from one
    the command chose (`attn_dp_size` ← `--dp-size` under `--enable-dp-attention`): the chosen value is what
    the check objects to, and back at its default the resolved field is too."""
    sources, _ = _resolutions(ctx, reading)
    found: dict[str, tuple[str, tuple[Edit, ...]]] = {}
    for read in reading.reads:
        if read.set_by_user:
            continue
        for source in sources.get(read.field, ()):
            info = flag_for_field(source, ctx.catalog, dests)
            option = next(
                (o for o in ctx.spec.options() if info and ctx.view.canon(o.name) == info.name), None
            )
            if info is None or option is None or info.name in WHAT_IS_SERVED or not chosen(option, info):
                continue
            found.setdefault(
                info.name, (read.field, take_back(info.name, " ".join(option.values), info, ctx))
            )
    if len(found) != 1:
        return None  # nothing, or several chosen settings feed the check: not a confident guess
    flag, (field, edits) = next(iter(found.items()))
    check = reading.site.condition or reading.site.template
    return fix(
        ctx,
        list(edits),
        check_category(reading),
        f"SGLang's check at {where(reading)} fails on {field}, which SGLang resolves from the command's {flag}",
        why=f"SGLang's argument code sets {field} from {flag}'s value; the check ({check}) reads it, and with "
        f"{flag} back at its default it holds",
        evidence=check_evidence(ctx, reading),
        confidence=0.45,
    )


def _resolutions(ctx: Context, reading: SiteReading) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The check's release's fields resolved from others, and its fields whose flag is not `--field-name`."""
    index = bundled_index()
    release = index.release(reading.site.release or ctx.catalog.version)
    return (index.resolved_from(release), index.dests(release)) if release else ({}, {})


def still_fails(ctx: Context, reading: SiteReading, edits: list[Edit]) -> bool:
    """The check's own arithmetic says it fails again after `edits` (`tp_size % attn_dp_size == 0` with
    --tp-size back at 1 and attn_dp_size still 4): only an assert whose every field has a number."""
    if reading.site.kind != "assert" or not reading.site.condition:
        return False
    after = CommandView(ctx.spec.apply_all(edits, ctx.view.canon), ctx.catalog)
    sources, dests = _resolutions(ctx, reading)
    values: dict[str, int] = {}
    for read in reading.reads:
        flags = [read.flag] if read.flag and after.has(read.flag) else []
        flags += [f.name for s in sources.get(read.field, ()) if (f := flag_for_field(s, ctx.catalog, dests))]
        given = [after.int(f) for f in flags if after.has(f)]
        default = read.default if read.default and read.default.lstrip("-").isdigit() else None
        value = given[0] if len(given) == 1 else int(default) if default is not None and not given else None
        if value is None:
            return False
        values[read.field] = value
    return holds(reading.site.condition, values) is False


def brought_in_by_the_command(ctx: Context, reading: SiteReading) -> Decision | None:
    """The check reads only defaults, but SGLang logged that it changed what the check is about because
    of a setting the command chose: that setting put the launch on the failing path."""
    about = " ".join([ctx.root.error_line or reading.site.template, *(r.field for r in reading.reads)])
    found = brought_in(ctx, about)
    if found is None:
        return None
    return fix(
        ctx,
        list(found.edits),
        check_category(reading),
        f"SGLang's check at {where(reading)} fails on a setting SGLang brought in because of {found.setting}",
        why=f"SGLang logged `{found.line}`, and its check then failed ({reading.site.condition or reading.site.template}); "
        f"without {found.setting} the launch does not take that path",
        evidence=(*check_evidence(ctx, reading), found.line),
        # The log's word ties the two together, not the check's own fields.
        confidence=0.45,
    )


def where(reading: SiteReading) -> str:
    site = reading.site
    release = f"sglang {site.release} " if site.release else ""
    return f"{release}{site.file}:{site.line} ({site.function})"


def check_category(reading: SiteReading) -> str:
    return category_of(" ".join(r.field for r in reading.reads) + " " + reading.site.file)


def check_evidence(ctx: Context, reading: SiteReading) -> tuple[str, ...]:
    site = reading.site
    lines = [ctx.root.error_line.strip()] if ctx.root.error_line else []
    lines.append(f"{site.file}:{site.line}: {site.text}" if site.text else f"{site.file}:{site.line}")
    return tuple(lines)


# A platform test that holds on anything but an NVIDIA GPU (`not get_platform().is_cuda`, `not _is_cuda`).
_CUDA_ONLY = re.compile(r"\bnot\s+(?:get_platform\(\)\.|current_platform\.)?_?is_cuda\b(?:\(\))?")
_NOT_CUDA = ("cpu", "npu", "xpu", "hpu", "mps", "musa")


def past_the_remedy(ctx: Context, reading: SiteReading) -> Decision | None:
    """The engine's remedy leads into the next check of the same path, one this device fails whatever the
    settings (`Run with --mamba-ssm-dtype float16`, then `if not get_platform().is_cuda: raise` under the
    same switch): the switch the user gave is the change that gets past both."""
    device = (ctx.view.get("--device") or "").lower()
    site = reading.site
    switches = [r for r in reading.reads if r.guard and r.set_by_user and r.flag and r.value == "true"]
    if device not in _NOT_CUDA or len(switches) != 1:
        return None
    guard = switches[0]
    if not any(_cuda_only_after(later, site, guard.field) for later in _same_function(site, ctx)):
        return None
    return fix(
        ctx,
        [RemoveFlag(flag=guard.flag or ""), *its_settings(guard.flag or "", ctx)],
        check_category(reading),
        f"SGLang's check at {where(reading)} asks for another setting, but the next check under {guard.flag} "
        f"needs CUDA, and this launch runs on --device {device}",
        why=f"whatever else is set, {guard.flag} stops the launch on this device; without it both checks pass",
        evidence=check_evidence(ctx, reading),
        confidence=0.6,
    )


def _same_function(site: Site, ctx: Context) -> list[Site]:
    index = bundled_index()
    release = index.release(site.release or ctx.catalog.version)
    if release is None:
        return []
    found = [index.site(check, release) for check, _, _, _ in index.in_file(site.file, release)]
    return [s for s in found if s.function == site.function and s.line > site.line]


def _cuda_only_after(later: Site, site: Site, guard: str) -> bool:
    return not later.fields and guard in later.guard_fields and bool(_CUDA_ONLY.search(later.condition or ""))
