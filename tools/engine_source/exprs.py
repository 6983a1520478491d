"""What an expression in the engine reads: ServerArgs fields, environment variables, and the literals
they are compared with. Pure `ast` work on source text; nothing is imported or evaluated."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from specdoctor.tools.engine_source.model import Constraint, Literal_

# Names that hold the server arguments in the engine's functions (hooks take `server_args` or `args` and
# read through `cfg = resolving_view(server_args)` / `view = resolved_view(server_args)`).
ARG_NAMES = frozenset({"server_args", "args", "cfg", "view", "sa", "_server_args"})
_ARG_CALLS = frozenset({"get_global_server_args", "resolving_view", "resolved_view", "get_server_args"})
_GLOBAL_DICTS = frozenset({"global_server_args_dict", "_global_server_args_dict"})
_ENV_CALL_SUFFIXES = ("env_var", "getenv", "get_env")
_COMPARE = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.In: "in",
    ast.NotIn: "not in",
}
_FLIP = {">": "<", "<": ">", ">=": "<=", "<=": ">=", "==": "==", "!=": "!="}
# `x.lower()`, `int(x)`: the same value for what a check compares.
_TRANSPARENT_CALLS = frozenset({"int", "float", "str", "bool"})
_TRANSPARENT_METHODS = frozenset({"lower", "upper", "strip"})


@dataclass
class Scope:
    """What is known where an expression sits: the fields ServerArgs has (empty: accept any field read
    through a server-args name), names that alias the server arguments, and constants in reach."""

    fields: frozenset[str] = frozenset()
    aliases: frozenset[str] = frozenset()
    constants: Mapping[str, tuple[Literal_, ...]] = field(default_factory=dict)
    params: frozenset[str] = frozenset()
    """The function's parameters named as a field (`speculative_algorithm`): the caller passes that field."""

    def is_field(self, name: str) -> bool:
        return not self.fields or name in self.fields


@dataclass(frozen=True)
class Read:
    name: str
    env: bool = False


def read_of(node: ast.expr, scope: Scope) -> Read | None:
    """The field or environment variable this expression is (seen through `int(x)`, `x.lower()`)."""
    if isinstance(node, ast.Call):
        if (env := _env_read(node)) is not None:
            return env
        func = node.func
        if isinstance(func, ast.Name) and func.id in _TRANSPARENT_CALLS and len(node.args) == 1:
            return read_of(node.args[0], scope)
        if isinstance(func, ast.Attribute) and func.attr in _TRANSPARENT_METHODS and not node.args:
            return read_of(func.value, scope)
        return None
    if isinstance(node, ast.Attribute):
        if _is_envs(node.value):
            return Read(node.attr, env=True)
        if node.attr == "value" and isinstance(node.value, ast.Attribute) and _is_envs(node.value.value):
            return Read(node.value.attr, env=True)
        if _is_args(node.value, scope) and scope.is_field(node.attr):
            return Read(node.attr)
        if isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in scope.fields:
            return Read(node.attr)
        return None
    if isinstance(node, ast.Name) and node.id in scope.params:
        return Read(node.id)
    if isinstance(node, ast.Subscript) and _is_global_dict(node.value):
        key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return Read(key.value)
    return None


def _is_envs(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "envs"


def _is_global_dict(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in _GLOBAL_DICTS


def _env_read(call: ast.Call) -> Read | None:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    first = call.args[0] if call.args else None
    key = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
    if key is None:
        return _envs_get(call)
    if name.endswith(_ENV_CALL_SUFFIXES):
        return Read(key, env=True)
    if name == "get" and isinstance(func, ast.Attribute) and ast.unparse(func.value) == "os.environ":
        return Read(key, env=True)
    if _is_global_dict(func.value if isinstance(func, ast.Attribute) else func) and name == "get":
        return Read(key)
    return None


def _envs_get(call: ast.Call) -> Read | None:
    """`envs.SGLANG_X.get()`, `envs.SGLANG_X.is_set()`"""
    func = call.func
    if (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Attribute)
        and _is_envs(func.value.value)
    ):
        return Read(func.value.attr, env=True)
    return None


def _is_args(node: ast.expr, scope: Scope) -> bool:
    if isinstance(node, ast.Name):
        return node.id in ARG_NAMES or node.id in scope.aliases
    if isinstance(node, ast.Attribute):
        return node.attr == "server_args"
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        return name in _ARG_CALLS
    return False


def is_args_expr(node: ast.expr, scope: Scope) -> bool:
    """Does this expression hold the server arguments (for alias detection: `cfg = resolving_view(sa)`)?"""
    return _is_args(node, scope)


def reads(node: ast.AST, scope: Scope) -> Iterator[Read]:
    """Every field and environment variable read anywhere in this expression."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.expr) and (r := read_of(sub, scope)) is not None:
            yield r


def constraints(test: ast.expr, scope: Scope, failing: bool) -> Iterator[Constraint]:
    """Literal comparisons in a condition, written as the state that trips the check.

    `failing` says whether the test being true trips it (`if test: raise`) or being false does
    (`assert test`, an `else:` branch)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        yield from constraints(test.operand, scope, not failing)
    elif isinstance(test, ast.BoolOp):
        for value in test.values:
            yield from constraints(value, scope, failing)
    elif isinstance(test, ast.Compare) and len(test.ops) == 1:
        if (c := _comparison(test, scope)) is not None:
            yield c if failing else c.allowed()
    elif (r := read_of(test, scope)) is not None:
        c = Constraint(field=r.name, op="truthy", env=r.env)
        yield c if failing else c.allowed()


def _comparison(test: ast.Compare, scope: Scope) -> Constraint | None:
    op_type = type(test.ops[0])
    left, right = test.left, test.comparators[0]
    if op_type in (ast.Is, ast.IsNot):
        r = read_of(left, scope)
        if r is None or not (isinstance(right, ast.Constant) and right.value is None):
            return None
        return Constraint(field=r.name, op="is None" if op_type is ast.Is else "is not None", env=r.env)
    op = _COMPARE.get(op_type)
    if op is None:
        return None
    r, other_side = read_of(left, scope), right
    if r is None and op in _FLIP:
        r, other_side, op = read_of(right, scope), left, _FLIP[op]
    if r is None:
        return None
    if (values := literals(other_side, scope)) is not None:
        return Constraint(field=r.name, op=op, values=values, env=r.env)
    if op in _FLIP and (o := read_of(other_side, scope)) is not None and not o.env:
        return Constraint(field=r.name, op=op, other=o.name, env=r.env)
    return None


def literals(node: ast.expr, scope: Scope) -> tuple[Literal_, ...] | None:
    """A constant, a tuple/list/set of constants, or a name bound to one; None otherwise."""
    if isinstance(node, ast.Constant) and _plain(node.value):
        return (node.value,)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        values = [literals(e, scope) for e in node.elts]
        if all(v is not None and len(v) == 1 for v in values):
            return tuple(v[0] for v in values if v)
        return None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 1:
        return (
            literals(node.args[0], scope) if node.func.id in ("frozenset", "set", "tuple", "list") else None
        )
    if isinstance(node, ast.Name):
        return scope.constants.get(node.id)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return scope.constants.get(node.attr)
    return None


def _plain(value: object) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def module_constants(tree: ast.Module) -> dict[str, tuple[Literal_, ...]]:
    """Names bound at module or class level to literals (`_PAGE_TREE_SPEC_BACKENDS = ("fa3", ...)`)."""
    found: dict[str, tuple[Literal_, ...]] = {}
    empty = Scope()
    bodies = [tree.body, *(n.body for n in tree.body if isinstance(n, ast.ClassDef))]
    for body in bodies:
        for stmt in body:
            target, value = _binding(stmt)
            values = literals(value, empty) if target is not None and value is not None else None
            if target is not None and values is not None:
                found[target] = values
    return found


def _binding(stmt: ast.stmt) -> tuple[str | None, ast.expr | None]:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id, stmt.value
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return stmt.target.id, stmt.value
    return None, None


def local_constants(func: ast.AST) -> dict[str, tuple[Literal_, ...]]:
    """Names a function binds to literals (`_PAGE_TREE_SPEC_BACKENDS = (...)` inside a handler)."""
    found: dict[str, tuple[Literal_, ...]] = {}
    for stmt in ast.walk(func):
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            target, value = _binding(stmt)
            if target is not None and value is not None and (values := literals(value, Scope())):
                found[target] = values
    return found
