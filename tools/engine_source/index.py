"""The bundled validation index: the checks of every covered SGLang release, read from its source.

One gzip JSON holds every distinct check once (`checks`) and, per release, where each sits
(`releases[v].sites`: `[check, line, end_line - line]`), the files read, the fields whose flag is not
`--field-name`, and the files Python could not parse. `build.py` writes it; nothing here needs the network.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from functools import cache, cached_property
from pathlib import Path

from specdoctor.tools.engine_source.model import Site

FORMAT = 1
DATA = Path(__file__).resolve().parent.parent / "data" / "engine-source" / "sglang-checks.json.gz"


_VERSION = re.compile(r"(?<![\w.])v?(\d+\.\d+(?:\.\d+)?(?:\.?post\d+)?)")


def clean_version(text: str | None) -> str | None:
    """The release number in a version as people write it (`0.3.1.post2 (docker ...)`, `v0.5.19.dev410+g1`,
    `lmsysorg/sglang:v0.4.6`) or None when it has none (`main @ b79e4b1e6`)."""
    m = _VERSION.search(text or "")
    return m.group(1) if m else None


def version_key(version: str) -> tuple[int, ...]:
    """`0.5.10` after `0.5.9`; `0.5.3.post1` after `0.5.3`."""
    parts = version.replace("post", ".").replace("rc", ".").split(".")
    return tuple(int(p) if p.isdigit() else 0 for p in parts)


def nearest_release(releases: list[str] | tuple[str, ...], version: str | None) -> str | None:
    """Of `releases` (oldest first), the one for `version`: itself, else the newest older one; None if the
    version is older than all or names none."""
    version = clean_version(version)
    if version is None:
        return None
    older = [r for r in releases if version_key(r) <= version_key(version)]
    return older[-1] if older else None


class EngineIndexError(RuntimeError):
    """The index file is missing or not one this version of specdoctor reads."""


class SourceIndex:
    """Checks by release; sites are built on demand (the file holds tens of thousands)."""

    def __init__(self, raw: dict) -> None:
        if raw.get("format") != FORMAT:
            raise EngineIndexError(f"engine source index format {raw.get('format')}, expected {FORMAT}")
        self._raw = raw
        self.checks: list[dict] = raw["checks"]
        self.fields: frozenset[str] = frozenset(raw.get("fields", ()))
        self.releases: list[str] = sorted(raw["releases"], key=version_key)

    @classmethod
    def load(cls, path: Path = DATA) -> SourceIndex:
        try:
            raw = json.loads(gzip.decompress(path.read_bytes()))
        except (OSError, ValueError) as exc:
            raise EngineIndexError(f"cannot read the engine source index {path}: {exc}") from None
        return cls(raw)

    # ---- releases ------------------------------------------------------------------------------
    def release(self, version: str | None) -> str | None:
        """The indexed release for a version: itself, else the newest older one; None if older than all."""
        return nearest_release(self.releases, version)

    def files(self, release: str) -> list[str]:
        return self._raw["releases"][release]["files"]

    def dests(self, release: str) -> dict[str, str]:
        """Fields whose flag is not `--field-name` in this release, e.g. `fp8_gemm_runner_backend`."""
        return self._raw["releases"][release].get("dests", {})

    def types(self, release: str) -> dict[str, str]:
        """Numeric fields of this release (`int`/`float`), read from their annotations."""
        return self._raw["releases"][release].get("types", {})

    def skipped(self, release: str) -> dict[str, str]:
        return self._raw["releases"][release].get("skipped", {})

    def architectures(self, release: str) -> frozenset[str]:
        """The architectures this release serves natively (its models' EntryClass); empty where not read."""
        return frozenset(self._raw["releases"][release].get("architectures", ()))

    def resolved_from(self, release: str) -> dict[str, list[str]]:
        """Fields SGLang's argument code resolves from others in this release (`attn_dp_size` ← `dp_size`)."""
        return self._raw["releases"][release].get("resolved_from", {})

    # ---- sites ---------------------------------------------------------------------------------
    @cached_property
    def _where(self) -> dict[int, list[tuple[str, int, int]]]:
        where: dict[int, list[tuple[str, int, int]]] = {}
        for release in self.releases:
            for check, line, span in self._raw["releases"][release]["sites"]:
                where.setdefault(check, []).append((release, line, line + span))
        return where

    def occurrences(self, check: int) -> list[tuple[str, int, int]]:
        """Every (release, line, end_line) where this check sits, oldest release first."""
        return self._where.get(check, [])

    def site(self, check: int, release: str | None = None) -> Site:
        """The check as it sits in `release` (default: the newest release that has it)."""
        places = self.occurrences(check)
        place = next((p for p in places if p[0] == release), places[-1])
        return Site.model_validate(
            {**self.checks[check], "release": place[0], "line": place[1], "end_line": place[2]}
        )

    @cache  # noqa: B019 - one index object lives for the process
    def sites(self, release: str) -> tuple[Site, ...]:
        """Every check of one release, in file and line order."""
        return tuple(self.site(check, release) for check, _, _ in self._raw["releases"][release]["sites"])

    @cached_property
    def _by_file(self) -> dict[str, list[int]]:
        by_file: dict[str, list[int]] = {}
        for check, raw in enumerate(self.checks):
            by_file.setdefault(raw["file"], []).append(check)
        return by_file

    def in_file(self, file: str, release: str | None = None) -> Iterator[tuple[int, str, int, int]]:
        """(check, release, line, end_line) of every check in `file`, in one release or all."""
        for check in self._by_file.get(file, ()):
            for place in self.occurrences(check):
                if release is None or place[0] == release:
                    yield (check, *place)


@cache
def bundled_index() -> SourceIndex:
    """The index that ships with specdoctor (read once per process)."""
    return SourceIndex.load()
