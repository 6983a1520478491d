"""The one gate every proposed change crosses, whoever proposed it (preflight, a rule, a user's YAML rule,
the LLM, a person's edit): is it a change the engine can take at all, and may this run make it unasked?

Validity does not trust where an edit came from. Log text, config files and LLM answers are untrusted, so
a value must be one the engine's catalog accepts (a listed choice, a number of the flag's type within
range) or one the user already wrote; a rename must be one the catalog itself explains (the abbreviation,
`_` spelling, synonym or close match of a flag the user typed); an environment variable may only be unset
when this run set it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from difflib import SequenceMatcher
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.playbooks.json_values import json_container, loose_literal, numbers_unquoted
from specdoctor.playbooks.spec_checks import builtin_algorithms
from specdoctor.playbooks.view import CommandView, as_int
from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.command import (
    Edit,
    LaunchCommand,
    PositionalToFlag,
    RemoveFlag,
    RenameFlag,
    SetEnv,
    SetFlag,
    SetFreePort,
    UnsetEnv,
)
from specdoctor.tools.edit_policy import Allowance, Classed, EditClass, edit_policy
from specdoctor.tools.engine_source.architectures import registered_architectures
from specdoctor.tools.help_parser import FlagInfo
from specdoctor.tools.sglang_facts import OPENAI_SAMPLING_NAMES, facts_for

MAX_EDITS = 16
MAX_TEXT = 512
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_ENV_VALUE = re.compile(r"^[A-Za-z0-9_.,:=/+@-]{0,256}$")
_NUMBER_LIMIT = 1e9
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?$")
_NUMERIC = ("int", "float", "human_readable_int")


class Refusal(BaseModel):
    """An edit the gate will not let through, and why, in words a person reads."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    edit: str
    reason: str
    edit_class: EditClass | None = None
    pinned: bool = Field(
        default=False, description="It touches a flag the run pinned: no automatic change makes it."
    )


def invalid_edits(
    command: LaunchCommand,
    edits: Sequence[Edit],
    catalog: FlagCatalog,
    original: LaunchCommand | None = None,
) -> list[Refusal]:
    """Why these edits cannot be applied by anyone (empty when they can). `original`: the command the run
    started from, so that environment variables this run set (and only those) may be unset."""
    if len(edits) > MAX_EDITS:
        return [Refusal(edit=f"{len(edits)} edits", reason=f"more than {MAX_EDITS} edits in one change")]
    refusals = []
    for edit in edits:
        reason = _text_problem(edit) or _problem(edit, command, catalog, original)
        if reason:
            refusals.append(Refusal(edit=_describe(edit), reason=reason))
    return refusals or _draft_refusals(command, edits, catalog)


def _draft_refusals(command: LaunchCommand, edits: Sequence[Edit], catalog: FlagCatalog) -> list[Refusal]:
    """A change of --speculative-algorithm that keeps a draft model made for another algorithm (an EAGLE-3
    head run as EAGLE accepts nothing; a plain model is no EAGLE head)."""
    changed = [
        e for e in edits if isinstance(e, SetFlag) and catalog.canonical(e.flag) == "--speculative-algorithm"
    ]
    before = CommandView(command, catalog)
    if not changed or not before.get("--speculative-draft-model-path"):
        return []
    after = CommandView(command.apply_all(list(edits), catalog.canonical), catalog)
    from specdoctor.playbooks.translate import draft_kind

    draft = after.get("--speculative-draft-model-path")
    # What the draft is made for: its config or name says, else the algorithm the user ran it with.
    made_for = (draft_kind(draft) if draft else None) or before.get("--speculative-algorithm") or ""
    new = after.get("--speculative-algorithm") or ""
    speculative = facts_for(catalog.version).speculative
    # With no algorithm before, nothing says what an unnamed draft was made for (a rule reads it from the draft).
    if not made_for or not draft or speculative.same_draft(made_for, new):
        return []
    return [
        Refusal(
            edit=_describe(changed[-1]),
            reason=f"the draft model at --speculative-draft-model-path is made for {made_for}, and {new} loads "
            "another kind of draft",
        )
    ]


class Touch(BaseModel):
    """One flag or environment variable an edit touches, with its policy class."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    edit: str
    classed: Classed
    is_env: bool = False
    pinned: bool = Field(
        default=False,
        description="A flag the run pinned (`--pin`, deploy's --port and --host): never changed by an "
        "automatic decision.",
    )


_PARALLEL = (
    "--tp-size",
    "--pp-size",
    "--dp-size",
    "--ep-size",
    "--attn-dp-size",
    "--attn-cp-size",
    "--moe-dp-size",
)


def touches(
    edits: Sequence[Edit],
    catalog: FlagCatalog,
    command: LaunchCommand | None = None,
    pinned: frozenset[str] = frozenset(),
) -> list[Touch]:
    """Every flag or variable the edits touch, classed (a rename touches both names), and whether it is
    one of the run's `pinned` flags (canonical names). In a multi-node `command` the parallel sizes are
    its topology, set on every node: never changed unasked."""
    policy = edit_policy()
    multi_node = command is not None and CommandView(command, catalog).nnodes > 1
    found: list[Touch] = []
    for edit in edits:
        if isinstance(edit, SetEnv | UnsetEnv):
            found.append(Touch(edit=_describe(edit), classed=policy.env(edit.name), is_env=True))
            continue
        names = [edit.flag, edit.to] if isinstance(edit, RenameFlag) else [edit.flag]
        for name in names:
            resolved = catalog.resolve(name)
            classed = policy.flag(resolved.flag.name if resolved.flag else name)
            if multi_node and classed.name in _PARALLEL:
                classed = Classed(
                    name=classed.name, edit_class="identity", rule="a parallel size of a multi-node launch"
                )
            found.append(Touch(edit=_describe(edit), classed=classed, pinned=classed.name in pinned))
    return found


def pinned_reason(flag: str) -> str:
    """Why a pinned flag is not changed, and how a person changes it."""
    return (
        f"{flag} is pinned: no automatic change touches it, --allow included (deploy pins --port and --host "
        f"unless --no-pin; --pin FLAG pins others); change it by hand if it must change"
    )


def needing_a_person(found: Sequence[Touch], allowance: Allowance) -> list[Refusal]:
    """What this run may not change unattended: a pinned flag, whatever is allowed, and anything beyond
    tuning the user did not allow."""
    refusals = []
    for touch in found:
        classed = touch.classed
        if touch.pinned:
            refusals.append(
                Refusal(
                    edit=touch.edit,
                    reason=pinned_reason(classed.name),
                    edit_class=classed.edit_class,
                    pinned=True,
                )
            )
            continue
        if allowance.permits(classed, touch.is_env):
            continue
        how = f"--allow-env {classed.name}" if touch.is_env else f"--allow {classed.name.removeprefix('--')}"
        refusals.append(
            Refusal(
                edit=touch.edit,
                reason=f"{classed.name} is {classed.edit_class} ({classed.rule}); a person decides "
                f"(`specdoctor fix`), or allow it with {how}",
                edit_class=classed.edit_class,
            )
        )
    return refusals


def _describe(edit: Edit) -> str:
    return _CONTROL.sub("?", edit.describe())[:200]


def _text_problem(edit: Edit) -> str | None:
    for value in edit.model_dump().values():
        texts = value if isinstance(value, list | tuple) else [value]
        for text in texts:
            if isinstance(text, str) and _CONTROL.search(text):
                return "contains a control character (newline, NUL, escape)"
            if isinstance(text, str) and len(text) > MAX_TEXT:
                return f"a value longer than {MAX_TEXT} characters"
    return None


def _problem(
    edit: Edit, command: LaunchCommand, catalog: FlagCatalog, original: LaunchCommand | None
) -> str | None:
    if isinstance(edit, SetEnv):
        return _env_problem(edit)
    if isinstance(edit, UnsetEnv):
        started = (original or command).env_dict()
        set_here = edit.name in command.env_dict() and started.get(edit.name) != command.env_dict()[edit.name]
        # An engine variable is one of SGLang's settings, like a flag the user gave: without it SGLang uses
        # its default. Any other (a device list, a token, a library's switch) is the person's.
        engines = edit.name in command.env_dict() and _ENGINE_VARIABLE.match(edit.name) is not None
        return (
            None if set_here or engines else f"{edit.name} was not set by this run: only a person removes it"
        )
    if isinstance(edit, RenameFlag):
        return _rename_problem(edit, command, catalog)
    if isinstance(edit, RemoveFlag):
        # Whatever the user wrote may go, known to this catalog or not; nothing else is "removed".
        written = any(o.name == edit.flag for o in command.options()) or command.has(
            edit.flag, catalog.canonical
        )
        return None if written else f"{edit.flag} is not in the command"
    flag = _exact(edit.flag, catalog)
    if flag is None:
        return f"{edit.flag} is not a flag of SGLang {catalog.version} (the full name --help lists)"
    if isinstance(edit, SetFlag):
        return _values_problem(flag, edit.values, command, catalog)
    if isinstance(edit, PositionalToFlag) and edit.value not in command.positionals():
        return f"{edit.value} is not a bare word of the command"
    if isinstance(edit, SetFreePort) and flag.value_type not in (None, "int"):
        return f"{flag.name} does not take a port number"
    return None


def _exact(name: str, catalog: FlagCatalog) -> FlagInfo | None:
    resolved = catalog.resolve(name)
    return resolved.flag if resolved.status == "exact" else None


_ENGINE_VARIABLE = re.compile(r"(?:SGLANG|SGL)_[A-Z0-9_]+$")


def _env_problem(edit: SetEnv) -> str | None:
    if not _ENV_NAME.match(edit.name):
        return f"{edit.name!r} is not an environment variable name"
    if not _ENV_VALUE.match(edit.value):
        return "the value has characters an environment setting from a rule never needs"
    return None


def _rename_problem(edit: RenameFlag, command: LaunchCommand, catalog: FlagCatalog) -> str | None:
    """A rename is valid only where the catalog explains it for a flag the user wrote."""
    if not any(o.name == edit.flag for o in command.options()):
        return f"{edit.flag} is not written in the command"
    target = _exact(edit.to, catalog)
    if target is None:
        return f"{edit.to} is not a flag of SGLang {catalog.version}"
    resolved = catalog.resolve(edit.flag)
    explained = (
        (resolved.status != "exact" and resolved.flag is not None and resolved.flag.name == target.name)
        or target.name in resolved.candidates
        or any(s.flag == target.name for s in resolved.suggestions)
        or (resolved.synonym is not None and resolved.synonym.target == target.name)
        # Another release reads this spelling as an abbreviation: argparse only expands prefixes.
        or (target.name.startswith(edit.flag) and target.name != edit.flag)
        # An older release's switch, which this one spells with `--enable-` (SGLang's naming of switches).
        or (target.name == f"--enable-{edit.flag.removeprefix('--')}" and target.nargs == 0)
        # A flag and its value written as one word (`"--port 30000"`): the words are the user's.
        or (
            edit.flag.split(" ", 1)[0] == target.name
            and edit.values == tuple(edit.flag.split()[1:]) + _written_values(command, edit.flag)
        )
    )
    if not explained:
        return f"nothing in SGLang {catalog.version}'s flags makes {edit.flag} mean {target.name}"
    values = edit.values if edit.values is not None else _written_values(command, edit.flag)
    return _values_problem(target, values, command, catalog)


def _written_values(command: LaunchCommand, flag: str) -> tuple[str, ...]:
    found = [o for o in command.options() if o.name == flag]
    return found[-1].values if found else ()


def _values_problem(
    flag: FlagInfo, values: Sequence[str], command: LaunchCommand, catalog: FlagCatalog
) -> str | None:
    if flag.nargs == 0:
        return f"{flag.name} is a switch and takes no value" if values else None
    if not values and flag.nargs not in ("?", "*"):
        return f"{flag.name} needs a value"
    if len(values) > 1 and flag.nargs in (None, "?"):
        return f"{flag.name} takes one value"
    for value in values:
        if problem := _value_problem(flag, value, command, catalog):
            return problem
    return None


def _value_problem(flag: FlagInfo, value: str, command: LaunchCommand, catalog: FlagCatalog) -> str | None:
    choices = flag.choices or _borrowed_choices(flag, catalog)
    if choices:
        return None if value in choices else f"{value!r} is not one of {flag.name}'s choices"
    written = _written(command, catalog)
    if flag.name == "--speculative-algorithm":
        known = builtin_algorithms(catalog)
        return None if value in known or value in written else f"{value!r} is not an algorithm SGLang has"
    if flag.value_type in _NUMERIC or (flag.value_type is None and _NUMBER.match(value)):
        return _number_problem(flag, value)
    if (
        value in written
        or _respelled(value, written)
        or _requoted(value, written)
        or _renamed(value, written)
        or _keys_respelled(value, written, catalog)
        or _near_named_file(value, written)
        or (" " in value and all(w in written for w in value.split(" ")))
        or _cached_revision(flag.name, value, command)
        or any(w != value and w.strip(_PASTED) == value for w in written)
    ):
        return None  # the user's own value, moved, kept or respelled
    if value in flag.listed_values or value in facts_for(catalog.version).named_values(flag.name):
        return None  # a name built into SGLang (a chat template it registers), not a person's text
    if _architectures_named(flag.name, value, written, catalog):
        return None  # the user's override with an architecture SGLang registers
    if _config_keys_dropped(flag.name, value, written):
        return None  # the user's override, and keys of the model's config set to null: nothing new comes in
    if _config_sizes(flag.name, value, written):
        return None  # the user's override, and a tensor size as a whole number: no text comes in
    return f"{flag.name} takes free text, and {value!r} is not in the command: only a person sets it"


def _written(command: LaunchCommand, catalog: FlagCatalog) -> set[str]:
    """Every value the user wrote: on the command line (`a,b` also as its pieces, a list given with commas)
    and in the command's own --config file, which SGLang reads whether the values stay there or move to the
    command line."""
    written = {t for o in command.options() for t in o.values} | set(command.positionals())
    written |= {w for o in command.options() if " " in o.name for w in o.name.split()[1:]}
    written |= {" ".join(o.values) for o in command.options() if len(o.values) > 1}
    written |= {piece.strip() for t in written if "," in t for piece in t.split(",")}
    from specdoctor.playbooks.config_read import config_values

    for option in command.options():
        if catalog.canonical(option.name) == "--config" and option.values:
            written |= config_values(option.values[0])
    return written


def _config_keys_dropped(flag: str, value: str, written: set[str]) -> bool:
    """A model-config override that only sets config keys to null (`{"quantization_config": null}`), next
    to the user's own keys with the user's values: it takes from the config, it brings nothing in."""
    parsed = json_container(value)
    if flag != "--json-model-override-args" or not isinstance(parsed, dict):
        return False
    dropped = {k for k, v in parsed.items() if v is None and re.fullmatch(r"[a-z][a-z0-9_]{0,63}", k)}
    return bool(dropped) and _rest_is_the_users(parsed, dropped, written)


def _config_sizes(flag: str, value: str, written: set[str]) -> bool:
    """A model-config override that sets fields sizing the model's tensors (`vocab_size`) to whole numbers,
    next to the user's own keys: a number carries no text; a wrong one only fails to load."""
    from specdoctor.playbooks.weight_shapes import SHAPE_FIELDS

    parsed = json_container(value)
    if flag != "--json-model-override-args" or not isinstance(parsed, dict):
        return False
    sized = {k for k, v in parsed.items() if k in SHAPE_FIELDS and type(v) is int and 0 < v < 2**31}
    return bool(sized) and _rest_is_the_users(parsed, sized, written)


def _architectures_named(flag: str, value: str, written: set[str], catalog: FlagCatalog) -> bool:
    """A model-config override whose `architectures` are names SGLang registers (its models' EntryClass)
    and whose every other key is the user's own, with the user's value."""
    parsed = json_container(value)
    if flag != "--json-model-override-args" or not isinstance(parsed, dict):
        return False
    named = parsed.get("architectures")
    registered = registered_architectures(catalog.version)
    if not isinstance(named, list) or not named or not all(a in registered for a in named):
        return False
    return _rest_is_the_users(parsed, {"architectures"}, written)


def _rest_is_the_users(parsed: dict, besides: set[str], written: set[str]) -> bool:
    """Every key of an override but `besides` is one of the user's own JSON objects', with the user's value."""
    rest = {k: v for k, v in parsed.items() if k not in besides}
    theirs = [t for w in written if isinstance(t := json_container(w), dict)]
    return not rest or any(all(k in t and t[k] == v for k, v in rest.items()) for t in theirs)


def _respelled(value: str, written: set[str]) -> bool:
    """The value is one of the command's own, or a run of its words, with only separators changed
    (`gpt-oss:120b` → `gpt-oss-120b`, `org/model:branch` → `org/model`, `::1:29500` → `[::1]:29500`):
    nothing in it came from anywhere but the user."""
    words = [w for w in re.split(r"[-_.:/\[\]]", value) if w]
    return bool(words) and any(_run_of(words, [p for p in re.split(r"[-_.:/\[\]]", w) if p]) for w in written)


def _requoted(value: str, written: set[str]) -> bool:
    """JSON's spelling of a Python literal the user wrote (`{'a': True}` → `{"a": true}`, `"2048"` →
    2048): the same values, so nothing in it came from anywhere but the user."""
    parsed = json_container(value)
    return parsed is not None and any(
        (theirs := loose_literal(w)) == parsed or numbers_unquoted(theirs) == parsed for w in written
    )


def _renamed(value: str, written: set[str]) -> bool:
    """A JSON object of the user's with keys renamed from the OpenAI API's names to SGLang's (`max_tokens`
    → `max_new_tokens`) or left out: every value in it is still the user's."""
    parsed = json_container(value)
    if not isinstance(parsed, dict):
        return False
    for text in written:
        theirs = json_container(text)
        if isinstance(theirs, dict):
            renamed = {OPENAI_SAMPLING_NAMES.get(k, k): v for k, v in theirs.items()}
            if parsed != theirs and all(k in renamed and renamed[k] == v for k, v in parsed.items()):
                return True
    return False


def _keys_respelled(value: str, written: set[str], catalog: FlagCatalog) -> bool:
    """A JSON object of the user's with keys respelled as keys SGLang's checks quote (`name` →
    `lora_name`): every value is still the user's, every new key the engine's."""
    from specdoctor.playbooks.json_keys import engine_keys, respelled_keys

    parsed = json_container(value)
    if not isinstance(parsed, dict):
        return False
    known = engine_keys(catalog.version)
    for theirs in (t for w in written if isinstance(t := json_container(w), dict)):
        new = [k for k in parsed if k not in theirs]
        renamed = respelled_keys(theirs, new) if new and all(k in known for k in new) else {}
        if renamed and {renamed.get(k, k): v for k, v in theirs.items()} == parsed:
            return True
    return False


# Quotes and list separators pasted around a value (see flag_checks._pasted_punctuation).
_PASTED = "\u201c\u201d\u2018\u2019\u201e\u00ab\u00bb,;"


def _cached_revision(flag: str, value: str, command: LaunchCommand) -> bool:
    """A commit of the command's own model repo that this host's Hub cache holds complete."""
    from specdoctor.tools.hf_cache import cached, hub_cache

    if flag != "--revision":
        return False
    repo = next((o.values[0] for o in command.options() if o.name == "--model-path" and o.values), "")
    found = cached(hub_cache(command.env_dict()), repo) if "/" in repo else None
    return found is not None and value in found.complete


def _near_named_file(value: str, written: set[str]) -> bool:
    """A file that exists beside a path the user wrote, of the same kind, its name that name mistyped
    (`server.yaml` → `serve.yaml`): the user's own file, not a place a rule made up."""
    found = Path(value)
    if not found.is_absolute() or not found.is_file():
        return False
    return any(
        (w := Path(text)).parent == found.parent
        and w.suffix == found.suffix
        and SequenceMatcher(None, w.name, found.name).ratio() >= 0.8
        for text in written
        if text.startswith("/")
    )


def _run_of(part: list[str], whole: list[str]) -> bool:
    n = len(part)
    return any(whole[i : i + n] == part for i in range(len(whole) - n + 1))


def _borrowed_choices(flag: FlagInfo, catalog: FlagCatalog) -> tuple[str, ...]:
    """A free-text flag that picks the same kind of thing as a flag with choices takes those choices:
    `--speculative-draft-attention-backend` takes what `--attention-backend` lists."""
    words = flag.name[2:].split("-")
    for size in range(len(words) - 1, 1, -1):
        suffix = "-".join(words[-size:])
        same_kind = [
            c
            for f in catalog.flags
            if f.choices and f.name != flag.name and f.name.endswith("-" + suffix)
            for c in f.choices
        ]
        if same_kind:
            return tuple(dict.fromkeys(same_kind))
    return ()


def _number_problem(flag: FlagInfo, value: str) -> str | None:
    # A count SGLang reads with its suffixes (`16Ki`, `32k`) is a number too.
    readable = as_int(value) if flag.value_type == "human_readable_int" else None
    if readable is None and not _NUMBER.match(value):
        return f"{value!r} is not a number of {flag.name}'s type ({flag.value_type})"
    number = float(value) if readable is None else readable
    low, high = edit_policy().ranges.get(flag.name, (-_NUMBER_LIMIT, _NUMBER_LIMIT))
    if not low <= number <= high:
        return f"{flag.name} {value} is outside [{low:g}, {high:g}]"
    return None
