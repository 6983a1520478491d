"""What GPUs this machine has: probed live (NVML, else nvidia-smi) or read from a user's description.

Every outcome is a `GpuReport`; a missing driver, a wedged GPU or an unreadable description is a status
with a one-line message, never an exception. Nothing is cached: each `inspect()` asks again.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

from specdoctor.tools.gpu_parse import (
    INSPECT_APP_FIELDS,
    INSPECT_GPU_FIELDS,
    Gpu,
    GpuProcess,
    GpuReport,
    Source,
    Status,
    build_report,
    classify_failure,
    infer_compute_capability,
    parse_query_compute_apps_csv,
    parse_query_gpu_csv,
    parse_table,
    parse_version,
)
from specdoctor.tools.reaper import read_proc

__all__ = [
    "INSPECT_APP_FIELDS",
    "INSPECT_GPU_FIELDS",
    "Gpu",
    "GpuProcess",
    "GpuReport",
    "Runner",
    "Source",
    "Status",
    "build_report",
    "classify_failure",
    "infer_compute_capability",
    "inspect",
    "known_memory_mib",
    "parse_gpus_description",
    "parse_query_compute_apps_csv",
    "parse_query_gpu_csv",
    "parse_table",
    "parse_version",
    "read_nvml",
]

Runner = Callable[[Sequence[str]], tuple[int, str, str]]
"""Runs an argv and returns (returncode, stdout, stderr); may raise FileNotFoundError or TimeoutExpired."""

_MIB = 1024 * 1024
_TIMEOUT_CODE = 10  # NVML_ERROR_TIMEOUT: lets classify_failure word a hung nvidia-smi


# -- user descriptions -----------------------------------------------------------------------------

# (product pattern, nominal GB it is sold as, MiB nvidia-smi reports) from recorded nvidia-smi output.
_KNOWN_TOTALS: tuple[tuple[re.Pattern[str], tuple[int, ...], int], ...] = tuple(
    (re.compile(pattern, re.I), sizes, mib)
    for pattern, sizes, mib in (
        (r"\bH200\b", (141,), 143771),
        (r"\bH100\b", (80,), 81559),
        (r"\bH20\b", (96,), 97871),
        (r"\bB200\b", (180, 192), 183359),
        (r"\bA100\b", (80,), 81920),
        (r"\bA100\b", (40,), 40960),
        (r"\bL40S\b", (48,), 46068),
        (r"\bL4\b", (24,), 23034),
        (r"\bA10G\b", (24,), 23028),
        (r"\bT4\b", (16,), 15360),
        (r"\bRTX\s*4090\b", (24,), 24564),
        (r"\bRTX\s*4080\s*SUPER\b", (16,), 16376),
        (r"\bRTX\s*2080\s*SUPER\b", (8,), 8192),
    )
)
_COUNT_FIRST = re.compile(r"^(\d+)\s*[x×*]\s*(.*)$", re.I)  # "8x H100", "2 x A100"
_COUNT_WORD = re.compile(r"^(\d+)\s+(.*)$")  # "8 GPUs", "4 H200"
_COUNT_LAST = re.compile(r"^(.*?)\s+[x×*]\s*(\d+)$", re.I)  # "H100 x8"
_NOMINAL_GB = re.compile(r"(\d+(?:\.\d+)?)\s*(?:GB|GiB|G)\b", re.I)
_GENERIC_WORDS = re.compile(r"\s*\b(?:GPUs?|cards?|devices?|accelerators?)\s*$", re.I)
_ACCELERATOR = re.compile(
    r"\b(?:GPUs?|NVIDIA|AMD|Instinct|MI\d{3}\w*|Radeon|Blackwell|Hopper|Ampere)\b", re.I
)
_MAX_DESCRIBED = 4096


def known_memory_mib(name: str, nominal_gb: float | None = None) -> int | None:
    """MiB nvidia-smi reports for a product, from recorded totals; else the nominal size, else None."""
    matches = [(sizes, mib) for pattern, sizes, mib in _KNOWN_TOTALS if pattern.search(name)]
    if nominal_gb is not None:
        exact = [mib for sizes, mib in matches if round(nominal_gb) in sizes]
        return exact[0] if exact else round(nominal_gb * 1024)
    return matches[0][1] if len(matches) == 1 else None


def _count_and_model(head: str) -> tuple[int | None, str]:
    if match := _COUNT_FIRST.match(head) or _COUNT_WORD.match(head):
        return int(match.group(1)), match.group(2)
    if match := _COUNT_LAST.match(head):
        return int(match.group(2)), match.group(1)
    return None, head


_NO_GPU = re.compile(r"(?:none|no gpus?|cpu(?:[- ]only)?(?: host| machine| server)?)$", re.I)
"""A description that says the host has no GPU (`none`, `CPU host`): the launch runs on the CPU or fails for it."""


def parse_gpus_description(text: str) -> GpuReport:
    """`8x H100 80GB`, `2 x A100-SXM4-80GB`, `8 GPUs (model not stated)` -> a report with source "described".

    Only the first clause counts: remarks in parentheses or after a comma (`(node), TP=2`) are context.
    """
    first_clause = re.split(r"[,;]", text, maxsplit=1)[0]
    head = re.split(r"\(", first_clause, maxsplit=1)[0].strip()
    if _NO_GPU.match(head):
        return GpuReport(status="no_gpu", message="no GPU on this host (as described)", source="described")
    count, model = _count_and_model(head)
    model = " ".join(_GENERIC_WORDS.sub("", model).split())
    recognised = infer_compute_capability(model) or known_memory_mib(model) or _ACCELERATOR.search(head)
    if count is None and recognised:
        count = 1
    if not count or count > _MAX_DESCRIBED or (not model and not _ACCELERATOR.search(head)):
        return GpuReport(
            status="error",
            message=f"could not read a GPU count and model from {text.strip()!r}: write it like '8x H100 80GB'",
        )
    nominal = _NOMINAL_GB.search(first_clause)
    gpu = Gpu(
        index=0,
        name=model or "unknown GPU",
        memory_total_mib=known_memory_mib(model, float(nominal.group(1)) if nominal else None),
        compute_capability=infer_compute_capability(model),
    )
    report = build_report(
        [gpu.model_copy(update={"index": i}) for i in range(count)],
        driver_version=None,
        cuda_version=None,
        source="described",
    )
    return report.model_copy(update={"message": f"{report.message} (as described, not measured)"})


# -- NVML -------------------------------------------------------------------------------------------


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _optional(nvml: Any, function: str, *args: Any) -> Any:
    """`nvml.<function>(*args)`, or None where this GPU, driver or binding version lacks it."""
    call = getattr(nvml, function, None)
    try:
        return call(*args) if call else None
    except nvml.NVMLError:
        return None


def _nvml_memory(nvml: Any, handle: Any) -> Any:
    # v2 reports `used` without the driver's reserve, as nvidia-smi does; older drivers only have v1.
    with contextlib.suppress(nvml.NVMLError, AttributeError, TypeError):
        return nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
    return nvml.nvmlDeviceGetMemoryInfo(handle)


def _nvml_gpu(nvml: Any, index: int, handle: Any) -> Gpu:
    name = _text(nvml.nvmlDeviceGetName(handle))
    memory = _nvml_memory(nvml, handle)
    utilization = _optional(nvml, "nvmlDeviceGetUtilizationRates", handle)
    cc = _optional(nvml, "nvmlDeviceGetCudaComputeCapability", handle)
    mig_mode = _optional(nvml, "nvmlDeviceGetMigMode", handle)
    mig_enabled = bool(mig_mode) and mig_mode[0] == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)
    mig_devices = None
    if mig_enabled:
        slots = range(_optional(nvml, "nvmlDeviceGetMaxMigDeviceCount", handle) or 0)
        mig_devices = sum(
            _optional(nvml, "nvmlDeviceGetMigDeviceHandleByIndex", handle, slot) is not None for slot in slots
        )
    return Gpu(
        index=index,
        name=name,
        memory_total_mib=memory.total // _MIB,
        memory_used_mib=memory.used // _MIB,
        memory_free_mib=memory.free // _MIB,
        compute_capability=tuple(cc) if cc else infer_compute_capability(name),
        mig_enabled=mig_enabled,
        mig_device_count=mig_devices,
        utilization_pct=utilization.gpu if utilization else None,
        uuid=_text(_optional(nvml, "nvmlDeviceGetUUID", handle) or "") or None,
    )


def _nvml_processes(nvml: Any, index: int, handle: Any) -> list[GpuProcess]:
    processes = []
    for proc in _optional(nvml, "nvmlDeviceGetComputeRunningProcesses", handle) or []:
        used = getattr(proc, "usedGpuMemory", None)
        name = _optional(nvml, "nvmlSystemGetProcessName", proc.pid)
        processes.append(
            GpuProcess(
                gpu_index=index,
                pid=proc.pid,
                process_name=_text(name or ""),
                # WDDM gives None; old bindings give NVML_VALUE_NOT_AVAILABLE (2**64 - 1).
                used_memory_mib=used // _MIB if used is not None and used < 2**63 else None,
            )
        )
    return processes


def _nvml_report(nvml: Any) -> GpuReport:
    driver = _text(nvml.nvmlSystemGetDriverVersion())
    cuda = _optional(nvml, "nvmlSystemGetCudaDriverVersion")
    gpus, processes = [], []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        gpus.append(_nvml_gpu(nvml, index, handle))
        processes += _nvml_processes(nvml, index, handle)
    if not gpus:
        return classify_failure(6, "", "")
    return build_report(
        gpus,
        processes,
        driver_version=driver,
        cuda_version=f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None,
        source="nvml",
    )


def read_nvml(nvml: Any) -> GpuReport | None:
    """A report from the `pynvml` module (nvidia-ml-py); None when its shared library is missing."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        if getattr(exc, "value", None) == 12:  # NVML_ERROR_LIBRARY_NOT_FOUND: let nvidia-smi say why
            return None
        return classify_failure(getattr(exc, "value", -1), "", str(exc))
    try:
        return _nvml_report(nvml)
    except nvml.NVMLError as exc:
        return classify_failure(getattr(exc, "value", -1), "", str(exc))
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


# -- nvidia-smi --------------------------------------------------------------------------------------

_INVALID_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')


def _subprocess_runner(timeout: float) -> Runner:
    def run(argv: Sequence[str]) -> tuple[int, str, str]:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, errors="replace", timeout=timeout, check=False
        )
        return done.returncode, done.stdout, done.stderr

    return run


def _call(runner: Runner, argv: Sequence[str], timeout: float) -> tuple[int, str, str]:
    """The runner's answer, with "could not even start" turned into the exit status a shell would give."""
    try:
        return runner(argv)
    except FileNotFoundError as exc:
        return 127, "", str(exc)
    except subprocess.TimeoutExpired:
        return _TIMEOUT_CODE, "", f"nvidia-smi did not answer within {timeout:g}s"
    except OSError as exc:
        return 126, "", str(exc)


def _query_gpus(runner: Runner, timeout: float) -> tuple[GpuReport, int]:
    """The CSV query and its exit status, dropping any field an older driver rejects."""
    fields = list(INSPECT_GPU_FIELDS)
    while True:
        argv = ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
        returncode, out, err = _call(runner, argv, timeout)
        if returncode == 0:
            return parse_query_gpu_csv(out, fields), returncode
        rejected = _INVALID_FIELD.search(out + err)
        if not rejected or rejected.group(1) not in fields or len(fields) == 1:
            return classify_failure(returncode, out, err), returncode
        fields.remove(rejected.group(1))


def _inspect_smi(runner: Runner, timeout: float) -> GpuReport:
    report, returncode = _query_gpus(runner, timeout)
    if report.status == "error" and returncode != _TIMEOUT_CODE:
        # This driver would not answer the CSV query at all: the plain table still has the essentials.
        returncode, out, err = _call(runner, ["nvidia-smi"], timeout)
        return parse_table(out) if returncode == 0 else classify_failure(returncode, out, err)
    if not report.ok:
        return report
    apps_argv = [
        "nvidia-smi",
        f"--query-compute-apps={','.join(INSPECT_APP_FIELDS)}",
        "--format=csv,noheader,nounits",
    ]
    returncode, out, _ = _call(runner, apps_argv, timeout)
    processes = parse_query_compute_apps_csv(out) if returncode == 0 else []
    returncode, out, _ = _call(runner, ["nvidia-smi", "--version"], timeout)
    driver, cuda = parse_version(out) if returncode == 0 else (None, None)
    return build_report(
        report.gpus,
        processes,
        driver_version=report.driver_version or driver,
        cuda_version=cuda,
        source="nvidia-smi-csv",
    )


def inspect(timeout: float = 5.0, runner: Runner | None = None) -> GpuReport:
    """Probe the GPUs now: NVML when `pynvml` imports, else nvidia-smi (CSV, then the table on old drivers).

    `runner` replaces the subprocess call (tests feed recorded outputs through it); given one, NVML is
    skipped so the answer comes from what the runner returns.
    """
    if runner is not None:
        return _inspect_smi(runner, timeout)
    try:
        import pynvml
    except ImportError:
        pynvml = None
    report = read_nvml(pynvml) if pynvml is not None else None
    return _with_start_times(report or _inspect_smi(_subprocess_runner(timeout), timeout))


def _with_start_times(report: GpuReport) -> GpuReport:
    """Each listed process stamped with its start time now, so a pid reused before `--allow-kill` acts
    is told from the process that was listed."""
    stamped = []
    for p in report.processes:
        proc = read_proc(p.pid)
        stamped.append(p.model_copy(update={"start_time": proc.start_time if proc else None}))
    return report.model_copy(update={"processes": tuple(stamped)})
