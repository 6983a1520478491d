"""Message templates: an exception or log message as written in the source, with each interpolated
expression as a `{expr}` placeholder and literal braces doubled (`str.format` conventions)."""

from __future__ import annotations

import ast
import re
import string
from collections.abc import Callable, Sequence

MAX_TEMPLATE = 600
_PERCENT = re.compile(r"%(?:\([^)]*\))?[-+ #0]*(?:\d+|\*)?(?:\.\d+)?[sdifrxXeEgGcaou%]")

Resolve = Callable[[str], ast.expr | None]
"""Finds the string a local name was last bound to before the statement (`msg = f"..."; raise X(msg)`)."""


def _no_name(_: str) -> ast.expr | None:
    return None


def escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def placeholder(node: ast.expr) -> str:
    # Braces inside the expression would end the placeholder early.
    return "{" + ast.unparse(node).replace("{", "(").replace("}", ")") + "}"


def template_of(node: ast.expr | None, resolve: Resolve = _no_name, depth: int = 0) -> str:
    """The template of a message expression; `{expr}` where the value is not known from the source."""
    if node is None:
        return ""
    if depth > 4:
        return placeholder(node)
    if isinstance(node, ast.Constant):
        return escape(str(node.value)) if isinstance(node.value, str) else placeholder(node)
    if isinstance(node, ast.JoinedStr):
        return "".join(_joined_part(v, resolve, depth) for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return template_of(node.left, resolve, depth + 1) + template_of(node.right, resolve, depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _is_str(node.left):
        right = node.right
        args = list(right.elts) if isinstance(right, ast.Tuple) else [right]
        return percent(node.left.value, args)  # type: ignore[attr-defined]
    if isinstance(node, ast.Call) and _is_format_call(node):
        return _format_call(node)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and node.args:
        return placeholder(node.args[0])
    if isinstance(node, ast.Name) and (bound := resolve(node.id)) is not None:
        return template_of(bound, _no_name, depth + 1)
    return placeholder(node)


def _joined_part(value: ast.expr, resolve: Resolve, depth: int) -> str:
    if isinstance(value, ast.FormattedValue):
        inner = value.value
        plain = value.conversion == -1 and value.format_spec is None
        if plain and isinstance(inner, ast.Name) and (bound := resolve(inner.id)) is not None:
            return template_of(bound, _no_name, depth + 1)
        return placeholder(inner)
    return template_of(value, resolve, depth + 1)


def _is_str(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _is_format_call(node: ast.Call) -> bool:
    return isinstance(node.func, ast.Attribute) and node.func.attr == "format" and _is_str(node.func.value)


def _format_call(node: ast.Call) -> str:
    fmt: str = node.func.value.value  # type: ignore[attr-defined]
    keywords = {k.arg: k.value for k in node.keywords if k.arg}
    out, auto = [], 0
    try:
        parsed = list(string.Formatter().parse(fmt))
    except ValueError:
        return escape(fmt)
    for literal, name, _spec, _conv in parsed:
        out.append(escape(literal))
        if name is None:
            continue
        if name == "" or name.isdigit():
            index = auto if name == "" else int(name)
            auto += name == ""
            arg = node.args[index] if index < len(node.args) else None
        else:
            arg = keywords.get(name.split(".")[0].split("[")[0])
        out.append(placeholder(arg) if arg is not None else "{" + name + "}")
    return "".join(out)


def percent(fmt: str, args: Sequence[ast.expr]) -> str:
    """A `%`-format string (logging's convention) with its arguments as placeholders."""
    out, last, i = [], 0, 0
    for m in _PERCENT.finditer(fmt):
        out.append(escape(fmt[last : m.start()]))
        if m.group() == "%%":
            out.append("%")
        else:
            out.append(placeholder(args[i]) if i < len(args) else "{}")
            i += 1
        last = m.end()
    out.append(escape(fmt[last:]))
    return "".join(out)


def clip(template: str) -> str:
    """Long messages are cut at a piece boundary: their start is what identifies them."""
    if len(template) <= MAX_TEMPLATE:
        return template
    cut, i = 0, 0
    while i < len(template) and i <= MAX_TEMPLATE:
        cut = i
        if template[i : i + 2] in ("{{", "}}"):
            i += 2
        elif template[i] == "{":
            i = _closing(template, i) + 1
        else:
            i += 1
    return template[:cut]


def segments(template: str) -> list[tuple[str, bool]]:
    """The literal pieces of a template, each with whether a placeholder comes right before it.

    A template ending in a placeholder gets a final empty piece marked True."""
    pieces: list[tuple[str, bool]] = []
    literal, after_placeholder, i = [], False, 0
    while i < len(template):
        ch = template[i]
        if ch in "{}" and template[i : i + 2] in ("{{", "}}"):
            literal.append(ch)
            i += 2
        elif ch == "{":
            pieces.append(("".join(literal), after_placeholder))
            literal, after_placeholder = [], True
            i = _closing(template, i) + 1
        else:
            literal.append(ch)
            i += 1
    pieces.append(("".join(literal), after_placeholder))
    return [p for p in pieces if p[0] or p[1]]


def _closing(template: str, start: int) -> int:
    depth = 0
    for j in range(start, len(template)):
        depth += template[j] == "{"
        depth -= template[j] == "}"
        if depth == 0:
            return j
    return len(template) - 1


def literal_text(template: str) -> str:
    """The template with its placeholders removed."""
    return "".join(p for p, _ in segments(template))
