"""Flags whose value SGLang reads with `json.loads`: a JSON-typed flag, or a text flag whose default is a
JSON object (`--json-model-override-args '{}'`). A value written in Python's syntax (single quotes, True,
None) is the commonest way to get one wrong; its JSON spelling has the same content, so it is a respelling
of the user's own value, not a new one."""

from __future__ import annotations

import ast
import json
import re

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


def python_literal(value: str) -> object | None:
    """The value as a Python literal (`{'a': True}`), None when it is not one."""
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


_PAIRS = re.compile(r"\s*[A-Za-z_][\w.-]*=[^=,{}\[\]]*(?:,\s*[A-Za-z_][\w.-]*=[^=,{}\[\]]*)*\s*")


def loose_literal(value: str) -> object | None:
    """The object or list the value means when written in Python's syntax (`{'a': True}`), as a YAML
    flow collection, the way JavaScript writes objects (`{enable_thinking: false}`), or as the command
    line's `key=value,key2=value2`; None otherwise."""
    parsed = python_literal(value)
    if parsed is None and _PAIRS.fullmatch(value):
        return _pairs(value)
    if parsed is not None or not value.strip().startswith(("{", "[")):
        return parsed
    import yaml

    try:
        loaded = yaml.safe_load(value)
    except yaml.YAMLError:
        return None
    return loaded if isinstance(loaded, dict | list) else None


def _pairs(value: str) -> dict[str, object]:
    import yaml

    found: dict[str, object] = {}
    for pair in value.split(","):
        key, _, raw = pair.partition("=")
        try:
            scalar = yaml.safe_load(raw.strip()) if raw.strip() else ""
        except yaml.YAMLError:
            scalar = raw.strip()
        found[key.strip()] = scalar if isinstance(scalar, str | int | float | bool) else raw.strip()
    return found


def json_container(value: str) -> dict | list | None:
    """The JSON object or array the value spells, None for anything else."""
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict | list) else None


def as_json(value: str) -> str | None:
    """The JSON spelling of a dict or list written loosely (Python's syntax, unquoted keys), None when the
    value is not one."""
    parsed = loose_literal(value)
    if not isinstance(parsed, dict | list):
        return None
    try:
        return json.dumps(parsed)
    except (TypeError, ValueError):
        return None


def numbers_unquoted(value: object) -> object:
    """The same JSON with every string that is a plain number written as that number (`"2048"` → 2048,
    `"4.0"` → 4.0), at any depth."""
    if isinstance(value, dict):
        return {k: numbers_unquoted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [numbers_unquoted(v) for v in value]
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    if isinstance(value, str) and re.fullmatch(
        r"-?\d+\.\d*(?:[eE][-+]?\d+)?|-?\d+[eE][-+]?\d+", value.strip()
    ):
        return float(value)
    return value
