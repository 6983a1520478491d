"""A user's own playbooks, written in YAML: a trigger regex and either edits or a stop.

    # ~/.config/specdoctor/playbooks/site.yaml
    - id: site.ib-flaky
      category: nccl
      trigger: "NCCL WARN NET/IB : Got async event"
      message: the InfiniBand fabric dropped a link; use TCP sockets
      edits:
        - {op: set_env, name: NCCL_IB_DISABLE, value: "1"}
    - id: site.no-gpu-4
      category: stale-gpu-process
      trigger: "GPU 4 .* has fallen off the bus"
      message: GPU 4 is broken on this node
      stop: ask the site admins to reset GPU 4

Files load from `--playbooks DIR` and from `<config dir>/playbooks/` (see tools.dirs). A broken file is an
error that names the file and the line, never a silently skipped rule.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specdoctor.playbooks.base import Context, Playbook, fix, stop
from specdoctor.playbooks.decision import Category, Decision
from specdoctor.tools.command import Edit
from specdoctor.tools.dirs import config_dir
from specdoctor.tools.errors import UsageError
from specdoctor.tools.files import MiB, UnreadableFile, read_text
from specdoctor.tools.outcome import OutcomeKind

PLAYBOOK_MAX_BYTES = 4 * MiB
"""Rules are written by hand; a bigger file is not a playbook file."""


class PlaybookFileError(UsageError):
    """A user playbook file that cannot be used; the message names the file and line."""


class UserRule(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    category: Category
    trigger: str = Field(description="A regex searched in the failure's log (root cause and compacted log).")
    message: str
    when: list[OutcomeKind] = ["exited", "hung", "unhealthy", "degraded"]
    edits: list[Edit] = []
    stop: str | None = Field(default=None, description="Advice for a person; makes this a stop rule.")
    why: str = ""
    confidence: float = Field(default=0.8, ge=0, le=1)
    priority: int = Field(default=5, description="Lower runs first; built-in playbooks start at 10.")
    scope: Literal["log", "root"] = "log"

    @field_validator("trigger")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"trigger is not a valid regex: {exc}") from None
        return value

    @model_validator(mode="after")
    def _one_action(self) -> UserRule:
        if bool(self.edits) == bool(self.stop):
            raise ValueError("give either `edits` (a fix) or `stop` (advice), not both and not neither")
        return self

    def to_playbook(self, source: str) -> Playbook:
        def run(ctx: Context, m: re.Match[str] | None) -> Decision | None:
            evidence = (m.group(0),) if m else ()
            if self.stop:
                return stop(
                    ctx, self.category, self.message, self.stop, evidence=evidence, confidence=self.confidence
                )
            return fix(
                ctx,
                self.edits,
                self.category,
                self.message,
                why=self.why,
                evidence=evidence,
                confidence=self.confidence,
            )

        return Playbook(
            id=self.id,
            category=self.category,
            when=frozenset(self.when),
            pattern=re.compile(self.trigger, re.M),
            fn=run,
            doc=self.message,
            priority=self.priority,
            source=source,
            scope=self.scope,
        )


def load_file(path: Path) -> list[Playbook]:
    try:
        text = read_text(path, "playbook file", PLAYBOOK_MAX_BYTES)
    except UnreadableFile as exc:
        raise PlaybookFileError(f"{path}: cannot read it ({exc.reason})") from None
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise PlaybookFileError(f"{path}{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if root is None:
        return []
    items = root.value if isinstance(root, yaml.SequenceNode) else None
    if isinstance(root, yaml.MappingNode):
        items = next(
            (v.value for k, v in root.value if k.value == "playbooks" and isinstance(v, yaml.SequenceNode)),
            None,
        )
    if items is None:
        raise PlaybookFileError(
            f"{path}:{root.start_mark.line + 1}: expected a list of playbooks (or `playbooks:` with a list)"
        )
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:  # a tag or construct safe_load refuses (`!!python/object`, ...)
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise PlaybookFileError(
            f"{path}{where}: not plain YAML data ({getattr(exc, 'problem', exc)})"
        ) from None
    rules = data if isinstance(data, list) else data["playbooks"]
    out: list[Playbook] = []
    for node, raw in zip(items, rules, strict=True):
        try:
            rule = UserRule.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            prefix = f"{field}: " if field else ""
            raise PlaybookFileError(f"{path}:{node.start_mark.line + 1}: {prefix}{first['msg']}") from None
        out.append(rule.to_playbook(f"{path}:{node.start_mark.line + 1}"))
    return out


def load_dir(folder: Path) -> list[Playbook]:
    if not folder.is_dir():
        raise PlaybookFileError(f"{folder}: not a folder of playbook files (*.yaml)")
    found = [p for pattern in ("*.yaml", "*.yml") for p in sorted(folder.glob(pattern))]
    playbooks = [pb for p in found for pb in load_file(p)]
    seen: dict[str, str] = {}
    for pb in playbooks:
        if pb.id in seen:
            raise PlaybookFileError(f"{pb.source}: playbook id {pb.id} is already defined at {seen[pb.id]}")
        seen[pb.id] = pb.source
    return playbooks


def user_playbooks(extra: Path | None = None) -> list[Playbook]:
    """The rules in the user's config dir, plus `extra` (from --playbooks)."""
    folders = [config_dir() / "playbooks"]
    out: list[Playbook] = []
    for folder in folders:
        if folder.is_dir():
            out += load_dir(folder)
    if extra is not None:
        out += load_dir(extra)
    return out
