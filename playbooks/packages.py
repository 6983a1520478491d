"""Python packages a launch needs. A package missing from SGLang's environment is not a flag problem,
unless a setting the command chose is what needs it: a backend whose module imports it (`--grammar-backend
llguidance`), a flag the engine names ("--enable-http2 requires the 'granian' package"), or an engine
variable that names the package to import (`SGLANG_EXTERNAL_MODEL_PACKAGE`). Taking that setting back needs
no install."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook, stop
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.command import RemoveFlag, SetEnv


@playbook(
    id="sglang.hardware.missing-module",
    category="other",
    pattern=r"ModuleNotFoundError: No module named '([\w.]+)'|ImportError: Please install ([\w.-]+)",
    priority=35,
    scope="root",
)
def missing_module(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A Python package SGLang needs on this path is not installed. When the path is a backend the command
    chose (its value names the importing module, `--grammar-backend llguidance` → `llguidance_backend.py`),
    SGLang's default for that flag needs no such package."""
    name = (m.group(1) or m.group(2)) if m else "?"
    decision = _take_back_the_settings(ctx, name, _settings_needing(ctx, name)) or _take_back_the_variable(
        ctx, name
    )
    return decision or stop(
        ctx,
        "other",
        f"the Python package `{name}` is missing from SGLang's environment",
        f"Install it in the environment SGLang runs in (`pip install` the package that provides `{name}`); no launch flag changes that.",
    )


def _settings_needing(ctx: Context, name: str) -> list[str]:
    """The command's settings the failure ties to the package: a value naming the importing module or the
    package, a flag the engine's message spells out, a switch named for it, a feature whose default needs it."""
    stack = " ".join(f.path for f in ctx.root.frames[-3:]).lower()
    said = ctx.root.error_line or ""
    return [
        o.name
        for o in ctx.spec.options()
        if (
            len(o.values) == 1
            and len(o.values[0]) >= 4
            and (o.values[0].lower() in (stack + " " + name.lower()) or _words_of_value_in(o.values[0], name))
        )
        # The engine's message names the flag that needs it ("--enable-http2 requires the 'granian' package").
        or re.search(rf"(?<![\w-]){re.escape(o.name)}(?![\w-])", said)
        or _switch_named_by(o.name, o.values, f"{stack} {name.lower()}")
        # A switch named for the package itself (`--enable-lmcache` and `lmcache`).
        or (not o.values and o.name.lower() == f"--enable-{name.split('.')[0].lower()}")
    ] or _feature_whose_default_needs(ctx, name)


def _take_back_the_settings(ctx: Context, name: str, chosen: list[str]) -> Decision | None:
    if len(chosen) > 1 and len({c[2:].split("-")[0] for c in chosen}) == 1:
        # One feature's settings, each naming the path (`--disaggregation-mode prefill` and its
        # `--disaggregation-transfer-backend nixl`): the feature goes whole, for a person to confirm.
        return fix(
            ctx,
            [RemoveFlag(flag=c) for c in chosen],
            "other",
            f"{', '.join(chosen)} need the Python package `{name}`, which is not installed",
            why=f"each names the failing path; without them SGLang does not import `{name}` (or install `{name}`)",
            confidence=0.45,
        )
    if len(chosen) != 1:
        return None
    flag = chosen[0]
    value = ctx.view.get(flag)
    return fix(
        ctx,
        [RemoveFlag(flag=flag)],
        "other",
        f"{f'{flag} {value}' if value else flag} needs the Python package `{name}`, which is not installed",
        why=f"without {flag} SGLang uses its default, which does not import `{name}` (or install `{name}`)",
        confidence=0.7,
    )


def _take_back_the_variable(ctx: Context, name: str) -> Decision | None:
    """An engine variable names the package to import (`SGLANG_EXTERNAL_MODEL_PACKAGE=my_models`)."""
    named = [
        k
        for k, v in ctx.spec.env_dict().items()
        if re.match(r"(?:SGLANG|SGL)_", k) and v and v.split(".")[0] == name.split(".")[0]
    ]
    if len(named) != 1:
        return None
    return fix(
        ctx,
        [SetEnv(name=named[0], value="")],
        "other",
        f"{named[0]}={ctx.spec.env_dict()[named[0]]} names the package `{name}`, which Python cannot import",
        why=f"SGLang imports what {named[0]} names; empty, it imports nothing extra (or make `{name}` "
        "importable in SGLang's environment)",
        confidence=0.6,
    )


def _words_of_value_in(value: str, package: str) -> bool:
    """Every word of a value of two or more is a word of the missing package's name (`runai_streamer` and
    `runai_model_streamer`)."""
    words = [w for w in re.split(r"[-_.]", value.lower()) if w]
    theirs = set(re.split(r"[-_.]", package.lower()))
    return len(words) >= 2 and all(w in theirs for w in words)


def _switch_named_by(flag: str, values: tuple[str, ...], where: str) -> bool:
    """A switch whose own words are all in the missing module's name or the importing files
    (`--enable-memory-saver` and `torch_memory_saver`), or a setting whose field is the importing module
    itself (`--tool-server demo` and `entrypoints/openai/tool_server.py`)."""
    words = [w for w in flag[2:].split("-") if w not in ("enable", "disable", "use")]
    if values:
        field = "_".join(flag[2:].split("-"))
        return len(words) >= 2 and re.search(rf"/{field}(?:\.py|/)", where) is not None
    return len(words) >= 2 and all(w in where for w in words)


def _feature_whose_default_needs(ctx: Context, package: str) -> list[str]:
    """The feature the command switched on runs on a backend whose default is the missing package
    (`--disaggregation-mode decode` and `--disaggregation-transfer-backend`'s default `mooncake`): the one
    flag of the command in that backend flag's family."""
    families = {
        info.name[2:].split("-")[0]
        for info in ctx.catalog.flags
        if (info.default or "").lower() == package.lower() and not ctx.view.has(info.name)
    }
    chosen = [o.name for o in ctx.spec.options() if ctx.view.canon(o.name)[2:].split("-")[0] in families]
    return chosen if len(chosen) == 1 else []
