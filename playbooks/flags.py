"""SGLang's argparse rejected the command: unknown, `_`-spelled, vLLM or renamed flags, ambiguous
abbreviations, invalid choices, bad or missing values.

The log names what argparse disliked; the fix comes from the same checks preflight runs, so a flag is
fixed the same way whether it was caught before the launch or after it.
"""

from __future__ import annotations

import copy
import re

from specdoctor.playbooks.base import Context, fix, line_of, playbook, stop
from specdoctor.playbooks.decision import Decision, Finding, Fix
from specdoctor.playbooks.flag_checks import check_flags, older_release_with, phase_split
from specdoctor.playbooks.json_values import json_container, reads_json
from specdoctor.playbooks.suspects import is_tuning
from specdoctor.tools.command import Edit, RemoveFlag, RenameFlag
from specdoctor.tools.engine_source.index import version_key
from specdoctor.tools.flag_synonyms import BY_WRITTEN
from specdoctor.tools.similarity import score

ARGPARSE = (
    r"(?:(?:^|\s)\S+: |(?m:^))error: (?:unrecognized arguments|ambiguous option|argument --|the following arguments "
    r"are required)"
)
"""argparse's last line, `prog: error: ...`, or the same pasted without its program (a line of its own)."""
_NAMED = re.compile(r"(--[A-Za-z0-9][\w\-]*)")


def _flags_in(line: str) -> tuple[set[str], bool]:
    """Flags an argparse error line blames, and whether it calls them unrecognized."""
    if "unrecognized arguments:" in line:
        return set(_NAMED.findall(line.split("unrecognized arguments:", 1)[1])), True
    if m := re.search(r"ambiguous option: (--\S+)", line):
        return {m.group(1).split("=")[0]}, False
    if m := re.search(r"argument (--[^/:\s]+)", line):
        return {m.group(1)}, False
    return set(), False


@playbook(id="sglang.argparse", category="flag-name", pattern=ARGPARSE, priority=10)
def argparse_rejected(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """SGLang's argparse rejected the command; fix every flag the catalog says is wrong."""
    error_line = line_of(m) if m else ""
    named, unrecognized = _flags_in(error_line)
    # The engine that ran rejected the command itself: about its flags the catalog is not guessing now.
    catalog = copy.copy(ctx.catalog)
    catalog.authoritative = True
    findings = [f for f in check_flags(ctx.spec, catalog) if f.severity != "info"]
    errors = [f for f in findings if f.severity == "error"]
    named_findings = [f for f in errors if f.flag in named] or errors
    edits: list[Edit] = [e for f in findings for e in f.edits]
    written = {o.name for o in ctx.spec.options()}
    if (amb := _AMBIGUOUS.search(error_line)) and amb.group(1) in written:
        found = _ambiguous_here(ctx, amb.group(1), [c.strip() for c in amb.group(2).split(",")], error_line)
        # argparse stops at the first bad option: the others the catalog rejects go in the same change.
        rest = [e for f in errors if f.edits and f.flag != amb.group(1) for e in f.edits]
        if isinstance(found, Fix) and rest:
            return (
                fix(
                    ctx,
                    [*found.edits, *rest],
                    found.category,
                    found.summary,
                    why=found.why,
                    evidence=found.evidence,
                    confidence=found.confidence,
                )
                or found
            )
        return found
    if unrecognized and named and not named & written and ctx.view.has("--config"):
        return _from_config_file(ctx, sorted(named), error_line)
    skew = sorted(n for n in named & written if unrecognized and ctx.catalog.resolve(n).accepted_by_engine)
    if skew and not [f for f in errors if f.edits]:
        took = sorted(_unknown_but_taken(ctx, named))
        if took:
            return _another_parser(ctx, skew, took, error_line)
        return _version_skew(ctx, skew, error_line)
    edits += [RemoveFlag(flag=n) for n in skew]  # beside real faults, an unknown-here flag just goes
    if named_findings and not any(f.edits for f in named_findings):
        return stop(
            ctx,
            named_findings[0].category,
            named_findings[0].message,
            "Rename or remove it by hand; `specdoctor check` lists what SGLang accepts.",
            evidence=(error_line,),
        )
    lead = next((f for f in named_findings if f.edits), named_findings[0] if named_findings else None)
    if lead is None:
        return _value_refused(ctx, error_line)
    return fix(
        ctx,
        edits,
        lead.category,
        _summary(named_findings),
        why=_why(named_findings),
        evidence=(error_line,),
        confidence=min(0.95, lead.confidence),
    )


_REFUSED = re.compile(r"argument (--[\w-]+)(?:/[\w/-]+)?: (.+)$")


def _value_refused(ctx: Context, error_line: str) -> Decision | None:
    """The flag's own type function refused its value with a message no static check knows (`unknown phase
    'cudagraph_capture_sizes'` from --cuda-graph-config): a tuning flag goes back to SGLang's default."""
    m = _REFUSED.search(error_line)
    if m is None or not ctx.view.has(m.group(1)) or not is_tuning(ctx.view.canon(m.group(1))):
        return None
    return fix(
        ctx,
        [RemoveFlag(flag=m.group(1))],
        "flag-name",
        f"SGLang's parser refused the value of {m.group(1)}: {m.group(2)}",
        why=f"{m.group(1)} tunes how the model runs; without it SGLang uses its default, and the message says "
        "what a value of it may hold",
        evidence=(error_line,),
        confidence=0.55,
    )


_AMBIGUOUS = re.compile(r"ambiguous option: (--[\w-]+) could match (.+)$")


def _ambiguous_here(ctx: Context, written: str, candidates: list[str], error_line: str) -> Decision | None:
    """The running SGLang reads `written` as an abbreviation of several flags. Spell out the one meant: the
    one this catalog gives it (an alias here, like `--model`), else the closest candidate."""
    # argparse's grammar: an ambiguous option is a prefix of every flag it could match. A line that says
    # otherwise did not come from argparse, and a rename it asks for would move the flag's value elsewhere.
    candidates = [c for c in candidates if c.startswith(written) and c != written]
    if not candidates:
        return None
    meant = ctx.catalog.canonical(written)
    synonym = BY_WRITTEN.get(written)
    if meant not in candidates and synonym is not None and synonym.target in candidates:
        meant = synonym.target  # vLLM's name for it (`--tokenizer`): the same setting, not a prefix
    if meant not in candidates and (split := _split_by_phase(ctx, written, candidates)) is not None:
        return split
    older = older_release_with(written, ctx.catalog.version)
    if meant not in candidates and older and version_key(older) < version_key(ctx.catalog.version):
        return fix(
            ctx,
            [RemoveFlag(flag=written)],
            "flag-name",
            f"{written} is a flag of SGLang {older} that this release dropped; argparse now reads it as an "
            f"abbreviation of {', '.join(candidates)}",
            why="none of the flags it prefixes is what it meant; without it the rest of the command stands",
            evidence=(error_line,),
            confidence=0.6,
        )
    if meant not in candidates:
        ranked = sorted(candidates, key=lambda c: -score(written, c))
        meant = (
            ranked[0]
            if ranked
            and score(written, ranked[0]) - (score(written, ranked[1]) if len(ranked) > 1 else 0) >= 0.05
            else ""
        )
    if not meant:
        # No flag it prefixes stands out: another tool's option that happens to prefix SGLang's (`--lora`
        # of llama.cpp, `--prefill` of a router). It does nothing here; the person names a flag if one was meant.
        return fix(
            ctx,
            [RemoveFlag(flag=written)],
            "flag-name",
            f"{written} is ambiguous here: it could be {', '.join(candidates)}, and none of them stands out",
            why="none of the flags it prefixes is clearly the one meant; without it the command launches (write "
            "the full name of the one meant instead)",
            evidence=(error_line,),
            confidence=0.45,
        )
    return fix(
        ctx,
        [RenameFlag(flag=written, to=meant)],
        "flag-name",
        f"this SGLang reads {written} as an abbreviation that could be {', '.join(candidates)}",
        why=f"{meant} is the full name of the flag {written} was meant as",
        evidence=(error_line,),
        confidence=0.85,
    )


def _split_by_phase(ctx: Context, written: str, candidates: list[str]) -> Decision | None:
    found = phase_split(written, candidates, ctx.catalog.version)
    if found is None:
        return None
    return fix(
        ctx, list(found.edits), found.category, found.message, why=found.why, confidence=found.confidence
    )


def _unknown_but_taken(ctx: Context, named: set[str]) -> set[str]:
    """Flags of the command the catalog does not know and the engine did not reject."""
    return {
        o.name
        for o in ctx.spec.options()
        if o.name.startswith("--") and o.name not in named and ctx.catalog.resolve(o.name).flag is None
    }


def _another_parser(ctx: Context, rejected: list[str], took: list[str], error_line: str) -> Decision | None:
    """The engine took flags SGLang {catalog} does not have and rejected ones it has: it parses another set
    (a diffusion server, a fork, another entrypoint), and only its own verdict counts: drop what it refused."""
    return fix(
        ctx,
        [RemoveFlag(flag=n) for n in rejected],
        "flag-name",
        f"the SGLang that ran does not take {', '.join(rejected)}; it took {', '.join(took[:4])}, which SGLang "
        f"{ctx.catalog.version}'s server does not have, so its flags are another set than that catalog's",
        why="the engine's own argparse named what it refuses; without it the command parses",
        evidence=(error_line,),
        confidence=0.6,
    )


def _version_skew(ctx: Context, flags: list[str], error_line: str) -> Decision:
    """The running SGLang rejects flags SGLang {catalog} knows: it is an older (or other) release. The flags
    are right for the newer one, so no rewrite of the command is the fix; the install is."""
    return stop(
        ctx,
        "flag-name",
        f"the SGLang that ran does not know {', '.join(flags)}, which SGLang {ctx.catalog.version} has: "
        "the installed SGLang is older than the command expects",
        f"Upgrade SGLang (pip install -U sglang), or drop {', '.join(flags)} if you must stay on this version; "
        "check the command against the installed version with `specdoctor check` using its python.",
        evidence=(error_line,),
        confidence=0.6,
    )


def _from_config_file(ctx: Context, flags: list[str], error_line: str) -> Decision:
    """Flags that are not on the command line came from the YAML given with --config."""
    hints = []
    for name in flags:
        r = ctx.catalog.resolve(name)
        target = (
            r.flag.name
            if r.flag
            else (r.synonym.target if r.synonym else (r.confident.flag if r.confident else None))
        )
        hints.append(
            f"`{name[2:]}` → `{target[2:]}`" if target else f"`{name[2:]}` (no SGLang equivalent: remove it)"
        )
    return stop(
        ctx,
        "flag-name",
        f"the config file {ctx.view.get('--config')} has keys SGLang does not accept: {', '.join(flags)}",
        "SGLang turns each YAML key into a flag; rename in the file: " + "; ".join(hints) + ".",
        evidence=(error_line,),
    )


def _summary(findings: list[Finding]) -> str:
    if len(findings) == 1:
        return findings[0].message
    return f"{len(findings)} flags SGLang rejects: " + "; ".join(f.flag or f.code for f in findings)


def _why(findings: list[Finding]) -> str:
    return " ".join(f"{f.flag}: {f.why}." for f in findings if f.why)


_UNEXPECTED_KEY = r"got an unexpected keyword argument '(?P<key>\w+)'|\b\w+\(\) takes no arguments"


@playbook(id="sglang.flag.json-unknown-key", category="other", pattern=_UNEXPECTED_KEY, priority=40)
def json_unknown_key(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A JSON flag's keys become keyword arguments of the object it configures (an eviction strategy, a
    loader): a key that object does not take (or any key, for one that takes none) is the user's, and the
    flag that carries it goes."""
    assert m is not None
    key = m["key"]
    carriers = [flag for flag, keys in _json_objects(ctx) if (key in keys if key else keys)]
    if len(carriers) != 1:
        return None
    flag = carriers[0]
    said = f"passes `{key}`, which" if key else "passes settings, which"
    return fix(
        ctx,
        [RemoveFlag(flag=flag)],
        "other",
        f"{flag} {said} the object it configures does not take",
        why=f"SGLang hands {flag}'s keys to the object as keyword arguments; without the flag it is built "
        "with its defaults",
        evidence=(m.group(0),),
        confidence=0.6,
    )


def _json_objects(ctx: Context) -> list[tuple[str, tuple[str, ...]]]:
    """(flag, its keys) for every JSON object the command gives a flag that reads JSON."""
    found = []
    for option in ctx.spec.options():
        flag = ctx.view.canon(option.name)
        info = ctx.catalog.get(flag)
        value = " ".join(option.values)
        if info is None or not reads_json(info) or not value:
            continue
        if isinstance(parsed := json_container(value), dict):
            found.append((flag, tuple(parsed)))
    return found


@playbook(
    id="sglang.value.pasted-punctuation", category="other", when=("exited", "hung", "unhealthy"), priority=8
)
def pasted_punctuation(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A value carries quotes or a separator pasted with it (`“/models/llama”`, `--host 127.0.0.1,`) and
    the log shows SGLang working with it so: the value without them is what was meant."""
    for finding in ctx.findings:
        if finding.code != "pasted-punctuation" or not finding.edits or not finding.flag:
            continue
        written = ctx.view.get(finding.flag) or ""
        marks = [ch for ch in written if ch in "\u201c\u201d\u2018\u2019\u201e\u00ab\u00bb"]
        if written and (written in ctx.search_text or any(ch in ctx.root_text for ch in marks)):
            return fix(
                ctx,
                list(finding.edits),
                "model-path" if "path" in finding.flag else "other",
                finding.message,
                why=finding.why,
                evidence=(ctx.root.error_line or "",),
                confidence=finding.confidence,
            )
    return None
