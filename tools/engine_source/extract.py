"""Read the checks out of one engine source file: every `raise`, `assert` and telling `logger` call,
with the conditions on its path, the fields those read and the message it gives.

Source is parsed as text with `ast`; no engine module is ever imported or executed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeGuard

from specdoctor.tools.engine_source.exprs import (
    Scope,
    constraints,
    is_args_expr,
    local_constants,
    module_constants,
    reads,
)
from specdoctor.tools.engine_source.model import Constraint, Kind, Literal_, Site
from specdoctor.tools.engine_source.sources import DECLARING, matches
from specdoctor.tools.engine_source.template import clip, percent, template_of

MAX_CONDITION = 400
_LOGGERS = frozenset({"logger", "log", "_logger", "LOGGER"})
_LOG_KINDS: dict[str, Kind] = {
    "error": "error",
    "critical": "error",
    "exception": "error",
    "warning": "warning",
    "warn": "warning",
}
# A warning is kept when it says the launch is not what the user asked for.
_TELLING_WARNING = re.compile(
    r"not supported|unsupported|not support|only support|incompatible|not compatible|deprecat|disabl|"
    r"ignor|overrid|fall(?:ing)? ?back|instead|please|must|cannot|can't|require|is set to|"
    r"will be set|adjust|force|automatically|reset|not (?:yet )?implemented|experimental|invalid",
    re.I,
)


@dataclass(frozen=True)
class Cond:
    """One condition on the way to a statement: an `if` test, an `else` (its test negated), a handler."""

    text: str
    node: ast.expr | None = None
    failing: bool = True


@dataclass
class Place:
    """Where a statement sits: its function's qualified name and node, and the conditions around it."""

    qualname: str
    func: ast.AST | None
    chain: tuple[Cond, ...]


@dataclass
class FileContext:
    """A parsed file and what is known about the release it belongs to."""

    rel: str
    lines: list[str]
    tree: ast.Module
    fields: frozenset[str] = frozenset()
    constants: Mapping[str, tuple[Literal_, ...]] = field(default_factory=dict)
    _scopes: dict[int, Scope] = field(default_factory=dict)

    @classmethod
    def parse(
        cls,
        text: str,
        rel: str,
        fields: frozenset[str] = frozenset(),
        constants: Mapping[str, tuple[Literal_, ...]] | None = None,
    ) -> FileContext:
        """Raises SyntaxError (or ValueError for a null byte) when the text is not Python."""
        return cls.of(ast.parse(text, filename=rel), text, rel, fields, constants)

    @classmethod
    def of(
        cls,
        tree: ast.Module,
        text: str,
        rel: str,
        fields: frozenset[str] = frozenset(),
        constants: Mapping[str, tuple[Literal_, ...]] | None = None,
    ) -> FileContext:
        merged = {**(constants or {}), **module_constants(tree)}
        return cls(rel=rel, lines=text.splitlines(), tree=tree, fields=fields, constants=merged)

    def scope(self, func: ast.AST | None) -> Scope:
        key = id(func)
        if key not in self._scopes:
            aliases: set[str] = set()
            local: dict[str, tuple[Literal_, ...]] = {}
            params = _field_params(func, self.fields) if matches(self.rel, DECLARING) else frozenset()
            if func is not None:
                base = Scope(fields=self.fields)
                for node in ast.walk(func):
                    if isinstance(node, ast.Assign) and len(node.targets) == 1:
                        target = node.targets[0]
                        if isinstance(target, ast.Name) and is_args_expr(node.value, base):
                            aliases.add(target.id)
                local = local_constants(func)
            self._scopes[key] = Scope(
                fields=self.fields,
                aliases=frozenset(aliases),
                constants={**self.constants, **local},
                params=params,
            )
        return self._scopes[key]

    def first_line(self, stmt: ast.stmt) -> str:
        return self.lines[stmt.lineno - 1].strip() if stmt.lineno <= len(self.lines) else ""


def _field_params(func: ast.AST | None, fields: frozenset[str]) -> frozenset[str]:
    # Only in the argument code, whose helpers take ServerArgs fields by name (elsewhere a `load_format`
    # parameter is the loader's own), and only against a known field list.
    if not fields or not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
        return frozenset()
    args = func.args
    names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    return frozenset(names & fields)


def statements(ctx: FileContext) -> Iterator[tuple[ast.stmt, Place]]:
    """Every statement of the file (compound ones too), with where it sits."""
    yield from _visit(ctx.tree.body, Place("<module>", None, ()))


def _visit(body: list[ast.stmt], place: Place) -> Iterator[tuple[ast.stmt, Place]]:
    for stmt in body:
        yield stmt, place
        yield from _children(stmt, place)
        if _returns_early(stmt):
            # `if kv_cache_dtype not in (...): return` guards the rest of the function as an `if` around it.
            test = ast.unparse(stmt.test)
            place = Place(place.qualname, place.func, (*place.chain, Cond(f"not ({test})", stmt.test, False)))


def _returns_early(stmt: ast.stmt) -> TypeGuard[ast.If]:
    return isinstance(stmt, ast.If) and not stmt.orelse and isinstance(stmt.body[-1], ast.Return)


def _children(stmt: ast.stmt, place: Place) -> Iterator[tuple[ast.stmt, Place]]:
    def within(*extra: Cond) -> Place:
        return Place(place.qualname, place.func, place.chain + extra)

    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        outer = "" if place.qualname == "<module>" else place.qualname + "."
        func = stmt if not isinstance(stmt, ast.ClassDef) else None
        yield from _visit(stmt.body, Place(outer + stmt.name, func, ()))
    elif isinstance(stmt, ast.If):
        test = ast.unparse(stmt.test)
        yield from _visit(stmt.body, within(Cond(test, stmt.test, True)))
        yield from _visit(stmt.orelse, within(Cond(f"not ({test})", stmt.test, False)))
    elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
        yield from _visit(stmt.body, place)  # type: ignore[attr-defined]
        for handler in stmt.handlers:  # type: ignore[attr-defined]
            caught = ast.unparse(handler.type) if handler.type is not None else "BaseException"
            yield from _visit(handler.body, within(Cond(f"except {caught}")))
        yield from _visit(stmt.orelse + stmt.finalbody, place)  # type: ignore[attr-defined]
    elif isinstance(stmt, ast.Match):
        for case in stmt.cases:
            yield from _visit(case.body, within(Cond(f"case {ast.unparse(case.pattern)}")))
    elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
        yield from _visit(stmt.body, place)
        yield from _visit(getattr(stmt, "orelse", []), place)


# ---- sites ----------------------------------------------------------------------------------------


def extract_sites(ctx: FileContext) -> list[Site]:
    """Every raise, assert and telling logger.error/warning of the file, in source order."""
    found = []
    for stmt, place in statements(ctx):
        site = check_site(ctx, stmt, place)
        if site is not None and (site.kind != "warning" or _TELLING_WARNING.search(site.template)):
            found.append(site)
    return found


def check_site(ctx: FileContext, stmt: ast.stmt, place: Place) -> Site | None:
    """The site of a raise, an assert or a logger.error/warning call; None for any other statement."""
    if isinstance(stmt, ast.Raise) and stmt.exc is not None:
        exc, message = _raised(stmt.exc)
        return _site(ctx, stmt, place, "raise", exc, _template(ctx, place, stmt, message), None)
    if isinstance(stmt, ast.Assert):
        template = _template(ctx, place, stmt, stmt.msg)
        return _site(ctx, stmt, place, "assert", "AssertionError", template, stmt.test)
    if isinstance(stmt, ast.Expr) and (log := _log_call(stmt.value)) is not None:
        kind, call = log
        first = call.args[0] if call.args else None
        if isinstance(first, ast.Constant) and isinstance(first.value, str) and len(call.args) > 1:
            template = percent(first.value, call.args[1:])
        else:
            template = _template(ctx, place, stmt, first)
        return _site(ctx, stmt, place, kind, None, template, None)
    return None


def statement_site(ctx: FileContext, stmt: ast.stmt, place: Place) -> Site:
    """Any statement as a site: a check's own site, else the statement with the conditions around it."""
    if (site := check_site(ctx, stmt, place)) is not None:
        return site
    return _site(ctx, stmt, place, "statement", None, "", None)


def _raised(exc: ast.expr) -> tuple[str, ast.expr | None]:
    if isinstance(exc, ast.Call):
        message = exc.args[0] if exc.args else next((k.value for k in exc.keywords if k.arg), None)
        return _name(exc.func), message
    return _name(exc), None


def _name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else ast.unparse(node)


def _log_call(node: ast.expr) -> tuple[Kind, ast.Call] | None:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    receiver, kind = node.func.value, _LOG_KINDS.get(node.func.attr)
    if kind is None:
        return None
    name = receiver.id if isinstance(receiver, ast.Name) else getattr(receiver, "attr", "")
    return (kind, node) if name in _LOGGERS else None


def _template(ctx: FileContext, place: Place, stmt: ast.stmt, message: ast.expr | None) -> str:
    def resolve(name: str) -> ast.expr | None:
        if (local := _bound_before(place.func, name, stmt.lineno)) is not None:
            return local
        # A message kept in a constant (`CUDA_GRAPH_CAPTURE_FAILED_MSG`), in this file or the release.
        known = ctx.constants.get(name) if name.isupper() else None
        return ast.Constant(known[0]) if known and len(known) == 1 and isinstance(known[0], str) else None

    return clip(template_of(message, resolve))


def _bound_before(func: ast.AST | None, name: str, line: int) -> ast.expr | None:
    """The string expression `name` holds at `line`: its last assignment plus any `+=` after it."""
    if func is None:
        return None
    parts: list[tuple[int, bool, ast.expr]] = []
    for node in ast.walk(func):
        if getattr(node, "lineno", line) >= line:
            continue
        if isinstance(node, ast.Assign) and any(_is_name(t, name) for t in node.targets):
            parts.append((node.lineno, False, node.value))
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and _is_name(node.target, name):
            parts.append((node.lineno, True, node.value))
    parts.sort(key=lambda p: p[0])
    start = max((i for i, p in enumerate(parts) if not p[1]), default=None)
    if start is None:
        return None
    value = parts[start][2]
    for _, _, more in parts[start + 1 :]:
        value = ast.BinOp(left=value, op=ast.Add(), right=more)
    return value


def _is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _site(
    ctx: FileContext,
    stmt: ast.stmt,
    place: Place,
    kind: Kind,
    exception: str | None,
    template: str,
    asserted: ast.expr | None,
) -> Site:
    scope = ctx.scope(place.func)
    chain = place.chain
    if asserted is not None:
        own, guards = Cond(ast.unparse(asserted), asserted, False), chain
    else:
        own, guards = (chain[-1], chain[:-1]) if chain else (None, ())
    main_nodes: list[ast.AST] = [n for n in (own.node if own else None, _message_node(stmt)) if n is not None]
    main = {r for n in main_nodes for r in reads(n, scope)}
    outer = {r for g in guards if g.node is not None for r in reads(g.node, scope)}
    found: list[Constraint] = []
    if own is not None and own.node is not None:
        found += constraints(own.node, scope, own.failing)
    for g in guards:
        if g.node is not None:
            found += (c.model_copy(update={"guard": True}) for c in constraints(g.node, scope, g.failing))
    return Site(
        file=ctx.rel,
        line=stmt.lineno,
        end_line=stmt.end_lineno or stmt.lineno,
        function=place.qualname,
        kind=kind,
        exception=exception,
        template=template,
        condition=_cut(own.text) if own else None,
        guards=tuple(_cut(g.text) for g in guards),
        fields=tuple(sorted({r.name for r in main if not r.env})),
        guard_fields=tuple(sorted({r.name for r in outer if not r.env} - {r.name for r in main})),
        envs=tuple(sorted({r.name for r in main | outer if r.env})),
        constraints=tuple(dict.fromkeys(found)),
        brought_in=_brought_in(place.func, scope, stmt.lineno, {r.name for r in main | outer if not r.env}),
        text=ctx.first_line(stmt),
    )


def _brought_in(func: ast.AST | None, scope: Scope, line: int, read: set[str]) -> tuple[str, ...]:
    """Fields the check reads that the function sets before `line` under a condition on other fields:
    SGLang turning a setting on because of another (`if cfg.enable_unified_memory:
    declare_resolution(..., enable_page_major_kv_layout=True)`)."""
    if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
        return ()
    found: list[str] = []

    def visit(body: list[ast.stmt], causes: frozenset[str]) -> None:
        for stmt in body:
            if stmt.lineno >= line:
                continue
            if isinstance(stmt, ast.If):
                more = causes | {r.name for r in reads(stmt.test, scope) if not r.env}
                visit(stmt.body, more)
                visit(stmt.orelse, more)
            elif causes:
                found.extend(
                    f"{f}={c}"
                    for f in _set_fields(stmt, scope)
                    if f in read
                    for c in sorted(causes)
                    if c != f
                )

    visit(func.body, frozenset())
    return tuple(dict.fromkeys(found))


def _set_fields(stmt: ast.stmt, scope: Scope) -> Iterator[str]:
    return (field for field, _ in assignments(stmt, scope))


def assignments(node: ast.AST, scope: Scope) -> Iterator[tuple[str, ast.expr]]:
    """(field, value) of each `declare_resolution(..., field=value)` and `server_args.field = value` in
    the code under `node`."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and _name(sub.func) == "declare_resolution":
            yield from ((k.arg, k.value) for k in sub.keywords if k.arg and scope.is_field(k.arg))
        elif isinstance(sub, ast.Assign):
            for target in sub.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and is_args_expr(target.value, scope)
                    and scope.is_field(target.attr)
                ):
                    yield target.attr, sub.value


def _message_node(stmt: ast.stmt) -> ast.AST | None:
    """What the statement itself reads: a check's message; a plain statement whole; a compound one's test."""
    if isinstance(stmt, ast.Raise):
        return stmt.exc
    if isinstance(stmt, ast.Assert):
        return stmt.msg
    if hasattr(stmt, "body"):
        return getattr(stmt, "test", None)
    return stmt


def _cut(text: str) -> str:
    return text if len(text) <= MAX_CONDITION else text[: MAX_CONDITION - 1] + "…"
