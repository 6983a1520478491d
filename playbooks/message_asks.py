"""What an error message asks of a setting the command chose, when it does not spell the flag out:
"For FP4 quantization, use ModelOptFp4Config" names the `--quantization` choice `modelopt_fp4` by its
class; "arange's range must be a power of 2" asks for a power of two of the one count the command gave that
is not one. The flag-level remedies ("please use --x y") are the engine index's (`sglang.source.check`);
where the message's site is not indexed (request handlers, kernels), `sglang.message.remedy` reads them
from the message itself."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook, stop
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.gate import invalid_edits, touches
from specdoctor.playbooks.naming import category_of, squeeze
from specdoctor.playbooks.suspects import failing_path
from specdoctor.tools.command import Edit, RemoveFlag, SetFlag, UnsetEnv
from specdoctor.tools.engine_source.remedies import remedies
from specdoctor.tools.log_cause import server_answer

# Not a purpose or condition (`To use priority scheduling, ...`, `when using X`): those name what the
# user asked for, not what to change.
_USE = re.compile(
    r"(?<!\bto )(?<!\bwhen )(?<!\bif )(?<!\bfor )\b(?:use|using|try|switch to|set it to)\s+[`'\"]?([A-Za-z][\w.-]{2,60})",
    re.I,
)
# The class or enum spelling of a choice: `ModelOptFp4Config` is `modelopt_fp4`, `MoeRunnerBackend.TRITON`
# is `triton`.
_CLASS_PARTS = re.compile(r"(?:config|backend|method|runner|kernel|quant)$")
_POWER_OF_TWO = re.compile(
    r"must be (?:a )?power of (?:2|two)|power-of-(?:2|two)|not a power of (?:2|two)", re.I
)
# Counts that are sizes of the machine or identifiers, never what a kernel's block shape is made of.
_NOT_SHAPES = re.compile(
    r"port|seed|rank|nnodes|size$|timeout|interval|limit|max-running|max-total|context-length|len$"
)


@playbook(id="sglang.message.use-choice", category="other", when=("exited", "unhealthy"), priority=62)
def use_named_choice(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The error tells the user to use something that is another value of a flag the command set."""
    error, _ = failing_path(ctx)
    asked = {
        squeeze(_CLASS_PARTS.sub("", w.rstrip(".-").rsplit(".", 1)[-1].lower())) for w in _USE.findall(error)
    }
    asked.discard("")
    found = []
    for option in ctx.spec.options():
        flag = ctx.view.canon(option.name)
        info = ctx.catalog.get(flag)
        if info is None or not info.choices or not option.values:
            continue
        current = squeeze(" ".join(option.values))
        found += [(flag, c) for c in info.choices if squeeze(c) in asked and squeeze(c) != current]
    if len(found) != 1:
        return None  # nothing, or several flags asked alike: not a confident guess
    flag, choice = found[0]
    return fix(
        ctx,
        [SetFlag(flag=flag, values=(choice,))],
        category_of(flag),
        f"the error asks for {choice}, another choice of {flag}: {ctx.root.error_line or ''}".strip(),
        why=f"the engine's message names what to use; `{choice}` is how {flag} spells it",
        confidence=0.7,
    )


@playbook(
    id="sglang.message.power-of-two",
    category="other",
    when=("exited", "unhealthy"),
    pattern=_POWER_OF_TWO.pattern,
    priority=63,
    scope="root",
)
def power_of_two(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A kernel needs a power of two, and exactly one count the command chose is not one."""
    counts = []
    for option in ctx.spec.options():
        flag = ctx.view.canon(option.name)
        value = ctx.view.int(flag)
        if value is None or value < 3 or value > 4096 or _NOT_SHAPES.search(flag) or value & (value - 1) == 0:
            continue
        counts.append((flag, value))
    if len(counts) != 1:
        return None
    flag, value = counts[0]
    up = 1 << (value - 1).bit_length()
    return fix(
        ctx,
        [SetFlag(flag=flag, values=(str(up),))],
        category_of(flag),
        f"a kernel needs a power of two and {flag} is {value}: {ctx.root.error_line or ''}".strip(),
        why=f"{flag} is the only count the command chose that is not a power of two; {up} is the next one",
        confidence=0.5,
    )


@playbook(id="sglang.message.remedy", category="other", when=("exited", "unhealthy"), priority=70)
def engine_remedy(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The engine's message says which flag to set, add or change ("Use --grammar-backend xgrammar",
    "--x requires --y"), where its raising site is not in the bundled index (the request handlers, kernels):
    the first such change the gate takes. Message text is data anyone can write, so from it only a tuning
    change, or taking back a flag the user chose, is proposed; a change of what is served or accepted
    ("Please set `--enable-custom-logit-processor`") is quoted for the person to make."""
    said = ctx.root.error_line or ""
    if ctx.root.kind not in ("exception", "message") or not said:
        return None
    valid = [
        (edit, _tuning(ctx, edit))
        for r in remedies(said, ctx.catalog)
        if (edit := r.edit) is not None
        and ctx.spec.apply_all([edit], ctx.catalog.canonical) != ctx.spec
        and not invalid_edits(ctx.spec, [edit], ctx.catalog)
    ]
    # What keeps the deployment as asked goes first ("--x requires --is-embedding": take --x back).
    asked: list[Edit] = []
    for edit, tuning in sorted(valid, key=lambda pair: not pair[1]):
        if not (tuning or _takes_back(ctx, edit)):
            asked.append(edit)
            continue
        decision = fix(
            ctx,
            [edit],
            category_of(getattr(edit, "flag", "")),
            f"SGLang's message says what to do: {said}",
            why=f"the engine names the change ({edit.describe()}) in the message of the failure",
            evidence=(said,),
            # A request turned away while the server serves others: a server-wide change for one kind of
            # request (the radix cache off for every user) is the person's trade, not an unattended one.
            confidence=0.6 if tuning and not _turned_away(ctx) else 0.45,
        )
        if decision is not None:
            return decision
    if not asked:
        return None
    if (own := _take_back_the_variable(ctx, said)) is not None:
        return own
    if (grounded := _in_the_engines_own_words(ctx, said, asked)) is not None:
        return grounded
    wanted = "; ".join(e.describe() for e in asked)
    return stop(
        ctx,
        "other",
        f"SGLang asks for a change of what the server serves or accepts: {said}",
        f"If that is what you mean, make it yourself ({wanted}): specdoctor does not add such a flag on the "
        "word of a message, which anyone can write into a log or an answer.",
        evidence=(said,),
        confidence=0.6,
    )


def _turned_away(ctx: Context) -> bool:
    """The failure is the answer a request got from a running server (a 400 it turned the request away
    with), not a crash."""
    answer = server_answer(ctx.log_text.splitlines()[-400:])
    return ctx.outcome.kind == "unhealthy" or (
        answer is not None and answer == (ctx.root.error_line or "").strip()
    )


def _take_back_the_variable(ctx: Context, said: str) -> Decision | None:
    """The message asks for a flag because of an engine variable the command set ("X is set but
    --enable-metrics is not active"): unsetting the variable keeps what is served as it was."""
    named = [
        n for n in ctx.spec.env_dict() if re.match(r"(?:SGLANG|SGL)_", n) and re.search(rf"\b{n}\b", said)
    ]
    if len(named) != 1:
        return None
    return fix(
        ctx,
        [UnsetEnv(name=named[0])],
        "other",
        f"SGLang asks for another flag because the command sets {named[0]}: {said}",
        why=f"without {named[0]} SGLang does not ask for it; adding the flag instead is yours to choose",
        evidence=(said,),
        confidence=0.45,
    )


def _in_the_engines_own_words(ctx: Context, said: str, asked: list[Edit]) -> Decision | None:
    """SGLang's own source writes this message and the flag it asks for (the installed engine's, else the
    bundled table of the release's messages): then the ask is the engine's, not a log's, and the change is
    proposed for the person to confirm."""
    from specdoctor.tools.catalog_load import installed_engine_folder
    from specdoctor.tools.engine_source.asks import written_by
    from specdoctor.tools.engine_source.said import said_by_engine

    folder = installed_engine_folder(ctx.spec)
    for edit in asked:
        flag = getattr(edit, "flag", None)
        if flag is None or _more_is_asked(ctx, said, flag):
            continue
        if folder is not None and said_by_engine(said, flag, folder):
            source = f"the installed SGLang ({folder}) writes this message itself"
        elif folder is None and (found := written_by(ctx.catalog.version, flag, said)):
            source = f"SGLang {found[0]} writes this message itself ({found[1]}:{found[2]})"
        else:
            continue
        return fix(
            ctx,
            [edit],
            category_of(flag),
            f"SGLang asks for {edit.describe()}: {said}",
            why=f"{source}; {flag} changes what the server serves or accepts, so it is yours to confirm",
            evidence=(said,),
            confidence=0.45,
        )
    return None


def _more_is_asked(ctx: Context, said: str, flag: str) -> bool:
    """The sentence asking for `flag` asks for another flag too ("with --enable-lora and preload adapters
    using --lora-paths"), one the command lacks and the message gives no value for: adding only the first
    is half of what the engine asks, and the next launch fails on the other half."""
    at = said.find(flag)
    sentence = re.split(r"\.(?:\s|$)", said[at + len(flag) :], maxsplit=1)[0] if at >= 0 else ""
    joined = re.search(r"\b(?:and|both)\b", sentence)
    others = [f for f in re.findall(r"--[a-z][\w-]+", sentence) if not ctx.view.has(f)]
    return joined is not None and bool(others) and joined.start() < sentence.find(others[0])


def _takes_back(ctx: Context, edit: Edit) -> bool:
    """A flag the command itself gives, taken back or set to another of its choices: no new flag comes
    from the message."""
    flag = getattr(edit, "flag", None)
    return (
        isinstance(edit, RemoveFlag | SetFlag)
        and flag is not None
        and ctx.spec.has(flag, ctx.catalog.canonical)
    )


def _tuning(ctx: Context, edit: Edit) -> bool:
    return all(t.classed.edit_class == "tuning" for t in touches([edit], ctx.catalog, ctx.spec))
