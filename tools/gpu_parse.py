"""GPU facts as typed values, and the pure parsers that build them from what nvidia-smi prints.

Everything here is a function of text: no subprocess, no NVML. `specdoctor.tools.gpu` runs the live probe, reads
user descriptions, and re-exports this API; import from there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Status = Literal["ok", "no_gpu", "no_driver", "driver_mismatch", "no_devices", "error"]
Source = Literal["nvidia-smi-csv", "nvidia-smi-table", "nvml", "described", "none"]

INSPECT_GPU_FIELDS: tuple[str, ...] = (
    "index",
    "name",
    "memory.total",
    "memory.used",
    "memory.free",
    "utilization.gpu",
    "driver_version",
    "compute_cap",
    "mig.mode.current",
    "uuid",
)
"""The `--query-gpu` columns the live probe asks for (and assumes for header-less CSV)."""
INSPECT_APP_FIELDS: tuple[str, ...] = ("gpu_uuid", "pid", "process_name", "used_memory")
"""The `--query-compute-apps` columns the live probe asks for (and assumes for header-less CSV)."""


class Gpu(BaseModel):
    """One physical GPU as the driver (or a user's description) presents it."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    index: int = Field(description="nvidia-smi's GPU index (what CUDA_VISIBLE_DEVICES counts).")
    name: str = Field(description="Product name as printed; the 79-column table truncates it with '...'.")
    memory_total_mib: int | None = Field(default=None, description="Framebuffer size in MiB.")
    memory_used_mib: int | None = Field(default=None, description="In use now; excludes driver-reserved.")
    memory_free_mib: int | None = Field(default=None, description="Free now, in MiB.")
    compute_capability: tuple[int, int] | None = Field(
        default=None, description="CUDA SM version, e.g. (9, 0); queried, else inferred from the name."
    )
    mig_enabled: bool = Field(default=False, description="MIG mode is on: CUDA sees MIG slices only.")
    mig_device_count: int | None = Field(
        default=None, description="MIG devices on this GPU when MIG is on and the source lists them."
    )
    utilization_pct: int | None = Field(default=None, description="GPU-Util; None where N/A (MIG).")
    uuid: str | None = None


class GpuProcess(BaseModel):
    """A process holding a GPU context."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    pid: int
    process_name: str = Field(description="As printed; the table shortens long paths with '...'.")
    used_memory_mib: int | None = Field(default=None, description="None where unknown (Windows WDDM).")
    kind: str | None = Field(default=None, description="Table 'Type' column: C, G, C+G; None from CSV.")
    start_time: int | None = Field(
        default=None,
        description="Its start (clock ticks after boot, /proc) when listed; a later process with the same pid "
        "is another one. None for recorded or described reports.",
    )


class GpuReport(BaseModel):
    """What is known about this machine's GPUs, or why nothing is."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    status: Status
    gpus: tuple[Gpu, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    driver_version: str | None = None
    cuda_version: str | None = Field(default=None, description="Highest CUDA the driver supports.")
    message: str = Field(description="One line for the user: what is wrong and what to do.")
    source: Source = "none"

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def count(self) -> int:
        return len(self.gpus)

    def gpu(self, index: int) -> Gpu | None:
        return next((g for g in self.gpus if g.index == index), None)

    def free_mib(self, index: int) -> int | None:
        """Free memory of GPU `index`; None when unknown or there is no such GPU."""
        gpu = self.gpu(index)
        return gpu.memory_free_mib if gpu else None

    def processes_on(self, index: int) -> tuple[GpuProcess, ...]:
        return tuple(p for p in self.processes if p.gpu_index == index)

    def summary(self) -> str:
        """`8x NVIDIA H200 (143771 MiB, sm90), driver 590.48.01`; the message when there are no GPUs."""
        return _summary(self.gpus, self.driver_version) if self.gpus else self.message


# -- compute capability ---------------------------------------------------------------------------

_CC_RULES: tuple[tuple[re.Pattern[str], tuple[int, int]], ...] = tuple(
    (re.compile(pattern, re.I), cc)
    for pattern, cc in (
        (r"\bG?B[23]00\b", (10, 0)),
        (r"\b(?:RTX\s*)?50[5-9]0\b|\bRTX\s*PRO\s*\d{4}\s*Blackwell", (12, 0)),
        (r"\bG?H(?:100|200|800|20)\b", (9, 0)),
        (r"\bL40S?\b|\bL4\b|\b(?:RTX\s*)?40[5-9]0\b|\bRTX\s*\d{4}\s*Ada\b", (8, 9)),
        (r"\bA(?:100|800|30)\b", (8, 0)),
        (r"\bA(?:10G?|40)\b|\bRTX\s*A\d{4}\b|\b(?:RTX\s*)?30[5-9]0\b", (8, 6)),
        (r"\bV100\b", (7, 0)),
        (r"\bT4\b|\bRTX\s*20[6-8]0\b|\b(?:Quadro|TITAN)\s*RTX\b", (7, 5)),
        (r"\bP100\b", (6, 0)),
    )
)


def infer_compute_capability(name: str) -> tuple[int, int] | None:
    """SM version of a known NVIDIA family named in `name`; None when the name does not say."""
    return next((cc for pattern, cc in _CC_RULES if pattern.search(name)), None)


# -- building reports -----------------------------------------------------------------------------


def _summary(gpus: Sequence[Gpu], driver: str | None) -> str:
    groups: dict[tuple[str, int | None, tuple[int, int] | None], int] = {}
    for gpu in gpus:
        key = (gpu.name, gpu.memory_total_mib, gpu.compute_capability)
        groups[key] = groups.get(key, 0) + 1
    parts = []
    for (name, total, cc), n in groups.items():
        facts = ([f"{total} MiB"] if total else []) + ([f"sm{cc[0]}{cc[1]}"] if cc else [])
        parts.append(f"{n}x {name}" + (f" ({', '.join(facts)})" if facts else ""))
    return ", ".join(parts) + (f", driver {driver}" if driver else "")


def _notes(gpus: Sequence[Gpu], processes: Sequence[GpuProcess]) -> list[str]:
    notes = []
    for gpu in gpus:
        if gpu.mig_enabled and gpu.mig_device_count == 0:
            notes.append(
                f"MIG is on for GPU {gpu.index} but it has no MIG devices, so CUDA sees no GPU there: "
                f"create MIG instances or disable MIG (sudo nvidia-smi -i {gpu.index} -mig 0)"
            )
        elif gpu.mig_enabled:
            slices = f"its {gpu.mig_device_count} MIG slices" if gpu.mig_device_count else "MIG slices"
            notes.append(f"MIG is on for GPU {gpu.index}: CUDA sees {slices}, not the whole GPU")
        compute = [
            p for p in processes if p.gpu_index == gpu.index and p.used_memory_mib and p.kind in (None, "C")
        ]
        if compute:
            held = sum(p.used_memory_mib or 0 for p in compute)
            pids = ", ".join(str(p.pid) for p in compute[:3]) + (", ..." if len(compute) > 3 else "")
            notes.append(
                f"GPU {gpu.index} already has {len(compute)} process(es) holding {held} MiB (pid {pids})"
            )
    return notes


def build_report(
    gpus: Iterable[Gpu],
    processes: Iterable[GpuProcess] = (),
    *,
    driver_version: str | None,
    cuda_version: str | None,
    source: Source,
) -> GpuReport:
    """An "ok" report; processes known only by GPU UUID get their GPU's index."""
    gpus = tuple(gpus)
    by_uuid = {g.uuid: g.index for g in gpus if g.uuid}
    processes = tuple(
        p.model_copy(update={"gpu_index": by_uuid[p.gpu_uuid]})
        if p.gpu_index is None and p.gpu_uuid in by_uuid
        else p
        for p in processes
    )
    message = "; ".join([_summary(gpus, driver_version), *_notes(gpus, processes)])
    return GpuReport(
        status="ok",
        gpus=gpus,
        processes=processes,
        driver_version=driver_version,
        cuda_version=cuda_version,
        message=message,
        source=source,
    )


# -- failures -------------------------------------------------------------------------------------

_MESSAGES: dict[Status, str] = {
    "no_gpu": (
        "nvidia-smi not found: no NVIDIA driver on this machine (or the container was started without GPU "
        "access, e.g. no `--gpus all`); run on a GPU host or describe the GPUs instead"
    ),
    "no_driver": (
        "the NVIDIA driver is not loaded (nvidia-smi couldn't communicate with it): load it with "
        "`sudo modprobe nvidia` or reinstall the driver, and check dmesg that nouveau does not own the GPU"
    ),
    "driver_mismatch": (
        "NVIDIA driver/library version mismatch: the driver was upgraded but the old kernel module is "
        "still loaded; reboot or reload the nvidia kernel modules"
    ),
    "no_devices": (
        "the NVIDIA driver found no usable GPU: check `dmesg` for NVRM errors (RmInitAdapter failed), "
        "the BIOS (Above 4G decoding / Resizable BAR) and that the container was given the devices"
    ),
}
_TEXT_STATES: tuple[tuple[Status, re.Pattern[str]], ...] = (
    ("driver_mismatch", re.compile(r"Driver/library version mismatch|NVML/RM version mismatch", re.I)),
    ("no_driver", re.compile(r"couldn't communicate with the NVIDIA driver|Driver Not Loaded", re.I)),
    ("no_devices", re.compile(r"No devices were found", re.I)),
    (
        "no_gpu",
        re.compile(
            r"nvidia-smi: (?:command )?not found|No such file or directory: '?nvidia-smi"
            r"|NVML Shared Library Not Found",
            re.I,
        ),
    ),
)
# nvidia-smi's exit status is an nvmlReturn_t; NVMLError.value uses the same numbers.
_CODE_STATES: dict[int, Status] = {
    127: "no_gpu",
    12: "no_gpu",
    9: "no_driver",
    18: "driver_mismatch",
    6: "no_devices",
}
_CODE_ERRORS: dict[int, str] = {
    4: "no permission to query the GPU: run as a user that can open /dev/nvidia* (or pass the devices in)",
    10: "nvidia-smi timed out: the driver may be hung or a GPU unresponsive; check `dmesg` for Xid errors",
    14: "a GPU's infoROM is corrupted: the board needs service; hide it with CUDA_VISIBLE_DEVICES meanwhile",
    15: "a GPU has fallen off the bus (GPU is lost, Xid 79): reboot; if it repeats, check power and cooling",
    16: "a GPU needs a reset: run `sudo nvidia-smi -r -i <gpu>` with nothing running on it, or reboot",
    17: "the operating system or a cgroup blocks access to the GPU: check the container's device permissions",
}
_TEXT_ERRORS: tuple[tuple[int, re.Pattern[str]], ...] = (
    (15, re.compile(r"GPU is lost|fallen off the bus|Unable to determine the device handle", re.I)),
    (14, re.compile(r"infoROM is corrupted", re.I)),
    (4, re.compile(r"Insufficient Permissions|No permission", re.I)),
)
_NVML_LIBRARY = re.compile(r"NVML library version:\s*(\S+)")


def classify_failure(returncode: int, stdout: str, stderr: str) -> GpuReport:
    """A typed report for a failed (or unusable) nvidia-smi run; status "error" when not recognised."""
    text = f"{stdout}\n{stderr}"
    status = next((s for s, pattern in _TEXT_STATES if pattern.search(text)), None)
    status = status or _CODE_STATES.get(returncode)
    if status:
        message = _MESSAGES[status]
        if status == "driver_mismatch" and (library := _NVML_LIBRARY.search(text)):
            message += f" (user-space library is {library.group(1)})"
        return GpuReport(status=status, message=message)
    code = next((c for c, pattern in _TEXT_ERRORS if pattern.search(text)), returncode)
    if code in _CODE_ERRORS:
        return GpuReport(status="error", message=_CODE_ERRORS[code])
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "no output")
    return GpuReport(
        status="error",
        message=f"the GPU query failed (code {returncode}): {first}; run nvidia-smi by hand to see why",
    )


# -- CSV (--query-gpu / --query-compute-apps) ----------------------------------------------------

_HEADER_CELL = re.compile(r"^[a-z][A-Za-z0-9_.]*(?: \[[^\]]+\])?$")
_WITH_UNIT = re.compile(r"^(-?\d+(?:\.\d+)?) ?(?:MiB|KiB|GiB|%|W|MHz|C)$")
_GPU_ALIASES = {"gpu_name": "name", "gpu_serial": "serial", "gpu_uuid": "uuid"}
_APP_ALIASES = {"name": "process_name", "used_gpu_memory": "used_memory"}
_KNOWN_FIELDS = {*INSPECT_GPU_FIELDS, *INSPECT_APP_FIELDS, *_GPU_ALIASES, *_APP_ALIASES, "timestamp", "pid"}


def _value(cell: str) -> str | None:
    """`[N/A]`, `[Not Supported]` and the like are missing values; units are dropped."""
    cell = cell.strip()
    if not cell or cell == "N/A" or (cell.startswith("[") and cell.endswith("]")):
        return None
    unit = _WITH_UNIT.match(cell)
    return unit.group(1) if unit else cell


def _int(value: str | None) -> int | None:
    try:
        return int(float(value)) if value is not None else None
    except ValueError:
        return None


def _is_header(cells: Sequence[str]) -> bool:
    return all(_HEADER_CELL.match(c) for c in cells) and any(c.split(" [")[0] in _KNOWN_FIELDS for c in cells)


def _csv_rows(
    text: str, fields: Sequence[str], aliases: dict[str, str], free_text: str
) -> list[dict[str, str | None]]:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if lines and _is_header(lines[0].split(", ")):
        fields = [cell.split(" [")[0] for cell in lines.pop(0).split(", ")]
    fields = [aliases.get(f, f) for f in fields]
    rows = []
    for line in lines:
        cells = line.split(", ")
        extra = len(cells) - len(fields)
        if extra < 0:
            continue
        if extra and free_text in fields:
            # A name containing ", " was split: glue the surplus back into the free-text column.
            at = fields.index(free_text)
            cells[at : at + extra + 1] = [", ".join(cells[at : at + extra + 1])]
        elif extra:
            continue
        rows.append({f: _value(c) for f, c in zip(fields, cells, strict=True)})
    return rows


def _cc(value: str | None) -> tuple[int, int] | None:
    match = re.fullmatch(r"(\d+)\.(\d+)", value or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def _csv_gpu(row: dict[str, str | None], position: int) -> Gpu:
    name = row.get("name") or "unknown GPU"
    total, used, free = (_int(row.get(f"memory.{k}")) for k in ("total", "used", "free"))
    reserved = _int(row.get("memory.reserved"))
    if total is None and used is not None and free is not None and reserved is not None:
        # Recent drivers: used + free + reserved = total (to within 1 MiB of rounding).
        total = used + free + reserved
    index = _int(row.get("index"))
    return Gpu(
        index=position if index is None else index,
        name=name,
        memory_total_mib=total,
        memory_used_mib=used,
        memory_free_mib=free,
        compute_capability=_cc(row.get("compute_cap")) or infer_compute_capability(name),
        mig_enabled=row.get("mig.mode.current") == "Enabled",
        utilization_pct=_int(row.get("utilization.gpu")),
        uuid=row.get("uuid"),
    )


def parse_query_gpu_csv(text: str, fields: Sequence[str] = INSPECT_GPU_FIELDS) -> GpuReport:
    """`--query-gpu=... --format=csv[,noheader][,nounits]`; `fields` names the columns when there is no header."""
    rows = _csv_rows(text, fields, _GPU_ALIASES, "name")
    gpus = [_csv_gpu(row, n) for n, row in enumerate(rows)]
    if not gpus:
        return classify_failure(0, text, "")
    return build_report(
        gpus, driver_version=rows[0].get("driver_version"), cuda_version=None, source="nvidia-smi-csv"
    )


def parse_query_compute_apps_csv(text: str, fields: Sequence[str] = INSPECT_APP_FIELDS) -> list[GpuProcess]:
    """`--query-compute-apps=...`; a header-only answer (nothing running) gives []."""
    processes = []
    for row in _csv_rows(text, fields, _APP_ALIASES, "process_name"):
        pid = _int(row.get("pid"))
        if pid is None:
            continue
        processes.append(
            GpuProcess(
                gpu_uuid=row.get("uuid") or row.get("gpu_uuid"),
                pid=pid,
                process_name=row.get("process_name") or "",
                used_memory_mib=_int(row.get("used_memory")),
            )
        )
    return processes


# -- `nvidia-smi --version` ------------------------------------------------------------------------

_VERSION_DRIVER = re.compile(r"^(?:DRIVER|KMD) version\s*:\s*(\d[\w.]*)", re.I | re.M)
_VERSION_CUDA = re.compile(r"^CUDA(?: UMD)? version\s*:\s*(\d[\d.]*)", re.I | re.M)


def parse_version(text: str) -> tuple[str | None, str | None]:
    """(driver, CUDA) from `nvidia-smi --version`; 610+ names them KMD / CUDA UMD version."""
    driver, cuda = _VERSION_DRIVER.search(text), _VERSION_CUDA.search(text)
    return (driver.group(1) if driver else None, cuda.group(1) if cuda else None)


# -- the default table -----------------------------------------------------------------------------

_SEPARATOR = re.compile(r"^\|=+(?:\+=+)*\|$")
_HEADING = re.compile(r"^\|\s*(Processes|MIG devices):")
_TABLE_DRIVER = re.compile(r"(?:Driver|KMD) Version:\s*(\S+)")
_TABLE_CUDA = re.compile(r"CUDA(?: UMD)? Version:\s*(\d[\d.]*)")
_GPU_CELL = re.compile(r"^(\d+)\s+(.+?)\s+(?:On|Off|WDDM|TCC|MCDM|N/A)$")
_MEMORY_CELL = re.compile(r"(\d+)MiB\s*/\s*(\d+)MiB")
_MIG_CELL = re.compile(r"^(\d+)\s+\d+\s+\d+\s+\d+$")
_PROCESS_ROW = re.compile(r"^(\d+)\s+(?:\S+\s+\S+\s+)?(\d+)\s+([CGM][+CGM]*)\s+(.*?)\s+(?:(\d+)MiB|N/A)$")

_Record = list[list[str]]
"""The rows of one block between `+---+` borders, each row its `|`-separated cells (stripped)."""


def _table_sections(lines: Iterable[str]) -> dict[str, list[_Record]]:
    """Blocks under each `|===|` separator, keyed by the heading above it ("GPUs" before any heading)."""
    sections: dict[str, list[_Record]] = {}
    heading, body = "GPUs", None
    for line in (ln.strip() for ln in lines):
        if match := _HEADING.match(line):
            heading, body = match.group(1), None
        elif _SEPARATOR.match(line):
            body = sections.setdefault(heading, [])
            body.append([])
        elif body is not None and line.startswith("+"):
            body.append([])
        elif body is not None and line.startswith("|"):
            cells = [c.strip() for c in line.split("|")[1:]]
            body[-1].append(cells[:-1] if line.endswith("|") and len(cells) > 1 else cells)
        else:
            body = None
    return {key: [rec for rec in records if rec] for key, records in sections.items()}


def _cell(record: _Record, row: int, column: int) -> str:
    return record[row][column] if row < len(record) and column < len(record[row]) else ""


def _table_gpu(record: _Record) -> Gpu | None:
    ident = _GPU_CELL.match(_cell(record, 0, 0))
    if not ident:
        return None
    used = total = free = None
    if memory := _MEMORY_CELL.search(_cell(record, 1, 1)):
        used, total = int(memory.group(1)), int(memory.group(2))
        # The table has no free column; total - used over-counts by the driver's reserve (~0.5 GiB).
        free = total - used
    util = re.match(r"(\d+)%", _cell(record, 1, 2))
    name = ident.group(2)
    return Gpu(
        index=int(ident.group(1)),
        name=name,
        memory_total_mib=total,
        memory_used_mib=used,
        memory_free_mib=free,
        compute_capability=infer_compute_capability(name),
        mig_enabled=_cell(record, 2, 2) == "Enabled",
        utilization_pct=int(util.group(1)) if util else None,
    )


def _table_process(cell: str) -> GpuProcess | None:
    match = _PROCESS_ROW.match(cell)
    if not match:
        return None
    gpu, pid, kind, name, memory = match.groups()
    return GpuProcess(
        gpu_index=int(gpu),
        pid=int(pid),
        process_name=name,
        used_memory_mib=int(memory) if memory else None,
        kind=kind,
    )


def parse_table(text: str) -> GpuReport:
    """The default `nvidia-smi` table, any driver layout from 470 to 610 (79 or 91 columns, MIG, WDDM)."""
    sections = _table_sections(text.splitlines())
    gpus = [gpu for record in sections.get("GPUs", []) if (gpu := _table_gpu(record))]
    if not gpus:
        return classify_failure(0, text, "")
    if "MIG devices" in sections:
        mig_rows = [m for rec in sections["MIG devices"] if (m := _MIG_CELL.match(_cell(rec, 0, 0)))]
        gpus = [
            gpu.model_copy(update={"mig_device_count": sum(int(m.group(1)) == gpu.index for m in mig_rows)})
            if gpu.mig_enabled
            else gpu
            for gpu in gpus
        ]
    rows = [row[0] for record in sections.get("Processes", []) for row in record if row]
    driver, cuda = _TABLE_DRIVER.search(text), _TABLE_CUDA.search(text)
    return build_report(
        gpus,
        [p for cell in rows if (p := _table_process(cell))],
        driver_version=driver.group(1) if driver else None,
        cuda_version=cuda.group(1) if cuda else None,
        source="nvidia-smi-table",
    )


# nvidia-smi's table row: `|    0   N/A  N/A     1696      G   /usr/bin/gnome-shell      176MiB |`
_TABLE_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?:\S+\s+\S+\s+)?(?P<pid>\d+)\s+(?P<kind>C\+G|[CGM])\s+(?P<name>\S.*?)\s+(?P<mib>\d+)\s*MiB\s*\|\s*$",
    re.M,
)
# The same listing as people paste it without the frame: `  0  2505781  sglang::scheduler  100998 MiB`.
_BARE_ROW = re.compile(
    r"^\s*(?P<gpu>\d+)\s+(?P<pid>\d{2,})\s+(?:(?P<kind>C\+G|[CGM])\s+)?(?P<name>\S+)\s+(?P<mib>\d+)\s*MiB\s*$",
    re.M,
)


def processes_in_text(text: str) -> list[GpuProcess]:
    """GPU processes listed in pasted text: nvidia-smi's table rows, or the same columns without the frame."""
    for pattern in (_TABLE_ROW, _BARE_ROW):
        rows = [
            GpuProcess(
                gpu_index=int(m["gpu"]),
                pid=int(m["pid"]),
                process_name=m["name"].strip(),
                used_memory_mib=int(m["mib"]),
                kind=m["kind"],
            )
            for m in pattern.finditer(text)
        ]
        if rows:
            return rows
    return []
