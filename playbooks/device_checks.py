"""Settings that cannot work on the device the command names, and an address written with its port.

SGLang groups its attention backends by platform (srt/arg_groups/choices.py: common, NVIDIA, AMD, other
platforms) and, on a device other than a GPU, picks that device's own backend when none is given
(platform_hook.py: `intel_amx` or `torch_native` on CPU, `torch_native` on HPU, `ascend` on NPU). A GPU
backend chosen on such a device fails wherever its kernels first run: a missing package (flashinfer), no
driver (Triton's "0 active drivers"), or CUDA calls on a CPU build of torch. Without the flag the device's
default is used.
"""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision, Finding
from specdoctor.playbooks.naming import category_of
from specdoctor.playbooks.suspects import MIN_WEIGHT, ranked_suspects
from specdoctor.playbooks.view import CommandView
from specdoctor.tools.command import RemoveFlag, SetFlag
from specdoctor.tools.edit_policy import edit_policy

ATTENTION_FLAGS = ("--attention-backend", "--prefill-attention-backend", "--decode-attention-backend")
RUNS_ON: dict[str, frozenset[str]] = {
    "cpu": frozenset({"torch_native", "intel_amx", "flex_attention"}),
    "hpu": frozenset({"torch_native"}),
    "mps": frozenset({"torch_native"}),
    "npu": frozenset({"ascend", "torch_native"}),
    "xpu": frozenset({"intel_xpu", "triton", "torch_native", "flex_attention"}),
}
"""Attention backends each non-GPU device runs (cuda and rocm run the rest)."""
_ENGINE_NAMES_IT = re.compile(r"backend(?: for \w+)? is only supported on", re.I)
_HOST_WITH_PORT = re.compile(r"^(?:(?P<scheme>[a-z]+)://)?(?P<host>[\w.-]+)(?::(?P<port>\d{1,5}))?/?$")


def check_device(view: CommandView) -> list[Finding]:
    return [*_backends_off_device(view), *_host_with_port(view), *_dist_init_addr_without_port(view)]


def _backends_off_device(view: CommandView) -> list[Finding]:
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


def _host_with_port(view: CommandView) -> list[Finding]:
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


def _dist_init_addr_without_port(view: CommandView) -> list[Finding]:
    """--dist-init-addr is host:port (the node rank 0 rendezvous). On one node it is not needed at all."""
    addr = view.get("--dist-init-addr")
    if not addr or re.search(r":\d+$", addr):
        return []
    single = view.nnodes <= 1
    return [
        Finding(
            code="dist-init-addr-without-port",
            severity="error",
            category="tp-config",
            flag="--dist-init-addr",
            message=f"--dist-init-addr {addr} has no port (SGLang reads host:port)",
            edits=(RemoveFlag(flag="--dist-init-addr"),) if single else (),
            why="one node needs no rendezvous address: SGLang picks its own"
            if single
            else "every node must name the same host:port; only a person knows which port is open",
            confidence=0.8 if single else 0.0,
        )
    ]


@playbook(
    id="sglang.network.dist-init-addr-without-port",
    category="tp-config",
    when=("exited", "hung", "unhealthy"),
    pattern=r"Missing port in address|Port could not be cast|not enough values to unpack",
    priority=18,
)
def dist_init_addr_without_port(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The rendezvous address has no port."""
    found = [f for f in _dist_init_addr_without_port(ctx.view) if f.edits]
    if not found:
        return None
    return fix(ctx, list(found[0].edits), "tp-config", found[0].message, why=found[0].why, confidence=0.8)


@playbook(
    id="sglang.hardware.backend-off-device",
    category="attention-backend",
    when=("exited", "hung", "unhealthy"),
    priority=18,
)
def backend_off_device(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A GPU attention backend chosen on a CPU, NPU, XPU, HPU or Apple device: whatever broke, it did not run."""
    found = _backends_off_device(ctx.view)
    if not found or _ENGINE_NAMES_IT.search(ctx.root_text):
        return None  # the engine's own "only supported on" message has its own rule (backends.py)
    return fix(
        ctx,
        [e for f in found for e in f.edits],
        "attention-backend",
        found[0].message,
        why=found[0].why,
        confidence=0.8,
    )


@playbook(
    id="sglang.network.host-with-port",
    category="other",
    when=("exited", "hung", "unhealthy"),
    pattern=r"Port could not be cast to integer|Invalid (?:IPv6 URL|address)|nodename nor servname|"
    r"Name or service not known|getaddrinfo failed|rendezvous: port number missing",
    priority=18,
)
def host_with_port(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The address the server or its workers build from --host and --port is not an address."""
    found = _host_with_port(ctx.view)
    if not found:
        return None
    return fix(ctx, list(found[0].edits), "other", found[0].message, why=found[0].why, confidence=0.8)


_NEEDS_A_GPU = (
    r"Torch not compiled with CUDA enabled|0 active drivers \(\[\]\)|No CUDA GPUs are available|"
    r"CUDA is not available|Found no NVIDIA driver|requires a CUDA or other accelerator"
)


@playbook(id="sglang.hardware.gpu-feature-off-device", category="other", pattern=_NEEDS_A_GPU, priority=19)
def gpu_feature_off_device(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The command runs on a CPU (NPU, XPU, HPU, Apple) device by choice, and something it switched on
    reached for a GPU: the setting the failing code belongs to goes, the device stays."""
    if (ctx.view.get("--device") or "").lower() not in RUNS_ON:
        return None
    ranked = ranked_suspects(ctx)
    # The switch that turns the feature on, rather than one of its settings (--enable-hierarchical-cache,
    # not --hicache-write-policy): without it the rest is not read.
    switches = [s for s in ranked if s.setting.startswith("--enable-")]
    ranked = switches or ranked
    if not ranked or (len(ranked) > 1 and ranked[1].weight == ranked[0].weight):
        return None
    found = ranked[0]
    return fix(
        ctx,
        list(found.edits),
        category_of(found.setting),
        f"{found.setting} needs a GPU, and the command runs on --device {ctx.view.get('--device')}",
        why=f"the failing code is {found.setting}'s ({', '.join(found.words)}) and asks for CUDA, which this "
        "device has not; without it SGLang stays on the device's own code path",
        evidence=(m.group(0),) if m else (),
        # Taking back a capability (LoRA) changes what is served: a person's call.
        confidence=0.6 if found.weight >= MIN_WEIGHT and _tuning(found.setting) else 0.45,
    )


def _tuning(setting: str) -> bool:
    return edit_policy().flag(setting).edit_class == "tuning"
