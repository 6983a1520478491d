"""What a release declares: its ServerArgs fields, the flag of each field whose flag is not simply
`--field-name`, and the constant choice lists its checks compare with. Read from source text."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field

from specdoctor.tools.engine_source.exprs import module_constants
from specdoctor.tools.engine_source.model import Literal_
from specdoctor.tools.engine_source.sources import DECLARING, matches


@dataclass
class Declarations:
    fields: frozenset[str] = frozenset()
    dests: dict[str, str] = field(default_factory=dict)
    """Field → canonical flag, only where the flag is not `--` + the field with `_` as `-`."""
    constants: dict[str, tuple[Literal_, ...]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    """Field → `int` or `float`, from its annotation (the bundled catalogs lack types for older flags)."""


def default_flag(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def declarations(trees: Mapping[str, ast.Module]) -> Declarations:
    """Fields from the `ServerArgs` dataclass (and 0.5.2x's `arg_groups/fields` namespaces), flag names
    from `add_argument(..., dest=...)` and `Arg(cli_name=...)`, constants from every file read."""
    fields: set[str] = set()
    types: dict[str, str] = {}
    dests: dict[str, str] = {}
    constants: dict[str, tuple[Literal_, ...]] = {}
    clashing: set[str] = set()
    for rel, tree in sorted(trees.items()):
        if matches(rel, DECLARING):
            found = _dataclass_fields(tree, rel)
            fields |= set(found)
            types |= {name: kind for name, kind in found.items() if kind is not None}
            dests |= _dests(tree)
        for name, values in module_constants(tree).items():
            if constants.setdefault(name, values) != values:
                clashing.add(name)
    for name in clashing:
        del constants[name]
    fields |= set(dests)
    renamed = {f: flag for f, flag in sorted(dests.items()) if flag != default_flag(f)}
    return Declarations(
        fields=frozenset(fields), dests=renamed, constants=constants, types=dict(sorted(types.items()))
    )


def _dataclass_fields(tree: ast.Module, rel: str) -> dict[str, str | None]:
    """Field name → `int`/`float` when its annotation says so (else None)."""
    every_class = rel.startswith("srt/arg_groups/fields/")
    found: dict[str, str | None] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and (every_class or node.name == "ServerArgs"):
            for stmt in node.body:
                named = isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                if named and not stmt.target.id.startswith("_"):  # type: ignore[attr-defined]
                    found[stmt.target.id] = _number_type(stmt.annotation)  # type: ignore[attr-defined]
    return found


def _number_type(annotation: ast.expr) -> str | None:
    """`int`, `Optional[float]`, `A[Optional[int], "help"]` → the number type; anything else → None."""
    node = annotation
    while isinstance(node, ast.Subscript):
        inner = node.slice
        node = inner.elts[0] if isinstance(inner, ast.Tuple) and inner.elts else inner
    if isinstance(node, ast.BinOp):  # `int | None`
        node = node.left
    name = node.id if isinstance(node, ast.Name) else None
    return name if name in ("int", "float") else None


def _dests(tree: ast.Module) -> dict[str, str]:
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if (flag := _keyword_in(node.annotation, "cli_name")) is not None:
                found[node.target.id] = flag
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            dest = _keyword(node, "dest")
            longs = [
                a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")
            ]
            if dest is not None and longs:
                found[dest] = longs[0]
    return found


def _keyword(call: ast.Call, name: str) -> str | None:
    for k in call.keywords:
        if k.arg == name and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str):
            return k.value.value
    return None


def _keyword_in(annotation: ast.expr, name: str) -> str | None:
    for node in ast.walk(annotation):
        if isinstance(node, ast.Call) and (value := _keyword(node, name)) is not None:
            return value
    return None
