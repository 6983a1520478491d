"""Whether an engine check's condition holds for given field values: arithmetic and comparisons on numbers
only (`cfg.tp_size % cfg.attn_dp_size == 0`), read with `ast` and computed here, never evaluated by
Python. Anything else (a call, a string, a field without a value) gives None: not known."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping

_ARITHMETIC: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Mod: operator.mod,
    ast.FloorDiv: operator.floordiv,
}
_COMPARE: dict[type, Callable[[int, int], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


def holds(condition: str, values: Mapping[str, int]) -> bool | None:
    """The condition's truth with each `x.field` / `field` read from `values`; None when not computable."""
    try:
        tree = ast.parse(condition, mode="eval")
    except SyntaxError:
        return None
    try:
        found = _value(tree.body, values)
    except (KeyError, TypeError, ZeroDivisionError, ValueError):
        return None
    return found if isinstance(found, bool) else None


def _value(node: ast.expr, values: Mapping[str, int]) -> int | bool:
    if isinstance(node, ast.Constant) and type(node.value) in (int, bool):
        return node.value
    if isinstance(node, ast.Attribute):
        return values[node.attr]
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        return _ARITHMETIC[type(node.op)](_number(node.left, values), _number(node.right, values))
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
        left, right = _number(node.left, values), _number(node.comparators[0], values)
        return _COMPARE[type(node.ops[0])](left, right)
    if isinstance(node, ast.BoolOp):
        parts = [_value(v, values) for v in node.values]
        return all(parts) if isinstance(node.op, ast.And) else any(parts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _value(node.operand, values)
    raise ValueError(ast.dump(node))


def _number(node: ast.expr, values: Mapping[str, int]) -> int:
    found = _value(node, values)
    if isinstance(found, bool):
        raise TypeError("a truth value where a number is compared")
    return found
