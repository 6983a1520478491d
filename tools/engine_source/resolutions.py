"""Which ServerArgs fields SGLang resolves from others, anywhere in its argument code: `declare_resolution(
server_args, ..., attn_dp_size=cfg.dp_size)` turns the old `--dp-size N --enable-dp-attention` into an
attention-DP width of N. A check that later reads `attn_dp_size` reads a field the command never set, yet
the command's `--dp-size` is where its value came from."""

from __future__ import annotations

import ast

from specdoctor.tools.engine_source.exprs import reads
from specdoctor.tools.engine_source.extract import FileContext, assignments


def resolved_from(ctx: FileContext) -> dict[str, set[str]]:
    """Field → the fields whose values the file's code resolves it from (not the conditions around it)."""
    found: dict[str, set[str]] = {}
    for func in ast.walk(ctx.tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        scope = ctx.scope(func)
        for field, value in assignments(func, scope):
            sources = {r.name for r in reads(value, scope) if not r.env} - {field}
            if sources:
                found.setdefault(field, set()).update(sources)
    return found
