"""What a planner decides after a failure: fix the command, retry it unchanged, or stop."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.command import Edit

Category = Literal[
    "flag-name",
    "invalid-choice",
    "spec-config",
    "spec-draft-mismatch",
    "oom",
    "cuda-graph",
    "tp-config",
    "nccl",
    "port-in-use",
    "model-path",
    "trust-remote-code",
    "attention-backend",
    "quantization",
    "context-length",
    "driver-cuda",
    "stale-gpu-process",
    "engine-bug",
    "other",
]
CATEGORIES: tuple[str, ...] = Category.__args__  # type: ignore[attr-defined]


class _Decided(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    category: Category
    summary: str = Field(description="One sentence a user reads: what is wrong.")
    evidence: tuple[str, ...] = Field(default=(), description="Log lines (or facts) the decision rests on.")
    playbook: str | None = Field(
        default=None, description="Id of the playbook that decided, None for the LLM."
    )
    confidence: float = Field(default=0.9, ge=0.0, le=1.0)


class Fix(_Decided):
    """Change the command with these edits and launch again."""

    action: Literal["fix"] = "fix"
    edits: tuple[Edit, ...]
    why: str = Field(default="", description="Why these edits fix it, in terms of the flags' meaning.")


class Retry(_Decided):
    """A transient failure (a port briefly busy, a Hub 5xx): launch the same command again after backoff."""

    action: Literal["retry"] = "retry"
    why: str = ""


class Stop(_Decided):
    """No flag change can help; say why and what a person should do."""

    action: Literal["stop"] = "stop"
    advice: str = Field(default="", description="What a person should do next.")
    bug_report: str = Field(
        default="", description="For an engine bug: the facts an upstream report needs, ready to paste."
    )


Decision = Annotated[Fix | Retry | Stop, Field(discriminator="action")]


class Finding(BaseModel):
    """A fault found in a command before launch (or confirmed in its log), with the edits that fix it."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    code: str = Field(description="Stable id, e.g. `unknown-flag`, `spec-steps-missing`.")
    severity: Literal["error", "warning", "info"] = Field(
        description="error: the engine will fail; warning: it will start but not as meant; info: a note."
    )
    category: Category
    message: str = Field(description="One line a user reads.")
    flag: str | None = Field(default=None, description="The flag as written, when the finding is about one.")
    evidence: tuple[str, ...] = ()
    edits: tuple[Edit, ...] = Field(default=(), description="Edits that fix it; empty when no fix is known.")
    why: str = Field(default="", description="Why the edits fix it.")
    confidence: float = Field(default=0.95, ge=0.0, le=1.0)
