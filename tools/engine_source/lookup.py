"""The statement a traceback frame points at: read from the installed engine when there is one, else
from the line the traceback quotes, else from the bundled index. Source is read as text, never imported.
"""

from __future__ import annotations

import ast
import contextlib
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.engine_source.declarations import declarations
from specdoctor.tools.engine_source.extract import FileContext, Place, statement_site, statements
from specdoctor.tools.engine_source.index import SourceIndex, bundled_index, clean_version, version_key
from specdoctor.tools.engine_source.model import Frame, Site

DRIFT = 40
"""How far (in lines) a frame may sit from an indexed check of the same function and still be it."""


class Located(BaseModel):
    """A frame's statement, where it was read from, and whether the match is exact."""

    model_config = ConfigDict(frozen=True)
    site: Site
    how: str = Field(description="One line: where the statement was read and how it was matched.")
    exact: bool = Field(description="False when found by a nearby line, not the frame's own line.")
    releases: tuple[str, ...] = Field(
        default=(), description="Indexed releases with this check at this line (the version unknown)."
    )


def site_for_frame(
    frame: Frame,
    *,
    version: str | None = None,
    installed: Path | None = None,
    index: SourceIndex | None = None,
) -> Located | None:
    """The statement behind a traceback frame inside sglang, or None outside it or when nothing fits.

    `installed` is the engine's `sglang` package folder (site-packages or a checkout's `python/sglang`);
    `version` the engine's version when known (it picks the index's release, or the nearest older one)."""
    if frame.engine_file is None:
        return None
    version = clean_version(version)
    if installed is not None and (found := read_installed(installed, frame, version)) is not None:
        return found
    index = index or bundled_index()
    exact = _indexed_at_line(frame, version, index)
    if exact is not None:
        return exact
    if (quoted := site_from_quote(frame, version, index.fields)) is not None:
        return Located(site=quoted, how="parsed from the source line the traceback quotes", exact=True)
    return _indexed_nearby(frame, version, index)


# ---- the installed engine ----------------------------------------------------------------------------


def read_installed(package: Path, frame: Frame, version: str | None = None) -> Located | None:
    """The statement at the frame's line in the installed engine's file (None if the file is not there)."""
    rel = frame.engine_file
    path = package / rel if rel else None
    if path is None or not path.is_file():
        return None
    try:
        ctx = _parsed(str(path), path.stat().st_mtime, rel or "", _installed_fields(str(package)))
    except (OSError, SyntaxError, ValueError):
        return None
    found = statement_at(ctx, frame.line)
    if found is None:
        return None
    site = found.model_copy(update={"source": "installed", "release": clean_version(version)})
    return Located(site=site, how=f"read from the installed engine: {path}:{frame.line}", exact=True)


@lru_cache(maxsize=64)
def _parsed(path: str, _mtime: float, rel: str, fields: frozenset[str]) -> FileContext:
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    return FileContext.parse(text, rel, fields)


@lru_cache(maxsize=8)
def _installed_fields(package: str) -> frozenset[str]:
    """The installed release's ServerArgs fields (from `server_args.py` only: cheap), plus every field
    the index knows (0.5.2x declares most of them in `arg_groups/fields`)."""
    trees = {}
    path = Path(package) / "srt" / "server_args.py"
    with contextlib.suppress(OSError, SyntaxError, ValueError):
        trees["srt/server_args.py"] = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    return declarations(trees).fields | bundled_index().fields


def statement_at(ctx: FileContext, line: int) -> Site | None:
    """The innermost statement covering `line`, as a site (a check's own, else a plain statement)."""
    best: tuple[int, ast.stmt, Place] | None = None
    for stmt, place in statements(ctx):
        end = stmt.end_lineno or stmt.lineno
        if stmt.lineno <= line <= end and (best is None or end - stmt.lineno <= best[0]):
            best = (end - stmt.lineno, stmt, place)
    return statement_site(ctx, best[1], best[2]) if best else None


# ---- the traceback's own quoted line -------------------------------------------------------------------


def site_from_quote(
    frame: Frame, version: str | None = None, fields: frozenset[str] = frozenset()
) -> Site | None:
    """The quoted line as a site when it is one whole statement (`assert x, "..."`, a one-line raise);
    the conditions around it are not known from a single line."""
    if not frame.quoted or frame.engine_file is None:
        return None
    try:
        tree = ast.parse(frame.quoted)
    except (SyntaxError, ValueError):
        return None
    if len(tree.body) != 1 or hasattr(tree.body[0], "body"):
        return None
    ctx = FileContext.of(tree, frame.quoted, frame.engine_file, fields)
    site = statement_site(ctx, tree.body[0], Place(frame.function, None, ()))
    return site.model_copy(
        update={"line": frame.line, "end_line": frame.line, "source": "traceback", "release": version}
    )


# ---- the bundled index ------------------------------------------------------------------------------


def _same_line(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


def _preference(version: str | None):
    """Sort key for releases, best last: the newest not newer than the engine's version, else the oldest
    newer one; with the version unknown, the newest."""
    if version is None:
        return version_key
    want = version_key(version)

    def key(release: str) -> tuple:
        have = version_key(release)
        return (have <= want, have if have <= want else tuple(-x for x in have))

    return key


def _candidates(frame: Frame, version: str | None, index: SourceIndex) -> list[tuple[int, str, int, int]]:
    """(check, release, line, end_line) of the indexed checks in the frame's function: in the engine's
    release when the index has it, else in every release."""
    only = version if version in index.releases else None
    return [
        c
        for c in index.in_file(frame.engine_file or "", only)
        if index.checks[c[0]]["function"].rsplit(".", 1)[-1] == frame.function
    ]


def _indexed_at_line(frame: Frame, version: str | None, index: SourceIndex) -> Located | None:
    hits = [c for c in _candidates(frame, version, index) if c[2] <= frame.line <= c[3]]
    if frame.quoted:
        # A quote that disagrees with the indexed first line means another release (or a patched engine).
        hits = [c for c in hits if c[2] != frame.line or _same_line(_text(index, c), frame.quoted)]
    if not hits:
        return None
    prefer = _preference(version)
    check, release, _, _ = max(hits, key=lambda c: (c[2] == frame.line, prefer(c[1])))
    same = tuple(sorted({c[1] for c in hits if c[0] == check}, key=version_key))
    how = f"bundled index: sglang {release} {frame.engine_file}:{frame.line}"
    return Located(site=index.site(check, release), how=how, exact=True, releases=same)


def _indexed_nearby(frame: Frame, version: str | None, index: SourceIndex) -> Located | None:
    """A check of the same function a few lines away (releases move lines): with a quote, the one whose
    first line is the quote; without one, only when a single check is that close."""
    near = [c for c in _candidates(frame, version, index) if abs(c[2] - frame.line) <= DRIFT]
    if frame.quoted:
        near = [c for c in near if _same_line(_text(index, c), frame.quoted)]
    elif len({c[0] for c in near}) > 1:
        return None
    if not near:
        return None
    prefer = _preference(version)
    check, release, line, _ = min(near, key=lambda c: (abs(c[2] - frame.line), _reversed(prefer(c[1]))))
    how = (
        f"bundled index: sglang {release} {frame.engine_file}:{line}, the check in {frame.function} "
        f"nearest to line {frame.line}" + ("" if frame.quoted else " (the traceback quotes no line)")
    )
    return Located(site=index.site(check, release), how=how, exact=False)


def _text(index: SourceIndex, candidate: tuple[int, str, int, int]) -> str:
    return index.checks[candidate[0]].get("text", "")


def _reversed(key: tuple) -> tuple:
    return tuple(_reversed(k) if isinstance(k, tuple) else -k for k in key)
