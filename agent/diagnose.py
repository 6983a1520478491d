"""One decision from a recorded failure: a log (a file of any size, or text), the command, GPU facts.

Used by `specdoctor diagnose`, by `eval` on the crash corpus, and by the launch loop after a crash, so the
three can never decide differently about the same evidence.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from specdoctor.agent.planner import ChainPlanner, Planned, Planner, PlaybookPlanner
from specdoctor.agent.preflight import facts, preflight
from specdoctor.playbooks.base import Context
from specdoctor.playbooks.decision import Decision, Fix, Retry, Stop
from specdoctor.playbooks.view import CommandView
from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.command import LaunchCommand
from specdoctor.tools.engine_source.lookup import Located
from specdoctor.tools.errors import UsageError
from specdoctor.tools.files import MiB, read_text
from specdoctor.tools.gpu import GpuReport, parse_gpus_description
from specdoctor.tools.log_cause import RootCause, server_answer
from specdoctor.tools.logs import compact, extract_root_cause, scan_file
from specdoctor.tools.outcome import EXIT_KIND_TO_OUTCOME, Outcome, OutcomeKind
from specdoctor.tools.sglang_facts import facts_for
from specdoctor.tools.system import ModelFacts

CASE_MAX_BYTES = 64 * MiB
"""A case carries its whole log; the corpus's largest is well under 1 MiB."""
_RUN_START = re.compile(r"server_args=")
_ACCEPT = re.compile(r"accept[ _]len(?:gth)?[\"']?\s*[:=]\s*([0-9]+(?:\.[0-9]+)?)", re.I)


class CrashCase(BaseModel):
    """A case of the crash corpus (tests/data/corpus/README.md)."""

    model_config = ConfigDict(extra="allow")
    id: str
    command: str
    log: str
    gpus: str | None = None
    exit_kind: str | None = None
    category: str | None = None
    action: str | None = None
    expected: list[list[dict[str, Any]]] = []


def read_case(path: Path) -> CrashCase:
    try:
        raw = json.loads(read_text(path, "case", CASE_MAX_BYTES))
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{path} is not JSON: {exc}") from None
    try:
        return CrashCase.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UsageError(
            f"{path}: {where}: {first['msg'].lower()} (see the corpus README for the fields)"
        ) from None


def outcome_from_log(
    lines: list[str], exit_kind: str | None = None, log_path: str | None = None, ready: bool | None = None
) -> Outcome:
    """The Outcome a watcher would have reported, inferred from a recorded log (`ready`: known already)."""
    text = "\n".join(lines[-2000:])
    accept = [float(x) for x in _ACCEPT.findall(text)]
    accept_length = sum(accept[-5:]) / len(accept[-5:]) if accept else None
    kind: OutcomeKind
    if exit_kind in EXIT_KIND_TO_OUTCOME:
        kind = EXIT_KIND_TO_OUTCOME[exit_kind]
        if kind == "degraded" and server_answer(lines[-2000:]) is not None:
            kind = "unhealthy"  # requests are turned away, as the watcher's own probe would find
    elif re.search(r"\[Errno 98\]", text):
        kind = "hung"
    elif (
        accept_length is not None
        and accept_length <= facts_for().acceptance.none_accepted
        and not re.search(r"Traceback|Error:", text)
    ):
        kind = "degraded"
    else:
        kind = "exited"
    parse_error = bool(re.search(r": error: ", text)) and exit_kind in (None, "parse-error")
    if ready is None:
        # A log appended to across restarts holds several runs; readiness counts only in the last one.
        starts = list(_RUN_START.finditer(text))
        ready = "fired up and ready to roll" in (text[starts[-1].start() :] if starts else text)
    return Outcome(
        kind=kind,
        detail=f"from a recorded log ({exit_kind or 'kind inferred'})",
        accept_length=accept_length,
        parse_error=parse_error,
        exit_code=2 if parse_error else None,
        log_path=log_path,
        ready_seen=ready,
    )


def context_for(
    spec: LaunchCommand,
    catalog: FlagCatalog,
    lines: list[str],
    *,
    gpus: GpuReport | None = None,
    outcome: Outcome | None = None,
    tried: tuple[LaunchCommand, ...] = (),
    log_text: str | None = None,
    root: RootCause | None = None,
    model: ModelFacts | None = None,
    draft: ModelFacts | None = None,
    engine_check: Located | str | None = "find",
) -> Context:
    """Everything a planner sees. Model and draft facts, and the engine check the failure stopped at, are
    read here unless given (replay passes the recorded ones: the folders need not exist on this machine)."""
    root = root or extract_root_cause(lines)
    if root.kind == "none" and outcome is not None and outcome.kind in ("unhealthy", "degraded"):
        # Our own probe's request was turned away: its answer (in the outcome) is the engine's reason.
        root = extract_root_cause([outcome.detail])
    view = CommandView(spec, catalog)
    if model is None and draft is None:
        model, draft = facts(view)
    report = preflight(spec, catalog, gpus=gpus, host=False)
    return Context(
        spec=spec,
        catalog=catalog,
        outcome=outcome or outcome_from_log(lines),
        root=root,
        log_text=log_text if log_text is not None else compact(lines, root=root),
        gpus=gpus,
        model=model if model and model.has_config else None,
        draft=draft if draft and draft.has_config else None,
        tried=tried,
        findings=report.findings,
        engine_check=find_engine_check(spec, catalog, [*root.block, *lines], root)
        if engine_check == "find"
        else engine_check,
    )


def find_engine_check(
    spec: LaunchCommand, catalog: FlagCatalog, lines: list[str], root: RootCause | None = None
) -> Located | None:
    """The engine check behind the failure: read from the SGLang the command runs when it is installed
    here (as text, never imported), else from the traceback's own lines or the bundled index. `root` is
    the failure as already read (its whole message, where the lines may repeat its first line)."""
    from specdoctor.tools.catalog_load import installed_engine_folder
    from specdoctor.tools.engine_source.locate import locate

    folder = installed_engine_folder(spec)
    # A bundled catalog says nothing of the version that ran: then every indexed release may match.
    version = catalog.version if folder is not None else None
    # People paste logs inside Markdown fences and quote error lines in backticks.
    clean = [line.replace("```", "").strip("`'\" ") for line in lines]
    try:
        return locate(clean, version=version, installed=folder, cause=root) or _message_in_tail(
            clean, version
        )
    except (OSError, ValueError):
        return None


def _message_in_tail(lines: list[str], version: str | None) -> Located | None:
    """A log without a traceback or an exception line (an engine message printed bare): the last lines
    that are one of the engine's own messages."""
    from specdoctor.tools.engine_source.match import match_message

    for line in reversed([ln for ln in lines if len(ln) >= 20][-12:]):
        found = match_message(line, version=version)
        if found is not None:
            how = f"a log line matches a check of sglang {found.site.release} (score {found.score:.2f})"
            return Located(site=found.site, how=how, exact=False, releases=found.releases)
    return None


def context_from_file(
    spec: LaunchCommand,
    catalog: FlagCatalog,
    log: Path,
    *,
    gpus: GpuReport | None = None,
    exit_kind: str | None = None,
    outcome: Outcome | None = None,
    tried: tuple[LaunchCommand, ...] = (),
) -> Context:
    """Like context_for, for a log file of any size (read in bounded memory). `outcome` is what a watcher
    saw; without one it is inferred from the log."""
    summary = scan_file(log)  # an unreadable log raises UnreadableFile, a one-line UsageError
    lines = [*summary.root_cause.block, *summary.compact.splitlines()]
    if outcome is None:
        outcome = outcome_from_log(summary.compact.splitlines(), exit_kind, str(log), ready=summary.ready)
    if summary.accept_length is not None and outcome.accept_length is None:
        outcome = outcome.model_copy(update={"accept_length": summary.accept_length})
    root = summary.root_cause if summary.root_cause.kind != "none" else None
    return context_for(
        spec, catalog, lines, gpus=gpus, outcome=outcome, log_text=summary.compact, root=root, tried=tried
    )


def gpus_from_case(text: str | None) -> GpuReport | None:
    if not text:
        return None
    report = parse_gpus_description(text)
    return report if report.status in ("ok", "no_gpu") else None


def default_planner(
    llm: Planner | None = None, notes: tuple[str, ...] = (), playbooks_dir: Path | None = None
) -> ChainPlanner:
    """Built-in and user playbooks first, then the LLM if one is configured."""
    from specdoctor.playbooks.registry import all_playbooks
    from specdoctor.playbooks.user import user_playbooks

    planners: list[Planner] = [PlaybookPlanner([*user_playbooks(playbooks_dir), *all_playbooks()])]
    if llm is not None:
        planners.append(llm)
    return ChainPlanner(planners, notes)


def plan(ctx: Context, planner: Planner | None = None) -> Planned:
    """The first decision about a failure, with which planner made it (never None: the chain stops)."""
    planned = (planner or default_planner()).plan(ctx)
    assert planned.decision is not None
    return planned


def decide(ctx: Context, planner: Planner | None = None) -> Decision:
    decision = plan(ctx, planner).decision
    assert decision is not None
    return decision


def as_contract(decision: Decision, ctx: Context) -> dict[str, Any]:
    """The one JSON object `diagnose --json` prints (its keys are a contract with scripts and scorers)."""
    spec = ctx.spec
    edits: list[dict[str, Any]] = []
    if isinstance(decision, Fix):
        spec = ctx.spec.apply_all(decision.edits, ctx.catalog.canonical)
        edits = [e.model_dump(mode="json") for e in decision.edits]
    summary = (
        decision.summary
        if not isinstance(decision, Retry)
        else f"transient, retry unchanged: {decision.summary}"
    )
    return {
        "action": "stop" if isinstance(decision, Stop) else "fix",
        "category": decision.category,
        "summary": summary,
        "evidence": list(decision.evidence),
        "edits": edits,
        "command": spec.shell(),
        "env": spec.env_dict(),
        "playbook": decision.playbook,
        "confidence": round(decision.confidence, 3),
    }
