"""Checks that need this machine: model folders, their config.json, GPUs, ports."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from specdoctor.playbooks.decision import Finding
from specdoctor.playbooks.value_checks import out_of_range
from specdoctor.playbooks.view import CommandView
from specdoctor.tools.command import Edit, SetFlag, SetFreePort
from specdoctor.tools.system import ModelFacts

if TYPE_CHECKING:
    from specdoctor.tools.gpu import GpuReport

DEFAULT_PORT = 30000


def check_model(view: CommandView, model: ModelFacts | None) -> list[Finding]:
    if model is None:
        return []
    path = model.path
    if model.local and not model.exists:
        return [
            Finding(
                code="model-missing",
                severity="error",
                category="model-path",
                message=f"model folder {path} does not exist",
            )
        ]
    if model.local and not model.has_config:
        return [
            Finding(
                code="model-no-config",
                severity="error",
                category="model-path",
                message=f"model {path}: {model.error}",
            )
        ]
    if not model.local and not model.exists and view.truthy_env("HF_HUB_OFFLINE"):
        return [
            Finding(
                code="model-offline",
                severity="error",
                category="model-path",
                message=f"{path} is a Hub repo id, HF_HUB_OFFLINE is set and it is not in the local Hugging Face cache",
            )
        ]
    found: list[Finding] = []
    if model.auto_map and not view.has("--trust-remote-code"):
        found.append(
            Finding(
                code="needs-remote-code",
                severity="error",
                category="trust-remote-code",
                message=f"{path} ships its own model code (auto_map in config.json); loading it needs --trust-remote-code",
                edits=(SetFlag(flag="--trust-remote-code"),),
                why="transformers refuses custom code unless allowed",
                confidence=0.85,
            )
        )
    found.extend(_context_length(view, model))
    found.extend(_model_files(view, model))
    return found


def _model_files(view: CommandView, model: ModelFacts) -> list[Finding]:
    """Files of the model folder SGLang parses that would fail it: a JSON file that does not parse (the
    tokenizer fails to load), sampling defaults SGLang rejects in every request that takes them."""
    # The tokenizer's files are read from the model folder unless another tokenizer is named or skipped.
    own_tokenizer = view.get("--tokenizer-path") in (None, model.path) and not view.has(
        "--skip-tokenizer-init"
    )
    found = [
        Finding(
            code="model-file-broken",
            severity="error",
            category="model-path",
            message=f"model {model.path}: {problem} (not valid JSON; loading the model fails on it)",
        )
        for problem in model.broken_files
        if own_tokenizer or problem.startswith("generation_config.json")
    ]
    bad = out_of_range(model.generation_defaults)
    if bad and view.get("--sampling-defaults") != "openai" and view.catalog.get("--sampling-defaults"):
        found.append(
            Finding(
                code="generation-defaults-rejected",
                severity="error",
                category="other",
                flag="--sampling-defaults",
                message=f"model {model.path}: generation_config.json sets {', '.join(bad.values())}, which "
                "SGLang rejects in every request that leaves it to the model's defaults",
                edits=(SetFlag(flag="--sampling-defaults", values=("openai",)),),
                why="--sampling-defaults openai takes SGLang's own defaults instead of generation_config.json's "
                "(or correct the file)",
                confidence=0.7,
            )
        )
    return found


def _context_length(view: CommandView, model: ModelFacts) -> list[Finding]:
    asked = view.int("--context-length")
    limit = model.max_position_embeddings
    if (
        asked is None
        or limit is None
        or asked <= limit
        or view.truthy_env("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN")
    ):
        return []
    edits: tuple[Edit, ...] = (SetFlag(flag="--context-length", values=(str(limit),)),)
    return [
        Finding(
            code="context-too-long",
            severity="error",
            category="context-length",
            message=f"--context-length {asked} is above the model's {limit} (max_position_embeddings); SGLang raises ValueError",
            edits=edits,
            why=f"{limit} is the longest context the model was built for; set SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 "
            "instead only if its RoPE scaling really supports more",
            confidence=0.8,
        )
    ]


def _mask(view: CommandView, gpus: GpuReport) -> list[str] | None:
    mask = view.env("CUDA_VISIBLE_DEVICES")
    if mask is None:
        mask = os.environ.get("CUDA_VISIBLE_DEVICES") if gpus.source != "described" else None
    return None if mask is None else [d.strip() for d in mask.split(",") if d.strip()]


def visible_gpus(view: CommandView, gpus: GpuReport | None) -> int | None:
    """How many GPUs the launch will see: the node's, narrowed by CUDA_VISIBLE_DEVICES."""
    if gpus is None or not gpus.ok:
        return None
    mask = _mask(view, gpus)
    return gpus.count if mask is None else len(mask)


def launch_gpus(view: CommandView, gpus: GpuReport | None) -> set[int] | None:
    """Indices (nvidia-smi numbering) of the GPUs the launch uses; None when unknown (UUIDs in the mask)."""
    if gpus is None or not gpus.ok:
        return None
    mask = _mask(view, gpus)
    if mask is None:
        return {g.index for g in gpus.gpus}
    return {int(d) for d in mask} if all(d.isdigit() for d in mask) else None


def check_parallel(view: CommandView, model: ModelFacts | None, gpus: GpuReport | None) -> list[Finding]:
    tp, pp = view.tp, view.pp
    found: list[Finding] = []
    heads = model.num_attention_heads if model else None
    visible = visible_gpus(view, gpus)
    found += check_nodes(view)
    if view.nnodes > 1:
        if visible is not None and view.gpus_per_node > visible:
            found.append(_node_too_small(view, visible, gpus))
        return found  # a multi-node layout is the user's to change, never preflight's
    if visible is not None and view.world > visible:
        best = largest_tp(visible // pp, heads)
        found.append(
            Finding(
                code="tp-above-gpus",
                severity="error",
                category="tp-config",
                message=f"--tp-size {tp}{f' × --pp-size {pp}' if pp > 1 else ''} needs {tp * pp} GPUs; this launch sees {visible}",
                evidence=(gpus.summary(),) if gpus else (),
                edits=(SetFlag(flag="--tp-size", values=(str(best),)),) if best else (),
                why=f"{best} is the largest TP size that fits the visible GPUs{' and divides the attention heads' if heads else ''}; "
                "the model must still fit in their memory"
                if best
                else "",
                confidence=0.7,
            )
        )
    elif heads and heads % tp:
        best = largest_tp(tp, heads)
        found.append(
            Finding(
                code="tp-heads",
                severity="error",
                category="tp-config",
                message=f"--tp-size {tp} does not divide the model's {heads} attention heads",
                edits=(SetFlag(flag="--tp-size", values=(str(best),)),) if best and best > 1 else (),
                why=f"{best} divides {heads}" if best else "",
                confidence=0.6,
            )
        )
    return found


def check_nodes(view: CommandView) -> list[Finding]:
    """A multi-node launch names its rendezvous and its rank on every node, and splits its ranks evenly."""
    if view.nnodes == 1:
        return []
    problems = []
    if not view.get("--dist-init-addr"):
        problems.append("--dist-init-addr is missing (every node must name the same rendezvous host:port)")
    rank = view.int("--node-rank")
    if rank is None or not 0 <= rank < view.nnodes:
        problems.append(
            f"--node-rank must be 0 … {view.nnodes - 1} on each node (got {view.get('--node-rank')})"
        )
    if view.world % view.nnodes:
        problems.append(
            f"--tp-size {view.tp} × --pp-size {view.pp} does not split evenly over --nnodes {view.nnodes}"
        )
    return [
        Finding(code="multi-node", severity="error", category="tp-config", message=f"multi-node launch: {p}")
        for p in problems
    ]


def _node_too_small(view: CommandView, visible: int, gpus: GpuReport | None) -> Finding:
    return Finding(
        code="node-too-small",
        severity="error",
        category="tp-config",
        message=f"--tp-size {view.tp} × --pp-size {view.pp} over --nnodes {view.nnodes} needs "
        f"{view.gpus_per_node} GPUs per node; this node sees {visible}",
        evidence=(gpus.summary(),) if gpus else (),
    )


def largest_tp(limit: int, heads: int | None) -> int | None:
    """The largest power-of-two TP size up to `limit` that divides the attention heads (when known)."""
    for tp in range(limit, 0, -1):
        if tp & (tp - 1) == 0 and (heads is None or heads % tp == 0):
            return tp
    return None


def check_port(view: CommandView, free: bool | None) -> list[Finding]:
    """`free`: whether the command's port was free on the host (None: unknown, nothing to say)."""
    port, host = port_of(view)
    if not 0 < port < 65536 or free is not False:
        return []
    return [
        Finding(
            code="port-busy",
            severity="error",
            category="port-in-use",
            message=f"port {port} on {host} is already taken: SGLang would load the model, fail to bind, and hang",
            edits=(SetFreePort(start=port + 10),),
            why="a free port at least 10 above it: SGLang also uses a few ports above --port",
            evidence=(
                f"[Errno 98] error while attempting to bind on address ('{host}', {port}): address already in use",
            ),
        )
    ]


def check_host_address(view: CommandView) -> list[Finding]:
    """--host names an address this machine does not have: the server cannot bind it, and SGLang's own
    readiness request to it waits until its timeout (half an hour) before the launch is called failed."""
    host = port_of(view)[1]
    return [
        Finding(
            code="host-not-local",
            severity="error",
            category="other",
            flag="--host",
            message=f"--host {host} is not an address of this machine: SGLang would wait for its own server "
            "there until it times out",
            edits=(SetFlag(flag="--host", values=("0.0.0.0",)),),
            why="0.0.0.0 listens on every address this machine has, including the one clients were meant to use",
            confidence=0.8,
        )
    ]


def port_of(view: CommandView) -> tuple[int, str]:
    """The HTTP port and host the command binds."""
    return view.int("--port") or DEFAULT_PORT, view.get("--host") or "127.0.0.1"


def check_gpu_presence(view: CommandView, gpus: GpuReport | None) -> list[Finding]:
    if gpus is None or gpus.ok or view.get("--device") == "cpu":
        return []
    return [
        Finding(
            code="no-gpu",
            severity="warning",
            category="driver-cuda",
            message=f"no usable NVIDIA GPU: {gpus.message}",
            evidence=(gpus.message,),
        )
    ]
