"""The GPU, its driver and the kernels built for it; experimental features that break on some of them."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, StopRule, fix, line_of, playbook, stop, stop_rules
from specdoctor.playbooks.code_paths import code_locations
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.overrides import leftover_quantization
from specdoctor.playbooks.suspects import prime_suspect, revert_prime_suspect
from specdoctor.tools.command import RemoveFlag, SetFlag


@playbook(
    id="sglang.hardware.no-gpu",
    category="driver-cuda",
    pattern=r"No accelerator \(CUDA|No CUDA GPUs are available|Found no NVIDIA driver|NVIDIA-SMI has failed|"
    r"couldn't communicate with the NVIDIA driver|Driver/library version mismatch|torch\._C' has no attribute '_cuda|"
    r"0 active drivers \(\[\]\)",
    priority=20,
)
def no_gpu(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """No usable GPU: no driver, a driver/library mismatch, or a container without GPU access."""
    facts = ctx.gpus.message if ctx.gpus is not None and not ctx.gpus.ok else ""
    mismatch = "version mismatch" in ctx.search_text
    advice = (
        "Reboot or reload the nvidia kernel modules: the driver libraries were upgraded under a loaded module."
        if mismatch
        else "Run on a machine with an NVIDIA GPU and driver (in Docker: --gpus all), or describe what you "
        "expected with `specdoctor diagnose --gpus`."
    )
    return stop(
        ctx,
        "driver-cuda",
        f"no usable GPU: {facts or ctx.root.error_line or 'SGLang found no accelerator'}",
        advice,
        confidence=0.95,
    )


stop_rules(
    __name__,
    [
        StopRule(
            id="sglang.hardware.driver-too-old",
            category="driver-cuda",
            pattern=r"driver on your system is too old|CUDA driver version is insufficient|"
            r"Error 804: forward compatibility|Error 802: system not yet initialized",
            priority=20,
            doc="The driver is older than the CUDA the wheels were built for (or fabric manager is missing).",
            summary="the NVIDIA driver does not support the CUDA version of the installed PyTorch/SGLang",
            advice="Upgrade the driver (or install wheels built for the driver's CUDA); on NVSwitch systems start "
            "nvidia-fabricmanager.",
        ),
        StopRule(
            id="sglang.hardware.no-kernel-image",
            category="driver-cuda",
            pattern=r"no kernel image is available for execution on the device",
            priority=20,
            doc="The installed binaries were not built for this GPU's compute capability.",
            summary="the installed kernels have no code for this GPU architecture",
            advice="Install SGLang/PyTorch builds for this GPU (e.g. CUDA 12.8+ wheels for Blackwell); compare "
            "nvidia-smi's compute_cap with the wheel.",
        ),
    ],
)


@playbook(
    id="sglang.hardware.package-skew",
    category="driver-cuda",
    pattern=r"with minimum required version .* is not installed|sgl[-_]kernel.*(?:version|not installed)|undefined symbol|"
    r"ImportError: .*\.so|No module named '(?:sgl_kernel|flashinfer|deep_gemm|triton|vllm|flash_attn)|flashinfer.* version",
    priority=25,
    scope="root",
)
def package_skew(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A kernel package (flashinfer, sgl-kernel) is missing or of the wrong version: an environment problem."""
    return stop(
        ctx,
        "driver-cuda",
        f"the Python environment does not match this SGLang: {ctx.root.error_line or 'a kernel package is wrong'}",
        'Install the versions SGLang pins (`pip install "sglang[all]==<version>"` or the matching docker image); no launch flag changes a package.',
    )


_PRELOADING = {
    "--enable-memory-saver": "SGLang starts its workers with torch_memory_saver's hook library preloaded "
    "(LD_PRELOAD), and that library links the CUDA runtime it was built for",
}
"""Switches that make SGLang preload a native library into its worker processes."""


@playbook(
    id="sglang.hardware.shared-library",
    category="driver-cuda",
    pattern=r"(?m)^(?P<program>[^\s:]+): error while loading shared libraries: (?P<lib>[^\s:]+)",
    priority=25,
)
def missing_shared_library(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A process of the launch could not even start: the dynamic loader did not find a library. A Python
    interpreter links no CUDA library of its own, so an interpreter failing so had one preloaded into it: by
    a switch of the command that preloads into SGLang's workers (take it back), or by the environment."""
    assert m is not None
    program, lib = m["program"], m["lib"]
    interpreter = re.search(r"python[\d.]*$", program) is not None
    chosen = [flag for flag in _PRELOADING if ctx.view.has(flag)]
    if interpreter and len(chosen) == 1:
        return fix(
            ctx,
            [RemoveFlag(flag=chosen[0])],
            "driver-cuda",
            f"a worker's Python could not start: {lib} is not installed, and {_PRELOADING[chosen[0]]}",
            why=f"without {chosen[0]} nothing is preloaded into the workers; to keep it, install the CUDA "
            f"runtime that provides {lib} (or a build of the package for this machine's CUDA)",
            evidence=(line_of(m),),
            confidence=0.6,
        )
    preloaded = (
        " (the environment preloads a library: LD_PRELOAD)" if "LD_PRELOAD" in ctx.spec.env_dict() else ""
    )
    return stop(
        ctx,
        "driver-cuda",
        f"{program.rsplit('/', 1)[-1]} could not start: the library {lib} is not installed{preloaded}",
        f"Install what provides {lib} (a CUDA runtime library: the CUDA toolkit or the nvidia-*-cu* wheel of "
        "that major version), or packages built for the CUDA this machine has; no launch flag provides a "
        "library.",
        evidence=(line_of(m),),
    )


_ATTENTION_CODE = re.compile(r"layers/attention/|attention|attn|_fwd_kernel", re.I)
"""Where an attention kernel runs: SGLang's attention backends and their Triton ops."""


@playbook(
    id="sglang.hardware.triton-smem",
    category="attention-backend",
    pattern=r"OutOfResources: out of resource: shared memory",
    priority=30,
)
def triton_shared_memory(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A Triton kernel's tiles need more shared memory than this GPU has. The attention backend swaps the
    kernels only when the kernel is attention's; elsewhere (a MoE or matmul kernel on a feature's path) the
    setting on the failing path is taken back, and with none the kernel has no config for this GPU: stop."""
    failure = "a Triton kernel needs more shared memory than this GPU has"
    code = code_locations(ctx)
    if code and not any(_ATTENTION_CODE.search(place) for place in code):
        # Not attention's kernel: the attention backend is no suspect, whatever its value (`triton` also
        # names the compiler that raised).
        return revert_prime_suspect(ctx, failure, ignore=frozenset({"--attention-backend"})) or stop(
            ctx,
            "engine-bug",
            f"{failure}, in code no setting of the command chose ({', '.join(code[-3:])})",
            "SGLang has no kernel config for this GPU's shared memory: upgrade SGLang, or report it with the "
            "GPU model and the traceback; no launch flag changes the kernel's tile sizes.",
        )
    backend = ctx.view.get("--attention-backend")
    if backend == "flashinfer":
        return fix(
            ctx,
            [SetFlag(flag="--chunked-prefill-size", values=("2048",))],
            "attention-backend",
            failure,
            why="smaller prefill chunks use smaller kernels",
            confidence=0.5,
        )
    return fix(
        ctx,
        [SetFlag(flag="--attention-backend", values=("flashinfer",))],
        "attention-backend",
        f"{failure}, in attention" + (" (the command chose the Triton backend)" if backend else ""),
        why="flashinfer's kernels fit consumer GPUs",
        # Chosen by the command, it is the setting to take back; chosen by SGLang, it may have had a reason.
        confidence=0.7 if backend else 0.5,
    )


@playbook(
    id="sglang.hardware.fp8-arch",
    category="quantization",
    pattern=r"(?i)fp8e4nv not supported in this architecture|fp8.*(?:not supported|requires).*(?:capability|architecture|SM)|compute capability.*fp8",
    priority=30,
)
def fp8_unsupported(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """FP8 kernels need SM89+; an older GPU cannot run online FP8 quantization."""
    if ctx.view.get("--quantization") == "fp8" and not (ctx.model and ctx.model.quantization):
        return fix(
            ctx,
            [RemoveFlag(flag="--quantization")],
            "quantization",
            "online FP8 quantization needs an Ada/Hopper (SM89+) GPU",
            why="without it the model runs in its own dtype",
            confidence=0.7,
        )
    if chosen := _fp8_value_the_error_names(ctx):
        return chosen
    return stop(
        ctx,
        "quantization",
        "this FP8 checkpoint needs an SM89+ GPU",
        "Use a GPU with FP8 support or a non-FP8 checkpoint.",
    )


def _fp8_value_the_error_names(ctx: Context) -> Decision | None:
    """The GPU requirement is the requirement of a value the command chose (`--kv-cache-dtype mxfp8
    requires an SM100+ GPU`), not of the checkpoint: that value goes back to SGLang's default."""
    found = prime_suspect(ctx)
    if found is None or found.how != "value in error":
        return None
    return fix(
        ctx,
        list(found.edits),
        "quantization",
        f"{found.setting} {ctx.view.get(found.setting) or ''} needs a newer GPU than this one: "
        f"{ctx.root.error_line or ''}".strip(),
        why=f"the error names the command's own {found.setting} value; at SGLang's default the model runs "
        "in a format this GPU has",
        confidence=0.6,
    )


@playbook(
    id="sglang.hardware.torch-compile",
    category="other",
    pattern=r"ModelRunner|model_runner|torch\._dynamo|inductor|tp_worker",
    priority=80,
)
def torch_compile_crash(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A startup crash while building the model with --enable-torch-compile: drop the experimental feature."""
    if not ctx.view.has("--enable-torch-compile") or ctx.outcome.ready_seen:
        return None
    compiled = _COMPILING.search(ctx.root_text) or any(_COMPILING.search(f.path) for f in ctx.root.frames)
    building = any(re.search(r"model_runner|tp_worker|cuda_graph_runner", f.path) for f in ctx.root.frames)
    if not (compiled or building):
        return None
    return fix(
        ctx,
        [RemoveFlag(flag="--enable-torch-compile")],
        "other",
        "the model runner crashed while --enable-torch-compile was on"
        + (" (inside torch.compile)" if compiled else ""),
        why="torch.compile is experimental in SGLang and does not support every dtype/quantization; the model serves without it",
        # Without a torch.compile frame this is the likeliest of the user's switches, not a proven cause.
        confidence=0.7 if compiled else 0.45,
    )


_COMPILING = re.compile(
    r"torch/_dynamo|torch/_inductor|torch\._dynamo|torch\._inductor|BackendCompilerFailed|InductorError|compile_fx"
)


@playbook(
    id="sglang.hardware.quant-alignment",
    category="quantization",
    pattern=r"not aligned with the quantized weight shape|not divisible by .*(?:group|block)[_ ]size|weight shape .* quantiz",
    priority=30,
)
def quant_alignment(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A quantized checkpoint's shapes do not split across this many GPUs (or at all) for this kernel."""
    if leftover := leftover_quantization(ctx, "the quantized weight shapes do not fit"):
        return leftover
    return stop(
        ctx,
        "quantization",
        f"the quantized weights cannot be sharded this way: {ctx.root.error_line or m.group(0) if m else ''}",
        "Try a smaller --tp-size only if the model still fits; otherwise use a checkpoint quantized for this "
        "architecture (or unquantized) — the kernel cannot map these shapes.",
        confidence=0.7,
    )
