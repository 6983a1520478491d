"""A remedy read from an engine message, and the checks every one passes: the flag is in the catalog, a
value is one of its choices or a number of its type. Nothing free-form is ever taken from a message."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.command import RemoveFlag, RenameFlag, SetEnv, SetFlag
from specdoctor.tools.engine_source.suspects import flag_for_field
from specdoctor.tools.help_parser import FlagInfo

Action = Literal["set", "remove", "rename", "set_env", "lower", "raise"]
RemedyEdit = SetFlag | RemoveFlag | RenameFlag | SetEnv

NUMBER_TYPES: dict[str, type] = {"int": int, "human_readable_int": int, "float": float}
FALSE_WORDS = frozenset({"false", "0"})


class Remedy(BaseModel):
    """One thing the message says to do. `edit` is set when it is concrete and valid for the catalog."""

    model_config = ConfigDict(frozen=True)
    action: Action = Field(
        description="set | remove | rename | set_env, or a direction: lower | raise (the value is too high "
        "or too low)."
    )
    flag: str | None = Field(default=None, description="The catalog flag it acts on (a rename's new flag).")
    edit: RemedyEdit | None = Field(
        default=None,
        description="The validated edit; None for a direction or a value the message does not state. For a "
        "bound (`lower`/`raise` with an edit) it is the nearest value the stated bound allows.",
    )
    rule: str = Field(description="The kind of phrase: use, set-to, rename, requires, only, one-of, ...")
    phrase: str = Field(description="The words of the message it was read from.")


@dataclass(frozen=True)
class FlagReader:
    """Names in a message as catalog flags: exact spellings only (no prefixes, no guesses)."""

    catalog: FlagCatalog
    dests: Mapping[str, str]
    types: Mapping[str, str] = field(default_factory=dict)
    """ServerArgs field → `int`/`float` (`SourceIndex.types`): for flags the catalog has no type for."""

    def flag(self, token: str | None) -> FlagInfo | None:
        """`--page-size`, `page-size` or the field `page_size` → the flag, when the catalog has it."""
        if not token:
            return None
        token = token.lower()
        if token.startswith("--"):
            return self.catalog.get(token)
        if "-" in token:
            return self.catalog.get("--" + token)
        return flag_for_field(token, self.catalog, self.dests)

    def number_type(self, flag: FlagInfo) -> type | None:
        """int or float when the flag takes a number (from the catalog, else the field's annotation)."""
        if flag.value_type is not None:
            return NUMBER_TYPES.get(flag.value_type)
        fields = [f for f, name in self.dests.items() if name == flag.name] or [
            flag.name[2:].replace("-", "_")
        ]
        return NUMBER_TYPES.get(self.types.get(fields[0], ""))


def valid_value(flag: FlagInfo, text: str | None, kind: type | None = None) -> str | None:
    """The value as the catalog accepts it (one of the choices, or a number of the flag's type `kind`,
    default the catalog's), else None."""
    if text is None:
        return None
    text = text.strip("`'\" .,;:")
    if flag.choices:
        return {c.lower(): c for c in flag.choices}.get(text.lower())
    kind = kind or NUMBER_TYPES.get(flag.value_type or "")
    if kind is None:
        return None
    try:
        return str(kind(text))
    except ValueError:
        return None


def list_values(text: str) -> list[str]:
    """The items of `['a', 'b']`, `(a, b)`, `{a, b}`, `a, b or c`, `a/b`."""
    inner = text.strip().strip("[](){}")
    items = re.split(r",\s*|\s+or\s+|\s*/\s*", inner)
    return [i.strip("`'\" ") for i in items if i.strip("`'\" ")]


def set_remedy(
    reader: FlagReader, token: str | None, value: str | None, rule: str, phrase: str
) -> Remedy | None:
    """Set a flag: a switch on (off for a stated false), a valued flag to a valid stated value."""
    flag = reader.flag(token)
    if flag is None:
        return None
    if flag.nargs == 0:
        if value is not None and value.lower() in FALSE_WORDS:
            edit = SetFlag(flag=flag.negation) if flag.negation else RemoveFlag(flag=flag.name)
            return Remedy(action="remove", flag=flag.name, edit=edit, rule=rule, phrase=phrase)
        return Remedy(action="set", flag=flag.name, edit=SetFlag(flag=flag.name), rule=rule, phrase=phrase)
    if value is None and flag.nargs in ("*", "+") and "all" in (flag.choices or ()):
        value = "all"  # asked for a list without one: the choice that names every item
    chosen = valid_value(flag, value, reader.number_type(flag))
    edit = SetFlag(flag=flag.name, values=(chosen,)) if chosen is not None else None
    return Remedy(action="set", flag=flag.name, edit=edit, rule=rule, phrase=phrase)


def remove_remedy(reader: FlagReader, token: str | None, rule: str, phrase: str) -> Remedy | None:
    flag = reader.flag(token)
    if flag is None:
        return None
    return Remedy(action="remove", flag=flag.name, edit=RemoveFlag(flag=flag.name), rule=rule, phrase=phrase)


def direction_remedy(
    reader: FlagReader, token: str | None, down: bool, rule: str, phrase: str
) -> Remedy | None:
    flag = reader.flag(token)
    if flag is None or flag.nargs == 0:
        return None
    return Remedy(action="lower" if down else "raise", flag=flag.name, rule=rule, phrase=phrase)


def bound_remedy(
    reader: FlagReader, token: str | None, op: str, number: str, rule: str, phrase: str
) -> Remedy | None:
    """`--x must be <= 8` → `--x 8` (action `lower`); a strict bound moves by one for an integer flag."""
    flag = reader.flag(token)
    if flag is None or flag.nargs == 0:
        return None
    if op == "==":
        return set_remedy(reader, token, number, rule, phrase)
    down = "<" in op
    kind = reader.number_type(flag)
    try:
        bound = float(number)
    except ValueError:
        return None
    if kind is None or (kind is float and op in ("<", ">")):
        return direction_remedy(reader, token, down, rule, phrase)
    if op in ("<", ">"):
        bound += -1 if down else 1
    if kind is int and bound != int(bound):
        return None
    value = str(int(bound)) if kind is int else str(bound)
    edit = SetFlag(flag=flag.name, values=(value,))
    return Remedy(action="lower" if down else "raise", flag=flag.name, edit=edit, rule=rule, phrase=phrase)


def one_of_remedies(
    reader: FlagReader, token: str | None, items: str, rule: str, phrase: str
) -> Iterator[Remedy]:
    """One `set` per listed value the flag accepts, in the message's order."""
    flag = reader.flag(token)
    if flag is None:
        return
    for item in list_values(items):
        if (chosen := valid_value(flag, item, reader.number_type(flag))) is not None:
            edit = SetFlag(flag=flag.name, values=(chosen,))
            yield Remedy(action="set", flag=flag.name, edit=edit, rule=rule, phrase=phrase)


def env_remedy(name: str, value: str, phrase: str) -> Remedy:
    value = value.lower() if value.lower() in ("true", "false") else value
    return Remedy(action="set_env", edit=SetEnv(name=name, value=value), rule="env", phrase=phrase)
