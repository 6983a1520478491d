"""Preflight: every static fault of a launch command, found before any GPU time is spent.

Flags first (names, values), then speculative-decoding rules on the command with its flags fixed, then
what needs this host (model folders, GPUs, the port). Each finding carries the edits that fix it; the
corrected command applies the fixes of every error and warning.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from specdoctor.playbooks.conflict_checks import check_engine_conflicts
from specdoctor.playbooks.container_checks import check_container, check_published_port
from specdoctor.playbooks.decision import Finding, Fix, Stop
from specdoctor.playbooks.device_checks import check_device
from specdoctor.playbooks.flag_checks import check_flags
from specdoctor.playbooks.host_checks import (
    check_gpu_presence,
    check_host_address,
    check_model,
    check_parallel,
    check_port,
    port_of,
)
from specdoctor.playbooks.repo_ids import check_repo_ids
from specdoctor.playbooks.serving import check_serving
from specdoctor.playbooks.spec_checks import check_speculative
from specdoctor.playbooks.value_checks import check_values
from specdoctor.playbooks.view import CommandView
from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.command import Edit, LaunchCommand
from specdoctor.tools.system import ModelFacts, address_is_local, looks_local, model_facts, port_is_free

if TYPE_CHECKING:
    from specdoctor.tools.gpu import GpuReport

_ROUNDS = 3


class HostFacts(BaseModel):
    """What preflight read from this host: config.json facts by path and port freeness by `host:port`.

    Live, a missing entry is read from the host (and kept); recorded (`live=False`, replay), a missing
    entry is unknown and the check that needs it says nothing. The checks themselves never touch the host.
    """

    models: dict[str, ModelFacts] = {}
    ports: dict[str, bool] = {}
    addresses: dict[str, bool] = {}
    """Whether each --host is an address of this machine."""
    live: bool = True

    def model(self, path: str | None) -> ModelFacts | None:
        if path is None:
            return None
        if path not in self.models and self.live:
            self.models[path] = model_facts(path)
        return self.models.get(path)

    def address_local(self, host: str) -> bool | None:
        if host not in self.addresses and self.live:
            self.addresses[host] = address_is_local(host)
        return self.addresses.get(host)

    def port_free(self, port: int, host: str) -> bool | None:
        key = f"{host}:{port}"
        if key not in self.ports and self.live and 0 < port < 65536:
            self.ports[key] = port_is_free(port, host)
        return self.ports.get(key)


class PreflightReport(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, defer_build=True)
    original: LaunchCommand
    corrected: LaunchCommand
    findings: tuple[Finding, ...]
    catalog_note: str = ""
    elapsed_s: float = 0.0
    host_facts: HostFacts | None = None

    @property
    def problems(self) -> tuple[Finding, ...]:
        """Findings that matter (errors and warnings), not notes."""
        return tuple(f for f in self.findings if f.severity != "info")

    @property
    def unfixed(self) -> tuple[Finding, ...]:
        """Errors with no known fix: the launch cannot work as written."""
        return tuple(f for f in self.findings if f.severity == "error" and not f.edits)

    @property
    def clean(self) -> bool:
        return not self.problems

    def edits(self) -> tuple[Edit, ...]:
        return tuple(e for f in self.problems for e in f.edits)

    def decision(self) -> Fix | Stop | None:
        """What the loop does before launching: stop at a fault nobody can fix, apply the fixes, or go."""
        if self.unfixed:
            f = self.unfixed[0]
            return Stop(
                category=f.category,
                summary=f.message,
                advice="Fix it by hand; `specdoctor check` shows the details.",
                evidence=f.evidence,
                playbook="preflight",
            )
        if not self.edits():
            return None
        lead = self.problems[0]
        return Fix(
            category=lead.category,
            summary=f"{len(self.problems)} problem(s) found before launch: {lead.message}",
            edits=self.edits(),
            why=" ".join(f.why for f in self.problems if f.why),
            evidence=lead.evidence,
            playbook="preflight",
            confidence=min(f.confidence for f in self.problems),
        )


def preflight(
    spec: LaunchCommand,
    catalog: FlagCatalog,
    *,
    gpus: GpuReport | None = None,
    host: bool = True,
    catalog_note: str = "",
    facts: HostFacts | None = None,
) -> PreflightReport:
    """Check `spec`. `host=False` skips what depends on this machine (paths, port), e.g. for a recorded log;
    `facts` gives that machine's facts as recorded (replay) instead of reading them here."""
    started = time.perf_counter()
    if host and facts is None:
        facts = HostFacts()
    findings: list[Finding] = []
    current = spec
    seen: set[tuple[str, str | None, str]] = set()
    for _ in range(_ROUNDS):
        new = [f for f in _check(current, catalog, gpus, facts) if (f.code, f.flag, f.message) not in seen]
        if not new:
            break
        seen.update((f.code, f.flag, f.message) for f in new)
        findings.extend(new)
        fixes = [e for f in new if f.severity != "info" for e in f.edits]
        if not fixes:
            break
        current = current.apply_all(fixes, catalog.canonical)
    return PreflightReport(
        original=spec,
        corrected=current,
        findings=tuple(findings),
        catalog_note=catalog_note,
        elapsed_s=time.perf_counter() - started,
        host_facts=facts,
    )


def _check(
    spec: LaunchCommand, catalog: FlagCatalog, gpus: GpuReport | None, host: HostFacts | None
) -> list[Finding]:
    flags = check_flags(spec, catalog)
    if any(f.severity == "error" and f.edits for f in flags):
        return flags  # fix names first: the rules below read flags by their canonical names
    view = CommandView(spec, catalog)
    model, draft = facts(view, host) if host else (None, None)
    found = flags + check_speculative(spec, catalog, model, draft) + check_container(view)
    found += check_serving(view) + check_repo_ids(view) + check_device(view, gpus) + check_values(view)
    if host:
        found += check_model(view, model)
        found += check_parallel(view, model, gpus)
        found += _port(view, host)
        found += check_gpu_presence(view, gpus)
    return found + _unclaimed(check_engine_conflicts(spec, catalog), found, catalog)


def _unclaimed(conflicts: list[Finding], found: list[Finding], catalog: FlagCatalog) -> list[Finding]:
    """The engine's conflicts that no finding above already edits (their rule knows the remedy better)."""
    edited = {catalog.canonical(f) for x in found for e in x.edits for f in _flags_of(e)}
    return [
        c for c in conflicts if not edited & {catalog.canonical(f) for e in c.edits for f in _flags_of(e)}
    ]


def _flags_of(edit: Edit) -> tuple[str, ...]:
    return tuple(n for n in (getattr(edit, "flag", None), getattr(edit, "to", None)) if n)


def _port(view: CommandView, host: HostFacts) -> list[Finding]:
    """The engine's port on this host, or for a container on a bridge network the host port published to it."""
    box = view.spec.container
    if box is None or box.host_network:
        if host.address_local(port_of(view)[1]) is False:
            return check_host_address(view)  # not ours: binding any port there fails, busy or not
        return check_port(view, host.port_free(*port_of(view)))
    reach = box.reach(port_of(view)[0])
    return check_published_port(view, host.port_free(reach[1], reach[0])) if reach else []


def model_path(view: CommandView) -> str | None:
    return view.get("--model-path") or (
        view.spec.positionals()[0] if view.spec.is_serve_cli and view.spec.positionals() else None
    )


def facts(view: CommandView, host: HostFacts | None = None) -> tuple[ModelFacts | None, ModelFacts | None]:
    """config.json facts of the target and the draft model, where they can be read here."""
    host = host or HostFacts()
    draft = view.get("--speculative-draft-model-path")
    return host.model(_here(view, model_path(view))), host.model(_here(view, draft))


def _here(view: CommandView, path: str | None) -> str | None:
    """Where a model folder the engine reads is on this host: for a containerised engine, through the
    container's bind mounts (None when none holds it: the folder is in the image, unknown here)."""
    box = view.spec.container
    if path is None or box is None or not looks_local(path):
        return path
    return box.host_path(path)


def validate_edits(
    spec: LaunchCommand,
    edits: Sequence[Edit],
    catalog: FlagCatalog,
    *,
    gpus: GpuReport | None = None,
    host: bool = True,
) -> list[str]:
    """Why these proposed edits are not acceptable (empty when they are): every flag they name must exist
    under its full name, and the command they produce must pass preflight with no error at all."""
    problems: list[str] = []
    for e in edits:
        for name in _flags_named(e):
            r = catalog.resolve(name)
            if r.status not in ("exact",):
                problems.append(
                    f"{name} is not a flag of SGLang {catalog.version} (use the full name --help lists)"
                )
    if problems:
        return problems
    after = spec.apply_all(edits, catalog.canonical)
    if after == spec:
        return ["the edits do not change the command"]
    report = preflight(after, catalog, gpus=gpus, host=host)
    return [f.message for f in report.findings if f.severity == "error"]


def _flags_named(edit: Edit) -> list[str]:
    names = [getattr(edit, "flag", None), getattr(edit, "to", None)]
    if edit.op == "rename":
        names = [getattr(edit, "to", None)]
    return [n for n in names if n]
