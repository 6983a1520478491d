"""Which ServerArgs fields SGLang resolves from others, anywhere in its argument code: `declare_resolution(
server_args, ..., attn_dp_size=cfg.dp_size)` turns the old `--dp-size N --enable-dp-attention` into an
attention-DP width of N. A check that later reads `attn_dp_size` reads a field the command never set, yet
the command's `--dp-size` is where its value came from."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from specdoctor.tools.engine_source.exprs import Scope, is_args_expr, reads
from specdoctor.tools.engine_source.extract import FileContext


def resolved_from(ctx: FileContext) -> dict[str, set[str]]:
    """Field → the fields whose values the file's code resolves it from (not the conditions around it)."""
    found: dict[str, set[str]] = {}
    for func in ast.walk(ctx.tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        scope = ctx.scope(func)
        for field, value in _assignments(func, scope):
            sources = {r.name for r in reads(value, scope) if not r.env} - {field}
            if sources:
                found.setdefault(field, set()).update(sources)
    return found


def _assignments(func: ast.AST, scope: Scope) -> Iterator[tuple[str, ast.expr]]:
    """(field, value) of each `declare_resolution(..., field=value)` and `server_args.field = value`."""
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and _called(node) == "declare_resolution":
            yield from ((k.arg, k.value) for k in node.keywords if k.arg and scope.is_field(k.arg))
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if (
                isinstance(target, ast.Attribute)
                and is_args_expr(target.value, scope)
                and scope.is_field(target.attr)
            ):
                yield target.attr, node.value


def _called(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
