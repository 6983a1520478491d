"""Build the bundled validation index from the real source of each SGLang release.

    python -m specdoctor.tools.engine_source.build                    # the releases whose --help is bundled
    python -m specdoctor.tools.engine_source.build --versions 0.5.23 0.5.22 --out /tmp/index.json.gz
    python -m specdoctor.tools.engine_source.build --tree 0.5.24=/src/sglang/python/sglang

Wheels are fetched with `pip download sglang==X --no-deps` into a cache folder (kept between runs) and
read as zip files; a `--tree` is a source folder read in place. No engine file is imported or run. The
output is deterministic for the same inputs and the same Python (its `ast.unparse` writes conditions).
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from specdoctor.tools.dirs import cache_dir
from specdoctor.tools.engine_source import asks
from specdoctor.tools.engine_source.architectures import REGISTERING, entry_classes
from specdoctor.tools.engine_source.declarations import declarations
from specdoctor.tools.engine_source.extract import FileContext, extract_sites
from specdoctor.tools.engine_source.index import DATA, FORMAT, version_key
from specdoctor.tools.engine_source.model import Site
from specdoctor.tools.engine_source.resolutions import resolved_from
from specdoctor.tools.engine_source.sources import COVERED, covered, from_tree, from_wheel, matches

_PLACE = frozenset({"line", "end_line", "release", "source"})


@dataclass
class ReleaseBuild:
    sites: list[Site] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    fields: frozenset[str] = frozenset()
    dests: dict[str, str] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    architectures: list[str] = field(default_factory=list)
    resolved_from: dict[str, list[str]] = field(default_factory=dict)


def build_release(files: Mapping[str, str]) -> ReleaseBuild:
    """The checks of one release, from its files' text (path inside the sglang package → text)."""
    trees: dict[str, ast.Module] = {}
    skipped: dict[str, str] = {}
    for rel, text in sorted(files.items()):
        try:
            trees[rel] = ast.parse(text, filename=rel)
        except (SyntaxError, ValueError) as exc:
            skipped[rel] = f"Python {sys.version_info.major}.{sys.version_info.minor} cannot parse it: {exc}"
    decl = declarations(trees)
    out = ReleaseBuild(fields=decl.fields, dests=decl.dests, types=decl.types, skipped=skipped)
    out.architectures = entry_classes({r: t for r, t in trees.items() if matches(r, REGISTERING)})
    sources: dict[str, set[str]] = {}
    for rel in covered(trees):
        ctx = FileContext.of(trees[rel], files[rel], rel, decl.fields, decl.constants)
        out.sites += extract_sites(ctx)
        out.files.append(rel)
        for resolved, fields in resolved_from(ctx).items():
            sources.setdefault(resolved, set()).update(fields)
    out.resolved_from = {f: sorted(s) for f, s in sorted(sources.items())}
    return out


def build_index(releases: Mapping[str, Mapping[str, str]]) -> dict:
    """The index of several releases, each distinct check stored once."""
    checks: list[dict] = []
    ids: dict[str, int] = {}
    out: dict[str, dict] = {}
    every_field: set[str] = set()
    for version in sorted(releases, key=version_key):
        built = build_release(releases[version])
        refs = []
        for site in built.sites:
            content = site.model_dump(mode="json", exclude=_PLACE, exclude_defaults=True)
            key = json.dumps(content, sort_keys=True)
            if key not in ids:
                ids[key] = len(checks)
                checks.append(content)
            refs.append([ids[key], site.line, site.end_line - site.line])
        every_field |= built.fields
        out[version] = {
            "sites": refs,
            "files": built.files,
            "dests": built.dests,
            "types": built.types,
            "skipped": built.skipped,
            "architectures": built.architectures,
            "resolved_from": built.resolved_from,
        }
    return {
        "format": FORMAT,
        "built_by": "python -m specdoctor.tools.engine_source.build",
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "covered": list(COVERED),
        "fields": sorted(every_field),
        "checks": checks,
        "releases": out,
    }


def write_index(index: dict, out: Path) -> int:
    """Write gzip JSON byte-identical for identical input (no timestamp, no file name); returns its size."""
    data = json.dumps(index, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    out.parent.mkdir(parents=True, exist_ok=True)
    packed = gzip.compress(data, compresslevel=9, mtime=0)
    out.write_bytes(packed)
    return len(packed)


def wheel_for(version: str, wheels: Path) -> Path:
    """The release's wheel from the cache folder, downloaded with pip when it is not there yet."""
    found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    if not found:
        wheels.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "pip", "download", f"sglang=={version}", "--no-deps", "-d", str(wheels)]
        proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
        if proc.returncode != 0 or not found:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise SystemExit(f"cannot download sglang=={version} ({last}); is PyPI reachable?")
    return found[-1]


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    from specdoctor.tools.catalog_load import bundled_versions

    p = argparse.ArgumentParser(prog="python -m specdoctor.tools.engine_source.build", description=__doc__)
    p.add_argument("--versions", nargs="*", default=None, help="Releases (default: every bundled --help).")
    p.add_argument("--tree", action="append", default=[], metavar="VERSION=DIR", help="A source folder.")
    p.add_argument("--wheels", type=Path, default=cache_dir() / "sglang-wheels", help="Wheel cache folder.")
    p.add_argument("--out", type=Path, default=DATA, help=f"Index file (default {DATA}).")
    args = p.parse_args(argv)
    if args.versions is None:
        args.versions = [] if args.tree else bundled_versions()
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    releases: dict[str, dict[str, str]] = {}
    said: dict[str, dict[str, str]] = {}
    for version in args.versions:
        wheel = wheel_for(version, args.wheels)
        releases[version], said[version] = from_wheel(wheel), asks.release_sources(wheel)
    for spec in args.tree:
        version, _, folder = spec.partition("=")
        if not folder or not Path(folder).is_dir():
            raise SystemExit(f"--tree {spec}: give VERSION=DIR with DIR the sglang package folder")
        releases[version], said[version] = from_tree(Path(folder)), asks.tree_sources(Path(folder))
    index = build_index(releases)
    size = write_index(index, args.out)
    if args.out == DATA:
        table = asks.build(said)
        print(
            f"{len(table['texts'])} distinct messages naming a flag, {asks.write(table) / 1e6:.2f} MB → {asks.ASKS}"
        )
    for version in sorted(index["releases"], key=version_key):
        rel = index["releases"][version]
        print(f"sglang {version}: {len(rel['sites'])} sites in {len(rel['files'])} files", end="")
        print(f", {len(rel['skipped'])} unparsable" if rel["skipped"] else "")
    print(f"{len(index['checks'])} distinct checks, {size / 1e6:.2f} MB → {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
