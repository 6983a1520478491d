"""Where a release's source text comes from, and which of its files the index covers.

Files are read as text from the release's wheel (a zip) or from a source tree; nothing is imported.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from specdoctor.tools.engine_source import architectures

# Where launches die: argument parsing and validation, model config, the model runner and its CUDA graphs,
# scheduler and TP worker start-up (and the watchdog that kills a stuck one), the parallel layout,
# speculative workers, attention backend and quantization selection, model loading, the entrypoints, and
# the engine's shared helpers (package version checks, parallel groups).
COVERED: tuple[str, ...] = (
    "srt/server_args.py",
    "srt/server_args_config_parser.py",
    "srt/server.py",
    "srt/arg_groups/**/*.py",
    "srt/configs/*.py",
    "srt/model_executor/**/*.py",
    "srt/model_loader/loader.py",
    "srt/model_loader/utils.py",
    "srt/models/registry.py",
    "srt/managers/scheduler*.py",
    "srt/managers/scheduler_components/**/*.py",
    "srt/managers/tp_worker*.py",
    "srt/managers/data_parallel_controller.py",
    "srt/speculative/**/*.py",
    "srt/layers/attention/**/*backend*.py",
    "srt/layers/attention/attention_registry.py",
    "srt/layers/quantization/__init__.py",
    "srt/layers/moe/utils.py",
    "srt/entrypoints/*.py",
    "srt/utils.py",
    "srt/utils/common.py",
    "srt/hf_transformers_utils.py",
    "srt/utils/hf_transformers_utils.py",
    "srt/utils/hf_transformers/*.py",
    "srt/utils/numa_utils.py",
    "srt/utils/watchdog.py",
    "srt/runtime_context.py",
    "cli/*.py",
    "srt/distributed/parallel_state.py",
)
# Read for what they declare (ServerArgs fields, flag names, choice lists), not for their checks.
DECLARING: tuple[str, ...] = ("srt/server_args.py", "srt/arg_groups/**/*.py")
# Read for the architectures they register (EntryClass), not for their checks.
REGISTERING = architectures.REGISTERING


@cache
def _glob(pattern: str) -> re.Pattern[str]:
    """A path glob: `*` stays within one folder, `**/` spans any number of folders (none too)."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:[^/]+/)*")
            i += 3
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def matches(rel: str, patterns: tuple[str, ...]) -> bool:
    return any(_glob(p).match(rel) for p in patterns)


def wanted(rel: str) -> bool:
    return matches(rel, COVERED) or matches(rel, DECLARING) or matches(rel, REGISTERING)


def from_wheel(wheel: Path) -> dict[str, str]:
    """The covered files of a release's wheel, path inside the sglang package → text."""
    found: dict[str, str] = {}
    with zipfile.ZipFile(wheel) as zf:
        for name in sorted(zf.namelist()):
            if name.startswith("sglang/") and name.endswith(".py") and wanted(name[len("sglang/") :]):
                found[name[len("sglang/") :]] = zf.read(name).decode("utf-8", errors="replace")
    return found


def from_tree(package: Path) -> dict[str, str]:
    """The covered files of an sglang package folder (`.../site-packages/sglang` or a checkout's
    `python/sglang`)."""
    found: dict[str, str] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if wanted(rel):
            found[rel] = path.read_text(encoding="utf-8", errors="replace")
    return found


def covered(files: Mapping[str, str]) -> list[str]:
    return sorted(rel for rel in files if matches(rel, COVERED))
