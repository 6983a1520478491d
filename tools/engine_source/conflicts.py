"""Conflicts between flags that SGLang's own argument checks declare, evaluated on a command before launch.

The bundled index holds every check of each release, but most read what a command cannot show (the
model's config, the platform, values ServerArgs derives) or sit behind an early return or a caller's
dispatch the index does not record: evaluated on a command, they fire on launches SGLang accepts. A few
are plain conflicts between settings a person writes, and those are kept here: a `raise`/`assert` of the
argument checks (not a model's own overrides), whose condition reads only ServerArgs fields compared with
literals, at least two of them, and whose message names each of them by its flag and no other flag
("The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive"). One is judged
only when the command sets every field it and its guards read; anything else is left to the engine.

    python -m specdoctor.tools.engine_source.conflicts      # rewrite the table from the bundled index
"""

from __future__ import annotations

import ast
import json
import operator
import re
import sys
from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.command import LaunchCommand
from specdoctor.tools.engine_source.declarations import default_flag
from specdoctor.tools.engine_source.index import SourceIndex, bundled_index, nearest_release
from specdoctor.tools.engine_source.suspects import written_value

DATA = Path(__file__).resolve().parent.parent / "data" / "engine-source" / "sglang-conflicts.json"
_ARGUMENT_FILES = re.compile(r"^srt/(?:server_args\.py|arg_groups/)")
_MODEL_SPECIFIC = re.compile(
    r"model_overrides/|deepseek|qwen|nemotron|iquest|mimo|llama|glm|kimi|gemma|minimax", re.I
)
_ROOTS = frozenset({"self", "cfg", "server_args", "args"})
_FLAG_IN_TEXT = re.compile(r"--[a-z][a-z0-9-]+")
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
}


class Conflict(BaseModel):
    """One argument check of SGLang that names the settings it rejects together."""

    model_config = ConfigDict(frozen=True)
    message: str = Field(description="The check's message template, as SGLang writes it.")
    kind: str = Field(description="`raise` (fails when its condition holds) or `assert` (when it does not).")
    condition: str
    guards: tuple[str, ...] = ()
    flags: dict[str, str] = Field(description="Each field the check reads → the flag that sets it.")
    where: str = Field(description="file:line (function) in the newest release that has it.")
    releases: tuple[str, ...] = Field(description="Every indexed release with this check.")


class Tripped(BaseModel):
    """A conflict the command runs into, in the release judged."""

    model_config = ConfigDict(frozen=True)
    conflict: Conflict
    release: str
    values: dict[str, str] = Field(description="The flags it reads that the command sets, as it sets them.")
    assumed: dict[str, str] = Field(
        default_factory=dict, description="The flags it reads that the command leaves off (`none`/`false`)."
    )

    def reading(self) -> dict[str, str]:
        """Every flag the check reads, as the launch would have it."""
        return {**self.assumed, **self.values}


# ---- deriving the table from the index ---------------------------------------------------------------


def derive(index: SourceIndex) -> dict:
    """The conflicts of every indexed release, and the releases indexed."""
    found: list[Conflict] = []
    for check, raw in enumerate(index.checks):
        places = index.occurrences(check)
        if places and (conflict := _as_conflict(index, check, raw, places)) is not None:
            found.append(conflict)
    found.sort(key=lambda c: (c.where, c.message))
    return {"releases": index.releases, "conflicts": [c.model_dump(mode="json") for c in found]}


def _as_conflict(index: SourceIndex, check: int, raw: dict, places: list) -> Conflict | None:
    if raw.get("kind") not in ("raise", "assert") or not _ARGUMENT_FILES.match(raw.get("file", "")):
        return None
    if _MODEL_SPECIFIC.search(f"{raw['file']} {raw.get('function', '')}"):
        return None
    tests = [raw.get("condition") or "", *raw.get("guards", ())]
    trees = [_parsed(t) for t in tests]
    if any(t is None or not _plain(t) for t in trees):
        return None
    read = [_fields(t) for t in trees if t is not None]
    if len(read[0]) < 2:
        return None
    newest = places[-1][0]
    dests = index.dests(newest)
    flags = {f: dests.get(f) or default_flag(f) for fields in read for f in fields}
    if not _names_exactly(raw.get("template", ""), [flags[f] for f in read[0]], set(flags.values())):
        return None
    return Conflict(
        message=raw["template"],
        kind=raw["kind"],
        condition=tests[0],
        guards=tuple(tests[1:]),
        flags=flags,
        where=f"{raw['file']}:{places[-1][1]} ({raw.get('function', '')})",
        releases=tuple(p[0] for p in places),
    )


def _parsed(text: str) -> ast.expr | None:
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError:
        return None


def _plain(tree: ast.expr) -> bool:
    """Only fields, literals, `and`/`or`/`not` and single comparisons: nothing a command cannot decide."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if not (isinstance(node.value, ast.Name) and node.value.id in _ROOTS):
                return False
        elif isinstance(node, ast.Name):
            if node.id not in _ROOTS:
                return False
        elif isinstance(node, ast.Compare):
            if len(node.ops) != 1:
                return False
        elif not isinstance(
            node,
            (
                ast.BoolOp,
                ast.boolop,
                ast.UnaryOp,
                ast.Not,
                ast.USub,
                ast.cmpop,
                ast.Constant,
                ast.Tuple,
                ast.List,
                ast.Set,
                ast.Load,
            ),
        ):
            return False
    return True


def _fields(tree: ast.expr) -> list[str]:
    seen = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
    return list(dict.fromkeys(seen))


def _names_exactly(template: str, needed: list[str], allowed: set[str]) -> bool:
    """The message names every flag of the condition (with or without its dashes) and no other flag."""
    text = template.lower()
    named = all(flag[2:] in text or flag[2:].replace("-", "_") in text for flag in needed)
    return named and all(f in allowed for f in _FLAG_IN_TEXT.findall(text))


# ---- judging a command -----------------------------------------------------------------------------


@cache
def _table() -> tuple[tuple[str, ...], tuple[Conflict, ...]]:
    raw = json.loads(DATA.read_text())
    return tuple(raw["releases"]), tuple(Conflict.model_validate(c) for c in raw["conflicts"])


def judged_release(version: str | None) -> str | None:
    """The indexed release whose checks judge `version`: itself, else the newest older one."""
    releases, _ = _table()
    return nearest_release(releases, version)


def tripped(spec: LaunchCommand, catalog: FlagCatalog) -> list[Tripped]:
    """The conflicts of the catalog's release that this command runs into."""
    release = judged_release(catalog.version)
    if release is None:
        return []
    _, conflicts = _table()
    written = {catalog.canonical(o.name) for o in spec.options()}
    found = []
    for conflict in conflicts:
        flags = set(conflict.flags.values())
        if release not in conflict.releases or not flags & written:
            continue
        values = {flag: _written(spec, catalog, flag) for flag in flags & written}
        unset = {flag: default_reading(catalog, flag) for flag in flags - written}
        if any(value not in ("none", "false") for value in unset.values()):
            continue  # a flag not given whose value SGLang may derive (a size, a mode): only the engine knows
        if fails(conflict, {**values, **unset}) is True:
            found.append(Tripped(conflict=conflict, release=release, values=values, assumed=unset))
    return found


def default_reading(catalog: FlagCatalog, flag: str) -> str | None:
    """A flag's default as a check reads it: `false` for a switch, `none` when unset, else its value;
    None when the catalog does not know it."""
    info = catalog.get(flag)
    if info is None:
        return None
    default = (info.default or "").strip("'\"")
    if info.nargs == 0:
        return "false" if default in ("False", "false", "") else None
    return "none" if default in ("None", "") else default


def fails(conflict: Conflict, values: dict[str, str]) -> bool | None:
    """Whether the check fails on these flag values (`true` for a switch given); None when undecidable."""
    by_field = {field: values.get(flag) for field, flag in conflict.flags.items()}
    try:
        if not all(bool(_value(_parsed(g), by_field)) for g in conflict.guards):
            return False
        holds = bool(_value(_parsed(conflict.condition), by_field))
    except _Undecidable:
        return None
    return holds if conflict.kind == "raise" else not holds


def _written(spec: LaunchCommand, catalog: FlagCatalog, flag: str) -> str:
    info = catalog.get(flag)
    return (written_value(spec, info, catalog) if info is not None else None) or ""


class _Undecidable(Exception):
    pass


def _value(node: ast.expr | None, fields: dict[str, str | None]) -> object:
    if isinstance(node, ast.BoolOp):
        values = [bool(_value(v, fields)) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not bool(_value(node.operand, fields))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _value(node.operand, fields)
        if isinstance(inner, (int, float)):
            return -inner
        raise _Undecidable
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [_value(e, fields) for e in node.elts]
    if isinstance(node, ast.Attribute):
        written = fields.get(node.attr)
        if written is None:
            raise _Undecidable
        return {"true": True, "false": False, "none": None}.get(written, written)
    if isinstance(node, ast.Compare):
        return _compare(node, fields)
    raise _Undecidable


def _compare(node: ast.Compare, fields: dict[str, str | None]) -> bool:
    op = node.ops[0]
    if isinstance(op, (ast.Is, ast.IsNot)):
        left, right = _value(node.left, fields), _value(node.comparators[0], fields)
        if right is not None and not isinstance(right, bool):
            raise _Undecidable
        same = left is right if left is None or isinstance(left, bool) else False
        return same if isinstance(op, ast.Is) else not same
    left, right = _value(node.left, fields), _value(node.comparators[0], fields)
    if isinstance(op, (ast.In, ast.NotIn)):
        if not isinstance(right, list):
            raise _Undecidable
        hit = any(_same(left, v) for v in right)
        return hit if isinstance(op, ast.In) else not hit
    if isinstance(op, (ast.Eq, ast.NotEq)):
        same = _same(left, right)
        return same if isinstance(op, ast.Eq) else not same
    a, b = _number(left), _number(right)
    if a is None or b is None:
        raise _Undecidable
    return _COMPARE[type(op)](a, b)


def _same(written: object, literal: object) -> bool:
    if isinstance(literal, bool) or isinstance(written, bool):
        return bool(written) == bool(literal)
    if isinstance(literal, (int, float)):
        return _number(written) == literal
    return written == literal


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value))
    except ValueError:
        return None


def main() -> int:
    table = derive(bundled_index())
    DATA.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(
        f"{len(table['conflicts'])} conflicts over {len(table['releases'])} releases → {DATA}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
