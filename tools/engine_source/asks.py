"""The messages each SGLang release writes that name one of its flags, read from its whole `srt/` source.

The validation index covers where launches die; a request handler's refusal ("Please add `--is-embedding`
when launching the server") sits elsewhere (the tokenizer manager, the OpenAI serving classes). A log line
or an HTTP answer is data anyone can write, so a flag that changes what the server serves is proposed on
its word only when the engine's own source writes those words next to that flag: this table is where that
is checked when the engine is not installed here (`said.said_by_engine` reads an installed one).

Built with the validation index (`python -m specdoctor.tools.engine_source.build`); read as text, nothing
imported. Each entry: the statement's string literals joined (an f-string's fields as `{}`), its file and
line.
"""

from __future__ import annotations

import ast
import gzip
import json
import re
import zipfile
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path

from specdoctor.tools.engine_source.index import nearest_release, version_key

ASKS = Path(__file__).resolve().parent.parent / "data" / "engine-source" / "sglang-asks.json.gz"
FORMAT = 1
_FLAG = re.compile(r"--[a-z][a-z0-9]*(?:-[a-z0-9]+)+|--[a-z]{3,}")
# Statements whose text is a message; help texts of `add_argument` and docstrings are not messages.
_STATEMENTS = (ast.Raise, ast.Return, ast.Assign, ast.AnnAssign, ast.Expr)


def release_sources(wheel: Path) -> dict[str, str]:
    """Every `srt/` Python file of a release's wheel except its tests, path inside the package → text."""
    with zipfile.ZipFile(wheel) as zf:
        return {
            name[len("sglang/") :]: zf.read(name).decode("utf-8", errors="replace")
            for name in sorted(zf.namelist())
            if name.startswith("sglang/srt/") and name.endswith(".py") and "/test" not in name
        }


def tree_sources(package: Path) -> dict[str, str]:
    """The same from an sglang package folder."""
    return {
        rel: path.read_text(encoding="utf-8", errors="replace")
        for path in sorted((package / "srt").rglob("*.py"))
        if "/test" not in (rel := path.relative_to(package).as_posix())
    }


def messages(files: Mapping[str, str]) -> list[tuple[str, int, str]]:
    """(file, line, text) of every statement whose string literals name a flag."""
    out = []
    for rel, source in files.items():
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, _STATEMENTS) and not _declaration(node):
                text = " ".join(_strings(node))
                if _FLAG.search(text):
                    out.append((rel, node.lineno, text))
    return out


def _declaration(node: ast.stmt) -> bool:
    """A docstring or an `add_argument(..., help=...)`: what a flag is, not what to do about a failure."""
    value = getattr(node, "value", None)
    if isinstance(node, ast.Expr) and isinstance(value, ast.Constant):
        return True
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "add_argument"
        for n in ast.walk(node)
    )


def _strings(node: ast.AST) -> Iterator[str]:
    parts: list[tuple[int, int, str]] = []
    in_fstrings = {id(v) for n in ast.walk(node) if isinstance(n, ast.JoinedStr) for v in n.values}
    for n in ast.walk(node):
        if isinstance(n, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in n.values)
            parts.append((n.lineno, n.col_offset, str(text)))
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in in_fstrings:
            parts.append((n.lineno, n.col_offset, n.value))
    yield from (text for _, _, text in sorted(parts))


def build(releases: Mapping[str, Mapping[str, str]]) -> dict:
    """Every distinct message once (`texts`), and per release where each sits."""
    texts: list[str] = []
    ids: dict[str, int] = {}
    out: dict[str, list[list]] = {}
    for version in sorted(releases, key=version_key):
        rows = []
        for rel, line, text in messages(releases[version]):
            if text not in ids:
                ids[text] = len(texts)
                texts.append(text)
            rows.append([ids[text], rel, line])
        out[version] = rows
    return {"format": FORMAT, "texts": texts, "releases": out}


def write(table: dict, out: Path = ASKS) -> int:
    data = json.dumps(table, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    packed = gzip.compress(data, compresslevel=9, mtime=0)
    out.write_bytes(packed)
    return len(packed)


@cache
def _table() -> dict:
    try:
        raw = json.loads(gzip.decompress(ASKS.read_bytes()))
    except (OSError, ValueError):
        return {"texts": [], "releases": {}}  # without the table nothing is grounded: asks stay the person's
    return raw if raw.get("format") == FORMAT else {"texts": [], "releases": {}}


def names(text: str, flag: str) -> bool:
    return re.search(rf"{re.escape(flag)}(?![\w-])", text) is not None


def written_by(version: str | None, flag: str, message: str) -> tuple[str, str, int] | None:
    """(release, file, line) of the statement of the release nearest `version` that names `flag` and that
    the message holds (`said.covers`); None when the release writes no such message."""
    from specdoctor.tools.engine_source.said import covers

    table = _table()
    release = nearest_release(sorted(table["releases"], key=version_key), version or "99.0")
    if release is None:
        return None
    for index, rel, line in table["releases"][release]:
        text = table["texts"][index]
        if names(text, flag) and covers(text, message):
            return release, rel, line
    return None
