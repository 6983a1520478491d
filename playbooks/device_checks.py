"""Settings that cannot work on the device the command names, and addresses written wrong: pure checks of
the command, which preflight runs before a launch and `playbooks/devices.py` when SGLang's error points here.

SGLang groups its attention backends by platform (srt/arg_groups/choices.py: common, NVIDIA, AMD, other
platforms) and, on a device other than a GPU, picks that device's own backend when none is given
(platform_hook.py: `intel_amx` or `torch_native` on CPU, `torch_native` on HPU, `ascend` on NPU). A GPU
backend chosen on such a device fails wherever its kernels first run: a missing package (flashinfer), no
driver (Triton's "0 active drivers"), or CUDA calls on a CPU build of torch. Without the flag the device's
default is used.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from specdoctor.playbooks.decision import Finding
from specdoctor.playbooks.view import CommandView
from specdoctor.tools.command import RemoveFlag, SetFlag

if TYPE_CHECKING:
    from specdoctor.tools.gpu import GpuReport

ATTENTION_FLAGS = ("--attention-backend", "--prefill-attention-backend", "--decode-attention-backend")
RUNS_ON: dict[str, frozenset[str]] = {
    "cpu": frozenset({"torch_native", "intel_amx", "flex_attention"}),
    "hpu": frozenset({"torch_native"}),
    "mps": frozenset({"torch_native"}),
    "npu": frozenset({"ascend", "torch_native"}),
    "xpu": frozenset({"intel_xpu", "triton", "torch_native", "flex_attention"}),
}
"""Attention backends each non-GPU device runs (cuda and rocm run the rest)."""
_HOST_WITH_PORT = re.compile(r"^(?:(?P<scheme>[a-z]+)://)?(?P<host>[\w.-]+)(?::(?P<port>\d{1,5}))?/?$")


_TORCH_DEVICE_TYPES = frozenset(
    [
        "cpu",
        "cuda",
        "ipu",
        "xpu",
        "mkldnn",
        "opengl",
        "opencl",
        "ideep",
        "hip",
        "ve",
        "fpga",
        "maia",
        "xla",
        "lazy",
        "vulkan",
        "mps",
        "meta",
        "hpu",
        "mtia",
        "privateuseone",
        "npu",
        "musa",
    ]
)
"""What `torch.device()` takes (its own error lists them; npu and musa come as plugins): SGLang hands
--device to torch as written."""
_GPU_WORDS = frozenset({"gpu", "gpus", "nvidia", "amd", "rocm", "cuda"})
"""How people name a GPU; torch calls NVIDIA and AMD GPUs alike `cuda`."""


def check_device(view: CommandView, gpus: GpuReport | None = None) -> list[Finding]:
    return [
        *device_not_a_device(view, gpus),
        *backends_off_device(view),
        *host_with_port(view),
        *dist_init_addr_faults(view),
    ]


def device_not_a_device(view: CommandView, gpus: GpuReport | None) -> list[Finding]:
    """--device is a free string SGLang passes to torch: a name torch has no device type for passes
    argument checks and kills the scheduler when it first selects its device."""
    device = view.get("--device")
    if not device or device.split(":", 1)[0] in _TORCH_DEVICE_TYPES:
        return []
    listed = _listed_devices(view)
    meant = _meant_device(device, gpus)
    return [
        Finding(
            code="device-unknown",
            severity="error",
            category="other",
            flag="--device",
            message=f"--device {device} is not a device SGLang or torch knows"
            + (f" (SGLang's --help lists {', '.join(listed)})" if listed else ""),
            edits=(SetFlag(flag="--device", values=(meant[0],)),) if meant else (),
            why=meant[1] if meant else "only a person knows which accelerator this host has",
            confidence=meant[2] if meant else 0.0,
        )
    ]


def _listed_devices(view: CommandView) -> tuple[str, ...]:
    info = view.catalog.get("--device")
    return info.listed_values if info else ()


def _meant_device(device: str, gpus: GpuReport | None) -> tuple[str, str, float] | None:
    """The device the host has, when the command's word means a GPU or the host has none."""
    if gpus is not None and gpus.status == "no_gpu":
        return "cpu", "this host has no GPU; SGLang runs on its CPU with --device cpu", 0.6
    if device.lower() in _GPU_WORDS:
        if gpus is not None and gpus.ok:
            return "cuda", f"torch calls this host's GPUs ({gpus.summary()}) `cuda`", 0.7
        return "cuda", "torch calls NVIDIA and AMD GPUs `cuda`", 0.45
    if device.lower() in _TORCH_DEVICE_TYPES:
        return device.lower(), "torch's device types are lower case", 0.7
    return None


def backends_off_device(view: CommandView) -> list[Finding]:
    device = (view.get("--device") or "").lower()
    runs = RUNS_ON.get(device)
    if runs is None:
        return []
    found = []
    for flag in ATTENTION_FLAGS:
        chosen = view.get(flag)
        if chosen and chosen not in runs:
            found.append(
                Finding(
                    code="backend-off-device",
                    severity="error",
                    category="attention-backend",
                    flag=flag,
                    message=f"{flag} {chosen} does not run on --device {device} "
                    f"(it runs {', '.join(sorted(runs))})",
                    edits=(RemoveFlag(flag=flag),),
                    why=f"without it SGLang picks --device {device}'s own attention backend",
                    confidence=0.8,
                )
            )
    return found


def host_with_port(view: CommandView) -> list[Finding]:
    host = view.get("--host")
    m = _HOST_WITH_PORT.match(host or "")
    if not m or not (m["scheme"] or m["port"]):
        return []
    port = view.get("--port")
    same = port is None or port == m["port"]
    return [
        Finding(
            code="host-with-port",
            severity="error",
            category="other",
            flag="--host",
            message=f"--host {host} carries {'a scheme' if m['scheme'] else 'a port'}; SGLang builds its "
            "addresses from a bare host and --port",
            edits=(SetFlag(flag="--host", values=(m["host"],)),),
            why=f"--host {m['host']}; the port is --port's and the scheme SGLang's own"
            + ("" if same else f" (the command's --port {port}, not {m['port']})"),
            confidence=0.8,
        )
    ]


def dist_init_addr_faults(view: CommandView) -> list[Finding]:
    """--dist-init-addr is host:port, the node-rank-0 rendezvous, to which SGLang prepends `tcp://` itself:
    a scheme, an IPv6 host without brackets or a port past 65535 is refused (on one node the address is
    not needed at all)."""
    addr = view.get("--dist-init-addr")
    if not addr:
        return []
    single = view.nnodes <= 1
    bare = addr.split("://", 1)[-1]
    host, _, port = bare.rpartition(":")
    if "://" in addr and port.isdigit():
        fault, fixed, why = "carries a scheme", bare, "SGLang writes `tcp://` before the address itself"
    elif host.count(":") >= 2 and not host.startswith("[") and port.isdigit():
        fault, fixed, why = "is an IPv6 host without brackets", f"[{host}]:{port}", "IPv6 hosts take brackets"
    elif not re.fullmatch(r".+:\d+", bare):
        fault, fixed, why = "has no port (SGLang reads host:port)", None, ""
    elif int(port) > 65535:
        fault, fixed, why = f"has port {port}, past 65535", None, ""
    else:
        return []
    if fixed is None and single:
        why = "one node needs no rendezvous address: SGLang picks its own"
    elif fixed is None:
        why = "every node must name the same host:port; only a person knows which port is open"
    return [
        Finding(
            code="dist-init-addr",
            severity="error",
            category="tp-config",
            flag="--dist-init-addr",
            message=f"--dist-init-addr {addr} {fault}",
            edits=(SetFlag(flag="--dist-init-addr", values=(fixed,)),)
            if fixed
            else (RemoveFlag(flag="--dist-init-addr"),)
            if single
            else (),
            why=f"--dist-init-addr {fixed}: {why}" if fixed else why,
            confidence=0.8 if fixed or single else 0.0,
        )
    ]
