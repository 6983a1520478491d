"""Static checks of flag names and values against the engine's flag catalog.

The same checks run before a launch (preflight) and after SGLang's argparse rejected a command (the
flags playbook), so the two can never disagree about what a flag means.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from difflib import SequenceMatcher
from functools import cache

from specdoctor.playbooks.decision import Finding
from specdoctor.playbooks.json_values import as_json, is_json, reads_json
from specdoctor.playbooks.translate import translate_synonym
from specdoctor.playbooks.view import as_float, as_int, human_spelling, plain_number
from specdoctor.tools.catalog import FlagCatalog, Resolution
from specdoctor.tools.command import (
    Edit,
    LaunchCommand,
    Option,
    Positional,
    PositionalToFlag,
    RemoveFlag,
    RenameFlag,
    SetFlag,
)
from specdoctor.tools.edit_policy import edit_policy
from specdoctor.tools.engine_source.index import version_key
from specdoctor.tools.flag_synonyms import value_synonyms
from specdoctor.tools.help_parser import FlagInfo
from specdoctor.tools.sglang_facts import facts_for
from specdoctor.tools.similarity import only_version_differs


def check_flags(spec: LaunchCommand, catalog: FlagCatalog) -> list[Finding]:
    """Every flag-level fault of `spec` for this catalog's engine version, each with its fix if known."""
    findings: list[Finding] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    serve = facts_for(catalog.version).serve_options
    for opt in spec.options():
        # One finding per spelling and value: 3,000 copies of a flag are one fault, not 3,000.
        if (opt.name, opt.values) in seen:
            continue
        seen.add((opt.name, opt.values))
        if opt.name in _HELP:
            findings.append(_asks_for_help(opt))
            continue
        if spec.is_serve_cli and opt.name in serve:
            findings.extend(_serve_option(opt, serve[opt.name]))
            continue
        if opt.name in serve:
            findings.append(_serve_only_option(opt))
            continue
        if " " in opt.name and (joined := _flag_and_value_in_one_word(opt, catalog)) is not None:
            findings.append(joined)
            continue
        if (renamed := _switch_renamed(opt, catalog)) is not None:
            findings.append(renamed)
            continue
        resolution = catalog.resolve(opt.name)
        if (misread := _value_after_abbreviated_switch(opt, resolution, catalog)) is not None:
            findings.append(misread)
            continue
        findings.extend(_name_findings(opt, resolution, spec, catalog))
        if resolution.flag is not None and resolution.status != "synonym":
            findings.extend(_value_findings(opt, resolution.flag, spec, catalog.version))
    findings.extend(_duplicates(spec, catalog))
    findings.extend(_inline_lists(spec, catalog))
    findings.extend(_positional_findings(spec, catalog))
    return findings


def _inline_lists(spec: LaunchCommand, catalog: FlagCatalog) -> list[Finding]:
    """`--lora-paths=a=/p1 b=/p2`: argparse gives a list flag written `--flag=value` that one value and
    rejects the words after it; they were more of its values."""
    found = []
    args = list(spec.args)
    for i, a in enumerate(args):
        info = catalog.get(catalog.canonical(a.name)) if isinstance(a, Option) and a.inline else None
        if info is None or info.nargs not in ("+", "*"):
            continue
        more = []
        for b in args[i + 1 :]:
            if not isinstance(b, Positional):
                break
            more.append(b.value)
        if more and isinstance(a, Option):
            values = (*a.values, *more)
            found.append(
                Finding(
                    code="list-flag-with-equals",
                    severity="error",
                    category="flag-name",
                    flag=a.name,
                    message=f"{a.name}={a.values[0]} takes that one value; argparse rejects {' '.join(more)}",
                    evidence=(f"error: unrecognized arguments: {' '.join(more)}",),
                    edits=(
                        *(PositionalToFlag(value=w, flag=info.name) for w in more),
                        SetFlag(flag=info.name, values=values),
                    ),
                    why=f"written `{info.name} {' '.join(values)}`, every word is one of its values",
                    confidence=0.8,
                )
            )
    return found


_HELP = ("--help", "-h")


def _serve_only_option(opt: Option) -> Finding:
    """`sglang serve`'s own dispatcher option given to `python -m sglang.launch_server`, which has no
    dispatcher: it always serves the language model, what `--model-type llm` (or auto) picks."""
    value = opt.values[0] if opt.values else ""
    language = value.lower() in ("llm", "auto", "")
    return Finding(
        code="serve-only-option",
        severity="error",
        category="flag-name",
        flag=opt.name,
        message=f"{opt.name} is an option of `sglang serve`, not of python -m sglang.launch_server",
        edits=(RemoveFlag(flag=opt.name),) if language else (),
        why="launch_server always serves the language model, which is what it picks"
        if language
        else f"launch `{value}` models with `sglang serve {opt.name} {value}`",
        confidence=0.8 if language else 0.0,
    )


def _flag_and_value_in_one_word(opt: Option, catalog: FlagCatalog) -> Finding | None:
    """`"--port 30000"` as one argv word (a Dockerfile's exec form, a YAML args list): argparse sees one
    unknown option; the flag and its value were meant as two words."""
    name, _, rest = opt.name.partition(" ")
    info = catalog.get(name)
    if info is None or not rest.strip():
        return None
    values = tuple(rest.split()) + opt.values
    return Finding(
        code="flag-and-value-in-one-word",
        severity="error",
        category="flag-name",
        flag=opt.name,
        message=f"`{opt.name}` is one word to argparse; {name} and its value are two",
        edits=(RenameFlag(flag=opt.name, to=name, values=values),),
        why="in an exec-form list each word is its own item: the flag, then its value",
        confidence=0.8,
    )


def _value_after_abbreviated_switch(opt: Option, r: Resolution, catalog: FlagCatalog) -> Finding | None:
    # argparse expands `--quantize` to the switch --quantize-and-serve; a value after it says the command
    # meant another program's option that takes one, so neither the switch nor the value is what it asked.
    if r.status != "prefix" or r.flag is None or r.flag.nargs != 0 or not opt.values or _truthy(opt):
        return None
    stray = " ".join(opt.values)
    owners = [f.name for f in catalog.flags if f.choices and opt.values[0] in f.choices]
    hint = f"; `{opt.values[0]}` is a choice of {', '.join(owners[:3])}" if owners else ""
    return Finding(
        code="value-after-abbreviated-switch",
        severity="error",
        category="flag-name",
        flag=opt.name,
        message=f"SGLang reads {opt.name} as an abbreviation of the switch {r.flag.name}, which takes no value: "
        f"`{stray}` is left over as an unrecognized argument{hint}",
        evidence=(f"error: unrecognized arguments: {stray}",),
        edits=(RemoveFlag(flag=opt.name),),
        why=f"{opt.name} {stray} is another program's option; leaving it out keeps SGLang's default "
        "(a checkpoint's own settings, such as its quantization, are read from its config)",
        confidence=0.6,
    )


def _switch_renamed(opt: Option, catalog: FlagCatalog) -> Finding | None:
    """A switch of an older release that this one spells `--enable-...` (0.4's `--return-hidden-states`
    is `--enable-return-hidden-states`): argparse would read it as an abbreviation of a longer flag, or
    reject it."""
    current = catalog.get(f"--enable-{opt.name.removeprefix('--')}")
    if opt.values or catalog.get(opt.name) is not None or current is None or current.nargs != 0:
        return None
    older = next((v for v in _older_releases(catalog.version) if _is_switch_in(v, opt.name)), None)
    if older is None:
        return None
    return Finding(
        code="switch-renamed",
        severity="error",
        category="flag-name",
        flag=opt.name,
        message=f"{opt.name} is SGLang {older}'s switch; SGLang {catalog.version} spells it {current.name}",
        edits=(RenameFlag(flag=opt.name, to=current.name),),
        why=f"the same switch under its {catalog.version} name",
        confidence=0.9,
    )


def _older_releases(version: str) -> list[str]:
    from specdoctor.tools.catalog_load import bundled_versions

    return [v for v in bundled_versions() if v != version]


def phase_split(name: str, candidates: Sequence[str], version: str) -> Finding | None:
    """An older release's CUDA graph flag that this one splits into `-decode` and `-prefill`, so argparse
    finds it ambiguous: before the split those flags sized the decode graphs (prefill graphs had flags of
    their own), so the decode one keeps the meaning."""
    decode = f"{name}-decode"
    if decode not in candidates or f"{name}-prefill" not in candidates:
        return None
    older = older_release_with(name, version)
    if older is None:
        return None
    return Finding(
        code="ambiguous-flag",
        severity="error",
        category="flag-name",
        flag=name,
        message=f"{name} is SGLang {older}'s flag; SGLang {version} splits it into {decode} and "
        f"{name}-prefill, so argparse finds it ambiguous",
        evidence=(f"error: ambiguous option: {name} could match {', '.join(candidates)}",),
        edits=(RenameFlag(flag=name, to=decode),),
        why=f"in {older} it sized the decode graphs: {decode} keeps that meaning",
        confidence=0.8,
    )


def older_release_with_choice(name: str, value: str, version: str) -> str | None:
    """The newest bundled release older than `version` that lists `value` among `name`'s choices."""
    from specdoctor.tools.catalog_load import bundled

    for older in sorted(_older_releases(version), key=version_key, reverse=True):
        found = bundled(older).get(name)
        if version_key(older) < version_key(version) and found is not None and value in (found.choices or ()):
            return older
    return None


def older_release_with(name: str, version: str) -> str | None:
    """A bundled release other than `version` whose flags include `name` exactly (newest first)."""
    from specdoctor.tools.catalog_load import bundled

    for older in sorted(_older_releases(version), key=version_key, reverse=True):
        found = bundled(older).get(name)
        if found is not None and found.name == name:
            return older
    return None


@cache
def _is_switch_in(version: str, name: str) -> bool:
    from specdoctor.tools.catalog_load import bundled

    found = bundled(version).get(name)
    return found is not None and found.name == name and found.nargs == 0


def _serve_option(opt: Option, choices: tuple[str, ...]) -> list[Finding]:
    """An option of `sglang serve` itself (not of the backend it starts): only its choices are checked."""
    value = " ".join(opt.values)
    if value in choices:
        return []
    return [
        Finding(
            code="invalid-choice",
            severity="error",
            category="invalid-choice",
            flag=opt.name,
            message=f"`sglang serve {opt.name} {value}`: it chooses the serving backend, one of {', '.join(choices)}",
            evidence=(
                f"ValueError: Unknown serve backend '{value}'. Available values: {', '.join(choices)}.",
            ),
            edits=(RemoveFlag(flag=opt.name),),
            why=f"without it `sglang serve` detects the backend from the model ({choices[0]})",
            confidence=0.8,
        )
    ]


def _asks_for_help(opt: Option) -> Finding:
    """argparse adds `--help`/`-h` to every parser (they are not in the flag list --help prints)."""
    return Finding(
        code="help-flag",
        severity="error",
        category="flag-name",
        flag=opt.name,
        message=f"`{opt.name}` prints the flags and exits; it does not launch",
        edits=(RemoveFlag(flag=opt.name),),
        why=f"without {opt.name} the command starts the server",
    )


def _duplicates(spec: LaunchCommand, catalog: FlagCatalog) -> list[Finding]:
    """A flag given more than once: argparse keeps the last value without a word, which is rarely meant."""
    groups: dict[str, list[Option]] = {}
    for opt in spec.options():
        resolution = catalog.resolve(opt.name)
        if resolution.flag is not None and resolution.accepted_by_engine and resolution.flag.nargs != 0:
            groups.setdefault(resolution.flag.name, []).append(opt)
    findings = []
    for flag, opts in groups.items():
        values = [" ".join(o.values) for o in opts]
        if len(opts) < 2 or len(set(values)) < 2:
            continue
        last = opts[-1]
        findings.append(
            Finding(
                code="duplicate-flag",
                severity="warning",
                category="flag-name",
                flag=flag,
                message=f"{flag} is given {len(opts)} times ({', '.join(dict.fromkeys(values))}); SGLang uses the "
                f"last one: {values[-1]}",
                edits=(RemoveFlag(flag=flag), SetFlag(flag=flag, values=last.values)),
                why="one occurrence, with the value SGLang would use, says what the command means",
            )
        )
    return findings


# ---- names -----------------------------------------------------------------------------------------


def _name_findings(opt: Option, r: Resolution, spec: LaunchCommand, catalog: FlagCatalog) -> list[Finding]:
    name = opt.name
    if r.status == "exact":
        return _deprecation(opt, r.flag) if r.flag and r.flag.deprecated else []
    if r.status == "prefix" and r.flag is not None:
        target = r.flag.negation if r.negated and r.flag.negation else r.flag.name
        return [
            Finding(
                code="abbreviated-flag",
                severity="warning",
                category="flag-name",
                flag=name,
                message=f"{name} is an abbreviation of {target}: SGLang accepts it only while no other flag starts the same way",
                edits=(RenameFlag(flag=name, to=target),),
                why=f"argparse expands unique prefixes; {target} is the full name and keeps working when flags are added",
            )
        ]
    if r.status == "underscore" and r.flag is not None:
        target = r.flag.negation if r.negated and r.flag.negation else r.flag.name
        return [
            Finding(
                code="underscore-flag",
                severity="error",
                category="flag-name",
                flag=name,
                message=f"SGLang does not accept {name}: its flags are spelled with "
                + ("two plain dashes, not a typographic one" if name[0] in "\u2013\u2014" else "dashes")
                + f" ({target})",
                evidence=(f"error: unrecognized arguments: {' '.join(opt.tokens())}",),
                edits=(RenameFlag(flag=name, to=target),),
                why=f"{target} is the same option with dashes",
            )
        ]
    if r.status == "synonym" and r.synonym is not None:
        return [translate_synonym(opt, r.synonym, spec, catalog)]
    if r.status == "ambiguous":
        return [_ambiguous(opt, r, catalog)]
    return [_unknown(opt, r, catalog)]


def _ambiguous(opt: Option, r: Resolution, catalog: FlagCatalog) -> Finding:
    shown = ", ".join(r.candidates[:6]) + (" ..." if len(r.candidates) > 6 else "")
    if split := phase_split(opt.name, r.candidates, catalog.version):
        return split
    evidence = (f"error: ambiguous option: {opt.name} could match {', '.join(r.candidates)}",)
    if (removed := _removed(opt, catalog, "", evidence)) is not None:
        return removed  # an older release's own flag, not an abbreviation of the newer ones it prefixes
    best = r.confident
    edits: tuple[Edit, ...] = (
        (RenameFlag(flag=opt.name, to=best.flag),) if best else (RemoveFlag(flag=opt.name),)
    )
    return Finding(
        code="ambiguous-flag",
        severity="error",
        category="flag-name",
        flag=opt.name,
        message=f"{opt.name} is ambiguous: it could match {shown}",
        evidence=(f"error: ambiguous option: {opt.name} could match {', '.join(r.candidates)}",),
        edits=edits,
        why=f"{best.flag} is the closest full name (score {best.score:.2f})"
        if best
        else "none of them stands out; without it the command launches (write the full name of the one meant)",
        confidence=best.score if best else 0.45,
    )


def _unknown(opt: Option, r: Resolution, catalog: FlagCatalog) -> Finding:
    best = r.confident
    evidence = (f"error: unrecognized arguments: {' '.join(opt.tokens())}",)
    if best is not None:
        return Finding(
            code="unknown-flag",
            severity="error",
            category="flag-name",
            flag=opt.name,
            message=f"SGLang {catalog.version} has no flag {opt.name}; the closest is {best.flag}",
            evidence=evidence,
            edits=(RenameFlag(flag=opt.name, to=best.flag),),
            why=f"{best.flag} is the flag --help lists for it (similarity {best.score:.2f})",
            confidence=best.score,
        )
    hint = "; did you mean " + " or ".join(s.flag for s in r.suggestions) + "?" if r.suggestions else ""
    if not catalog.authoritative:
        # The SGLang that runs is not known: a newer one may have this flag. Say so; change nothing.
        return Finding(
            code="unknown-flag",
            severity="warning",
            category="flag-name",
            flag=opt.name,
            message=f"{opt.name} is not a flag of SGLang {catalog.version} (the bundled list used because the "
            f"SGLang that runs is not known){hint}; a newer SGLang may have it",
            evidence=evidence,
            why="check against the SGLang that really runs: --live-catalog, or --sglang-version X",
            confidence=0.0,
        )
    if not opt.values and re.match(r"--(?:enable|disable|use|no)-", opt.name):
        # A switch this SGLang lacks turns on a feature it does not have; dropping it is the only change
        # that launches, and it cannot change anything else the command asks for.
        return Finding(
            code="unknown-flag",
            severity="error",
            category="flag-name",
            flag=opt.name,
            message=f"SGLang {catalog.version} has no switch {opt.name}{hint}",
            evidence=evidence,
            edits=(RemoveFlag(flag=opt.name),),
            why=f"{opt.name} turns on a feature this SGLang does not have; without it the rest of the command stands",
            confidence=0.6,
        )
    if (removed := _removed(opt, catalog, hint, evidence)) is not None:
        return removed
    # Another tool's flag with no SGLang spelling close to it: it does nothing here, so the command launches
    # without it; what it meant (`--ctx-size` is --context-length) is for the person who confirms.
    return Finding(
        code="unknown-flag",
        severity="error",
        category="flag-name",
        flag=opt.name,
        message=f"SGLang {catalog.version} has no flag {opt.name}{hint} (no confident match)",
        evidence=evidence,
        edits=(RemoveFlag(flag=opt.name),),
        why=f"no flag of SGLang {catalog.version} is a close spelling of {opt.name}; without it the command "
        "launches, and if it meant a setting, set that setting's SGLang flag instead",
        confidence=0.45,
    )


def _removed(opt: Option, catalog: FlagCatalog, hint: str, evidence: tuple[str, ...]) -> Finding | None:
    """A flag an older bundled release had and this one dropped, with no close successor: it goes."""
    older = older_release_with(opt.name, catalog.version)
    if older is None or version_key(older) >= version_key(catalog.version):
        return None
    return Finding(
        code="removed-flag",
        severity="error",
        category="flag-name",
        flag=opt.name,
        message=f"{opt.name} is a flag of SGLang {older} that SGLang {catalog.version} no longer has{hint}",
        evidence=evidence,
        edits=(RemoveFlag(flag=opt.name),),
        why=f"no flag of SGLang {catalog.version} takes its place under a close name; without it the rest of "
        "the command stands",
        confidence=0.6,
    )


_DEPRECATED_REPLACEMENTS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "--disable-cuda-graph": (
        ("--cuda-graph-backend-decode", ("disabled",)),
        ("--cuda-graph-backend-prefill", ("disabled",)),
    ),
}


def _deprecation(opt: Option, flag: FlagInfo | None) -> list[Finding]:
    if flag is None:
        return []
    replacement = _DEPRECATED_REPLACEMENTS.get(flag.name, ())
    edits: tuple[Edit, ...] = ()
    if replacement:
        edits = (RemoveFlag(flag=opt.name), *(SetFlag(flag=f, values=v) for f, v in replacement))
    return [
        Finding(
            code="deprecated-flag",
            severity="info",
            category="flag-name",
            flag=opt.name,
            message=f"{opt.name} still works but is deprecated: {flag.help}",
            edits=edits,
        )
    ]


# ---- values ----------------------------------------------------------------------------------------


def _value_findings(opt: Option, flag: FlagInfo, spec: LaunchCommand, version: str) -> list[Finding]:
    values = opt.values
    if flag.nargs == 0:
        return _switch_with_values(opt, spec) if values else []
    count = _count_problem(opt, flag)
    if count is not None:
        return [count]
    found: list[Finding] = []
    for value in values:
        if (pasted := _pasted_punctuation(opt, value)) is not None:
            found.append(pasted)
        elif flag.choices is not None:
            found.extend(_choice(opt, flag, value, version))
        else:
            found.extend(_typed(opt, flag, value))
    return found


# Quotes a word processor or a web page puts around a value, and a separator left from a list it was copied
# from: no shell removes them, so SGLang gets them as part of the value.
_TYPOGRAPHIC_QUOTES = "\u201c\u201d\u2018\u2019\u201e\u00ab\u00bb"
_LEFT_FROM_A_LIST = re.compile(r"^([^,;\s]+)[,;]$")


def _pasted_punctuation(opt: Option, value: str) -> Finding | None:
    quoted = value.strip(_TYPOGRAPHIC_QUOTES)
    left = _LEFT_FROM_A_LIST.match(value)
    plain = quoted if quoted != value and quoted else left.group(1) if left else None
    if plain is None:
        return None
    what = "typographic quotes" if quoted != value else f"a trailing `{value[-1]}`"
    return Finding(
        code="pasted-punctuation",
        severity="error",
        category="flag-name",
        flag=opt.name,
        message=f"{opt.name} {value} carries {what}, which become part of the value",
        edits=(SetFlag(flag=opt.name, values=tuple(plain if v == value else v for v in opt.values)),),
        why=f"`{plain}` is the value without them: no shell strips them",
        confidence=0.8 if quoted != value else 0.6,
    )


def _count_problem(opt: Option, flag: FlagInfo) -> Finding | None:
    n = len(opt.values)
    if (n == 0 and flag.nargs in (None, "+")) or (isinstance(flag.nargs, int) and n < flag.nargs):
        return Finding(
            code="missing-value",
            severity="error",
            category="flag-name",
            flag=opt.name,
            message=f"{opt.name} needs a value ({flag.usage()})",
            evidence=(f"error: argument {flag.name}: expected one argument",),
        )
    if (flag.nargs in (None, "?") and n > 1) or (isinstance(flag.nargs, int) and n > flag.nargs):
        keep = 1 if flag.nargs in (None, "?") else int(flag.nargs)  # type: ignore[arg-type]
        extra = " ".join(opt.values[keep:])
        whole = as_json(" ".join(opt.values)) if keep == 1 and reads_json(flag) else None
        if whole is not None:
            return Finding(
                code="json-split-at-spaces",
                severity="error",
                category="flag-name",
                flag=opt.name,
                message=f"{opt.name}'s JSON reached SGLang as {n} words: the shell split it and ate its quotes",
                evidence=(f"error: unrecognized arguments: {extra}",),
                edits=(SetFlag(flag=opt.name, values=(whole,)),),
                why="the same object as one JSON word; in a shell, single quotes around it keep it whole",
                confidence=0.7,
            )
        if keep == 1 and _split_path(opt.values):
            joined = " ".join(opt.values)
            return Finding(
                code="path-split-at-spaces",
                severity="error",
                category="flag-name",
                flag=opt.name,
                message=f"{opt.name} takes one path, and the shell split `{joined}` at its spaces",
                evidence=(f"error: unrecognized arguments: {extra}",),
                edits=(SetFlag(flag=opt.name, values=(joined,)),),
                why="a path with spaces reaches SGLang whole only when quoted; the words after it continue it",
                confidence=0.6,
            )
        return Finding(
            code="extra-values",
            severity="error",
            category="flag-name",
            flag=opt.name,
            message=f"{opt.name} takes {keep} value(s); SGLang rejects the rest: {extra}",
            evidence=(f"error: unrecognized arguments: {extra}",),
            edits=(SetFlag(flag=opt.name, values=opt.values[:keep]),),
            why="the extra words are not arguments SGLang knows",
            confidence=0.6,
        )
    return None


def _split_path(values: tuple[str, ...]) -> bool:
    """A folder path the shell split at its spaces: it starts as a path and goes on into a folder
    (`/data/my models/llama` as `/data/my` `models/llama`)."""
    first, rest = values[0], values[1:]
    return first.startswith(("/", "./", "~/")) and all(
        "/" in w and not w.startswith(("-", "/")) for w in rest
    )


def _truthy(opt: Option) -> bool:
    # `--trust-remote-code true`: the switch was meant, written the way a config file writes it.
    return len(opt.values) == 1 and opt.values[0].lower() in ("true", "false", "1", "0", "yes", "no")


def _switch_with_values(opt: Option, spec: LaunchCommand) -> list[Finding]:
    # `--trust-remote-code true` or a bare word after a switch; the word is a stray positional.
    stray = " ".join(opt.values)
    if _truthy(opt):
        on = opt.values[0].lower() in ("true", "1", "yes")
        edit: Edit = SetFlag(flag=opt.name) if on else RemoveFlag(flag=opt.name)
        return [
            Finding(
                code="switch-with-value",
                severity="error",
                category="flag-name",
                flag=opt.name,
                message=f"{opt.name} is a switch and takes no value; `{stray}` would be an unrecognized argument",
                evidence=(f"error: unrecognized arguments: {stray}",),
                edits=(edit,),
                why=f"give {opt.name} alone to turn it on, leave it out to turn it off",
            )
        ]
    if spec.is_serve_cli:
        return []
    return [
        Finding(
            code="stray-argument",
            severity="error",
            category="flag-name",
            flag=opt.name,
            message=f"{opt.name} takes no value; `{stray}` is an argument SGLang does not accept here",
            evidence=(f"error: unrecognized arguments: {stray}",),
        )
    ]


def _choice(opt: Option, flag: FlagInfo, value: str, version: str) -> list[Finding]:
    choices = flag.choices or ()
    if value in choices:
        return []
    listed = ", ".join(choices[:12]) + (" ..." if len(choices) > 12 else "")
    message = f"{opt.name} {value} is not one of SGLang's choices ({listed})"
    pieces = [p.strip() for p in value.split(",")]
    target = closest_choice(flag.name, value, choices)
    described = None if target else flag.choice_described_as(value)
    if flag.nargs in ("+", "*") and len(pieces) > 1 and all(p in choices for p in pieces):
        # A list flag takes its values space-separated; `q_proj,v_proj` is one value argparse does not know.
        values = _replaced(opt, value, tuple(pieces))
        message += f": {opt.name} takes its values separated by spaces, not commas"
        why = f"the same choices as separate values: {' '.join(values)}"
    elif target is not None:
        values = tuple(target if v == value else v for v in opt.values)
        message += f"; the closest is {target}"
        why = f"{target} is the choice SGLang spells for `{value}`"
    elif described is not None:
        values = tuple(described if v == value else v for v in opt.values)
        message += f"; SGLang's --help describes {described} in those words"
        why = f"{flag.name}'s --help says what `{value}` names where it describes {described}"
    else:
        values, why = (), ""
    # No choice is close: the flag goes back to SGLang's own pick (a value of an older release, a backend
    # another engine has). For a tuning flag that is the fix; for what is served or loaded, the person's call.
    tuning = edit_policy().flag(flag.name).edit_class == "tuning"
    older = None if values or tuning else older_release_with_choice(flag.name, value, version)
    if older is not None:
        message += f"; `{value}` is a choice of SGLang {older} this release dropped"
    edits = (SetFlag(flag=opt.name, values=values),) if values else (RemoveFlag(flag=opt.name),)
    return [
        Finding(
            code="invalid-choice",
            severity="error",
            category="invalid-choice",
            flag=opt.name,
            message=message,
            evidence=(f"error: argument {flag.name}: invalid choice: '{value}' (choose from {listed})",),
            edits=edits,
            why=why or "no choice is close to it; without the flag SGLang picks its default",
            confidence=0.6 if described else 0.95 if values else 0.6 if tuning else 0.45,
        )
    ]


def closest_choice(flag: str, value: str, choices: tuple[str, ...]) -> str | None:
    """The one choice `value` is a respelling of (case, `-`/`_`, a known synonym, a near typo); None when no
    choice is clearly closest."""
    synonyms = value_synonyms(flag)
    mapped = synonyms.get(value) or synonyms.get(value.upper())
    if mapped in choices:
        return mapped
    folded = [
        c for c in choices if c.lower() == value.lower() or c.replace("-", "_") == value.replace("-", "_")
    ]
    if len(folded) == 1:
        return folded[0]
    extended = [c for c in choices if c.lower().startswith(value.lower())]
    if len(value) >= 3 and len(extended) == 1:
        return extended[0]
    ranked = sorted(
        ((SequenceMatcher(None, value.lower(), c.lower()).ratio(), c) for c in choices), reverse=True
    )
    if ranked and ranked[0][0] >= 0.8 and (len(ranked) == 1 or ranked[0][0] - ranked[1][0] >= 0.08):
        best = ranked[0][1]
        return None if only_version_differs(best, value) else best
    return None


def _typed(opt: Option, flag: FlagInfo, value: str) -> list[Finding]:
    kind = "json" if reads_json(flag) else flag.value_type
    ok = {
        "int": lambda v: _is_int(v),
        "human_readable_int": lambda v: as_int(v) is not None,
        "float": lambda v: as_float(v) is not None,
        "json": is_json,
    }.get(kind or "")
    problems: list[Finding] = []
    if ok is not None and not ok(value):
        problems.append(_bad_value(opt, flag, value, kind))
    problems.extend(_range(opt, flag, value))
    return problems


# How people write "no value" for a number: for a flag whose default is None, that is leaving it out.
_NO_VALUE = frozenset({"none", "null", "nil", "unset", "default"})


def _bad_value(opt: Option, flag: FlagInfo, value: str, kind: str | None) -> Finding:
    what = {"human_readable_int": "int", "json": "JSON"}.get(kind or "", kind)
    edits: tuple[Edit, ...]
    if (
        kind != "json"
        and value.lower() in _NO_VALUE
        and flag.default in (None, "None")
        and len(opt.values) == 1
    ):
        note = ": leaving the flag out is how SGLang spells that"
        why = f"{flag.name}'s default is None, which is what `{value}` says; argparse reads only a number"
        edits, confidence, category = (RemoveFlag(flag=opt.name),), 0.9, "flag-name"
    else:
        values, note, why = _respelled(opt, flag, value, kind)
        edits = (SetFlag(flag=flag.name, values=values),) if values else ()
        confidence = (0.6 if kind == "int" and re.search(r"[a-zA-Z]", value) else 0.9) if values else 0.0
        # argparse rejects a value of its own type; JSON in a text flag fails later, in the engine.
        category = "flag-name" if kind == flag.value_type else "other"
    return Finding(
        code="bad-value",
        severity="error",
        category=category,
        flag=opt.name,
        message=f"{opt.name} needs {'an' if what == 'int' else 'a'} {what} value, got `{value}`{note}",
        evidence=(f"error: argument {flag.name}: invalid {what} value: '{value}'",),
        edits=edits,
        why=why,
        confidence=confidence,
    )


def _respelled(opt: Option, flag: FlagInfo, value: str, kind: str | None) -> tuple[tuple[str, ...], str, str]:
    """(the flag's values with this one respelled as SGLang reads it, a note for the message, why)."""
    if kind == "json" and (fixed := as_json(value)):
        note = " (not JSON's spelling: SGLang reads it with json.loads)"
        return (
            _replaced(opt, value, (fixed,)),
            note,
            "the same keys and values in JSON's spelling (double quotes)",
        )
    if kind == "human_readable_int" and (fixed := human_spelling(value)):
        note = f" (SGLang's suffixes are case-sensitive: {fixed})"
        return (
            _replaced(opt, value, (fixed,)),
            note,
            f"`{value}` as another tool reads it; SGLang writes that count `{fixed}`",
        )
    pieces = [p.strip() for p in value.split(",")]
    if (
        kind in ("int", "float")
        and flag.nargs in ("+", "*")
        and len(pieces) > 1
        and all(_is_int(p) if kind == "int" else as_float(p) is not None for p in pieces)
    ):
        note = f": {opt.name} takes its values separated by spaces, not commas"
        return (
            _replaced(opt, value, tuple(pieces)),
            note,
            f"the same values as separate words: {' '.join(pieces)}",
        )
    if kind in ("int", "float") and (fixed := plain_number(value, kind, _in_seconds(flag))):
        note = f" ({kind} flags take plain digits: {fixed})"
        return (
            _replaced(opt, value, (fixed,)),
            note,
            f"`{value}` written as the {kind} argparse reads: {fixed}",
        )
    return (), "", ""


def _replaced(opt: Option, value: str, new: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(v for w in opt.values for v in (new if w == value else (w,)))


def _in_seconds(flag: FlagInfo) -> bool:
    return bool(re.search(r"\bsec(?:ond)?s?\b|timeout", f"{flag.name} {flag.help or ''}", re.IGNORECASE))


def _is_int(value: str) -> bool:
    try:
        int(value)
    except ValueError:
        return False
    return True


def _range(opt: Option, flag: FlagInfo, value: str) -> list[Finding]:
    number = as_float(value)
    if number is None:
        return []
    if flag.name == "--mem-fraction-static" and not 0 < number <= 1:
        fixed = number / 100 if 1 < number <= 100 else None
        return [
            Finding(
                code="bad-value",
                severity="error",
                category="oom",
                flag=opt.name,
                message=f"--mem-fraction-static is a fraction of GPU memory in (0, 1], got {value}",
                edits=(SetFlag(flag=opt.name, values=(f"{fixed:g}",)),) if fixed else (),
                why=f"{value} reads as a percentage: {fixed:g}" if fixed else "",
                confidence=0.8,
            )
        ]
    if flag.name in ("--tp-size", "--pp-size", "--dp-size") and number < 1:
        return [
            Finding(
                code="bad-value",
                severity="error",
                category="tp-config",
                flag=opt.name,
                message=f"{flag.name} must be at least 1, got {value}",
                edits=(SetFlag(flag=opt.name, values=("1",)),),
                why="a parallel size of 1 means no splitting",
                confidence=0.7,
            )
        ]
    if flag.name == "--port" and not 0 < number < 65536:
        return [
            Finding(
                code="bad-value",
                severity="error",
                category="port-in-use",
                flag=opt.name,
                message=f"--port {value} is not a TCP port (1-65535); SGLang does not check it and fails after loading",
                edits=(RemoveFlag(flag=opt.name),),
                why="without --port SGLang listens on 30000",
                confidence=0.7,
            )
        ]
    return []


# ---- positionals and required flags ----------------------------------------------------------------


def _positional_findings(spec: LaunchCommand, catalog: FlagCatalog) -> list[Finding]:
    model_flag = catalog.get("--model-path")
    if model_flag is None or spec.has("--model-path", catalog.canonical):
        return []
    words = spec.positionals() or _attached_words(spec, catalog)
    if spec.is_serve_cli and spec.positionals():
        return []
    if words:
        return [
            Finding(
                code="positional-model",
                severity="error",
                category="flag-name",
                flag=None,
                message=f"`{' '.join(spec.entrypoint)}` takes the model as --model-path, not as a bare `{words[0]}`",
                evidence=("error: the following arguments are required: --model-path/--model",),
                edits=(PositionalToFlag(value=words[0], flag="--model-path"),),
                why="only `sglang serve` accepts a positional model",
            )
        ]
    return [
        Finding(
            code="missing-model",
            severity="error",
            category="model-path",
            message="no --model-path: SGLang needs the model folder or Hub repo id",
            evidence=("error: the following arguments are required: --model-path/--model",),
        )
    ]


def _attached_words(spec: LaunchCommand, catalog: FlagCatalog) -> list[str]:
    """Bare words the lexer attached to a switch (`--trust-remote-code MODEL`)."""
    words: list[str] = []
    for opt in spec.options():
        flag = catalog.resolve(opt.name).flag
        if flag is not None and flag.nargs == 0 and opt.values:
            words.extend(opt.values)
    return words
