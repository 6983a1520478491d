"""Launches that die of a setting the device or the host cannot have: the static checks of
`device_checks.py`, applied when SGLang's own error shows it."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.device_checks import (
    RUNS_ON,
    backends_off_device,
    dist_init_addr_faults,
    host_with_port,
)
from specdoctor.playbooks.naming import category_of, named_in
from specdoctor.playbooks.suspects import MIN_WEIGHT, failing_path, is_tuning, prime_suspect, ranked_suspects
from specdoctor.tools.command import SetFlag

_ENGINE_NAMES_IT = re.compile(r"backend(?: for \w+)? is only supported on", re.I)


@playbook(
    id="sglang.network.dist-init-addr",
    category="tp-config",
    when=("exited", "hung", "unhealthy"),
    pattern=r"Missing port in address|Port could not be cast|not enough values to unpack|Bare IPv6 address|"
    r"Port out of range|rendezvous: port number missing",
    priority=18,
)
def rendezvous_address(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The rendezvous address is not host:port: no port, a scheme, a bare IPv6 host, a port past 65535."""
    found = [f for f in dist_init_addr_faults(ctx.view) if f.edits]
    if not found:
        return None
    return fix(ctx, list(found[0].edits), "tp-config", found[0].message, why=found[0].why, confidence=0.8)


@playbook(
    id="sglang.hardware.backend-off-device",
    category="attention-backend",
    when=("exited", "hung", "unhealthy"),
    priority=18,
)
def backend_the_device_lacks(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A GPU attention backend chosen on a CPU, NPU, XPU, HPU or Apple device: whatever broke, it did not run."""
    found = backends_off_device(ctx.view)
    if not found or _ENGINE_NAMES_IT.search(ctx.root_text):
        return None  # the engine's own "only supported on" message has its own rule (backends.py)
    check = ctx.engine_check
    if (
        check is not None
        and check.site.fields
        and not any("attention_backend" in f for f in check.site.fields)
    ):
        return None  # SGLang stopped at a check of other settings first: that is the failure to fix now
    edits = [e for f in found for e in f.edits]
    why = found[0].why
    # The failure runs through another chosen setting's own code (`batch_invariant_ops` for
    # --enable-deterministic-inference): the backend alone is half of what does not run on this device.
    other = prime_suspect(ctx)
    if other is not None and not any(getattr(e, "flag", None) == other.setting for e in edits):
        edits += other.edits
        why += (
            f"; and the failing code is {other.setting}'s ({', '.join(other.words)}), which needs a GPU too"
        )
    return fix(ctx, edits, "attention-backend", found[0].message, why=why, confidence=0.8)


@playbook(
    id="sglang.network.host-with-port",
    category="other",
    when=("exited", "hung", "unhealthy"),
    pattern=r"Port could not be cast to integer|Invalid (?:IPv6 URL|address)|nodename nor servname|"
    r"Name or service not known|getaddrinfo failed|rendezvous: port number missing",
    priority=18,
)
def host_written_with_port(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The address the server or its workers build from --host and --port is not an address."""
    found = host_with_port(ctx.view)
    if not found:
        return None
    return fix(ctx, list(found[0].edits), "other", found[0].message, why=found[0].why, confidence=0.8)


_NEEDS_A_GPU = (
    r"Torch not compiled with CUDA enabled|0 active drivers \(\[\]\)|No CUDA GPUs are available|"
    r"CUDA is not available|Found no NVIDIA driver|requires a CUDA or other accelerator|you have a CUDA build"
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
        confidence=0.6 if found.weight >= MIN_WEIGHT and is_tuning(found.setting) else 0.45,
    )


# How a device's runtime says it is not there: its tool missing, no device to open, nothing to measure.
_ABSENT = re.compile(
    r"not found|not available|requires an available|no \w+ (?:devices?|memory values?) (?:found|available)|"
    r"no such device|found no|cannot find|is not installed|not compiled with",
    re.I,
)


@playbook(
    id="sglang.hardware.device-absent", category="other", when=("exited", "hung", "unhealthy"), priority=19
)
def device_absent(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """--device names an accelerator this host does not have: SGLang fails in that device's own code
    (`get_hpu_memory_capacity`, `hardware_backend/mps/`) saying it is not there. The host's own device is
    what to run on."""
    device = (ctx.view.get("--device") or "").lower()
    gpus = ctx.gpus
    if device in ("", "cpu", "cuda") or gpus is None or not (gpus.status == "no_gpu" or gpus.ok):
        return None
    error, stack = failing_path(ctx)
    if not named_in(device, stack) or not _ABSENT.search(error):
        return None
    host = "cpu" if gpus.status == "no_gpu" else "cuda"
    has = "no GPU" if host == "cpu" else f"{gpus.summary()}, which torch calls `cuda`"
    return fix(
        ctx,
        [SetFlag(flag="--device", values=(host,))],
        "other",
        f"--device {device}: SGLang's {device} code says this host has no such device",
        why=f"the failure is in the {device} runtime's own code ({error.splitlines()[0][:120]}); this host has "
        f"{has}, so SGLang runs with --device {host}",
        confidence=0.6,
    )
