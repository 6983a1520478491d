"""What several verbs do the same way: read the command, pick the flag catalog, get GPU facts."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from specdoctor.agent.commands.options import command_words
from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.catalog_load import CatalogChoice, for_spec
from specdoctor.tools.command import LaunchCommand
from specdoctor.tools.edit_policy import Allowance
from specdoctor.tools.errors import UsageError
from specdoctor.tools.files import MiB, read_text
from specdoctor.tools.gpu import GpuReport

NVIDIA_SMI_MAX_BYTES = 16 * MiB
"""nvidia-smi prints kilobytes even on a full node."""


def read_spec(args: argparse.Namespace) -> LaunchCommand:
    return LaunchCommand.parse(command_words(args.command, getattr(args, "verb", None) or "check"))


def choose_catalog(spec: LaunchCommand, args: argparse.Namespace, launching: bool = False) -> CatalogChoice:
    """The flag catalog for the command. Only a verb that will launch the command anyway (`launching`), or
    a person asking for it (--live-catalog, --refresh-catalog), runs the command's python to read it."""
    catalog_file = Path(args.catalog) if getattr(args, "catalog", None) else None
    refresh = getattr(args, "refresh_catalog", False)
    return for_spec(
        spec,
        version=getattr(args, "sglang_version", None),
        catalog_file=catalog_file,
        refresh=refresh,
        live=launching or refresh or getattr(args, "live_catalog", False),
    )


def gpu_facts(args: argparse.Namespace, live: bool = True) -> GpuReport | None:
    """GPU facts from --gpus, --nvidia-smi FILE, or (when `live`) the nvidia-smi of this machine."""
    from specdoctor.tools import gpu

    if getattr(args, "gpus", None):
        report = gpu.parse_gpus_description(args.gpus)
        if report.status == "error":
            raise UsageError(f"--gpus: {report.message}")
        return report
    if getattr(args, "nvidia_smi", None):
        return read_nvidia_smi_file(Path(args.nvidia_smi))
    return gpu.inspect() if live else None


def read_nvidia_smi_file(path: Path) -> GpuReport:
    from specdoctor.tools import gpu

    text = read_text(path, "nvidia-smi output", NVIDIA_SMI_MAX_BYTES)
    if "# ---" in text:  # a recording with a header (tests/data/nvidia-smi format)
        text = text.split("# ---\n", 1)[1]
    if "|===" in text:
        return gpu.parse_table(text)
    report = gpu.parse_query_gpu_csv(text)
    if report.status == "error":
        failure = gpu.classify_failure(1, "", text)
        return failure if failure.status != "error" else report
    return report


def llm_planner(args: argparse.Namespace, host: bool = True):
    """The LLM planner the options and environment configure, or (None, notes saying why not)."""
    if getattr(args, "no_llm", False):
        return None, ("The LLM planner is off (--no-llm).",)
    try:
        from specdoctor.agent.llm import LLMConfig
        from specdoctor.agent.llm_planner import LLMPlanner
    except ImportError:
        return None, ()
    setup = LLMConfig.setup(
        base_url=getattr(args, "llm_base_url", None), model=getattr(args, "llm_model", None)
    )
    if setup.config is None:
        return None, (f"No LLM was asked: {setup.note.rstrip('.')}.",)
    return LLMPlanner(setup.config, host=host), ()


def _flag_named(option: str, written: str, catalog: FlagCatalog) -> str:
    """The canonical flag `--allow port` / `--pin port` names; a usage error when it names none."""
    resolved = catalog.resolve(written if written.startswith("--") else f"--{written}")
    if resolved.flag is None or resolved.status not in ("exact", "prefix"):
        raise UsageError(f"{option} {written}: not a flag of SGLang {catalog.version}")
    return resolved.flag.name


def pins(args: argparse.Namespace, catalog: FlagCatalog, defaults: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The flags no automatic change may touch: `--pin FLAG`, and the verb's `defaults` unless --no-pin."""
    pinned = [] if getattr(args, "no_pin", False) else list(defaults)
    pinned += [_flag_named("--pin", written, catalog) for written in getattr(args, "pin", None) or []]
    return tuple(dict.fromkeys(pinned))


def allowance(args: argparse.Namespace, catalog: FlagCatalog) -> Allowance:
    """What `--allow FLAG` and `--allow-env NAME` let unattended changes touch beyond tuning."""
    flags = {_flag_named("--allow", written, catalog) for written in getattr(args, "allow", None) or []}
    for name in getattr(args, "allow_env", None) or []:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise UsageError(f"--allow-env {name!r}: not an environment variable name")
    return Allowance(flags=frozenset(flags), env=frozenset(getattr(args, "allow_env", None) or []))
