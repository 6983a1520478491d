"""Flags whose value SGLang reads with `json.loads`: a JSON-typed flag, or a text flag whose default is a
JSON object (`--json-model-override-args '{}'`). A value written in Python's syntax (single quotes, True,
None) is the commonest way to get one wrong; its JSON spelling has the same content, so it is a respelling
of the user's own value, not a new one."""

from __future__ import annotations

import ast
import json
import re

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.command import RemoveFlag
from specdoctor.tools.help_parser import FlagInfo


def reads_json(flag: FlagInfo) -> bool:
    """argparse parses it as JSON, or it is one text value whose default is a JSON object (a list flag with
    an empty default takes words, not JSON)."""
    default = (flag.default or "").strip("'\"")
    one_value = flag.nargs in (None, "?")
    return flag.value_type == "json" or (flag.value_type in (None, "str") and one_value and default == "{}")


def is_json(value: str) -> bool:
    """`json.loads` takes it."""
    try:
        json.loads(value)
    except ValueError:
        return False
    return True


def as_json(value: str) -> str | None:
    """The JSON spelling of a Python literal dict or list, None when the value is not one."""
    try:
        parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(parsed, dict | list):
        return None
    try:
        return json.dumps(parsed)
    except (TypeError, ValueError):
        return None


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
        try:
            parsed = json.loads(value)
        except ValueError:
            continue
        if isinstance(parsed, dict):
            found.append((flag, tuple(parsed)))
    return found
