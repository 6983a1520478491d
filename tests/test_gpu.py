"""specdoctor.tools.gpu on recorded nvidia-smi / NVML output (tests/data/nvidia-smi, see its README.md)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from specdoctor.tools.gpu import (
    GpuReport,
    build_report,
    classify_failure,
    infer_compute_capability,
    inspect,
    parse_gpus_description,
    parse_query_compute_apps_csv,
    parse_query_gpu_csv,
    parse_table,
    parse_version,
    read_nvml,
)

DATA = Path(__file__).parent / "data" / "nvidia-smi"
CORPUS = Path(__file__).parent / "data" / "corpus"
MASKED_UUID = "GPU-00000000-0000-0000-0000-000000000000"


def load_sample(path: Path) -> str:
    """The recorded body: everything after the first line that is exactly `# ---`."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.rstrip("\r\n") == "# ---")
    return "".join(lines[start + 1 :])


def sample_command(path: Path) -> str:
    return re.search(r"^# command: (.*)$", path.read_text(encoding="utf-8"), re.M).group(1)


def queried_fields(path: Path, query: str) -> list[str]:
    return re.search(rf"--{query}=(\S+)", sample_command(path)).group(1).split(",")


def samples(folder: str) -> list[Path]:
    return sorted((DATA / folder).glob("*.txt"))


def ids(paths: Sequence[Path]) -> list[str]:
    return [p.stem for p in paths]


# Capture-repo machines (file names `<os>__<model>__<driver>__<state>[__<format>].txt`), figures from the
# README and the recordings. name, memory.total MiB, compute_cap, MIG enabled, MIG devices in the table.
CAPTURES = {
    "nvidia-geforce-rtx-2080-super": ("NVIDIA GeForce RTX 2080 SUPER", 8192, (7, 5), False, None),
    "nvidia-geforce-rtx-4080-super": ("NVIDIA GeForce RTX 4080 SUPER", 16376, (8, 9), False, None),
    "nvidia-h100-80gb-hbm3": ("NVIDIA H100 80GB HBM3", 81559, (9, 0), False, None),
    "nvidia-h100-mig": ("NVIDIA H100 80GB HBM3", 81559, (9, 0), True, 4),
    "nvidia-h200": ("NVIDIA H200", 143771, (9, 0), False, None),
    "nvidia-h200-mig": ("NVIDIA H200", 143771, (9, 0), True, 5),
    "nvidia-l40s": ("NVIDIA L40S", 46068, (8, 9), False, None),
}
DATACENTER = {"nvidia-h100-80gb-hbm3", "nvidia-h100-mig", "nvidia-h200", "nvidia-h200-mig", "nvidia-l40s"}


def capture(path: Path) -> tuple[str, str, str, str]:
    """(os, model, driver, state) of a capture-repo sample."""
    os_name, model, driver, state = path.stem.split("__")[:4]
    return os_name, model, driver, state


def same_capture(path: Path, folder: str) -> Path:
    return DATA / folder / ("__".join(capture(path)) + ".txt")


# -- the default table ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", samples("table"), ids=ids(samples("table")))
def test_table_capture(path: Path) -> None:
    os_name, model, driver, state = capture(path)
    name, total, cc, mig, mig_devices = CAPTURES[model]
    report = parse_table(load_sample(path))
    assert (report.status, report.source, report.count) == ("ok", "nvidia-smi-table", 1)
    gpu = report.gpus[0]
    # The table cuts GeForce names ("NVIDIA GeForce RTX 2080 ..."); what is left is a prefix of the real one.
    assert name.startswith(gpu.name.removesuffix(" ...")) and len(gpu.name) > len("NVIDIA ")
    assert (gpu.index, gpu.memory_total_mib, gpu.compute_capability) == (0, total, cc)
    assert gpu.memory_used_mib is not None and gpu.memory_free_mib == total - gpu.memory_used_mib
    assert (gpu.mig_enabled, gpu.mig_device_count) == (mig, mig_devices)
    assert (gpu.utilization_pct is None) == mig
    assert report.driver_version == driver
    assert re.fullmatch(r"1[23]\.\d", report.cuda_version or "")
    assert report.summary().startswith(f"1x {gpu.name} ({total} MiB, sm{cc[0]}{cc[1]}), driver {driver}")
    assert all(p.gpu_index == 0 and p.pid > 0 and p.process_name for p in report.processes)
    if os_name.startswith("windows"):
        # WDDM: per-process memory is N/A.
        assert report.processes and all(p.used_memory_mib is None for p in report.processes)
    if state == "idle":
        assert not [p for p in report.processes if p.kind == "C"]
        if model in DATACENTER:
            assert report.processes == () and report.processes_on(0) == ()
    elif os_name.startswith("linux"):
        compute = [p for p in report.processes if p.kind == "C"]
        assert compute and all(p.used_memory_mib for p in compute)
        assert sum(p.used_memory_mib for p in compute) <= gpu.memory_used_mib
        assert "already has" in report.message


def test_table_mig_process_rows_carry_gi_ci_ids() -> None:
    report = parse_table(load_sample(DATA / "table/linux-x86_64__nvidia-h200-mig__590.48.01__load.txt"))
    assert [(p.pid, p.process_name, p.used_memory_mib) for p in report.processes] == [
        (12249, "/root/tools/memhog", 2194),
        (12250, "/root/tools/memhog", 1170),
        (12267, "./gpu_burn", 13526),
    ]
    assert "MIG is on for GPU 0: CUDA sees its 5 MIG slices" in report.message


def test_table_610_names_kmd_and_cuda_umd_versions() -> None:
    report = parse_table(
        load_sample(DATA / "table/linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04__load.txt")
    )
    assert (report.driver_version, report.cuda_version) == ("610.57.04", "13.3")
    assert [(p.pid, p.kind, p.used_memory_mib) for p in report.processes] == [
        (1720, "G", 173),
        (4556, "G", 3),
        (28511, "C", 230),
        (28512, "C", 370),
    ]


def test_table_windows_keeps_shortened_process_paths() -> None:
    report = parse_table(
        load_sample(DATA / "table/windows-x86_64__nvidia-geforce-rtx-2080-super__591.86__load.txt")
    )
    by_pid = {p.pid: p for p in report.processes}
    assert by_pid[20372].process_name == "...m Files\\NZXT CAM\\NZXT CAM.exe"
    assert (by_pid[2056].process_name, by_pid[2056].kind) == ("C:\\Windows\\System32\\dwm.exe", "C+G")
    assert (by_pid[25704].kind, by_pid[25704].used_memory_mib) == ("C", None)


# Other drivers (470..570) and layouts; a new file here still gets the generic checks.
OTHER_TABLES = {
    "2x-rtx4090__570.148.08__1proc": {
        "names": ["NVIDIA GeForce RTX 4090"] * 2,
        "totals": [24564, 24564],
        "used": [15516, 1],
        "cc": (8, 9),
        "cuda": "12.8",
        "processes": [(0, 553657, "text-embeddings-router", 15506)],
    },
    "a100-sxm4-80gb__535.104.05__mig-enabled-no-mig-devices": {
        "names": ["NVIDIA A100-SXM4-80GB"],
        "totals": [81920],
        "used": [0],
        "cc": (8, 0),
        "cuda": "12.2",
        "processes": [],
        "mig": (True, 0),
    },
    "a100-sxm4-80gb__535.154.05__1proc": {
        "names": ["NVIDIA A100-SXM4-80GB"],
        "totals": [81920],
        "used": [6568],
        "cc": (8, 0),
        "cuda": "12.2",
        "processes": [(0, 3009270, "python", 6558)],
        "utilization": 99,
    },
    "rtx-3060-class__525.147.05__TRUNCATED": {
        "names": ["NVIDIA GeForce ..."],
        "totals": [12288],
        "used": [490],
        "cc": None,
        "cuda": "12.0",
        "processes": [],
        "utilization": 12,
    },
    "tesla-p100__470.82.01__no-proc__TRUNCATED-END": {
        "names": ["Tesla P100-PCIE..."],
        "totals": [16280],
        "used": [0],
        "cc": (6, 0),
        "cuda": "11.4",
        "processes": [],
    },
    "tesla-p100__515.65.01__TRUNCATED": {
        "names": ["Tesla P100-PCIE..."],
        "totals": [16384],
        "used": [0],
        "cc": (6, 0),
        "cuda": "11.7",
        "processes": [],
    },
}


@pytest.mark.parametrize("path", samples("tables-other-drivers"), ids=ids(samples("tables-other-drivers")))
def test_table_other_drivers(path: Path) -> None:
    report = parse_table(load_sample(path))
    assert (report.status, report.source) == ("ok", "nvidia-smi-table")
    assert report.count >= 1 and report.driver_version == path.stem.split("__")[1]
    expected = OTHER_TABLES.get(path.stem)
    if expected is None:
        return
    assert [g.name for g in report.gpus] == expected["names"]
    assert [g.memory_total_mib for g in report.gpus] == expected["totals"]
    assert [g.memory_used_mib for g in report.gpus] == expected["used"]
    assert all(g.compute_capability == expected["cc"] for g in report.gpus)
    assert report.cuda_version == expected["cuda"]
    assert [(p.gpu_index, p.pid, p.process_name, p.used_memory_mib) for p in report.processes] == expected[
        "processes"
    ]
    gpu = report.gpus[0]
    assert (gpu.mig_enabled, gpu.mig_device_count) == expected.get("mig", (False, None))
    if "utilization" in expected:
        assert gpu.utilization_pct == expected["utilization"]


def test_table_mig_without_devices_tells_the_user() -> None:
    path = DATA / "tables-other-drivers/a100-sxm4-80gb__535.104.05__mig-enabled-no-mig-devices.txt"
    report = parse_table(load_sample(path))
    assert report.gpus[0].utilization_pct is None
    assert "no MIG devices, so CUDA sees no GPU there" in report.message
    assert "nvidia-smi -i 0 -mig 0" in report.message


def test_report_helpers_on_two_gpus() -> None:
    report = parse_table(load_sample(DATA / "tables-other-drivers/2x-rtx4090__570.148.08__1proc.txt"))
    assert report.summary() == "2x NVIDIA GeForce RTX 4090 (24564 MiB, sm89), driver 570.148.08"
    assert report.message.startswith(report.summary())
    assert (report.free_mib(0), report.free_mib(1), report.free_mib(2)) == (24564 - 15516, 24563, None)
    assert [p.pid for p in report.processes_on(0)] == [553657]
    assert report.processes_on(1) == ()


# -- --query-gpu CSV --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", samples("query-gpu-allfields"), ids=ids(samples("query-gpu-allfields")))
def test_query_gpu_all_fields(path: Path) -> None:
    _, model, driver, _ = capture(path)
    name, total, cc, mig, _ = CAPTURES[model]
    report = parse_query_gpu_csv(load_sample(path))
    assert (report.status, report.source, report.count, report.driver_version) == (
        "ok",
        "nvidia-smi-csv",
        1,
        driver,
    )
    gpu = report.gpus[0]
    assert (gpu.index, gpu.name, gpu.memory_total_mib, gpu.compute_capability) == (0, name, total, cc)
    assert (gpu.mig_enabled, gpu.uuid) == (mig, MASKED_UUID)
    # used + free + reserved = total: used + free alone is short of the total by the reserve.
    assert 0 < total - gpu.memory_used_mib - gpu.memory_free_mib < 1024
    assert report.free_mib(0) == gpu.memory_free_mib
    # MIG: utilization.gpu is the placeholder [N/A].
    assert (gpu.utilization_pct is None) == mig
    assert infer_compute_capability(name) == cc


@pytest.mark.parametrize(
    "path", samples("query-gpu-basic-derived"), ids=ids(samples("query-gpu-basic-derived"))
)
def test_query_gpu_basic_formats_agree_with_the_full_query(path: Path) -> None:
    fields = queried_fields(path, "query-gpu")
    report = parse_query_gpu_csv(load_sample(path), fields)
    full = parse_query_gpu_csv(load_sample(same_capture(path, "query-gpu-allfields"))).gpus[0]
    gpu = report.gpus[0]
    assert report.status == "ok" and report.driver_version == capture(path)[2]
    keep = ("index", "name", "memory_total_mib", "memory_used_mib", "memory_free_mib", "utilization_pct")
    assert gpu.model_dump(include=set(keep)) == full.model_dump(include=set(keep))
    # Not queried here, so inferred from the name: it still matches the real compute_cap.
    assert gpu.compute_capability == full.compute_capability
    assert gpu.uuid is None and gpu.mig_enabled is False


def test_query_gpu_nounits_keeps_header_units() -> None:
    path = DATA / "query-gpu-nounits-netdata/tesla-p100__510.47.03__csv-nounits.txt"
    report = parse_query_gpu_csv(load_sample(path))
    gpu = report.gpus[0]
    assert (gpu.index, gpu.name, gpu.uuid) == (
        0,
        "Tesla P100-PCIE-16GB",
        "GPU-ef1b2c9b-38d8-2090-2bd1-f567a3eb42a6",
    )
    assert (gpu.memory_used_mib, gpu.memory_free_mib, gpu.utilization_pct) == (0, 16280, 0)
    # No memory.total column: reserved 103 + used 0 + free 16280 (the board has 16384 MiB, +/-1 rounding).
    assert gpu.memory_total_mib == 16383
    assert gpu.compute_capability == (6, 0)
    assert report.driver_version is None


@pytest.mark.parametrize(
    ("text", "status"),
    [
        (load_sample(DATA / "errors/no-devices-were-found__rtx5090__syslog.txt"), "no_devices"),
        ("index, name, memory.total [MiB]\n", "error"),
        ("", "error"),
    ],
    ids=["no-devices", "header-only", "empty"],
)
def test_query_gpu_without_rows_is_a_typed_failure(text: str, status: str) -> None:
    report = parse_query_gpu_csv(text)
    assert (report.status, report.count) == (status, 0) and report.message


# -- --query-compute-apps CSV ------------------------------------------------------------------------


@pytest.mark.parametrize("path", samples("query-compute-apps"), ids=ids(samples("query-compute-apps")))
def test_query_compute_apps(path: Path) -> None:
    os_name, model, _, state = capture(path)
    rows = load_sample(path).strip().splitlines()[1:]
    processes = parse_query_compute_apps_csv(load_sample(path))
    assert len(processes) == len(rows)
    assert all(p.gpu_uuid == MASKED_UUID and p.pid > 0 and p.process_name for p in processes)
    if state == "idle" and model in DATACENTER:
        assert processes == []
    if state == "load":
        assert processes
    if os_name.startswith("windows"):
        assert all(p.used_memory_mib is None for p in processes)
    else:
        assert all(p.used_memory_mib for p in processes)
    # Every compute app also appears in the table recorded in the same state.
    table = parse_table(load_sample(same_capture(path, "table")))
    assert {p.pid for p in processes} <= {p.pid for p in table.processes}
    # Joined to the GPU list, each process lands on GPU 0 through its UUID.
    gpus = parse_query_gpu_csv(load_sample(same_capture(path, "query-gpu-allfields"))).gpus
    joined = build_report(gpus, processes, driver_version=None, cuda_version=None, source="nvidia-smi-csv")
    assert len(joined.processes_on(0)) == len(processes)


@pytest.mark.parametrize(
    "path", samples("query-compute-apps-basic-derived"), ids=ids(samples("query-compute-apps-basic-derived"))
)
def test_query_compute_apps_basic_formats_agree(path: Path) -> None:
    processes = parse_query_compute_apps_csv(load_sample(path), queried_fields(path, "query-compute-apps"))
    full = parse_query_compute_apps_csv(load_sample(same_capture(path, "query-compute-apps")))
    assert processes
    assert [(p.pid, p.process_name, p.used_memory_mib) for p in processes] == [
        (p.pid, p.process_name, p.used_memory_mib) for p in full
    ]
    assert all(p.gpu_uuid is None for p in processes)


def test_query_compute_apps_name_with_comma_space() -> None:
    # A real row whose process name is swapped for one containing ", ": the name column takes the surplus.
    row = load_sample(
        DATA / "query-compute-apps/linux-x86_64__nvidia-h200__590.48.01__load.txt"
    ).splitlines()[1]
    row = row.replace("/root/tools/memhog", "python -m sglang.launch_server, worker 0")
    [process] = parse_query_compute_apps_csv(
        row,
        [
            "timestamp",
            "gpu_name",
            "gpu_bus_id",
            "gpu_serial",
            "gpu_uuid",
            "pid",
            "process_name",
            "used_gpu_memory",
        ],
    )
    assert (process.pid, process.process_name, process.used_memory_mib) == (
        10291,
        "python -m sglang.launch_server, worker 0",
        2566,
    )


# -- nvidia-smi --version -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", samples("version"), ids=ids(samples("version")))
def test_version(path: Path) -> None:
    driver, cuda = parse_version(load_sample(path))
    assert driver == path.stem.split("__")[2]
    assert cuda == (
        "13.3" if driver.startswith("610") else re.search(r"CUDA Version\s*: (\S+)", load_sample(path))[1]
    )


# -- failures ---------------------------------------------------------------------------------------------

# Prefix of the sample name -> (exit status the README documents, status).
ERRORS = {
    "command-not-found": (127, "no_gpu"),
    "couldnt-communicate-with-driver": (9, "no_driver"),
    "driver-library-version-mismatch": (18, "driver_mismatch"),
    "no-devices-were-found": (6, "no_devices"),
}
NAMES_THE_FAILURE = re.compile(
    r"not found|No such file|couldn't communicate|version mismatch|No devices were found", re.I
)


def expected_error(path: Path) -> tuple[int, str]:
    return ERRORS[next(prefix for prefix in ERRORS if path.stem.startswith(prefix))]


@pytest.mark.parametrize("path", samples("errors"), ids=ids(samples("errors")))
def test_error_sample_with_its_exit_status(path: Path) -> None:
    returncode, status = expected_error(path)
    report = classify_failure(returncode, "", load_sample(path))
    assert (report.status, report.count, report.source) == (status, 0, "none")
    assert report.summary() == report.message and "\n" not in report.message


@pytest.mark.parametrize("path", samples("errors"), ids=ids(samples("errors")))
def test_error_sample_recognised_from_text_alone(path: Path) -> None:
    body = load_sample(path)
    report = classify_failure(1, body, "")
    # The dmesg-only recording names no nvidia-smi failure: it must not be misread as one.
    assert report.status == (expected_error(path)[1] if NAMES_THE_FAILURE.search(body) else "error")


def test_error_messages_say_what_to_do() -> None:
    assert classify_failure(127, "", "bash: nvidia-smi: command not found").message.startswith(
        "nvidia-smi not found: no NVIDIA driver on this machine"
    )
    mismatch = classify_failure(18, load_sample(DATA / "errors/driver-library-version-mismatch__550.txt"), "")
    assert "reboot or reload the nvidia kernel modules" in mismatch.message
    assert "550.144" in mismatch.message
    assert "modprobe nvidia" in classify_failure(9, "", "").message


def test_table_printed_but_exit_14_is_a_corrupted_inforom() -> None:
    # GPU Operator docs: the table printed, then the validator failed on return code 14.
    body = load_sample(DATA / "tables-other-drivers/tesla-p100__470.82.01__no-proc__TRUNCATED-END.txt")
    report = classify_failure(14, body, "")
    assert report.status == "error" and "infoROM is corrupted" in report.message


@pytest.mark.parametrize(
    ("returncode", "words"),
    [(15, "fallen off the bus"), (16, "needs a reset"), (4, "no permission"), (42, "code 42")],
)
def test_other_exit_statuses(returncode: int, words: str) -> None:
    report = classify_failure(returncode, "", "")
    assert report.status == "error" and words in report.message


# -- descriptions -----------------------------------------------------------------------------------------

DESCRIPTIONS = [
    # text, count, name contains, memory MiB, compute capability
    ("8x RTX 4090 (node), TP=2", 8, "RTX 4090", 24564, (8, 9)),
    ("1x RTX 4070 Ti SUPER 16GB", 1, "RTX 4070 Ti SUPER", 16384, (8, 9)),
    ("8x NVIDIA A100-SXM4-80GB", 8, "A100-SXM4-80GB", 81920, (8, 0)),
    ("8x H200 (also fails on B200 / GB300 per the PR)", 8, "H200", 143771, (9, 0)),
    ("4x Blackwell-class GPUs (SGLang blackwell docker image)", 4, "Blackwell", None, None),
    ("8x AMD MI355X (gfx950)", 8, "MI355X", None, None),
    ("8 GPUs (model not stated)", 8, "unknown GPU", None, None),
    ("8x H100 80GB", 8, "H100", 81559, (9, 0)),
    ("4x H200", 4, "H200", 143771, (9, 0)),
    ("2 x A100-SXM4-80GB", 2, "A100", 81920, (8, 0)),
    ("4x A100 40GB", 4, "A100", 40960, (8, 0)),
    ("H100 x8", 8, "H100", 81559, (9, 0)),
    ("RTX 5090", 1, "RTX 5090", None, (12, 0)),
    ("2x L40S", 2, "L40S", 46068, (8, 9)),
]


@pytest.mark.parametrize(
    ("text", "count", "name", "memory", "cc"), DESCRIPTIONS, ids=[d[0] for d in DESCRIPTIONS]
)
def test_description(
    text: str, count: int, name: str, memory: int | None, cc: tuple[int, int] | None
) -> None:
    report = parse_gpus_description(text)
    assert (report.status, report.source, report.count) == ("ok", "described", count)
    assert [g.index for g in report.gpus] == list(range(count))
    gpu = report.gpus[0]
    assert name in gpu.name
    assert (gpu.memory_total_mib, gpu.compute_capability) == (memory, cc)
    assert gpu.memory_free_mib is None and report.free_mib(0) is None
    assert report.message.endswith("(as described, not measured)")
    assert report.summary().startswith(f"{count}x ")


def corpus_descriptions() -> list[str]:
    texts = (json.loads(p.read_text(encoding="utf-8")).get("gpus") for p in sorted(CORPUS.glob("*.json")))
    return [t for t in texts if t]


@pytest.mark.parametrize("text", corpus_descriptions())
def test_every_corpus_description_reads(text: str) -> None:
    report = parse_gpus_description(text)
    stated = re.match(r"\s*(\d+)", text)
    assert report.status == "ok" and report.count == (int(stated.group(1)) if stated else 1)
    if nominal := re.search(r"(\d+)\s*GB\b", text):
        assert report.gpus[0].memory_total_mib is not None
        assert abs(report.gpus[0].memory_total_mib - int(nominal.group(1)) * 1024) < 0.1 * 1024 * int(
            nominal.group(1)
        )


@pytest.mark.parametrize("text", ["", "unknown", "see logs", "0x H100", "n/a"])
def test_unreadable_description_is_an_error_report(text: str) -> None:
    report = parse_gpus_description(text)
    assert (report.status, report.count) == ("error", 0)
    assert "write it like '8x H100 80GB'" in report.message


@pytest.mark.parametrize(
    ("name", "cc"),
    [
        ("NVIDIA GeForce RTX 2080 ...", (7, 5)),
        ("Tesla P100-PCIE...", (6, 0)),
        ("NVIDIA GeForce ...", None),
        ("NVIDIA B200", (10, 0)),
        ("NVIDIA GB200", (10, 0)),
        ("NVIDIA B300 SXM6 AC", (10, 0)),
        ("NVIDIA H20", (9, 0)),
        ("NVIDIA H800", (9, 0)),
        ("NVIDIA GH200 480GB", (9, 0)),
        ("NVIDIA A800-SXM4-80GB", (8, 0)),
        ("NVIDIA A30", (8, 0)),
        ("NVIDIA A10G", (8, 6)),
        ("NVIDIA A40", (8, 6)),
        ("NVIDIA RTX A6000", (8, 6)),
        ("NVIDIA GeForce RTX 3090", (8, 6)),
        ("NVIDIA L4", (8, 9)),
        ("NVIDIA L40", (8, 9)),
        ("NVIDIA GeForce RTX 5090", (12, 0)),
        ("Tesla V100-SXM2-32GB", (7, 0)),
        ("Tesla T4", (7, 5)),
        ("AMD Instinct MI300X", None),
    ],
)
def test_compute_capability_from_name(name: str, cc: tuple[int, int] | None) -> None:
    assert infer_compute_capability(name) == cc


# -- NVML -------------------------------------------------------------------------------------------------


class NVMLError(Exception):
    def __init__(self, value: int, text: str) -> None:
        super().__init__(text)
        self.value = value


def recorded_nvml_errors() -> dict[str, NVMLError]:
    """The exceptions nvidia-ml-py raised on the research machine (no driver), by class name."""
    body = load_sample(DATA / "nvml/pynvml__no-driver__exceptions.txt")
    found = re.findall(r"-> pynvml\.NVMLError_(\w+): (.+?)  \(value=(\d+)", body)
    return {name: NVMLError(int(value), text) for name, text, value in found}


class RecordedNVML:
    """A `pynvml` stand-in that answers from one `nvidia-smi -q` recording (the facts NVML returns)."""

    NVMLError = NVMLError
    nvmlMemory_v2 = 2
    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(self, q_text: str = "", init_error: NVMLError | None = None) -> None:
        self.q, self.init_error, self.shut_down = q_text, init_error, False

    def _field(self, label: str) -> str:
        return re.search(rf"^\s*{label}\s*: (.+)$", self.q, re.M).group(1).strip()

    def _section(self, heading: str) -> str:
        """The GPU's own block (4-space indent), not the same heading inside a MIG device."""
        return re.split(rf"^    {heading}$", self.q, maxsplit=1, flags=re.M)[1]

    def _mib(self, label: str) -> int:
        section = self._section("FB Memory Usage")
        return int(re.search(rf"{label}\s*: (\d+) MiB", section).group(1)) * 2**20

    def nvmlInit(self) -> None:
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return self._field("Driver Version")

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        major, minor = self._field("CUDA Version").split(".")
        return int(major) * 1000 + int(minor) * 10

    def nvmlDeviceGetCount(self) -> int:
        return int(self._field("Attached GPUs"))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return self._field("Product Name").encode()  # old bindings hand back bytes

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self._field("GPU UUID")

    def nvmlDeviceGetMemoryInfo(self, handle: int, version: int | None = None) -> object:
        used = self._mib("Used") if version else self._mib("Used") + self._mib("Reserved")
        return type("Memory", (), {"total": self._mib("Total"), "used": used, "free": self._mib("Free")})

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> object:
        gpu = re.search(r"GPU\s*: (\d+) %|GPU\s*: N/A", self._section("Utilization"))
        if not gpu.group(1):
            raise NVMLError(3, "Not Supported")  # a MIG parent: nvidia-smi prints N/A
        return type("Utilization", (), {"gpu": int(gpu.group(1))})

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        raise NVMLError(3, "Not Supported")  # exercises the inference from the name

    def nvmlDeviceGetMigMode(self, handle: int) -> tuple[int, int]:
        current = re.search(r"MIG Mode\s+Current\s*: (\w+)", self.q).group(1)
        return (int(current == "Enabled"), 0)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: int) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: int, slot: int) -> int:
        if slot >= len(re.findall(r"^    MIG Device$", self.q, re.M)):
            raise NVMLError(6, "Not Found")
        return slot

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[object]:
        found = re.findall(
            r"Process ID\s*: (\d+)\s+Type\s*: C\s+Name\s*: (\S+)\s+Used GPU Memory\s*: (\d+) MiB", self.q
        )
        return [
            type("Process", (), {"pid": int(pid), "usedGpuMemory": int(mib) * 2**20}) for pid, _, mib in found
        ]

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        return re.search(rf"Process ID\s*: {pid}\s+Type\s*: \S+\s+Name\s*: (\S+)", self.q).group(1)


def test_nvml_report_matches_the_table_of_the_same_machine() -> None:
    nvml = RecordedNVML(load_sample(DATA / "q/linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__load.txt"))
    report = read_nvml(nvml)
    table = parse_table(load_sample(DATA / "table/linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__load.txt"))
    assert report is not None and nvml.shut_down
    assert (report.status, report.source, report.driver_version, report.cuda_version) == (
        "ok",
        "nvml",
        "590.48.01",
        "13.1",
    )
    gpu = report.gpus[0]
    assert (gpu.name, gpu.memory_total_mib, gpu.memory_used_mib, gpu.memory_free_mib) == (
        "NVIDIA H100 80GB HBM3",
        81559,
        19818,
        61263,
    )
    assert (gpu.compute_capability, gpu.utilization_pct, gpu.mig_enabled, gpu.uuid) == (
        (9, 0),
        100,
        False,
        MASKED_UUID,
    )
    assert [(p.pid, p.process_name, p.used_memory_mib) for p in report.processes] == [
        (p.pid, p.process_name, p.used_memory_mib) for p in table.processes
    ]


def test_nvml_mig_gpu_counts_its_mig_devices() -> None:
    nvml = RecordedNVML(load_sample(DATA / "q/linux-x86_64__nvidia-h100-mig__590.48.01__idle.txt"))
    report = read_nvml(nvml)
    gpu = report.gpus[0]
    assert (gpu.mig_enabled, gpu.mig_device_count, gpu.utilization_pct) == (True, 4, None)
    assert gpu.memory_total_mib == 81559
    assert "CUDA sees its 4 MIG slices" in report.message


def test_nvml_without_its_library_defers_to_nvidia_smi() -> None:
    errors = recorded_nvml_errors()
    assert errors["LibraryNotFound"].value == 12
    assert read_nvml(RecordedNVML(init_error=errors["LibraryNotFound"])) is None
    uninitialised = read_nvml(RecordedNVML(init_error=errors["Uninitialized"]))
    assert uninitialised.status == "error" and "Uninitialized" in uninitialised.message


@pytest.mark.parametrize(
    ("error", "status"),
    # The NVML side of the nvidia-smi failures, as documented in the README.
    [
        (NVMLError(9, "Driver Not Loaded"), "no_driver"),
        (NVMLError(18, "RM has detected an NVML/RM version mismatch."), "driver_mismatch"),
    ],
)
def test_nvml_init_failures(error: NVMLError, status: str) -> None:
    assert read_nvml(RecordedNVML(init_error=error)).status == status


# -- inspect() ---------------------------------------------------------------------------------------------


def project(csv_text: str, fields: Sequence[str], aliases: dict[str, str]) -> str:
    """`--format=csv,noheader,nounits` for `fields`, cut from a full recorded `--format=csv` answer."""
    lines = csv_text.strip().splitlines()
    header = [cell.split(" [")[0] for cell in lines[0].split(", ")]
    columns = [header.index(aliases.get(f, f)) for f in fields]
    out = []
    for line in lines[1:]:
        cells = line.split(", ")
        out.append(", ".join(re.sub(r" (MiB|%)$", "", cells[c]) for c in columns))
    return "".join(f"{line}\n" for line in out)


class RecordedMachine:
    """A runner answering nvidia-smi argv from one capture's recordings; remembers what it was asked."""

    def __init__(self, name: str, *, rejects: Sequence[str] = (), csv_broken: bool = False) -> None:
        self.name, self.rejects, self.csv_broken = name, rejects, csv_broken
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> tuple[int, str, str]:
        self.calls.append(list(argv))
        args = " ".join(argv[1:])
        if args.startswith("--query") and self.csv_broken:
            return 2, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n", ""
        if query := re.match(r"--query-gpu=(\S+)", args):
            fields = query.group(1).split(",")
            for field in self.rejects:
                if field in fields:
                    return 2, f'Field "{field}" is not a valid field to query.\n\n', ""
            recording = load_sample(DATA / "query-gpu-allfields" / f"{self.name}.txt")
            return 0, project(recording, fields, {}), ""
        if query := re.match(r"--query-compute-apps=(\S+)", args):
            recording = load_sample(DATA / "query-compute-apps" / f"{self.name}.txt")
            aliases = {"used_memory": "used_gpu_memory"}
            return 0, project(recording, query.group(1).split(","), aliases), ""
        if args == "--version":
            version = "__".join(self.name.split("__")[:3])
            return 0, load_sample(DATA / "version" / f"{version}.txt"), ""
        if not args:
            return 0, load_sample(DATA / "table" / f"{self.name}.txt"), ""
        raise AssertionError(f"unexpected argv {argv}")


@pytest.mark.parametrize("path", samples("table"), ids=ids(samples("table")))
def test_inspect_through_the_csv_queries(path: Path) -> None:
    _, model, driver, state = capture(path)
    name, total, cc, mig, _ = CAPTURES[model]
    machine = RecordedMachine(path.stem)
    report = inspect(runner=machine)
    assert [argv[1].split("=")[0] for argv in machine.calls] == [
        "--query-gpu",
        "--query-compute-apps",
        "--version",
    ]
    assert all(argv[0] == "nvidia-smi" for argv in machine.calls)
    assert (report.status, report.source, report.driver_version) == ("ok", "nvidia-smi-csv", driver)
    assert re.fullmatch(r"1[23]\.\d", report.cuda_version or "")
    gpu = report.gpus[0]
    assert (gpu.name, gpu.memory_total_mib, gpu.compute_capability, gpu.mig_enabled) == (name, total, cc, mig)
    expected = parse_query_compute_apps_csv(load_sample(DATA / "query-compute-apps" / path.name))
    assert [p.pid for p in report.processes_on(0)] == [p.pid for p in expected]
    if state == "load":
        assert report.processes


def test_inspect_retries_without_a_field_an_old_driver_rejects() -> None:
    machine = RecordedMachine("linux-x86_64__nvidia-h200__590.48.01__load", rejects=["compute_cap"])
    report = inspect(runner=machine)
    queries = [argv[1] for argv in machine.calls if argv[1].startswith("--query-gpu")]
    assert len(queries) == 2 and "compute_cap" in queries[0] and "compute_cap" not in queries[1]
    assert (report.status, report.source) == ("ok", "nvidia-smi-csv")
    assert report.gpus[0].compute_capability == (9, 0)  # inferred from "NVIDIA H200"
    assert len(report.processes) == 3


def test_inspect_falls_back_to_the_table_when_csv_queries_fail() -> None:
    machine = RecordedMachine("linux-x86_64__nvidia-h200-mig__590.48.01__load", csv_broken=True)
    report = inspect(runner=machine)
    assert machine.calls[-1] == ["nvidia-smi"]
    assert (report.status, report.source, report.cuda_version) == ("ok", "nvidia-smi-table", "13.1")
    assert (report.gpus[0].mig_device_count, len(report.processes)) == (5, 3)


def test_inspect_keeps_gpus_when_the_process_query_fails() -> None:
    machine = RecordedMachine("linux-x86_64__nvidia-l40s__595.80__load")

    def runner(argv: Sequence[str]) -> tuple[int, str, str]:
        if argv[1].startswith("--query-compute-apps"):
            return 2, "Invalid combination of input arguments.\n", ""
        return machine(argv)

    report = inspect(runner=runner)
    assert (report.status, report.count, report.processes) == ("ok", 1, ())


@pytest.mark.parametrize(
    ("path", "returncode", "status"),
    [
        ("errors/couldnt-communicate-with-driver.txt", 9, "no_driver"),
        ("errors/driver-library-version-mismatch__570.txt", 18, "driver_mismatch"),
        ("errors/no-devices-were-found__rtx5090__syslog.txt", 6, "no_devices"),
        ("errors/command-not-found__bash.txt", 127, "no_gpu"),
    ],
)
def test_inspect_maps_a_broken_driver_without_more_calls(path: str, returncode: int, status: str) -> None:
    calls: list[Sequence[str]] = []

    def runner(argv: Sequence[str]) -> tuple[int, str, str]:
        calls.append(argv)
        return returncode, "", load_sample(DATA / path)

    report = inspect(runner=runner)
    assert (report.status, report.source, len(calls)) == (status, "none", 1)


def test_inspect_when_nvidia_smi_is_missing() -> None:
    recorded = load_sample(DATA / "errors/command-not-found__python-subprocess.txt")
    message = re.search(r"FileNotFoundError: (.+)", recorded).group(1)

    def runner(argv: Sequence[str]) -> tuple[int, str, str]:
        raise FileNotFoundError(2, message.split("] ", 1)[1])

    report = inspect(runner=runner)
    assert report.status == "no_gpu"
    assert report.message.startswith("nvidia-smi not found: no NVIDIA driver on this machine")


def test_inspect_when_nvidia_smi_hangs() -> None:
    calls: list[Sequence[str]] = []

    def runner(argv: Sequence[str]) -> tuple[int, str, str]:
        calls.append(argv)
        raise subprocess.TimeoutExpired(list(argv), 2.0)

    report = inspect(timeout=2.0, runner=runner)
    assert (report.status, len(calls)) == ("error", 1)
    assert "timed out" in report.message


@pytest.mark.skipif(
    bool(shutil.which("nvidia-smi") or importlib.util.find_spec("pynvml")),
    reason="this machine has an NVIDIA stack",
)
def test_inspect_on_this_machine_without_a_driver() -> None:
    report = inspect()
    assert isinstance(report, GpuReport)
    assert (report.status, report.count, report.source) == ("no_gpu", 0, "none")
    assert report.message.startswith("nvidia-smi not found")
